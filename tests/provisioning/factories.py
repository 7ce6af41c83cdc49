"""Plain-dict Kubernetes objects for the provisioning tests, shaped as kopf's `body` gives them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DRIVER = "hostpath.csi.k8s.io"
UID = "6a2b1c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
PV_NAME = f"pvc-{UID}"


def make_claim(
    *,
    name: str = "data",
    namespace: str = "default",
    uid: str = UID,
    annotations: Mapping[str, str] | None = None,
    storage: str | None = "1Gi",
    access_modes: Sequence[str] = ("ReadWriteOnce",),
    storage_class: str | None = "fast",
    spec: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "42",
            "annotations": {"volume.kubernetes.io/storage-provisioner": DRIVER}
            if annotations is None
            else dict(annotations),
            **(metadata or {}),
        },
        "spec": {
            "accessModes": list(access_modes),
            "resources": {"requests": {"storage": storage}} if storage is not None else {},
            **({"storageClassName": storage_class} if storage_class is not None else {}),
            **(spec or {}),
        },
        "status": dict(status or {"phase": "Pending"}),
    }
    return claim


def make_class(
    *,
    name: str = "fast",
    provisioner: str = DRIVER,
    parameters: Mapping[str, str] | None = None,
    binding: str | None = None,
    reclaim: str | None = "Delete",
    mount_options: Sequence[str] | None = None,
    allowed: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    sc: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "uid": "sc-uid"},
        "provisioner": provisioner,
    }
    if parameters is not None:
        sc["parameters"] = dict(parameters)
    if binding is not None:
        sc["volumeBindingMode"] = binding
    if reclaim is not None:
        sc["reclaimPolicy"] = reclaim
    if mount_options is not None:
        sc["mountOptions"] = list(mount_options)
    if allowed is not None:
        sc["allowedTopologies"] = list(allowed)
    return sc


def make_volume(
    *,
    name: str = PV_NAME,
    annotations: Mapping[str, str] | None = None,
    finalizers: Sequence[str] | None = None,
    deleting: bool = False,
    phase: str | None = "Bound",
    policy: str | None = "Delete",
    csi: Mapping[str, Any] | None = None,
    claim_ref: Mapping[str, Any] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if finalizers is not None:
        metadata["finalizers"] = list(finalizers)
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    volume_spec: dict[str, Any] = {**(spec or {})}
    if policy is not None:
        volume_spec["persistentVolumeReclaimPolicy"] = policy
    if csi is not None:
        volume_spec["csi"] = dict(csi)
    if claim_ref is not None:
        volume_spec["claimRef"] = dict(claim_ref)
    volume: dict[str, Any] = {"metadata": metadata, "spec": volume_spec}
    if phase is not None:
        volume["status"] = {"phase": phase}
    return volume


def make_node(name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": dict(labels or {})}}


def make_csinode(name: str, *keys: str, driver: str = DRIVER) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"drivers": [{"name": driver, "nodeID": name, "topologyKeys": list(keys)}]},
    }
