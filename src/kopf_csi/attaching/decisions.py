"""The attacher's decisions, as pure functions over plain-dict objects.

external-attacher's rules (pkg/controller/util.go, controller.go, csi_handler.go): which
VolumeAttachments are ours and which queue they go to, the finalizer and its patches, the node
ID, the status patches, the filter that keeps our own error writes from resetting the backoff,
when a PV's finalizer may go, and what the reconciler re-syncs. No I/O here.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kopf_csi import names
from kopf_csi.attaching.errors import AttachError, error_code, error_text

__all__ = [
    "ReconcilePlan",
    "Route",
    "add_finalizer_patch",
    "attached_status",
    "detached_status",
    "error_status",
    "finalizer_name",
    "has_finalizer",
    "is_deleted",
    "is_deleting",
    "is_ours",
    "node_id",
    "node_id_from_csinode",
    "reconcile",
    "remove_finalizer_patch",
    "route",
    "sanitize_driver_name",
    "should_enqueue_change",
    "should_release_volume",
    "va_metadata_patch",
    "volume_in_use",
    "volume_name",
    "volume_spec",
]

Body = Mapping[str, Any]
StrategicPatch = dict[str, Any]
"""A body for `application/strategic-merge-patch+json` (the kinds here are all built in)."""
_UNSAFE = re.compile(r"[^a-zA-Z0-9-]")


# -- names -------------------------------------------------------------------------------------


def sanitize_driver_name(driver: str) -> str:
    """`SanitizeDriverName`: `[^a-zA-Z0-9-]` → `-`, and an `X` after a trailing `-`."""
    name = _UNSAFE.sub("-", driver)
    return name + "X" if name.endswith("-") else name


def finalizer_name(driver: str) -> str:
    """`external-attacher/<sanitized driver>`, on both the PV and the VA (`GetFinalizerName`)."""
    return names.FINALIZER_ATTACHER_PREFIX + sanitize_driver_name(driver)


# -- reading objects ---------------------------------------------------------------------------


def _meta(obj: Body) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    return meta


def _spec(obj: Body) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = obj.get("spec") or {}
    return spec


def _status(obj: Body) -> Mapping[str, Any]:
    status: Mapping[str, Any] = obj.get("status") or {}
    return status


def is_ours(va: Body, driver: str) -> bool:
    """Only VAs whose `spec.attacher` is our driver (controller.go `syncVA`)."""
    return _spec(va).get("attacher") == driver


def is_deleting(obj: Body) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def is_deleted(obj: Body) -> bool:
    """A write's answer shows the object gone: deleting, and its last finalizer removed."""
    return is_deleting(obj) and not _meta(obj).get("finalizers")


def has_finalizer(obj: Body, finalizer: str) -> bool:
    return finalizer in (_meta(obj).get("finalizers") or ())


def volume_name(va: Body) -> str | None:
    """The PV a VA attaches (`spec.source.persistentVolumeName`), None for inline volumes."""
    name = (_spec(va).get("source") or {}).get("persistentVolumeName")
    return str(name) if name else None


def volume_spec(va: Body, volumes: Callable[[str], Body | None]) -> tuple[Body, Body | None]:
    """The PV spec a VA attaches, and the PV (None for a migrated inline volume).

    `getProcessedPVSpec`: a PV by name (read from the cache through `volumes`), or the
    `inlineVolumeSpec`; exactly one of them. The errors are the Go ones.
    """
    source = _spec(va).get("source") or {}
    inline = source.get("inlineVolumeSpec")
    pv_name = source.get("persistentVolumeName")
    if pv_name:
        if inline is not None:
            raise AttachError(names.MESSAGE_BOTH_SOURCES)
        pv = volumes(pv_name)
        if pv is None:
            raise AttachError(names.MESSAGE_PV_NOT_FOUND.format(volume=pv_name))
        return _spec(pv), pv
    if inline is not None:
        if not inline.get("csi"):
            raise AttachError(names.MESSAGE_INLINE_WITHOUT_CSI)
        return inline, None
    raise AttachError(names.MESSAGE_NO_SOURCE)


# -- routing watch events ----------------------------------------------------------------------


class Route(enum.Enum):
    """Where a VA's watch event sends it."""

    IGNORE = "ignore"
    """Not ours, or a change we must not react to (only our own error write)."""
    ATTACH = "attach"
    """The attach queue: not being deleted (or any VA, in trivial mode)."""
    DETACH = "detach"
    """The detach queue: being deleted."""


