"""A claim's data source: a PVC to clone, a VolumeSnapshot to restore, or someone else's job.

For a clone, the source PVC must be Bound, not deleting, with a StorageClass and no bigger than
the new claim; its PV must be a CSI PV of the same driver, bound back to it, Bound, and with
the same volumeMode. For a restore, the snapshot must be bound to a VolumeSnapshotContent that
points back at it, of the same driver, ready, with a handle, no bigger than the claim, and (with
`--prevent-volume-mode-conversion`) of the same volumeMode unless the content allows a change.
Any other kind belongs to a volume populator: we step aside (`IgnoredError`).

These are external-provisioner's `dataSource`, `getPVCSource` and `getSnapshotSource`, with its
exact messages. Failed checks leave the claim unchanged (`NO_CHANGE`): the source may become
ready. The caller reads the objects; a read that failed is passed in as None (or reported with
`source_claim_unavailable` / `snapshot_unavailable`, which keep Go's wording).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from kopf_csi import names
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import gofmt
from kopf_csi.provisioning.errors import IgnoredError, ProvisioningError
from kopf_csi.provisioning.quantities import quantity_bytes
from kopf_csi.provisioning.states import ProvisioningState

__all__ = [
    "DataSourceRef",
    "SourceKind",
    "claim_not_found",
    "clone_source",
    "data_source",
    "snapshot_content_name",
    "snapshot_source",
    "snapshot_unavailable",
    "source_claim_unavailable",
    "source_kind",
]

_NOT_BOUND_OR_INVALID = "claim in dataSource not bound or invalid"
_BLOCK, _FILESYSTEM = "Block", "Filesystem"


class SourceKind(enum.Enum):
    CLONE = "PersistentVolumeClaim"
    SNAPSHOT = "VolumeSnapshot"


@dataclasses.dataclass(frozen=True)
class DataSourceRef:
    """`spec.dataSource` (else `spec.dataSourceRef`), normalised; `api_group` "" for core."""

    kind: str
    name: str
    api_group: str
    namespace: str


def data_source(claim: Mapping[str, Any]) -> DataSourceRef | None:
    """The claim's data source, if any; a cross-namespace `dataSourceRef` is a final error."""
    spec, namespace = claim.get("spec", {}), claim.get("metadata", {}).get("namespace", "")
    source = spec.get("dataSource")
    if source is None:
        source = spec.get("dataSourceRef")
        if source is not None and source.get("namespace"):  # the alpha gate is off
            raise ProvisioningError(
                "dataSourceRef namespace specified but the CrossNamespaceVolumeDataSource"
                " feature is disabled",
                state=ProvisioningState.FINISHED,
            )
    if source is None:
        return None
    return DataSourceRef(
        kind=source.get("kind", ""),
        name=source.get("name", ""),
        api_group=source.get("apiGroup") or "",
        namespace=namespace,
    )


def source_kind(ref: DataSourceRef, *, claim: Mapping[str, Any]) -> SourceKind:
    """Clone or restore; any other kind is left to a populator (`IgnoredError`)."""
    if not ref.name:
        claim_name = claim.get("metadata", {}).get("name", "")
        raise ProvisioningError(
            f"the PVC source not found for PVC {claim_name}", state=ProvisioningState.FINISHED
        )
    if ref.kind == names.KIND_VOLUME_SNAPSHOT:
        if ref.api_group != names.SNAPSHOT_API_GROUP:
            raise ProvisioningError(
                "the PVC source does not belong to the right APIGroup."
                f" Expected {names.SNAPSHOT_API_GROUP}, Got {ref.api_group}",
                state=ProvisioningState.FINISHED,
            )
        return SourceKind.SNAPSHOT
    if ref.kind == names.KIND_PERSISTENT_VOLUME_CLAIM:
        return SourceKind.CLONE
    raise IgnoredError(
        f"data source ({ref.kind}) is not handled by the provisioner,"
        " assuming an external populator will provision it",
        event_message=names.MESSAGE_EXTERNAL_POPULATOR,
    )


def _error(ref: DataSourceRef, message: str) -> ProvisioningError:
    return ProvisioningError(
        f"error getting handle for DataSource Type {ref.kind} by Name {ref.name}: {message}",
        state=ProvisioningState.NO_CHANGE,
    )


def claim_not_found(name: str) -> str:
    """The not-found text of a claim read from an informer's lister (`NewNotFound` with the
    singular resource `persistentvolumeclaim`); the API server says `persistentvolumeclaims`."""
    return f"persistentvolumeclaim {gofmt.go_quote(name)} not found"


