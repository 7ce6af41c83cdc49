"""The health monitor's decisions: can the driver tell, which volumes to watch, which event.

external-health-monitor's controller (cmd/csi-external-health-monitor-controller,
pkg/csi-handler/pv_checker.go): it runs only with CONTROLLER_SERVICE and VOLUME_CONDITION plus
LIST_VOLUMES or GET_VOLUME (ListVolumes is preferred: one paged call for all volumes), checks
bound PVs of our driver, and posts on the bound PVC a Warning `VolumeConditionAbnormal` with
the driver's message while a volume is abnormal, and a Normal `VolumeConditionNormal` when it is
healthy again after an abnormal event. No I/O here.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kopf_csi import events, names
from kopf_csi.csi import DriverInfo

__all__ = ["Check", "Mode", "Post", "monitor_mode", "monitored", "transition"]

Body = Mapping[str, Any]


class Mode(enum.Enum):
    """How the conditions are read."""

    LIST_VOLUMES = "ListVolumes"
    """One paged ListVolumes per round (`--list-volumes-interval`)."""
    GET_VOLUME = "ControllerGetVolume"
    """One ControllerGetVolume per volume per round (`--monitor-interval`)."""


def monitor_mode(driver: DriverInfo) -> Mode | None:
    """The mode the driver allows, or None: upstream exits where we switch the monitor off."""
    if not driver.has_plugin("CONTROLLER_SERVICE"):
        return None
    if not driver.has_controller("VOLUME_CONDITION"):
        return None
    if driver.has_controller("LIST_VOLUMES"):
        return Mode.LIST_VOLUMES
    if driver.has_controller("GET_VOLUME"):
        return Mode.GET_VOLUME
    return None


@dataclasses.dataclass(frozen=True)
class Check:
    """A volume to check, and the claim to tell."""

    volume_handle: str
    claim_namespace: str
    claim_name: str


def monitored(volumes: Iterable[Body], *, driver: str) -> Iterator[Check]:
    """Bound PVs of our driver with a volume handle and a claim (the others are skipped)."""
    for pv in volumes:
        spec = pv.get("spec") or {}
        source = spec.get("csi") or {}
        ref = spec.get("claimRef") or {}
        if source.get("driver") != driver or (pv.get("status") or {}).get("phase") != "Bound":
            continue
        if not source.get("volumeHandle") or not ref.get("name"):
            continue
        yield Check(
            volume_handle=str(source["volumeHandle"]),
            claim_namespace=str(ref.get("namespace") or ""),
            claim_name=str(ref["name"]),
        )


@dataclasses.dataclass(frozen=True)
class Post:
    """An event to post on the claim."""

    type_: str
    reason: str
    message: str


def transition(*, abnormal: bool, message: str, was_abnormal: bool) -> Post | None:
    """The event for a volume's condition, given whether an abnormal event was posted before.

    While abnormal, every round posts the Warning (the recorder counts the repeats, as
    client-go's correlator does); the recovery is posted once, after an abnormal event.
    """
    if abnormal:
        return Post(events.WARNING, names.REASON_VOLUME_CONDITION_ABNORMAL, message)
    if was_abnormal:
        reason = names.REASON_VOLUME_CONDITION_NORMAL
        return Post(events.NORMAL, reason, names.MESSAGE_VOLUME_RECOVERED)
    return None