def route(va: Body, *, driver: str, trivial: bool) -> Route:
    """The queue for a VA; in trivial mode everything is "mark attached" (trivial_handler.go)."""
    if not is_ours(va, driver):
        return Route.IGNORE
    if trivial or not is_deleting(va):
        return Route.ATTACH
    return Route.DETACH


_IGNORED_META = ("resourceVersion", "managedFields")


def _sanitized(va: Body, *, errors_from: Body) -> dict[str, Any]:
    meta = {k: v for k, v in _meta(va).items() if k not in _IGNORED_META}
    status = dict(_status(va))
    for key in ("attachError", "detachError"):
        status.pop(key, None)
        if key in _status(errors_from):
            status[key] = _status(errors_from)[key]
    return {**va, "metadata": meta, "status": status}


def should_enqueue_change(old: Body | None, new: Body) -> bool:
    """`shouldEnqueueVAChange`: ignore an update that changed only `attachError`/`detachError`.

    Those are our own writes after a failure; re-queueing them would run the VA again at once
    and defeat its backoff. Also ignored (unlike Go): `managedFields`, which a real API server
    rewrites with every write, so that Go's comparison rarely sees "only the error changed".
    """
    if old is None or _meta(old).get("resourceVersion") == _meta(new).get("resourceVersion"):
        return True  # the first sight, or a resync: process it
    errors = ("attachError", "detachError")
    if not any(_status(old).get(k) or _status(new).get(k) for k in errors):
        return True  # the difference must be elsewhere
    return _sanitized(old, errors_from=old) != _sanitized(new, errors_from=old)


# -- the node ID -------------------------------------------------------------------------------


def node_id_from_csinode(csinode: Body, driver: str) -> str | None:
    """`GetNodeIDFromCSINode`: the driver's entry's `nodeID`, or None without an entry."""
    for entry in _spec(csinode).get("drivers") or ():
        if entry.get("name") == driver:
            return str(entry.get("nodeID") or "")
    return None


def node_id(*, driver: str, node_name: str, csinode: Body | None, va: Body | None = None) -> str:
    """`getNodeID`: from the CSINode; with a VA (detach, reconcile), its annotation as a fallback.

    A CSINode without our driver counts as missing: the driver pod may be down on a node that
    is shut down, and that must not block ControllerUnpublish.
    """
    if csinode is not None:
        found = node_id_from_csinode(csinode, driver)
        if found is not None:
            return found
        error = names.MESSAGE_CSINODE_WITHOUT_DRIVER.format(node=node_name, driver=driver)
    else:
        error = names.MESSAGE_CSINODE_NOT_FOUND.format(node=node_name)
    if va is not None:
        annotations = _meta(va).get("annotations") or {}
        if names.ANN_VA_NODE_ID in annotations:
            return str(annotations[names.ANN_VA_NODE_ID])
    raise AttachError(error)


# -- patches -----------------------------------------------------------------------------------


def add_finalizer_patch(obj: Body, finalizer: str) -> StrategicPatch | None:
    """A strategic merge patch adding the finalizer; None if the copy read has it.

    `metadata.finalizers` merges by item on the server (its patch strategy is "merge"): the
    server adds this one item to the list it holds, whatever was written since our read. So
    the patch needs no resourceVersion: it can neither lose a race nor write over another
    controller's change to the list (external-provisioner #1217). A guarded merge patch of
    the whole list lost its race on a third of the attached PVs under churn (the PV
    controller and pv-protection write the same PV), each costing a GET and a second PATCH.
    """
    if finalizer in (_meta(obj).get("finalizers") or ()):
        return None
    return {"metadata": {"finalizers": [finalizer]}}


def remove_finalizer_patch(obj: Body, finalizer: str) -> StrategicPatch | None:
    """A strategic merge patch removing the finalizer; None if the copy read lacks it.

    `$deleteFromPrimitiveList` removes this one item from the list the server holds, as
    client-go and kubectl remove a finalizer: race-free without a resourceVersion, and it
    cannot re-add what another controller removed meanwhile (#1217). external-attacher
    v4.13's `removeFinalizerPatch` guards the list with a JSON-patch `test` instead, whose
    failure is a 422 a client cannot tell from a bad patch.
    """
    if finalizer not in (_meta(obj).get("finalizers") or ()):
        return None
    return {"metadata": {"$deleteFromPrimitiveList/finalizers": [finalizer]}}


