"""What the driver advertises, and the access-mode rules it enforces.

Advertised capabilities come from `Features` alone, so ControllerGetCapabilities and the RPCs
that refuse a switched-off feature cannot disagree. Names are the CSI enum member names
(`CREATE_DELETE_VOLUME`); the servicers turn them into the generated enums. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from kopf_csi.csi.codes import Code
from kopf_csi.driver.config import Features
from kopf_csi.driver.errors import DriverError
from kopf_csi.driver.records import Capability

__all__ = [
    "allows_many_nodes",
    "allows_many_targets",
    "check_volume_capabilities",
    "controller_capabilities",
    "group_controller_capabilities",
    "node_capabilities",
    "plugin_services",
    "volume_expansion",
]

SINGLE_NODE_MODES = frozenset(
    {
        "SINGLE_NODE_WRITER",
        "SINGLE_NODE_READER_ONLY",
        "SINGLE_NODE_SINGLE_WRITER",
        "SINGLE_NODE_MULTI_WRITER",
    }
)
MULTI_NODE_MODES = frozenset(
    {"MULTI_NODE_READER_ONLY", "MULTI_NODE_SINGLE_WRITER", "MULTI_NODE_MULTI_WRITER"}
)
# Only with the SINGLE_NODE_MULTI_WRITER capability (SINGLE_NODE_WRITER stays valid regardless).
NEW_SINGLE_NODE_MODES = frozenset({"SINGLE_NODE_SINGLE_WRITER", "SINGLE_NODE_MULTI_WRITER"})


def plugin_services(features: Features) -> list[str]:
    """PluginCapability.Service types."""
    services = ["CONTROLLER_SERVICE"]
    if features.topology:
        services.append("VOLUME_ACCESSIBILITY_CONSTRAINTS")
    if group_controller_capabilities(features):
        services.append("GROUP_CONTROLLER_SERVICE")
    return services


def group_controller_capabilities(features: Features) -> list[str]:
    """GroupControllerServiceCapability.RPC types; empty: no GroupController service at all."""
    if features.snapshots and features.group_snapshots:
        return ["CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT"]
    return []


def volume_expansion(features: Features) -> list[str]:
    """PluginCapability.VolumeExpansion types: directories grow while in use."""
    if not features.expansion:
        return []
    return ["ONLINE"] if features.online_expansion else ["OFFLINE"]


def controller_capabilities(features: Features) -> list[str]:
    """ControllerServiceCapability.RPC types."""
    wanted = {
        "CREATE_DELETE_VOLUME": True,
        "PUBLISH_UNPUBLISH_VOLUME": features.attach,
        "LIST_VOLUMES": features.list_volumes,
        "GET_CAPACITY": features.capacity,
        "CREATE_DELETE_SNAPSHOT": features.snapshots,
        "LIST_SNAPSHOTS": features.snapshots and features.list_snapshots,
        "CLONE_VOLUME": features.clone,
        # The spec ties both to controller publishing: without it they would be a lie.
        "PUBLISH_READONLY": features.attach and features.publish_readonly,
        "EXPAND_VOLUME": features.expansion and features.controller_expansion,
        "LIST_VOLUMES_PUBLISHED_NODES": features.attach and features.published_nodes,
        "VOLUME_CONDITION": features.volume_condition,
        "GET_VOLUME": features.get_volume,
        "SINGLE_NODE_MULTI_WRITER": features.single_node_multi_writer,
        "MODIFY_VOLUME": features.modify,
        "GET_SNAPSHOT": features.snapshots and features.get_snapshot,
    }
    return [name for name, on in wanted.items() if on]


def node_capabilities(features: Features) -> list[str]:
    """NodeServiceCapability.RPC types."""
    wanted = {
        "STAGE_UNSTAGE_VOLUME": features.node_stage,
        "GET_VOLUME_STATS": features.node_stats,
        "EXPAND_VOLUME": features.expansion,
        "VOLUME_CONDITION": features.volume_condition,
        "SINGLE_NODE_MULTI_WRITER": features.single_node_multi_writer,
    }
    return [name for name, on in wanted.items() if on]


def check_volume_capabilities(capabilities: Sequence[Capability], *, features: Features) -> bool:
    """Validate CreateVolume's capabilities; True for a block volume, False for a mount one."""
    if not capabilities:
        raise DriverError(Code.INVALID_ARGUMENT, "volume_capabilities are required")
    for capability in capabilities:
        check_access_mode(capability.access_mode, features=features)
    kinds = {capability.block for capability in capabilities}
    if len(kinds) > 1:
        raise DriverError(
            Code.INVALID_ARGUMENT, "a volume cannot have both block and mount access types"
        )
    return kinds.pop()


def check_access_mode(mode: str, *, features: Features) -> None:
    if mode in NEW_SINGLE_NODE_MODES and not features.single_node_multi_writer:
        raise DriverError(
            Code.INVALID_ARGUMENT, f"access mode {mode} needs SINGLE_NODE_MULTI_WRITER"
        )
    if mode not in SINGLE_NODE_MODES and mode not in MULTI_NODE_MODES:
        raise DriverError(Code.INVALID_ARGUMENT, f"unsupported access mode {mode}")


def allows_many_nodes(mode: str) -> bool:
    """Whether a volume published with this mode may be published to other nodes too."""
    return mode in MULTI_NODE_MODES


def allows_many_targets(mode: str) -> bool:
    """Whether a node may publish the volume at a second target path.

    The spec's table refuses a second target path (FAILED_PRECONDITION) for every mode except
    MULTI_NODE_* and SINGLE_NODE_MULTI_WRITER, but says SHOULD. Kubernetes publishes an RWO
    volume (SINGLE_NODE_WRITER) once per pod on the node, and drivers accept that; only
    SINGLE_NODE_SINGLE_WRITER (ReadWriteOncePod) was made to forbid it, so only it is refused.
    """
    return mode != "SINGLE_NODE_SINGLE_WRITER"
