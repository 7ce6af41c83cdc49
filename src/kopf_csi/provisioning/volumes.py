"""The PersistentVolume for a created volume, field for field as the Go sidecar writes it.

External tools, the KCM and a Go sidecar taking over later all read these fields: the CSI
source (handle, attributes with our identity, fsType, readOnly, the five secret references),
the capacity, the node affinity, the claimRef, and the annotations the delete path and the
resizer rely on. Before the PV is built, `response_problem` checks the driver's answer (a volume
smaller than asked for, or a clone/restore without its content source, is deleted and retried).
Beyond Go, a volume without an id is retried (CreateVolume is idempotent: the retry gets the
same volume back), and one accessible from none of the requisite topologies is deleted and
retried, rather than written into a PV no pod of the selected node could use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from kopf_csi import names
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import topology
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.naming import claim_class_name
from kopf_csi.provisioning.options import ProvisionerOptions
from kopf_csi.provisioning.quantities import format_binary_si
from kopf_csi.provisioning.requests import RequestPlan
from kopf_csi.provisioning.secrets import SecretRef, SecretReferences
from kopf_csi.provisioning.states import ProvisioningState

__all__ = [
    "ResponseProblem",
    "build_volume",
    "claim_reference",
    "complete_volume",
    "response_problem",
]


@dataclasses.dataclass(frozen=True)
class ResponseProblem:
    """The driver's volume is unusable: delete it (up to 5 tries), then retry in background."""

    message: str
    cleanup: str
    """How Go words a failed cleanup in this case ("Cleanup" or "cleanup", sic)."""
    deletable: bool = True
    """False when the answer has no volume id: there is nothing to delete, only to retry."""

    def error(self, *, volume_name: str, cleanup_error: str | None) -> ProvisioningError:
        """The attempt's error: `IN_BACKGROUND` either way, naming the orphan if any."""
        message = self.message
        if cleanup_error is not None:
            message = (
                f"{message}. {self.cleanup} of volume {volume_name} failed,"
                f" volume is orphaned: {cleanup_error}"
            )
        return ProvisioningError(message, state=ProvisioningState.IN_BACKGROUND)


def response_problem(
    volume: csi.Volume,
    *,
    claim: Mapping[str, Any],
    required_bytes: int,
    requirement: csi.TopologyRequirement | None = None,
) -> ResponseProblem | None:
    """What is wrong with CreateVolume's answer, if anything (a capacity of 0 = unknown = ok)."""
    if not volume.volume_id:
        return ResponseProblem("created volume has no volume id", "Cleanup", deletable=False)
    # Go: 0 means unknown; anything else below the request (negative included) is too small.
    if volume.capacity_bytes != 0 and volume.capacity_bytes < required_bytes:
        message = (
            f"created volume capacity {volume.capacity_bytes} less than requested capacity"
            f" {required_bytes}"
        )
        return ResponseProblem(message, "Cleanup")
    if claim.get("spec", {}).get("dataSource") is not None and volume.content_source is None:
        return ResponseProblem("volume content source missing", "cleanup")
    requisite = requirement.requisite if requirement is not None else []
    if (
        requisite
        and volume.accessible_topology
        and not _within(volume.accessible_topology, requisite)
    ):
        message = (
            f"created volume is accessible from {_segments(volume.accessible_topology)}, none of"
            f" the requisite topologies {_segments(requisite)}"
        )
        return ResponseProblem(message, "Cleanup")
    return None


def _within(accessible: Sequence[csi.Topology], requisite: Sequence[csi.Topology]) -> bool:
    """Some returned segment agrees with some requisite one on every key both have (CSI: a
    volume "MUST be accessible from at least one of the requisite topologies")."""
    return any(
        all(wanted.segments.get(key, value) == value for key, value in given.segments.items())
        for given in accessible
        for wanted in requisite
    )


def _segments(topologies: Sequence[csi.Topology]) -> str:
    return (
        "["
        + " ".join(
            "{" + ",".join(f"{k}={v}" for k, v in sorted(t.segments.items())) + "}"
            for t in topologies
        )
        + "]"
    )


def claim_reference(claim: Mapping[str, Any]) -> dict[str, str]:
    """The PV's `claimRef`, as client-go's `reference.GetReference` makes it."""
    meta = claim.get("metadata", {})
    ref = {
        "kind": names.KIND_PERSISTENT_VOLUME_CLAIM,
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "apiVersion": "v1",
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    return {key: value for key, value in ref.items() if value}  # Go omits empty fields


def build_volume(
    *,
    claim: Mapping[str, Any],
    storage_class: Mapping[str, Any],
    plan: RequestPlan,
    volume: csi.Volume,
    secrets: SecretReferences,
    driver_name: str,
    identity: str,
    options: ProvisionerOptions,
    supports_topology: bool,
) -> dict[str, Any]:
    """The PV object to create (external-provisioner's `Provision` + the library's additions)."""
    spec: dict[str, Any] = {
        "accessModes": list(claim.get("spec", {}).get("accessModes") or ()),
        "capacity": {"storage": format_binary_si(volume.capacity_bytes or plan.required_bytes)},
        "csi": _csi_source(plan, volume, secrets, driver_name, identity, options),
        "claimRef": claim_reference(claim),
        "storageClassName": claim_class_name(claim),
    }
    if storage_class.get("mountOptions"):
        spec["mountOptions"] = list(storage_class["mountOptions"])
    if storage_class.get("reclaimPolicy"):
        spec["persistentVolumeReclaimPolicy"] = storage_class["reclaimPolicy"]
    affinity = topology.node_affinity(volume.accessible_topology) if supports_topology else None
    if affinity is not None:
        spec["nodeAffinity"] = affinity
    if claim.get("spec", {}).get("volumeMode") is not None:
        spec["volumeMode"] = claim["spec"]["volumeMode"]
    if plan.volume_attributes_class:
        spec["volumeAttributesClassName"] = plan.volume_attributes_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": plan.volume_name,
            "annotations": _annotations(storage_class, secrets),
            "finalizers": [names.FINALIZER_PV],
        },
        "spec": spec,
    }