def va_metadata_patch(va: Body, *, finalizer: str, node_id: str) -> StrategicPatch | None:
    """The strategic merge patch written before ControllerPublish: finalizer and node-ID
    annotation, each only if missing from the copy read; None when both are there.

    Strategic, as the finalizer patches: the finalizer merges into the server's list and the
    annotation into its map, so no resourceVersion is needed.
    """
    meta = _meta(va)
    finalizers = meta.get("finalizers") or ()
    annotations = meta.get("annotations") or {}
    patch: dict[str, Any] = {}
    if finalizer not in finalizers:
        patch["finalizers"] = [finalizer]
    if annotations.get(names.ANN_VA_NODE_ID) != node_id:
        patch["annotations"] = {names.ANN_VA_NODE_ID: node_id}
    if not patch:
        return None
    return {"metadata": patch}


def attached_status(publish_context: Mapping[str, str] | None) -> dict[str, Any]:
    """`markAsAttached`: attached, the publish context as metadata, no attach error."""
    return {
        "status": {
            "attached": True,
            "attachmentMetadata": dict(publish_context) if publish_context else None,
            "attachError": None,
        }
    }


def detached_status() -> dict[str, Any]:
    """`markAsDetached`'s status part (after the finalizer is gone)."""
    return {"status": {"attached": False, "detachError": None, "attachmentMetadata": None}}


def error_status(field: str, error: BaseException, *, now: str) -> dict[str, Any]:
    """`status.attachError`/`detachError`: `{message, time, errorCode}` (no code if not gRPC)."""
    volume_error: dict[str, Any] = {"message": error_text(error), "time": now}
    code = error_code(error)
    if code is not None:
        volume_error["errorCode"] = code
    return {"status": {field: volume_error}}


# -- the PV finalizer --------------------------------------------------------------------------


def volume_in_use(pv_name: str, attachments: Iterable[Body]) -> bool:
    """Whether any VA (of any attacher, deleting or not) references the PV by name."""
    return any(volume_name(va) == pv_name for va in attachments)


def should_release_volume(pv: Body, *, finalizer: str, attachments: Iterable[Body]) -> bool:
    """`SyncNewOrUpdatedPersistentVolume`: a deleting PV with our finalizer and no VA left."""
    name = str(_meta(pv).get("name", ""))
    return is_deleting(pv) and has_finalizer(pv, finalizer) and not volume_in_use(name, attachments)


# -- reconciliation ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ReconcilePlan:
    """What a comparison of ListVolumes with the VAs found."""

    resync: list[str]
    """VAs whose `status.attached` disagrees with the driver: force-synced (ReconcileVA)."""
    unexpected: list[tuple[str, str]]
    """(volume handle, node ID) published for one of our PVs, without any VA: reported."""


def reconcile(
    *,
    driver: str,
    attachments: Iterable[Body],
    volumes: Callable[[str], Body | None],
    csinodes: Callable[[str], Body | None],
    published: Mapping[str, Sequence[str]],
    known_handles: Iterable[str] = (),
) -> ReconcilePlan:
    """Compare each VA's `status.attached` with whether the driver lists the volume on its node.

    VAs whose node ID or volume cannot be worked out are skipped (logged upstream, retried at
    the next round). `known_handles` are our PVs' volume handles, for `unexpected`.
    """
    resync: list[str] = []
    expected: set[tuple[str, str]] = set()
    for va in attachments:
        if not is_ours(va, driver):
            continue
        node_name = str(_spec(va).get("nodeName") or "")
        try:
            node = node_id(driver=driver, node_name=node_name, csinode=csinodes(node_name), va=va)
            spec, _ = volume_spec(va, volumes)
        except AttachError:
            continue
        handle = str((spec.get("csi") or {}).get("volumeHandle") or "")
        if not handle:
            continue
        expected.add((handle, node))
        found = node in (published.get(handle) or ())
        if bool(_status(va).get("attached")) != found:
            resync.append(str(_meta(va)["name"]))
    unexpected = sorted(
        (handle, node)
        for handle in set(known_handles) & set(published)
        for node in published[handle]
        if (handle, node) not in expected
    )
    return ReconcilePlan(resync=resync, unexpected=unexpected)
