"""`DriverInfo`: what a CSI driver says about itself, as plain data.

Apart from the client, so that the decisions made from a driver's capabilities (which resize
mode, which health-monitor mode) import no transport.
"""

from __future__ import annotations

import dataclasses

__all__ = ["DriverInfo"]


@dataclasses.dataclass(frozen=True)
class DriverInfo:
    """What the driver says about itself; read once, cached (as the Go sidecars do)."""

    name: str
    vendor_version: str
    manifest: dict[str, str]
    plugin_capabilities: frozenset[str]
    """PluginCapability.Service types: CONTROLLER_SERVICE, VOLUME_ACCESSIBILITY_CONSTRAINTS, ..."""
    volume_expansion: frozenset[str]
    """PluginCapability.VolumeExpansion types: ONLINE and/or OFFLINE."""
    controller_capabilities: frozenset[str]
    """ControllerServiceCapability.RPC types: CREATE_DELETE_VOLUME, PUBLISH_UNPUBLISH_VOLUME, ..."""
    group_controller_capabilities: frozenset[str] = frozenset()
    """GroupControllerServiceCapability.RPC types (CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT);
    asked only of a driver with GROUP_CONTROLLER_SERVICE."""

    def has_controller(self, capability: str) -> bool:
        return capability in self.controller_capabilities

    def has_group_controller(self, capability: str) -> bool:
        return capability in self.group_controller_capabilities

    def has_plugin(self, capability: str) -> bool:
        return capability in self.plugin_capabilities
