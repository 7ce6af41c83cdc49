"""The claim and PV writes of the resize controller, as merge patches (pure).

Ports of `markControllerResizeInProgress`, `markForPendingNodeExpansion`,
`markControllerExpansionInfeasible`, `markControllerExpansionFailedCondition`,
`markOverallExpansionAsFinished` (resize_status.go), `updatePVCapacity` and
`deletePreResizeCapAnnotation` (controller.go).

Upstream sends one strategic-merge patch to the claim's `status` subresource that also adds or
removes the `node-expansion-not-required` annotation. Metadata written through `/status` is
reset by API servers that apply `ResetObjectMetaForStatus`, so here the annotation is a patch
of its own on the claim (`annotation_patch`), and the status patch carries only `status`.
The conditions list is replaced whole, computed from the cached claim, so the status patches
carry the claim's resourceVersion where upstream adds its resourceVersion check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kopf_csi import names
from kopf_csi.resizing.decisions import STORAGE

__all__ = [
    "annotation_patch",
    "failed",
    "finished",
    "in_progress",
    "infeasible",
    "merge_resize_conditions",
    "pending_on_node",
    "volume_capacity_patch",
    "without_pre_resize_annotation",
]

Body = Mapping[str, Any]
Condition = dict[str, Any]

RESIZE_CONDITIONS = frozenset(
    {
        names.CONDITION_RESIZING,
        names.CONDITION_FS_RESIZE_PENDING,
        names.CONDITION_CONTROLLER_RESIZE_ERROR,
        names.CONDITION_NODE_RESIZE_ERROR,
    }
)


def condition(kind: str, *, now: str, message: str = "") -> Condition:
    found: Condition = {"type": kind, "status": "True", "lastTransitionTime": now}
    if message:
        found["message"] = message
    return found


def merge_resize_conditions(
    old: Sequence[Body], new: Sequence[Condition], *, keep_old: bool
) -> list[Condition]:
    """`mergeResizeConditionOnPVC`: other controllers' conditions stay; a resize condition is
    replaced by a new one of its type, kept (with `keep_old`) or dropped; new types go last.
    (Upstream's older merge also dropped the non-resize conditions, e.g. ModifyingVolume; the
    newer one keeps them, as this does.)"""
    pending = {c["type"]: c for c in new}
    merged: list[Condition] = []
    for item in old:
        kind = item.get("type")
        if kind not in RESIZE_CONDITIONS:
            merged.append(dict(item))
        elif kind in pending:
            merged.append(pending.pop(str(kind)))
        elif keep_old:
            merged.append(dict(item))
    merged.extend(pending.values())
    return merged


def _conditions(claim: Body) -> list[Body]:
    return list((claim.get("status") or {}).get("conditions") or ())


def _statuses(claim: Body, value: str | None) -> dict[str, Any] | None:
    """`allocatedResourceStatuses` with `storage` set (or removed: None when then empty)."""
    statuses = dict((claim.get("status") or {}).get("allocatedResourceStatuses") or {})
    if value is None:
        statuses.pop(STORAGE, None)
        return statuses or None
    statuses[STORAGE] = value
    return statuses


def _patch(claim: Body, status: Mapping[str, Any], *, versioned: bool) -> dict[str, Any]:
    patch: dict[str, Any] = {"status": dict(status)}
    if versioned:
        version = (claim.get("metadata") or {}).get("resourceVersion")
        if version:
            patch["metadata"] = {"resourceVersion": version}
    return patch


def in_progress(claim: Body, size: str, *, update_status: bool, now: str) -> dict[str, Any]:
    """Resizing=True, the target in `allocatedResources`, ControllerResizeInProgress."""
    resizing = [condition(names.CONDITION_RESIZING, now=now)]
    status: dict[str, Any] = {
        "conditions": merge_resize_conditions(
            _conditions(claim), resizing, keep_old=not update_status
        ),
        "allocatedResources": {
            **((claim.get("status") or {}).get("allocatedResources") or {}),
            STORAGE: size,
        },
    }
    if update_status:
        status["allocatedResourceStatuses"] = _statuses(claim, names.RESIZE_CONTROLLER_IN_PROGRESS)
    return _patch(claim, status, versioned=True)


def pending_on_node(claim: Body, *, now: str) -> dict[str, Any]:
    """FileSystemResizePending and NodeResizePending: kubelet's NodeExpandVolume is next."""
    pending = [
        condition(
            names.CONDITION_FS_RESIZE_PENDING, now=now, message=names.MESSAGE_FS_RESIZE_PENDING
        )
    ]
    status = {
        "conditions": merge_resize_conditions(_conditions(claim), pending, keep_old=True),
        "allocatedResourceStatuses": _statuses(claim, names.RESIZE_NODE_PENDING),
    }
    return _patch(claim, status, versioned=True)


def infeasible(claim: Body, error: str, *, now: str) -> dict[str, Any]:
    """ControllerResizeInfeasible and a ControllerResizeError condition (no version check)."""
    status = {
        "conditions": _error_conditions(claim, error, now=now),
        "allocatedResourceStatuses": _statuses(claim, names.RESIZE_CONTROLLER_INFEASIBLE),
    }
    return _patch(claim, status, versioned=False)


def failed(claim: Body, error: str, *, now: str) -> dict[str, Any]:
    """A ControllerResizeError condition; the resize status stays as it is."""
    return _patch(claim, {"conditions": _error_conditions(claim, error, now=now)}, versioned=False)


def _error_conditions(claim: Body, error: str, *, now: str) -> list[Condition]:
    message = names.MESSAGE_CONTROLLER_RESIZE_ERROR.format(error=error)
    new = [condition(names.CONDITION_CONTROLLER_RESIZE_ERROR, now=now, message=message)]
    return merge_resize_conditions(_conditions(claim), new, keep_old=True)


def finished(claim: Body, size: str) -> dict[str, Any]:
    """The new capacity, the resize conditions cleared, the resize status removed."""
    status = {
        "capacity": {**((claim.get("status") or {}).get("capacity") or {}), STORAGE: size},
        "conditions": merge_resize_conditions(_conditions(claim), [], keep_old=False),
        "allocatedResourceStatuses": _statuses(claim, None),
    }
    return _patch(claim, status, versioned=True)


def annotation_patch(claim: Body, *, not_required: bool) -> dict[str, Any] | None:
    """Set or remove `node-expansion-not-required` on the claim; None when it is already so."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    present = names.ANN_NODE_EXPANSION_NOT_REQUIRED in annotations
    if present == not_required:
        return None
    value = "true" if not_required else None
    return {"metadata": {"annotations": {names.ANN_NODE_EXPANSION_NOT_REQUIRED: value}}}


def volume_capacity_patch(
    pv: Body, size: str, *, old_capacity: str | None, node_expansion: bool
) -> dict[str, Any]:
    """`updatePVCapacity`: the new capacity, and (AnnotateFsResize) the claim's old capacity
    in `pre-resize-capacity` when the node still has to grow the filesystem."""
    patch: dict[str, Any] = {"spec": {"capacity": {STORAGE: size}}}
    annotations = (pv.get("metadata") or {}).get("annotations") or {}
    if node_expansion and names.ANN_PRE_RESIZE_CAPACITY not in annotations:
        patch["metadata"] = {"annotations": {names.ANN_PRE_RESIZE_CAPACITY: old_capacity or "0"}}
    return patch


def without_pre_resize_annotation() -> dict[str, Any]:
    return {"metadata": {"annotations": {names.ANN_PRE_RESIZE_CAPACITY: None}}}
