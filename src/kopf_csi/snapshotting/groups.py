"""Pure decisions of the csi-snapshotter's group controller: which VolumeGroupSnapshotContents
are ours, and what each one needs next.

The port of `syncGroupSnapshotContent`, `shouldDeleteGroupSnapshotContent`, `isDriverMatch` for
group contents, `makeGroupSnapshotName` and the status arithmetic of
`updateGroupSnapshotContentStatus` (external-snapshotter pkg/sidecar-controller
groupsnapshot_helper.go, csi_handler.go). Plain dicts in, plain values and patches out.

Where this differs from upstream, on purpose:
- a dynamic content that has a group handle but is not ready is polled with
  GetVolumeGroupSnapshot (upstream v8.2 sends CreateVolumeGroupSnapshot again; both are
  idempotent and answer the same); one without a handle (a failed create) is created again;
- the per-volume list is refreshed from every answer, so its `readyToUse` follows the driver
  (upstream fills it in once).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kopf_csi import names
from kopf_csi.snapshotting import decisions
from kopf_csi.snapshotting.decisions import (
    Action,
    annotations_of,
    is_deleting,
    snapshot_name,
    source_of,
    spec_of,
)

__all__ = [
    "Action",
    "Member",
    "cleared_status_patch",
    "group_handle",
    "group_snapshot_name",
    "is_driver_match",
    "is_ready",
    "member_snapshot_ids",
    "next_action",
    "should_delete",
    "updated_status",
]

Body = Mapping[str, Any]
ClassLookup = Callable[[str], Body | None]


def _status(obj: Body) -> Body:
    return obj.get("status") or {}


def _preprovisioned(content: Body) -> Body | None:
    handles = source_of(content).get("groupSnapshotHandles")
    return handles if handles else None


def volume_handles(content: Body) -> list[str]:
    return [str(h) for h in source_of(content).get("volumeHandles") or []]


def group_handle(content: Body) -> str | None:
    """The driver's group id: from the status, else from a pre-provisioned source."""
    handle = _status(content).get("volumeGroupSnapshotHandle")
    if not handle:
        handle = (_preprovisioned(content) or {}).get("volumeGroupSnapshotHandle")
    return str(handle) if handle else None


def member_snapshot_ids(content: Body) -> list[str]:
    """The member snapshot ids the driver is told about: the status list (dynamic), else the
    pre-provisioned source's `volumeSnapshotHandles` (`deleteCSIGroupSnapshotOperation`)."""
    listed = _status(content).get("volumeSnapshotInfoList") or []
    if listed:
        return [str(i["snapshotHandle"]) for i in listed if i.get("snapshotHandle")]
    return [str(h) for h in (_preprovisioned(content) or {}).get("volumeSnapshotHandles") or []]


def is_ready(content: Body) -> bool:
    return _status(content).get("readyToUse") is True


def is_driver_match(content: Body, *, driver: str, class_of: ClassLookup) -> bool:
    """A source, our driver, and no class of another driver."""
    if not volume_handles(content) and _preprovisioned(content) is None:
        return False
    field = "volumeGroupSnapshotClassName"
    return decisions.is_drivers(content, driver=driver, class_of=class_of, field=field)


def should_delete(content: Body) -> bool:
    """`shouldDeleteGroupSnapshotContent`: deleted, and either an unbound pre-provisioned
    content, or being deleted by the snapshot-controller and not being created."""
    if not is_deleting(content):
        return False
    ref = spec_of(content).get("volumeGroupSnapshotRef") or {}
    if _preprovisioned(content) is not None and not ref.get("uid"):
        return True
    annotations = annotations_of(content)
    if names.ANN_GROUP_SNAPSHOT_BEING_CREATED in annotations:
        return False
    return names.ANN_GROUP_SNAPSHOT_BEING_DELETED in annotations


def next_action(content: Body) -> Action:
    """`syncGroupSnapshotContent`'s dispatch."""
    status = content.get("status")
    if should_delete(content):
        deletes = spec_of(content).get("deletionPolicy") == "Delete"
        if deletes and (status or {}).get("volumeGroupSnapshotHandle"):
            return Action.DELETE_SNAPSHOT
        return Action.RELEASE
    dynamic = bool(volume_handles(content))
    if dynamic and status is None:
        return Action.CREATE
    if is_ready(content):
        return Action.READY
    if dynamic and not (status or {}).get("volumeGroupSnapshotHandle"):
        return Action.CREATE
    return Action.CHECK


def group_snapshot_name(prefix: str, uid: str, uuid_length: int = -1) -> str:
    """`makeGroupSnapshotName`: `<prefix>-<VolumeGroupSnapshot uid>`, as `makeSnapshotName`."""
    return snapshot_name(prefix, uid, uuid_length)


class Member:
    """One snapshot of the group as the driver answered it (plain values)."""

    def __init__(
        self, *, volume: str, snapshot: str, ready: bool, size: int, created_ns: int
    ) -> None:
        self.volume, self.snapshot, self.ready = volume, snapshot, ready
        self.size, self.created_ns = size, created_ns

    def info(self) -> dict[str, Any]:
        """One `volumeSnapshotInfoList` entry (groupsnapshot.storage.k8s.io/v1)."""
        entry: dict[str, Any] = {
            "volumeHandle": self.volume,
            "snapshotHandle": self.snapshot,
            "readyToUse": self.ready,
        }
        if self.size > 0:
            entry["restoreSize"] = self.size
        if self.created_ns:
            entry["creationTime"] = self.created_ns
        return entry


def updated_status(
    current: Body | None,
    *,
    handle: str,
    ready: bool,
    created: str,
    members: Sequence[Member],
) -> dict[str, Any] | None:
    """`updateGroupSnapshotContentStatus`: the new status, or None when nothing changes.

    Empty fields are filled in; `readyToUse` follows the driver (a group turning ready drops an
    old error); `creationTime` is an RFC 3339 time, as in the v1 API's metav1.Time.
    """
    infos = [m.info() for m in members]
    status = copy.deepcopy(dict(current or {}))
    before = copy.deepcopy(status)
    status.setdefault("volumeGroupSnapshotHandle", handle)
    if status.get("readyToUse") is None or status["readyToUse"] != ready:
        status["readyToUse"] = ready
        if ready:
            status.pop("error", None)
    if status.get("creationTime") is None:
        status["creationTime"] = created
    if infos:
        status["volumeSnapshotInfoList"] = infos
    return status if status != before or current is None else None


def cleared_status_patch() -> dict[str, Any]:
    """`clearGroupSnapshotContentStatus`: the group is gone from the driver."""
    gone = {"volumeGroupSnapshotHandle": None, "readyToUse": None, "creationTime": None}
    return {"status": {**gone, "error": None}}