def _annotations(storage_class: Mapping[str, Any], secrets: SecretReferences) -> dict[str, str]:
    deletion = secrets.provisioner or SecretRef("", "")  # both "" = "no secret needed"
    annotations = {
        names.ANN_PROVISIONED_BY: storage_class.get("provisioner", ""),
        names.ANN_DELETION_SECRET_NAME: deletion.name,
        names.ANN_DELETION_SECRET_NAMESPACE: deletion.namespace,
    }
    if secrets.controller_modify is not None:
        annotations[names.ANN_MODIFY_SECRET_NAME] = secrets.controller_modify.name
        annotations[names.ANN_MODIFY_SECRET_NAMESPACE] = secrets.controller_modify.namespace
    return annotations


def _csi_source(
    plan: RequestPlan,
    volume: csi.Volume,
    secrets: SecretReferences,
    driver_name: str,
    identity: str,
    options: ProvisionerOptions,
) -> dict[str, Any]:
    source: dict[str, Any] = {
        "driver": driver_name,
        "volumeHandle": volume.volume_id,
        "volumeAttributes": {names.PROVISIONER_IDENTITY_KEY: identity, **volume.volume_context},
    }
    if plan.fs_type and not plan.block:
        source["fsType"] = plan.fs_type
    if options.controller_publish_readonly and _read_only_many(plan):
        source["readOnly"] = True
    refs = {
        "controllerPublishSecretRef": secrets.controller_publish,
        "nodeStageSecretRef": secrets.node_stage,
        "nodePublishSecretRef": secrets.node_publish,
        "controllerExpandSecretRef": secrets.controller_expand,
        "nodeExpandSecretRef": secrets.node_expand,
    }
    source.update({key: ref.as_dict() for key, ref in refs.items() if ref is not None})
    return source


def _read_only_many(plan: RequestPlan) -> bool:
    """Exactly one capability, and it is MULTI_NODE_READER_ONLY (a ROX-only claim)."""
    caps = plan.volume_capabilities
    mode = caps[0].access_mode.mode if len(caps) == 1 and caps[0].access_mode else None
    return mode == csi.VolumeCapabilityAccessModeMode.MULTI_NODE_READER_ONLY


def complete_volume(
    volume: Mapping[str, Any],
    *,
    claim: Mapping[str, Any],
    storage_class: Mapping[str, Any],
    volume_name: str,
    requested_bytes: int,
) -> dict[str, Any]:
    """A back end's PV (or part of one) made whole, as the library does after `Provision`.

    The library sets the claimRef, the class name and the provisioned-by annotation (the
    class's provisioner) whatever its provisioner returned, and adds our PV finalizer. Beyond
    it, what the back end left out comes from the claim and its class: the name, the access
    modes, the capacity (the request), the volume mode, the reclaim policy and the mount
    options. A complete PV (the CSI back end's) comes out unchanged, key order included.
    """
    meta = dict(volume.get("metadata") or {})
    spec = dict(volume.get("spec") or {})
    meta.setdefault("name", volume_name)
    annotations = dict(meta.get("annotations") or {})
    annotations[names.ANN_PROVISIONED_BY] = storage_class.get("provisioner", "")
    meta["annotations"] = annotations
    finalizers = list(meta.get("finalizers") or ())
    if names.FINALIZER_PV not in finalizers:
        finalizers.append(names.FINALIZER_PV)
    meta["finalizers"] = finalizers
    claim_spec = claim.get("spec", {})
    spec.setdefault("accessModes", list(claim_spec.get("accessModes") or ()))
    spec.setdefault("capacity", {"storage": format_binary_si(requested_bytes)})
    spec["claimRef"] = claim_reference(claim)
    spec["storageClassName"] = claim_class_name(claim)
    if storage_class.get("mountOptions"):
        spec.setdefault("mountOptions", list(storage_class["mountOptions"]))
    if storage_class.get("reclaimPolicy"):  # the API server defaults it in every class
        spec.setdefault("persistentVolumeReclaimPolicy", storage_class["reclaimPolicy"])
    if claim_spec.get("volumeMode") is not None:
        spec.setdefault("volumeMode", claim_spec["volumeMode"])
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta, "spec": spec}
