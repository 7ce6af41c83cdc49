"""Which resizer runs, from what the driver advertises (external-resizer's `main.go`).

- CONTROLLER_SERVICE with controller EXPAND_VOLUME: the CSI resizer (ControllerExpandVolume).
- CONTROLLER_SERVICE, no controller EXPAND_VOLUME, but node EXPAND_VOLUME: the trivial
  resizer (`trivial_resizer.go`): no RPC; the PV gets the requested size and kubelet's
  NodeExpandVolume does the rest.
- Otherwise no resizer: claims are never expanded by us (logged once, at start).
- MODIFY_VOLUME (with CONTROLLER_SERVICE): the modify controller (VolumeAttributesClass).
"""

from __future__ import annotations

import enum
from collections.abc import Set

from kopf_csi.csi.driverinfo import DriverInfo

__all__ = ["ResizeMode", "can_modify", "resize_mode"]


class ResizeMode(enum.Enum):
    CSI = "csi"
    TRIVIAL = "trivial"
    DISABLED = "disabled"


def resize_mode(driver: DriverInfo, node_capabilities: Set[str]) -> ResizeMode:
    if not driver.has_plugin("CONTROLLER_SERVICE"):
        return ResizeMode.DISABLED  # Go: controllerServiceNotSupportErr
    if driver.has_controller("EXPAND_VOLUME"):
        return ResizeMode.CSI
    if "EXPAND_VOLUME" in node_capabilities:
        return ResizeMode.TRIVIAL
    return ResizeMode.DISABLED  # Go: resizeNotSupportErr


def can_modify(driver: DriverInfo) -> bool:
    return driver.has_plugin("CONTROLLER_SERVICE") and driver.has_controller("MODIFY_VOLUME")
