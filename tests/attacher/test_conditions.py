"""The health monitor's pure decisions, table-tested.

We test these aspects:
- the mode: ListVolumes preferred, ControllerGetVolume otherwise, off without
  CONTROLLER_SERVICE or VOLUME_CONDITION or either RPC;
- only bound PVs of our driver with a handle and a claim are checked;
- the events: a Warning with the driver's message every round while abnormal, the Normal
  recovery once after an abnormal event, nothing for a healthy volume.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi.attaching.conditions import Check, Mode, Post, monitor_mode, monitored, transition
from kopf_csi.csi import DriverInfo


def _driver(plugin: set[str], controller: set[str]) -> DriverInfo:
    return DriverInfo(
        name="d",
        vendor_version="1",
        manifest={},
        plugin_capabilities=frozenset(plugin),
        volume_expansion=frozenset(),
        controller_capabilities=frozenset(controller),
    )


CS = {"CONTROLLER_SERVICE"}
RECOVERED = "The Volume returns to the healthy state"


@pytest.mark.parametrize(
    ("plugin", "controller", "expected"),
    [
        (CS, {"VOLUME_CONDITION", "LIST_VOLUMES", "GET_VOLUME"}, Mode.LIST_VOLUMES),
        (CS, {"VOLUME_CONDITION", "LIST_VOLUMES"}, Mode.LIST_VOLUMES),
        (CS, {"VOLUME_CONDITION", "GET_VOLUME"}, Mode.GET_VOLUME),
        (CS, {"VOLUME_CONDITION"}, None),
        (CS, {"LIST_VOLUMES", "GET_VOLUME"}, None),
        (set(), {"VOLUME_CONDITION", "LIST_VOLUMES"}, None),
    ],
)
def test_monitor_mode(plugin: set[str], controller: set[str], expected: Mode | None) -> None:
    assert monitor_mode(_driver(plugin, controller)) is expected


def _pv(name: str, *, driver: str = "d", phase: str = "Bound", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {
            "csi": {"driver": driver, "volumeHandle": f"h-{name}"},
            "claimRef": {"namespace": "ns", "name": f"c-{name}"},
            **spec,
        },
        "status": {"phase": phase},
    }
    return body


def test_monitored_volumes() -> None:
    volumes = [
        _pv("ok"),
        _pv("other-driver", driver="x"),
        _pv("released", phase="Released"),
        _pv("no-claim", claimRef=None),
        _pv("no-handle", csi={"driver": "d"}),
    ]
    assert list(monitored(volumes, driver="d")) == [Check("h-ok", "ns", "c-ok")]


@pytest.mark.parametrize(
    ("abnormal", "was_abnormal", "expected"),
    [
        (True, False, Post("Warning", "VolumeConditionAbnormal", "disk on fire")),
        (True, True, Post("Warning", "VolumeConditionAbnormal", "disk on fire")),
        (False, True, Post("Normal", "VolumeConditionNormal", RECOVERED)),
        (False, False, None),
    ],
)  # fmt: skip
def test_transition(abnormal: bool, was_abnormal: bool, expected: Post | None) -> None:
    post = transition(abnormal=abnormal, message="disk on fire", was_abnormal=was_abnormal)
    assert post == expected
