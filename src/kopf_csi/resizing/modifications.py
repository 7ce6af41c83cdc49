"""Pure decisions and writes of the modify controller (VolumeAttributesClass changes).

A port of external-resizer's modify controller (pkg/modifycontroller: `syncPVC`, `modify`,
`delayModificationIfRecentlyInfeasible`, modify_status.go): a Bound claim whose
`spec.volumeAttributesClassName` differs from `status.currentVolumeAttributesClassName` gets
ControllerModifyVolume with the class's parameters; its progress is in
`status.modifyVolumeStatus` {targetVolumeAttributesClassName, status: Pending, InProgress or
Infeasible} and the ModifyingVolume / ModifyVolumeError conditions. A class set back to empty
(rollback) is not acted on: upstream's `syncPVC` only looks at claims naming a class.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Any

from kopf_csi import names
from kopf_csi.resizing.status import Condition, condition

__all__ = [
    "Step",
    "Target",
    "completed",
    "has_modify_work",
    "modify_status",
    "plan_modify",
    "with_status",
]

Body = Mapping[str, Any]
MODIFY_CONDITIONS = frozenset(
    {names.CONDITION_MODIFYING_VOLUME, names.CONDITION_MODIFY_VOLUME_ERROR}
)


def spec_class(claim: Body) -> str:
    return str((claim.get("spec") or {}).get("volumeAttributesClassName") or "")


def current_class(claim: Body) -> str:
    return str((claim.get("status") or {}).get("currentVolumeAttributesClassName") or "")


def modify_status(claim: Body) -> Body | None:
    found: Body | None = (claim.get("status") or {}).get("modifyVolumeStatus")
    return found


def has_modify_work(claim: Body) -> bool:
    """`syncPVC`'s filter, plus "not done yet": Bound, naming a class, not at it."""
    if (claim.get("status") or {}).get("phase") != "Bound" or not spec_class(claim):
        return False
    if not (claim.get("spec") or {}).get("volumeName"):
        return False
    return modify_status(claim) is not None or spec_class(claim) != current_class(claim)


class Step(enum.Enum):
    SKIP = "skip"
    DELAY = "delay"
    CONTINUE = "continue"
    """Retry the target of an operation that may still run on the driver."""
    START = "start"
    """Validate the spec's class and modify to it."""


@dataclasses.dataclass(frozen=True)
class Target:
    step: Step
    vac: str = ""


def plan_modify(claim: Body, *, uncertain: bool, slow: bool) -> Target:
    """`modify`: whether and to which class; `uncertain`: the last call ended non-finally;
    `slow`: the same target failed as infeasible within the slow-retry interval."""
    status = modify_status(claim)
    wanted, current = spec_class(claim), current_class(claim)
    target_now = str((status or {}).get("targetVolumeAttributesClassName") or "")
    if status is not None and wanted and target_now == wanted and slow:
        return Target(Step.DELAY, wanted)
    if status is None and wanted == current:
        return Target(Step.SKIP)
    in_progress = status is not None and status.get("status") == names.MODIFY_IN_PROGRESS
    if not wanted and not in_progress:
        return Target(Step.SKIP)  # rolled back; upstream does not sync such claims
    if (in_progress and uncertain) or not wanted:
        return Target(Step.CONTINUE, target_now)
    return Target(Step.START, wanted)


def _merge(old: Sequence[Body], new: Sequence[Condition]) -> list[Condition]:
    """`MergeModifyVolumeConditionsOfPVC`: the modify conditions replaced, others kept."""
    kept = [dict(c) for c in old if c.get("type") not in MODIFY_CONDITIONS]
    return [*kept, *new]


def with_status(
    claim: Body, value: str, *, target: str, error: str | None, now: str
) -> dict[str, Any]:
    """`markControllerModifyVolumeStatus`: Pending (conditions untouched), InProgress (the
    target, ModifyingVolume, or ModifyVolumeError after an error) or Infeasible."""
    previous = dict(modify_status(claim) or {})
    previous["status"] = value
    if value == names.MODIFY_IN_PROGRESS and target:
        previous["targetVolumeAttributesClassName"] = target
    status: dict[str, Any] = {"modifyVolumeStatus": previous}
    conditions = list((claim.get("status") or {}).get("conditions") or ())
    if error is not None:
        message = names.MESSAGE_MODIFY_ERROR.format(error=error)
        new = [condition(names.CONDITION_MODIFY_VOLUME_ERROR, now=now, message=message)]
        status["conditions"] = _merge(conditions, new)
    elif value == names.MODIFY_IN_PROGRESS:
        message = names.MESSAGE_MODIFY_IN_PROGRESS
        new = [condition(names.CONDITION_MODIFYING_VOLUME, now=now, message=message)]
        status["conditions"] = _merge(conditions, new)
    version = (claim.get("metadata") or {}).get("resourceVersion")
    patch: dict[str, Any] = {"status": status}
    if version and error is None:
        patch["metadata"] = {"resourceVersion": version}
    return patch


def completed(claim: Body, target: str) -> dict[str, Any]:
    """`markControllerModifyVolumeCompleted`: the class is current, the status and the modify
    conditions are gone."""
    conditions = list((claim.get("status") or {}).get("conditions") or ())
    return {
        "status": {
            "modifyVolumeStatus": None,
            "currentVolumeAttributesClassName": target,
            "conditions": _merge(conditions, []),
        }
    }
