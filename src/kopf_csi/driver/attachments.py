"""The rules of publishing: ControllerPublishVolume to nodes, NodeStage/NodePublish on a node.

Pure decisions over records: each `check_*` returns True when the request is already done
(the idempotent OK), False when it should be done, and raises `DriverError` with the spec's code
when it must be refused. Applying the decision (records, symlinks) is the servicers' business.
"""

from __future__ import annotations

from kopf_csi.csi.codes import Code
from kopf_csi.driver.capabilities import allows_many_nodes, allows_many_targets
from kopf_csi.driver.errors import DriverError
from kopf_csi.driver.records import Attachment, Capability, Mount, NodeVolume, Volume

__all__ = ["check_controller_publish", "check_node_publish", "check_node_stage"]


def check_controller_publish(
    volume: Volume,
    *,
    node_id: str,
    attachment: Attachment,
    attached_to_node: int,
    max_per_node: int,
) -> bool:
    """ControllerPublishVolume of `volume` to `node_id` (spec: ControllerPublishVolume Errors)."""
    existing = volume.attachments.get(node_id)
    if existing is not None:
        if existing != attachment:
            raise DriverError(
                Code.ALREADY_EXISTS,
                f"volume {volume.volume_id} is published to {node_id} with another "
                "capability or readonly flag",
            )
        return True
    _check_access_type(volume, attachment.capability, code=Code.INVALID_ARGUMENT)
    others = sorted(volume.attachments)
    exclusive = not allows_many_nodes(attachment.capability.access_mode) or any(
        not allows_many_nodes(a.capability.access_mode) for a in volume.attachments.values()
    )
    if others and exclusive:
        # The spec asks for the node the volume is published at in the message.
        raise DriverError(
            Code.FAILED_PRECONDITION,
            f"volume {volume.volume_id} is published to another node: {', '.join(others)}",
        )
    if max_per_node and attached_to_node >= max_per_node:
        raise DriverError(
            Code.RESOURCE_EXHAUSTED,
            f"node {node_id} has the maximum of {max_per_node} volumes attached",
        )
    return False


def check_node_stage(
    volume: Volume, node: NodeVolume, *, path: str, capability: Capability
) -> bool:
    """NodeStageVolume at `path` (spec: NodeStageVolume Errors)."""
    _check_access_type(volume, capability, code=Code.FAILED_PRECONDITION)
    existing = node.staged.get(path)
    if existing is not None:
        if existing.capability != capability:
            raise DriverError(
                Code.ALREADY_EXISTS,
                f"volume {volume.volume_id} is staged at {path} with another capability",
            )
        return True
    if node.staged:
        # "The CO SHALL ensure that there is only one staging_target_path per volume."
        raise DriverError(
            Code.FAILED_PRECONDITION,
            f"volume {volume.volume_id} is already staged at {', '.join(sorted(node.staged))}",
        )
    return False


def check_node_publish(
    volume: Volume,
    node: NodeVolume,
    *,
    target: str,
    mount: Mount,
    needs_staging: bool,
) -> bool:
    """NodePublishVolume at `target` (spec: NodePublishVolume Errors and its two tables)."""
    _check_access_type(volume, mount.capability, code=Code.FAILED_PRECONDITION)
    if needs_staging:
        if not mount.staging_path:
            raise DriverError(Code.FAILED_PRECONDITION, "staging_target_path is required")
        if mount.staging_path not in node.staged:
            raise DriverError(
                Code.FAILED_PRECONDITION,
                f"volume {volume.volume_id} is not staged at {mount.staging_path}",
            )
    existing = node.published.get(target)
    if existing is not None:
        if existing != mount:
            raise DriverError(
                Code.ALREADY_EXISTS,
                f"volume {volume.volume_id} is published at {target} with other arguments",
            )
        return True
    for other in node.published.values():
        if other.capability != mount.capability:
            raise DriverError(
                Code.FAILED_PRECONDITION,
                f"volume {volume.volume_id} is published on this node with another capability",
            )
        if not allows_many_targets(mount.capability.access_mode):
            raise DriverError(
                Code.FAILED_PRECONDITION,
                f"volume {volume.volume_id} is already published on this node "
                f"({mount.capability.access_mode})",
            )
    return False


def _check_access_type(volume: Volume, capability: Capability, *, code: Code) -> None:
    if capability.block != volume.block:
        want = "block" if capability.block else "mount"
        have = "block" if volume.block else "mount"
        raise DriverError(code, f"volume {volume.volume_id} is a {have} volume, not {want}")
