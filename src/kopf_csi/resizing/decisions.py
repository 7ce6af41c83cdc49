"""Pure decisions of the resize controller: which claims need work, and to what size.

A port of external-resizer's `syncPVC`, `pvcNeedResize`, `pvCanBeExpanded`,
`isNodeExpandComplete` and `expandAndRecover` (pkg/controller/controller.go,
expand_and_recover.go), with RecoverVolumeExpansionFailure GA: the claim's
`status.allocatedResources` and `status.allocatedResourceStatuses` remember what the
controller last set out to do, so that a user may lower a request that failed, but never below
an expansion that may still be running on the driver.

Plain functions over the claim and PV dicts; sizes are compared as exact byte counts and kept
as the quantity strings the user (or we) wrote.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from kopf_csi import names
from kopf_csi.provisioning.quantities import QuantityError, quantity_bytes

__all__ = [
    "Action",
    "Plan",
    "allocated_size",
    "capacity",
    "claim_key",
    "has_pending_resize",
    "is_bound_to",
    "is_ours",
    "needs_resize",
    "node_expand_complete",
    "plan_expansion",
    "request",
    "resize_status",
    "size_of",
    "volume_capacity",
]

Body = Mapping[str, Any]
STORAGE = "storage"


def _status(obj: Body) -> Body:
    return obj.get("status") or {}


def _spec(obj: Body) -> Body:
    return obj.get("spec") or {}


def claim_key(claim: Body) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def size_of(quantity: str | None) -> int:
    """Bytes of a quantity; a missing or unparsable one counts as 0 (Go's zero Quantity)."""
    if not quantity:
        return 0
    try:
        return quantity_bytes(str(quantity))
    except QuantityError:
        return 0


def request(claim: Body) -> str | None:
    value = ((_spec(claim).get("resources") or {}).get("requests") or {}).get(STORAGE)
    return str(value) if value is not None else None


def capacity(claim: Body) -> str | None:
    value = (_status(claim).get("capacity") or {}).get(STORAGE)
    return str(value) if value is not None else None


def allocated_size(claim: Body) -> str | None:
    value = (_status(claim).get("allocatedResources") or {}).get(STORAGE)
    return str(value) if value is not None else None


def resize_status(claim: Body) -> str:
    return str((_status(claim).get("allocatedResourceStatuses") or {}).get(STORAGE) or "")


def volume_capacity(pv: Body) -> str | None:
    value = (_spec(pv).get("capacity") or {}).get(STORAGE)
    return str(value) if value is not None else None


def needs_resize(claim: Body) -> bool:
    """`pvcNeedResize`: a Bound claim whose request is above its capacity."""
    if _status(claim).get("phase") != "Bound" or not _spec(claim).get("volumeName"):
        return False
    wanted, has = request(claim), capacity(claim)
    if wanted == has:
        return False  # the same text: no parsing (every bound claim's every event comes here)
    return size_of(wanted) > size_of(has)


def is_ours(pv: Body, driver: str) -> bool:
    """`CanSupport`: a CSI PV of our driver (migrated in-tree volumes are not supported)."""
    return (_spec(pv).get("csi") or {}).get("driver") == driver


def is_bound_to(pv: Body, claim: Body) -> bool:
    """The PV's claimRef names this claim, by namespace and uid (`pvCanBeExpanded`)."""
    ref = _spec(pv).get("claimRef") or {}
    meta = claim.get("metadata") or {}
    return ref.get("namespace") == meta.get("namespace") and ref.get("uid") == meta.get("uid")


def node_expand_complete(claim: Body, pv: Body) -> bool:
    """`isNodeExpandComplete`: the claim's capacity caught up with the PV's."""
    return size_of(capacity(claim)) >= size_of(volume_capacity(pv))


def has_pending_resize(claim: Body) -> bool:
    """Worth keeping in the resizer's cache: a resize requested or under way."""
    status = _status(claim)
    return needs_resize(claim) or bool((status.get("allocatedResourceStatuses") or {}).get(STORAGE))


class Action(enum.Enum):
    SKIP = "skip"
    """Nothing to do now (not ours, or the node has the rest of the work)."""
    DELAY = "delay"
    """The same size failed as infeasible recently: wait for the slow retry."""
    EXPAND = "expand"


@dataclasses.dataclass(frozen=True)
class Plan:
    action: Action
    size: str = ""
    """The quantity to expand to (the request, or the allocated size of an earlier attempt)."""
    update_status: bool = True
    """False when the status already says this size is in progress (no conditions reset)."""


def plan_expansion(
    claim: Body,
    pv: Body,
    *,
    driver: str,
    final_error: bool,
    slow: bool,
    controller_expansion: bool,
) -> Plan:
    """`expandAndRecover` up to the RPC: which size to expand to, or why not now.

    `final_error`: the last ControllerExpandVolume of this claim failed with a final error (an
    in-memory fact, as upstream's `finalErrorPVCs`); `slow`: the claim is in the slow set (an
    infeasible failure within `--retry-interval-max`); `controller_expansion`: the driver has
    controller EXPAND_VOLUME (not the trivial resizer).
    """
    if not is_ours(pv, driver) or not is_bound_to(pv, claim):
        return Plan(Action.SKIP)
    wanted = request(claim) or ""
    allocated = allocated_size(claim)
    status = resize_status(claim)
    size = wanted
    if size_of(volume_capacity(pv)) < size_of(wanted):
        # The volume is smaller than asked: expand, but let an earlier expansion that may
        # still be running (or is pending on the node) finish first, at its own size.
        if status == names.RESIZE_NODE_INFEASIBLE:
            size = allocated or wanted
        elif status in (names.RESIZE_NODE_PENDING, names.RESIZE_NODE_IN_PROGRESS):
            size = allocated or wanted
            if size_of(volume_capacity(pv)) >= size_of(size):
                return Plan(Action.SKIP)
        elif status == names.RESIZE_CONTROLLER_IN_PROGRESS:
            # A final error means nothing runs on the driver: the user's new size is safe.
            size = wanted if final_error else (allocated or wanted)
    elif status in (names.RESIZE_NODE_IN_PROGRESS, names.RESIZE_NODE_PENDING):
        return Plan(Action.SKIP)  # expanded already; kubelet finishes the job
    elif status == names.RESIZE_NODE_INFEASIBLE:
        size = (allocated or wanted) if controller_expansion else wanted
    elif status in (names.RESIZE_CONTROLLER_IN_PROGRESS, names.RESIZE_CONTROLLER_INFEASIBLE):
        size = allocated or wanted  # our write of the result was lost, or the user shrank it
    elif allocated is not None:
        size = allocated
    elif has_condition(claim, names.CONDITION_FS_RESIZE_PENDING):
        return Plan(Action.SKIP)
    if allocated is not None and size_of(allocated) == size_of(size):
        if slow:
            return Plan(Action.DELAY, size)
        return Plan(Action.EXPAND, size, update_status=False)
    return Plan(Action.EXPAND, size)


def has_condition(claim: Body, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in _status(claim).get("conditions") or ()
    )
