"""The volume side: which PVs are ours, our PV finalizer, and when to call DeleteVolume.

sig-storage-lib-external-provisioner's `syncVolume` in pure form, with `addFinalizer` on (as
external-provisioner always sets it): a PV is ours if we provisioned it (`provisioned-by`, or
`migrated-to` for a migrated in-tree PV) or if it is a static CSI PV of our driver. Our
finalizer goes on every Bound, Delete-policy PV of ours and comes off when the policy becomes
Retain or Recycle. A Released, Delete-policy PV is deleted on the driver, unless a
VolumeAttachment still uses it. Retain never deletes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from kopf_csi import names
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning.decisions import Decision
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.protection import add_finalizer, remove_finalizer
from kopf_csi.provisioning.requests import check_driver_capabilities

__all__ = [
    "DeletionError",
    "blocking_attachment",
    "delete_request",
    "is_ours",
    "should_delete",
    "volume_finalizers",
]


class DeletionError(Exception):
    """DeleteVolume cannot be called (yet); posted as `VolumeFailedDelete`, then retried."""


class VolumeInUseError(DeletionError):
    """A VolumeAttachment still names the PV: the normal wait for a detach, not a failure.

    external-provisioner posts a Warning `VolumeFailedDelete` on every retry here, a known
    annoyance when a workload and its claims are deleted together (its open issue #1574; the
    proposed fix, library PR #206, posts a Normal `VolumeDelete` instead). We do the latter.
    """


def is_ours(
    volume: Mapping[str, Any], *, driver_name: str, known_names: Collection[str] = ()
) -> bool:
    """The library's `isProvisionerForVolume`."""
    known = {driver_name, *known_names}
    annotations = volume.get("metadata", {}).get("annotations") or {}
    migrated_to = annotations.get(names.ANN_MIGRATED_TO, "")
    if names.ANN_PROVISIONED_BY in annotations:
        return annotations[names.ANN_PROVISIONED_BY] in known or migrated_to in known
    source = volume.get("spec", {}).get("csi")
    if source is not None:  # a statically provisioned CSI volume
        return source.get("driver") in known
    return migrated_to in known


def volume_finalizers(volume: Mapping[str, Any]) -> list[str] | None:
    """The PV's finalizers after `handleProtectionFinalizer`, or None if unchanged."""
    meta, spec = volume.get("metadata", {}), volume.get("spec", {})
    finalizers = list(meta.get("finalizers") or ())
    policy = spec.get("persistentVolumeReclaimPolicy")
    phase = (volume.get("status") or {}).get("phase")
    if policy == "Delete" and not meta.get("deletionTimestamp") and phase == "Bound":
        return add_finalizer(finalizers, names.FINALIZER_PV)
    if policy in ("Retain", "Recycle"):
        return remove_finalizer(finalizers, names.FINALIZER_PV)
    return None


def should_delete(
    volume: Mapping[str, Any], *, driver_name: str, known_names: Collection[str] = ()
) -> Decision:
    """Whether to delete the volume on the driver (given the PV after its finalizer update)."""
    meta, spec = volume.get("metadata", {}), volume.get("spec", {})
    if not is_ours(volume, driver_name=driver_name, known_names=known_names):
        return Decision(False, "the volume belongs to another provisioner")
    if meta.get("deletionTimestamp") and names.FINALIZER_PV not in (meta.get("finalizers") or ()):
        return Decision(False, "our finalizer is gone: the volume was deleted already")
    if (volume.get("status") or {}).get("phase") != "Released":
        return Decision(False, "the volume is not Released")
    if spec.get("persistentVolumeReclaimPolicy") != "Delete":
        return Decision(False, "the volume's reclaim policy is not Delete")
    return Decision(True, "the volume is Released with the Delete policy")


def blocking_attachment(
    volume: Mapping[str, Any], *, attachments: Iterable[Mapping[str, Any]]
) -> str | None:
    """Why DeleteVolume must wait: a VolumeAttachment still names the PV (upstream #438).

    Only for drivers with PUBLISH_UNPUBLISH_VOLUME; the caller passes no attachments otherwise.
    """
    name = volume.get("metadata", {}).get("name", "")
    for attachment in attachments:
        spec = attachment.get("spec", {})
        if (spec.get("source") or {}).get("persistentVolumeName") == name:
            return names.MESSAGE_STILL_ATTACHED.format(volume=name, node=spec.get("nodeName", ""))
    return None


def delete_request(
    volume: Mapping[str, Any],
    *,
    secrets: Mapping[str, str] | None,
    plugin_capabilities: Iterable[str],
    controller_capabilities: Iterable[str],
) -> csi.DeleteVolumeRequest:
    """DeleteVolume for the PV's handle, with the deletion secret's data (if it was readable)."""
    source = volume.get("spec", {}).get("csi")
    if source is None:
        raise DeletionError("invalid CSI PV")
    try:
        check_driver_capabilities(
            plugin_capabilities=plugin_capabilities, controller_capabilities=controller_capabilities
        )
    except ProvisioningError as exc:
        raise DeletionError(str(exc)) from None
    return csi.DeleteVolumeRequest(
        volume_id=source.get("volumeHandle", ""), secrets=dict(secrets or {})
    )
