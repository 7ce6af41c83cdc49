"""`streams.volume_changes`: what a PV's watch event means to `kopf_csi.on`'s handlers."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi.streams import volume_changes

PROVISIONED = {"pv.kubernetes.io/provisioned-by": "hostpath.csi.kopf.dev"}


def pv(phase: str = "Bound", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "pv", "uid": "u1", "annotations": annotations or {}},
            "status": {"phase": phase}}  # fmt: skip


@pytest.mark.parametrize(
    ("type_", "volume", "seen", "was_released", "expected"),
    [
        ("ADDED", pv("Pending", PROVISIONED), False, False, ["volume_provisioned"]),
        ("ADDED", pv("Bound"), False, False, []),  # made by hand: not provisioned
        ("MODIFIED", pv("Bound", PROVISIONED), True, False, []),  # seen before
        ("ADDED", pv("Bound", PROVISIONED), True, False, []),  # a relist's ADDED of a known PV
        ("MODIFIED", pv("Released", PROVISIONED), True, False, ["volume_released"]),
        ("MODIFIED", pv("Released", PROVISIONED), True, True, []),  # still Released
        ("ADDED", pv("Released", PROVISIONED), False, False,
         ["volume_provisioned", "volume_released"]),  # both happened in a watch gap
        ("DELETED", pv("Released", PROVISIONED), True, True, ["volume_deleted"]),
        ("DELETED", {"metadata": {"name": "pv"}}, False, False, ["volume_deleted"]),  # a stub
    ],
)  # fmt: skip
def test_volume_changes(
    type_: str, volume: dict[str, Any], seen: bool, was_released: bool, expected: list[str]
) -> None:
    assert volume_changes(type_, volume, seen=seen, was_released=was_released) == expected