def source_claim_unavailable(
    ref: DataSourceRef, *, claim: Mapping[str, Any], error: str
) -> ProvisioningError:
    """The source PVC could not be read (`error` is the API error's text)."""
    namespace = gofmt.go_quote(claim.get("metadata", {}).get("namespace", ""))
    return _error(
        ref, f"error getting PVC {ref.name} (namespace {namespace}) from api server: {error}"
    )


def snapshot_unavailable(ref: DataSourceRef, *, error: str) -> ProvisioningError:
    """The VolumeSnapshot could not be read (`error` is the API error's text)."""
    return _error(ref, f"error getting snapshot {ref.name} from api server: {error}")


def _storage(obj: Mapping[str, Any]) -> str | None:
    return ((obj.get("spec", {}).get("resources") or {}).get("requests") or {}).get("storage")


def _bytes(obj: Mapping[str, Any]) -> int:
    quantity = _storage(obj)
    return quantity_bytes(quantity) if quantity is not None else 0


def clone_source(
    claim: Mapping[str, Any],
    *,
    ref: DataSourceRef,
    storage_class: Mapping[str, Any],
    source_claim: Mapping[str, Any],
    source_volume: Mapping[str, Any] | None,
) -> csi.VolumeContentSource:
    """`volume_content_source.volume` for a clone, after every check of `getPVCSource`."""
    status = source_claim.get("status") or {}
    source_meta, source_spec = source_claim.get("metadata", {}), source_claim.get("spec", {})
    if status.get("phase") != "Bound":
        got = _go_claim_status(status)
        raise _error(ref, f"the PVC DataSource {ref.name} must have a status of Bound.  Got {got}")
    if source_meta.get("deletionTimestamp"):
        raise _error(ref, f"the PVC DataSource {ref.name} is currently being deleted")
    if source_spec.get("storageClassName") is None:
        source_name = source_meta.get("name", "")
        raise _error(ref, f"the source PVC ({source_name}) storageclass cannot be empty")
    if claim.get("spec", {}).get("storageClassName") is None:
        claim_name = claim.get("metadata", {}).get("name", "")
        raise _error(ref, f"the requested PVC ({claim_name}) storageclass cannot be empty")
    requested, available = _bytes(claim), _bytes(source_claim)
    if requested < available:
        raise _error(
            ref,
            "error, new PVC request must be greater than or equal in size to the specified PVC"
            f" data source, requested {requested} but source is {available}",
        )
    if not source_spec.get("volumeName"):
        raise _error(ref, f"volume name is empty in source PVC {source_meta.get('name', '')}")
    if not _is_bound_to(source_volume, source_claim, storage_class.get("provisioner")):
        raise _error(ref, _NOT_BOUND_OR_INVALID)
    assert source_volume is not None  # for mypy: checked by _is_bound_to
    wanted = claim.get("spec", {}).get("volumeMode")
    actual = source_volume.get("spec", {}).get("volumeMode")
    if wanted in (None, _FILESYSTEM) and actual not in (None, _FILESYSTEM):
        raise _error(ref, _mode_mismatch("Block", "Filesystem"))
    if wanted == _BLOCK and actual != _BLOCK:
        raise _error(ref, _mode_mismatch("Filesystem", "Block"))
    handle = source_volume["spec"]["csi"].get("volumeHandle", "")
    return csi.VolumeContentSource(volume=csi.VolumeContentSourceVolumeSource(volume_id=handle))


def _mode_mismatch(source: str, requested: str) -> str:
    return (
        "the source PVC and destination PVCs must have the same volume mode for cloning."
        f"  Source is {source}, but new PVC requested {requested}"
    )


def _is_bound_to(
    volume: Mapping[str, Any] | None, claim: Mapping[str, Any], driver: str | None
) -> bool:
    """The source PV is a CSI PV of `driver`, Bound, and its claimRef is exactly the claim."""
    if volume is None:
        return False
    spec, meta = volume.get("spec", {}), claim.get("metadata", {})
    source, claim_ref = spec.get("csi"), spec.get("claimRef")
    if source is None or source.get("driver") != driver or claim_ref is None:
        return False
    if (claim_ref.get("uid", ""), claim_ref.get("namespace", ""), claim_ref.get("name", "")) != (
        meta.get("uid", ""),
        meta.get("namespace", ""),
        meta.get("name", ""),
    ):
        return False
    return bool((volume.get("status") or {}).get("phase") == "Bound")


def snapshot_content_name(snapshot: Mapping[str, Any]) -> str | None:
    """The VolumeSnapshotContent the snapshot is bound to, for the caller to read."""
    return (snapshot.get("status") or {}).get("boundVolumeSnapshotContentName")


