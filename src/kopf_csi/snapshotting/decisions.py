"""Pure decisions of the csi-snapshotter: which contents are ours, and what each one needs next.

The port of `syncContent`, `shouldDelete`, `isDriverMatch`, `ShouldEnqueueContentChange`,
`makeSnapshotName` and the status arithmetic of `updateSnapshotContentStatus`
(external-snapshotter pkg/sidecar-controller, pkg/utils). Plain dicts in, plain values and
patches out: no I/O, no kopf.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Callable, Mapping
from typing import Any

from kopf_csi import names

__all__ = [
    "Action",
    "annotations_of",
    "cleared_status_patch",
    "error_status_patch",
    "is_deleting",
    "is_driver_match",
    "is_drivers",
    "is_group_member",
    "is_ready",
    "member_status_handle",
    "meta_of",
    "next_action",
    "release_patch",
    "should_delete",
    "should_enqueue_change",
    "snapshot_handle",
    "snapshot_name",
    "source_of",
    "spec_of",
    "updated_status",
]

Body = Mapping[str, Any]
ClassLookup = Callable[[str], Body | None]


class Action(enum.Enum):
    """What `syncContent` (and `syncGroupSnapshotContent`) does with a content of ours now."""

    DELETE_SNAPSHOT = "delete"
    """Being deleted, policy Delete, a snapshot (or group) on the driver: delete it there, clear
    the status."""
    RELEASE = "release"
    """Being deleted, and nothing (left) to delete on the driver: remove the finalizer."""
    CREATE = "create"
    """Dynamic and without a status: CreateSnapshot."""
    READY = "ready"
    """Ready to use: nothing to call; drop a left-over being-created annotation."""
    CHECK = "check"
    """Not ready (or failed before): poll it; a dynamic one by CreateSnapshot again (upstream
    `checkandUpdateContentStatusOperation`), a pre-provisioned one by its status RPC."""


def meta_of(obj: Body) -> Body:
    return obj.get("metadata") or {}


def spec_of(obj: Body) -> Body:
    return obj.get("spec") or {}


def source_of(obj: Body) -> Body:
    return spec_of(obj).get("source") or {}


def annotations_of(obj: Body) -> Mapping[str, str]:
    return meta_of(obj).get("annotations") or {}


def is_deleting(obj: Body) -> bool:
    return bool(meta_of(obj).get("deletionTimestamp"))


def is_ready(content: Body) -> bool:
    """`contentIsReady`."""
    return (content.get("status") or {}).get("readyToUse") is True


def snapshot_handle(content: Body) -> str | None:
    """The driver's id of the snapshot: from the status, else from a pre-provisioned source."""
    handle = (content.get("status") or {}).get("snapshotHandle") or source_of(content).get(
        "snapshotHandle"
    )
    return str(handle) if handle else None


def is_driver_match(content: Body, *, driver: str, class_of: ClassLookup) -> bool:
    """`isDriverMatch`: a source, our driver, and no class of another driver."""
    source = source_of(content)
    if not source.get("volumeHandle") and not source.get("snapshotHandle"):
        return False
    return is_drivers(content, driver=driver, class_of=class_of, field="volumeSnapshotClassName")


def is_drivers(content: Body, *, driver: str, class_of: ClassLookup, field: str) -> bool:
    """Our driver's content, whose class (named by `field`), if known, is our driver's too."""
    if spec_of(content).get("driver") != driver:
        return False
    class_name = spec_of(content).get(field)
    if class_name:
        found = class_of(str(class_name))
        if found is not None and found.get("driver") != driver:
            return False
    return True


def should_delete(content: Body) -> bool:
    """`shouldDelete`: deleted, and either an unbound pre-provisioned content, or being deleted
    by the snapshot-controller and not being created (then wait for CreateSnapshot's answer)."""
    if not is_deleting(content):
        return False
    ref = spec_of(content).get("volumeSnapshotRef") or {}
    if source_of(content).get("snapshotHandle") and not ref.get("uid"):
        return True
    if names.ANN_SNAPSHOT_BEING_CREATED in annotations_of(content):
        return False
    return names.ANN_SNAPSHOT_BEING_DELETED in annotations_of(content)


def _has_group_handle(content: Body) -> bool:
    """The status names a group: the snapshot goes with the group, never deleted alone."""
    return bool((content.get("status") or {}).get("volumeGroupSnapshotHandle"))


def is_group_member(content: Body) -> bool:
    """A member of a dynamic group snapshot (the snapshot-controller's group-handle
    annotation): its content and status are the snapshot-controller's, never created here."""
    return names.ANN_GROUP_SNAPSHOT_HANDLE in annotations_of(content)


def member_status_handle(content: Body) -> str | None:
    """A member whose status names its group and its snapshot: the snapshot to poll."""
    status = content.get("status") or {}
    if status.get("volumeGroupSnapshotHandle") and status.get("snapshotHandle"):
        return str(status["snapshotHandle"])
    return None


