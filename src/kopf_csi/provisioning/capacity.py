"""Storage capacity tracking (`--enable-capacity`): pure decisions.

external-provisioner publishes one CSIStorageCapacity object per (StorageClass, topology
segment) so that the scheduler places WaitForFirstConsumer pods where there is room. The
segments are the distinct values of the driver's topology keys (from CSINode) on the nodes
(from their labels); the capacity comes from GetCapacity with the class's parameters and the
segment. Objects are labelled as the Go sidecar labels them, so either can take them over.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.parameters import driver_parameters
from kopf_csi.provisioning.quantities import format_binary_si

__all__ = [
    "LABEL_DRIVER",
    "LABEL_MANAGED_BY",
    "MANAGED_BY",
    "Want",
    "capacity_object",
    "diff",
    "segments",
    "wanted",
]

LABEL_DRIVER = "csi.storage.k8s.io/drivername"
LABEL_MANAGED_BY = "csi.storage.k8s.io/managed-by"
MANAGED_BY = "external-provisioner"
GENERATE_NAME = "csisc-"
Body = Mapping[str, Any]
Segment = tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class Want:
    """One CSIStorageCapacity the cluster should have."""

    storage_class: str
    segment: Segment
    parameters: Mapping[str, str]


def segments(*, driver_name: str, csinodes: Iterable[Body], nodes: Iterable[Body]) -> list[Segment]:
    """The distinct topology segments of the nodes that run the driver, sorted."""
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    found: set[Segment] = set()
    for csinode in csinodes:
        for entry in csinode.get("spec", {}).get("drivers") or ():
            if entry.get("name") != driver_name or not entry.get("topologyKeys"):
                continue
            node_labels = labels.get(csinode["metadata"]["name"])
            if node_labels is None:
                continue
            keys = entry["topologyKeys"]
            if all(key in node_labels for key in keys):
                found.add(tuple(sorted((key, node_labels[key]) for key in keys)))
    return sorted(found)


def wanted(
    *,
    driver_name: str,
    storage_classes: Iterable[Body],
    segments: Sequence[Segment],
    immediate_binding: bool = False,
) -> list[Want]:
    """Every (class, segment) pair to publish: our WaitForFirstConsumer classes (all of ours
    with `--capacity-for-immediate-binding`)."""
    result: list[Want] = []
    for storage_class in storage_classes:
        if storage_class.get("provisioner") != driver_name:
            continue
        waits = storage_class.get("volumeBindingMode") == "WaitForFirstConsumer"
        if not waits and not immediate_binding:
            continue
        try:
            params = driver_parameters(storage_class.get("parameters"))
        except ProvisioningError:
            continue  # a class we cannot provision from has no capacity to publish either
        name = storage_class["metadata"]["name"]
        result.extend(Want(name, segment, params) for segment in segments)
    return result


def capacity_object(
    want: Want, *, capacity: int, maximum_volume_size: int | None, driver_name: str, namespace: str
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {
            "generateName": GENERATE_NAME,
            "namespace": namespace,
            "labels": {LABEL_DRIVER: driver_name, LABEL_MANAGED_BY: MANAGED_BY},
        },
        "storageClassName": want.storage_class,
        "nodeTopology": {"matchLabels": dict(want.segment)},
        "capacity": format_binary_si(capacity),
    }
    if maximum_volume_size is not None:
        body["maximumVolumeSize"] = format_binary_si(maximum_volume_size)
    return body


def _key(obj: Body) -> tuple[str, Segment]:
    labels = (obj.get("nodeTopology") or {}).get("matchLabels") or {}
    return obj.get("storageClassName", ""), tuple(sorted(labels.items()))


def diff(
    existing: Iterable[Body], desired: Iterable[Want]
) -> tuple[list[Want], dict[str, Want], list[Body]]:
    """(to create, existing object name → want to update, obsolete objects to delete)."""
    by_key = {(w.storage_class, w.segment): w for w in desired}
    create_keys = set(by_key)
    update: dict[str, Want] = {}
    obsolete = []
    for obj in existing:
        key = _key(obj)
        if key in by_key and key in create_keys:
            update[obj["metadata"]["name"]] = by_key[key]
            create_keys.discard(key)
        else:
            obsolete.append(obj)  # not wanted any more, or a duplicate
    return [by_key[k] for k in sorted(create_keys)], update, obsolete