def snapshot_source(
    claim: Mapping[str, Any],
    *,
    ref: DataSourceRef,
    storage_class: Mapping[str, Any],
    snapshot: Mapping[str, Any],
    content: Mapping[str, Any] | None,
    prevent_volume_mode_conversion: bool = True,
) -> csi.VolumeContentSource:
    """`volume_content_source.snapshot` for a restore, after every check of `getSnapshotSource`."""
    meta, status = snapshot.get("metadata", {}), snapshot.get("status") or {}
    not_bound = f"snapshot {ref.name} not bound"
    finalizers = meta.get("finalizers") or ()
    if (
        meta.get("deletionTimestamp")
        and names.FINALIZER_SNAPSHOT_SOURCE_PROTECTION not in finalizers
    ):
        # With our finalizer, provisioning started before the deletion: finish it, no leak.
        raise _error(ref, f"snapshot {ref.name} is being deleted")
    if status.get("boundVolumeSnapshotContentName") is None or content is None:
        raise _error(ref, not_bound)
    content_spec = content.get("spec", {})
    back = content_spec.get("volumeSnapshotRef") or {}
    if (back.get("uid", ""), back.get("namespace", ""), back.get("name", "")) != (
        meta.get("uid", ""),
        meta.get("namespace", ""),
        meta.get("name", ""),
    ) or content_spec.get("driver") != storage_class.get("provisioner"):
        raise _error(ref, not_bound)
    if not status.get("readyToUse"):
        raise _error(ref, f"snapshot {ref.name} is not Ready")
    handle = (content.get("status") or {}).get("snapshotHandle")
    if handle is None:
        raise _error(ref, f"snapshot handle {ref.name} is not available")
    if status.get("restoreSize") is not None:
        _check_restore_size(claim, ref=ref, snapshot=snapshot)
    if prevent_volume_mode_conversion:
        _check_mode_change(claim, ref=ref, content=content)
    return csi.VolumeContentSource(
        snapshot=csi.VolumeContentSourceSnapshotSource(snapshot_id=handle)
    )


def _check_restore_size(
    claim: Mapping[str, Any], *, ref: DataSourceRef, snapshot: Mapping[str, Any]
) -> None:
    claim_name = claim.get("metadata", {}).get("name", "")
    snapshot_name = snapshot.get("metadata", {}).get("name", "")
    requested = _storage(claim)
    if requested is None:
        raise _error(
            ref,
            f"error getting capacity for PVC {claim_name} when creating snapshot {snapshot_name}",
        )
    size, restore = quantity_bytes(requested), quantity_bytes(snapshot["status"]["restoreSize"])
    if size < restore:
        raise _error(
            ref,
            f"requested volume size {size} is less than the size {restore}"
            f" for the source snapshot {snapshot_name}",
        )


def _check_mode_change(
    claim: Mapping[str, Any], *, ref: DataSourceRef, content: Mapping[str, Any]
) -> None:
    source_mode = content.get("spec", {}).get("sourceVolumeMode")
    wanted_mode = claim.get("spec", {}).get("volumeMode")
    if source_mode is None or wanted_mode is None or source_mode == wanted_mode:
        return
    meta = claim.get("metadata", {})
    content_name = content.get("metadata", {}).get("name", "")
    annotations = content.get("metadata", {}).get("annotations") or {}
    prefix = (
        f"requested volume {meta.get('namespace', '')}/{meta.get('name', '')} modifies the mode"
        " of the source volume but does not have permission to do so. "
    )
    key = names.ANN_ALLOW_VOLUME_MODE_CHANGE
    if key not in annotations:
        raise _error(
            ref, f"{prefix}{key} annotation is not present on snapshotcontent {content_name}"
        )
    try:
        allowed = gofmt.parse_bool(annotations[key])
    except ValueError as exc:
        raise _error(
            ref, f"{prefix}failed to convert {key} annotation value to boolean with error: {exc}"
        ) from None
    if not allowed:
        raise _error(ref, f"{prefix}{key} is set to false on snapshotcontent {content_name}")


def _go_claim_status(status: Mapping[str, Any]) -> str:
    """`%v` of a PersistentVolumeClaimStatus; exact for the usual not-yet-bound source.

    The eight fields print in declaration order; non-empty maps and conditions are rendered
    plainly (Go would print its internal structs, which no one can usefully read anyway).
    """
    fields = [
        status.get("phase", ""),
        gofmt.go_list(status.get("accessModes") or ()),
        gofmt.go_map(status.get("capacity")),
        gofmt.go_list(c.get("type", "") for c in status.get("conditions") or ()),
        gofmt.go_map(status.get("allocatedResources")),
        gofmt.go_map(status.get("allocatedResourceStatuses")),
        status.get("currentVolumeAttributesClassName") or "<nil>",
        "<nil>" if status.get("modifyVolumeStatus") is None else str(status["modifyVolumeStatus"]),
    ]
    return "{" + " ".join(fields) + "}"
