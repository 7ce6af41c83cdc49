"""The CSI Node service of one node: staging and publishing as symlinks, stats, expansion.

A node's stagings and publications are kept in the volume's record (under the node id), so a
restart remembers them and DeleteVolume can refuse a volume still in use. Publishing makes the
target path a symlink to the volume's directory or file (`storage.link`); no real mounts.
The rules (which second publish is refused, and with which code) are in `attachments`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib

from kopf_csi.csi import messages as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver import attachments, capabilities
from kopf_csi.driver.backend import Backend
from kopf_csi.driver.errors import DriverError
from kopf_csi.driver.messages import (
    absolute,
    capability_of,
    capacity_of,
    condition_message,
    require,
    rpc_capabilities,
)
from kopf_csi.driver.records import Mount, NodeVolume, Volume

__all__ = ["NodeServicer"]


class NodeServicer(csi.NodeBase):
    """Node RPCs for `node_id`, over one backend."""

    def __init__(self, backend: Backend, *, node_id: str) -> None:
        self.backend = backend
        self.node_id = node_id

    async def node_stage_volume(
        self, message: csi.NodeStageVolumeRequest
    ) -> csi.NodeStageVolumeResponse:
        features = self.backend.config.features
        self.backend.require_feature(features.node_stage, "NodeStageVolume")
        self.backend.check_secrets("NodeStageVolume", message.secrets)
        volume_id = require(message.volume_id, "volume_id")
        path = absolute(message.staging_target_path, "staging_target_path")
        capability = capability_of(message.volume_capability, field="volume_capability")
        async with self.backend.lock:
            volume = self.backend.volume(volume_id)
            self._check_attached(volume)
            node = volume.on_node(self.node_id)
            if not attachments.check_node_stage(volume, node, path=path, capability=capability):
                self.backend.storage.ensure_directory(pathlib.Path(path))
                node = dataclasses.replace(
                    node, staged={**node.staged, path: Mount(capability=capability)}
                )
                self._save(volume, node)
        return csi.NodeStageVolumeResponse()

    async def node_unstage_volume(
        self, message: csi.NodeUnstageVolumeRequest
    ) -> csi.NodeUnstageVolumeResponse:
        self.backend.require_feature(self.backend.config.features.node_stage, "NodeUnstageVolume")
        volume_id = require(message.volume_id, "volume_id")
        path = absolute(message.staging_target_path, "staging_target_path")
        async with self.backend.lock:
            volume = self.backend.volume(volume_id)
            node = volume.on_node(self.node_id)
            if path in node.staged:
                staged = {p: m for p, m in node.staged.items() if p != path}
                self._save(volume, dataclasses.replace(node, staged=staged))
        return csi.NodeUnstageVolumeResponse()

    async def node_publish_volume(
        self, message: csi.NodePublishVolumeRequest
    ) -> csi.NodePublishVolumeResponse:
        features = self.backend.config.features
        self.backend.check_secrets("NodePublishVolume", message.secrets)
        volume_id = require(message.volume_id, "volume_id")
        target = absolute(message.target_path, "target_path")
        mount = Mount(
            capability=capability_of(message.volume_capability, field="volume_capability"),
            readonly=message.readonly,
            staging_path=absolute(
                message.staging_target_path, "staging_target_path", required=False
            ),
        )
        capabilities.check_access_mode(mount.capability.access_mode, features=features)
        async with self.backend.lock:
            volume = self.backend.volume(volume_id)
            self._check_attached(volume)
            node = volume.on_node(self.node_id)
            done = attachments.check_node_publish(
                volume, node, target=target, mount=mount, needs_staging=features.node_stage
            )
            # Re-link even when done: the CO may have cleaned the target path behind our back.
            if not self.backend.storage.link(pathlib.Path(target), volume_id):
                raise DriverError(
                    Code.FAILED_PRECONDITION, f"target_path {target} is in use by something else"
                )
            if not done:
                node = dataclasses.replace(node, published={**node.published, target: mount})
                self._save(volume, node)
        return csi.NodePublishVolumeResponse()

    async def node_unpublish_volume(
        self, message: csi.NodeUnpublishVolumeRequest
    ) -> csi.NodeUnpublishVolumeResponse:
        volume_id = require(message.volume_id, "volume_id")
        target = absolute(message.target_path, "target_path")
        async with self.backend.lock:
            volume = self.backend.volume(volume_id)
            node = volume.on_node(self.node_id)
            path = pathlib.Path(target)
            if target in node.published or self.backend.storage.is_linked(path, volume_id):
                self.backend.storage.unlink(path)
            if target in node.published:
                published = {p: m for p, m in node.published.items() if p != target}
                self._save(volume, dataclasses.replace(node, published=published))
        return csi.NodeUnpublishVolumeResponse()

    async def node_get_volume_stats(
        self, message: csi.NodeGetVolumeStatsRequest
    ) -> csi.NodeGetVolumeStatsResponse:
        features = self.backend.config.features
        enabled = features.node_stats or features.volume_condition
        self.backend.require_feature(enabled, "NodeGetVolumeStats")
        volume_id = require(message.volume_id, "volume_id")
        path = require(message.volume_path, "volume_path")
        volume = self.backend.volume(volume_id)
        self._require_path(volume, path)
        usage: list[csi.VolumeUsage] = []
        if features.node_stats:
            usage = await self._usage(volume)
        condition = None
        if features.volume_condition:
            condition = condition_message(self.backend.problem(volume))
        return csi.NodeGetVolumeStatsResponse(usage=usage, volume_condition=condition)

    async def node_expand_volume(
        self, message: csi.NodeExpandVolumeRequest
    ) -> csi.NodeExpandVolumeResponse:
        self.backend.require_feature(self.backend.config.features.expansion, "NodeExpandVolume")
        self.backend.check_secrets("NodeExpandVolume", message.secrets)
        volume_id = require(message.volume_id, "volume_id")
        path = require(message.volume_path, "volume_path")
        async with self.backend.lock:
            volume = self.backend.volume(volume_id)
            self._require_path(volume, path)
            if message.volume_capability is not None:
                capability = capability_of(message.volume_capability, field="volume_capability")
                if capability.block != volume.block:
                    raise DriverError(
                        Code.INVALID_ARGUMENT, f"volume {volume_id} has another access type"
                    )
            required, limit = capacity_of(message.capacity_range)
            if required > volume.size or (limit and volume.size > limit):
                # The node grows the filesystem into what the controller gave the volume.
                raise DriverError(
                    Code.OUT_OF_RANGE,
                    f"volume {volume_id} has {volume.size} bytes; expand it on the controller",
                )
            node = volume.on_node(self.node_id)
            if node.expanded_size != volume.size:
                self._save(volume, dataclasses.replace(node, expanded_size=volume.size))
        return csi.NodeExpandVolumeResponse(capacity_bytes=volume.size)

    async def node_get_capabilities(
        self, message: csi.NodeGetCapabilitiesRequest
    ) -> csi.NodeGetCapabilitiesResponse:
        names = capabilities.node_capabilities(self.backend.config.features)
        return csi.NodeGetCapabilitiesResponse(
            capabilities=rpc_capabilities(
                names,
                capability=csi.NodeServiceCapability,
                rpc=csi.NodeServiceCapabilityRpc,
                types=csi.NodeServiceCapabilityRpcType,
            )
        )

    async def node_get_info(self, message: csi.NodeGetInfoRequest) -> csi.NodeGetInfoResponse:
        key = self.backend.topology_key
        return csi.NodeGetInfoResponse(
            node_id=self.node_id,
            max_volumes_per_node=self.backend.config.limits.max_volumes_per_node,
            accessible_topology=None if key is None else csi.Topology(segments={key: self.node_id}),
        )

    # Helpers.

    def _check_attached(self, volume: Volume) -> None:
        """With controller publishing on, the CO must attach to this node before using it."""
        if self.backend.config.features.attach and self.node_id not in volume.attachments:
            raise DriverError(
                Code.FAILED_PRECONDITION,
                f"volume {volume.volume_id} is not published to node {self.node_id}; "
                "call ControllerPublishVolume first",
            )

    def _require_path(self, volume: Volume, path: str) -> None:
        """NOT_FOUND unless staged or published at `path`.

        A relative path is one of those "not found" paths, not a malformed argument: the REQUIRED
        checks come first, then existence (the volume, then the path), and a path that nothing
        was staged or published at is simply absent (csi-sanity pins NOT_FOUND for both).
        """
        node = volume.on_node(self.node_id)
        if path not in node.published and path not in node.staged:
            raise DriverError(
                Code.NOT_FOUND, f"volume {volume.volume_id} is not staged or published at {path}"
            )

    def _save(self, volume: Volume, node: NodeVolume) -> None:
        self.backend.state.save_volume(volume.with_node(self.node_id, node))

    async def _usage(self, volume: Volume) -> list[csi.VolumeUsage]:
        if volume.block:  # the spec lets block volumes report only their total
            return [csi.VolumeUsage(unit=csi.VolumeUsageUnit.BYTES, total=volume.size)]
        usage = await asyncio.to_thread(self.backend.storage.usage, volume.volume_id)
        used = min(usage.bytes_used, volume.size)
        return [
            csi.VolumeUsage(
                unit=csi.VolumeUsageUnit.BYTES,
                total=volume.size,
                used=used,
                available=volume.size - used,
            )
        ]