def next_action(content: Body) -> Action:
    """`syncContent`'s dispatch."""
    status = content.get("status")
    if should_delete(content):
        deletes = spec_of(content).get("deletionPolicy") == "Delete"
        has_snapshot = bool((status or {}).get("snapshotHandle"))
        if deletes and has_snapshot and not _has_group_handle(content):
            return Action.DELETE_SNAPSHOT
        return Action.RELEASE
    if source_of(content).get("volumeHandle") and status is None and not is_group_member(content):
        return Action.CREATE
    if is_ready(content):
        return Action.READY
    return Action.CHECK


def snapshot_name(prefix: str, uid: str, uuid_length: int = -1) -> str:
    """`makeSnapshotName`: `<prefix>-<uid>`; with a length, the uid without dashes, cut."""
    if uuid_length == -1:
        return f"{prefix}-{uid}"
    return f"{prefix}-{uid.replace('-', '')[:uuid_length]}"


def should_enqueue_change(
    old: Body | None, new: Body, *, own: str = names.ANN_SNAPSHOT_BEING_CREATED
) -> bool:
    """`ShouldEnqueueContentChange`: ignore changes of the resourceVersion, the status, the
    managed fields, the finalizers and our own being-created annotation (`own`). They are our
    writes, and re-running the content at once would defeat its backoff."""
    if old is None:
        return True
    return _sanitized(old, own) != _sanitized(new, own)


def _sanitized(obj: Body, own: str) -> Body:
    clean = {k: v for k, v in obj.items() if k != "status"}
    meta = {
        k: v
        for k, v in meta_of(obj).items()
        if k not in ("resourceVersion", "managedFields", "finalizers")
    }
    kept = {k: v for k, v in annotations_of(obj).items() if k != own}
    meta.pop("annotations", None)
    if kept:
        meta["annotations"] = kept
    clean["metadata"] = meta
    return clean


def updated_status(
    current: Body | None,
    *,
    handle: str,
    ready: bool,
    created_ns: int,
    size: int,
    group_handle: str = "",
) -> dict[str, Any] | None:
    """`updateSnapshotContentStatus`: the new status, or None when nothing changes.

    Only empty fields are filled in, except `readyToUse`, which follows the driver (and a
    snapshot turning ready drops an old error). `restoreSize` is set only for a size above 0,
    `volumeGroupSnapshotHandle` only when the driver named a group.
    """
    if current is None:
        status: dict[str, Any] = {
            "snapshotHandle": handle,
            "readyToUse": ready,
            "creationTime": created_ns,
        }
        if group_handle:
            status["volumeGroupSnapshotHandle"] = group_handle
        if size > 0:
            status["restoreSize"] = size
        return status
    status = copy.deepcopy(dict(current))
    changed = False
    if status.get("snapshotHandle") is None:
        status["snapshotHandle"], changed = handle, True
    if status.get("readyToUse") is None or status["readyToUse"] != ready:
        status["readyToUse"], changed = ready, True
        if ready:
            status.pop("error", None)
    if status.get("creationTime") is None:
        status["creationTime"], changed = created_ns, True
    if status.get("restoreSize") is None and size > 0:
        status["restoreSize"], changed = size, True
    if status.get("volumeGroupSnapshotHandle") is None and group_handle:
        status["volumeGroupSnapshotHandle"], changed = group_handle, True
    return status if changed else None


def error_status_patch(content: Body, message: str, now: str) -> dict[str, Any] | None:
    """`updateContentErrorStatusWithEvent`'s status: not ready, with the error; None when that
    very message is already there (then neither the status nor an event is written)."""
    status = content.get("status")
    if status is not None and (status.get("error") or {}).get("message") == message:
        return None
    error = {"time": now, "message": message}
    if status is None:
        return {"status": {"readyToUse": False, "error": error}}
    return {"status": {"error": error, "readyToUse": False}}


def cleared_status_patch() -> dict[str, Any]:
    """`clearVolumeContentStatus`: the snapshot is gone from the driver."""
    gone = {"snapshotHandle": None, "readyToUse": None, "creationTime": None, "restoreSize": None}
    return {"status": gone}


def release_patch(
    content: Body, *, finalizer: str = names.FINALIZER_SNAPSHOT_CONTENT_BOUND
) -> dict[str, Any] | None:
    """`removeContentFinalizer`: a merge patch of the finalizers read without the
    bound-protection finalizer (only it), to send guarded by the resourceVersion read
    (`kube.guarded_patch`: 409 when stale); None when it is not there."""
    finalizers = list(meta_of(content).get("finalizers") or [])
    if finalizer not in finalizers:
        return None
    remaining = [f for f in finalizers if f != finalizer]
    return {"metadata": {"finalizers": remaining}}
