"""The CSI Controller service: messages in, `volumes`/`snapshots` operations, messages out.

Each RPC checks its feature (UNIMPLEMENTED when switched off, as it is then not advertised), its
secrets, and its REQUIRED fields, then calls one operation. The rules themselves live in the
operations and the pure modules they use; this module only translates.
"""

from __future__ import annotations

from kopf_csi.csi import messages as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver import capabilities, paging, snapshots, topology, volumes
from kopf_csi.driver.backend import Backend
from kopf_csi.driver.errors import DriverError
from kopf_csi.driver.messages import (
    capabilities_of,
    capability_of,
    capacity_of,
    condition_message,
    require,
    requirements_of,
    rpc_capabilities,
    snapshot_message,
    source_of,
    volume_message,
)
from kopf_csi.driver.records import Attachment, Snapshot, Volume

__all__ = ["ControllerServicer"]


class ControllerServicer(csi.ControllerBase):
    """Controller RPCs over one backend."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    # Volumes.

    async def create_volume(self, message: csi.CreateVolumeRequest) -> csi.CreateVolumeResponse:
        self.backend.check_secrets("CreateVolume", message.secrets)
        required, limit = capacity_of(message.capacity_range)
        preferred, requisite = requirements_of(message.accessibility_requirements)
        request = volumes.VolumeRequest(
            name=message.name,
            capabilities=capabilities_of(message.volume_capabilities, field="volume_capabilities"),
            required=required,
            limit=limit,
            parameters=message.parameters,
            mutable_parameters=message.mutable_parameters,
            source=source_of(message.volume_content_source),
            preferred=preferred,
            requisite=requisite,
        )
        volume = await volumes.create_volume(self.backend, request)
        response = csi.CreateVolumeResponse(volume=self._volume(volume))
        return self.backend.faults.response("CreateVolume", response)

    async def delete_volume(self, message: csi.DeleteVolumeRequest) -> csi.DeleteVolumeResponse:
        self.backend.check_secrets("DeleteVolume", message.secrets)
        await volumes.delete_volume(self.backend, require(message.volume_id, "volume_id"))
        return csi.DeleteVolumeResponse()

    async def controller_publish_volume(
        self, message: csi.ControllerPublishVolumeRequest
    ) -> csi.ControllerPublishVolumeResponse:
        config = self.backend.config
        self.backend.require_feature(config.features.attach, "ControllerPublishVolume")
        self.backend.check_secrets("ControllerPublishVolume", message.secrets)
        volume_id = require(message.volume_id, "volume_id")
        node_id = require(message.node_id, "node_id")
        attachment = Attachment(
            readonly=message.readonly,
            capability=capability_of(message.volume_capability, field="volume_capability"),
        )
        await volumes.attach_volume(self.backend, volume_id, node_id=node_id, attachment=attachment)
        # Static and safe to cache, as the spec demands of a publish context.
        device = str(self.backend.storage.volume_path(volume_id))
        response = csi.ControllerPublishVolumeResponse(publish_context={"devicePath": device})
        return self.backend.faults.response("ControllerPublishVolume", response)

    async def controller_unpublish_volume(
        self, message: csi.ControllerUnpublishVolumeRequest
    ) -> csi.ControllerUnpublishVolumeResponse:
        config = self.backend.config
        self.backend.require_feature(config.features.attach, "ControllerUnpublishVolume")
        self.backend.check_secrets("ControllerUnpublishVolume", message.secrets)
        volume_id = require(message.volume_id, "volume_id")
        await volumes.detach_volume(self.backend, volume_id, node_id=message.node_id)
        return csi.ControllerUnpublishVolumeResponse()

    async def validate_volume_capabilities(
        self, message: csi.ValidateVolumeCapabilitiesRequest
    ) -> csi.ValidateVolumeCapabilitiesResponse:
        self.backend.check_secrets("ValidateVolumeCapabilities", message.secrets)
        volume_id = require(message.volume_id, "volume_id")
        if not message.volume_capabilities:
            raise DriverError(Code.INVALID_ARGUMENT, "volume_capabilities are required")
        volume = self.backend.volume(volume_id)
        problem = self._unsupported(volume, message)
        if problem is not None:
            return csi.ValidateVolumeCapabilitiesResponse(message=problem)
        confirmed = csi.ValidateVolumeCapabilitiesResponseConfirmed(
            volume_context=message.volume_context,
            volume_capabilities=message.volume_capabilities,
            parameters=message.parameters,
            mutable_parameters=message.mutable_parameters,
        )
        return csi.ValidateVolumeCapabilitiesResponse(confirmed=confirmed)

    def _unsupported(
        self, volume: Volume, message: csi.ValidateVolumeCapabilitiesRequest
    ) -> str | None:
        """Why the volume cannot be used as asked, or None if it can."""
        config = self.backend.config
        if message.volume_context and message.volume_context != dict(volume.context):
            return "volume_context does not match the volume's"
        if message.parameters and message.parameters != dict(volume.parameters):
            return "parameters do not match the volume's"
        unknown = set(message.mutable_parameters) - config.mutable_parameters
        if unknown:
            return f"mutable parameters {sorted(unknown)} are not supported"
        for capability in capabilities_of(message.volume_capabilities, field="volume_capabilities"):
            if capability.block != volume.block:
                return "the volume's access type is " + ("block" if volume.block else "mount")
            try:
                capabilities.check_access_mode(capability.access_mode, features=config.features)
            except DriverError as exc:
                return exc.message
        return None

    async def list_volumes(self, message: csi.ListVolumesRequest) -> csi.ListVolumesResponse:
        self.backend.require_feature(self.backend.config.features.list_volumes, "ListVolumes")
        items, next_token = paging.page(
            self.backend.state.sorted_volumes(),
            starting_token=message.starting_token,
            max_entries=message.max_entries,
        )
        entries = [
            csi.ListVolumesResponseEntry(volume=self._volume(v), status=self._list_status(v))
            for v in items
        ]
        return csi.ListVolumesResponse(entries=entries, next_token=next_token)

    async def controller_get_volume(
        self, message: csi.ControllerGetVolumeRequest
    ) -> csi.ControllerGetVolumeResponse:
        self.backend.require_feature(self.backend.config.features.get_volume, "ControllerGetVolume")
        volume = self.backend.volume(require(message.volume_id, "volume_id"))
        status = csi.ControllerGetVolumeResponseVolumeStatus(
            published_node_ids=self._published_nodes(volume),
            volume_condition=self._condition(volume),
        )
        return csi.ControllerGetVolumeResponse(volume=self._volume(volume), status=status)

    async def controller_expand_volume(
        self, message: csi.ControllerExpandVolumeRequest
    ) -> csi.ControllerExpandVolumeResponse:
        config = self.backend.config
        features = config.features
        self.backend.require_feature(
            features.expansion and features.controller_expansion, "ControllerExpandVolume"
        )
        self.backend.check_secrets("ControllerExpandVolume", message.secrets)
        volume_id = require(message.volume_id, "volume_id")
        if message.capacity_range is None:
            raise DriverError(Code.INVALID_ARGUMENT, "capacity_range is required")
        required, limit = capacity_of(message.capacity_range)
        block = None
        if message.volume_capability is not None:
            block = capability_of(message.volume_capability, field="volume_capability").block
        volume = await volumes.expand_volume(
            self.backend,
            volume_id,
            required=required,
            limit=limit,
            block=block,
            offline=not features.online_expansion,
        )
        # A directory needs no filesystem resize, but a mount volume's node-side size is what
        # NodeExpandVolume records: ask for it, as a real filesystem would.
        return csi.ControllerExpandVolumeResponse(
            capacity_bytes=volume.size, node_expansion_required=not volume.block
        )

    async def controller_modify_volume(
        self, message: csi.ControllerModifyVolumeRequest
    ) -> csi.ControllerModifyVolumeResponse:
        config = self.backend.config
        self.backend.require_feature(config.features.modify, "ControllerModifyVolume")
        self.backend.check_secrets("ControllerModifyVolume", message.secrets)
        volume_id = require(message.volume_id, "volume_id")
        await volumes.modify_volume(self.backend, volume_id, message.mutable_parameters)
        return csi.ControllerModifyVolumeResponse()

    # Capacity and capabilities.

    async def get_capacity(self, message: csi.GetCapacityRequest) -> csi.GetCapacityResponse:
        config = self.backend.config
        self.backend.require_feature(config.features.capacity, "GetCapacity")
        pool: str | None = config.node_id if config.features.topology else ""
        if message.accessible_topology is not None:
            if not config.features.topology:
                raise DriverError(
                    Code.INVALID_ARGUMENT, "accessible_topology is set but topology is off"
                )
            pool = topology.node_of(message.accessible_topology.segments, key=config.topology_key)
            if pool is not None and not config.is_known_node(pool):
                pool = None
        for capability in capabilities_of(message.volume_capabilities, field="volume_capabilities"):
            try:
                capabilities.check_access_mode(capability.access_mode, features=config.features)
            except DriverError:
                pool = None  # no storage can hold volumes we cannot make
        available = 0 if pool is None else self.backend.available(pool)
        maximum = config.limits.max_volume_size
        return csi.GetCapacityResponse(
            available_capacity=available,
            maximum_volume_size=None if maximum is None else min(maximum, available),
        )

    async def controller_get_capabilities(
        self, message: csi.ControllerGetCapabilitiesRequest
    ) -> csi.ControllerGetCapabilitiesResponse:
        names = capabilities.controller_capabilities(self.backend.config.features)
        return csi.ControllerGetCapabilitiesResponse(
            capabilities=rpc_capabilities(
                names,
                capability=csi.ControllerServiceCapability,
                rpc=csi.ControllerServiceCapabilityRpc,
                types=csi.ControllerServiceCapabilityRpcType,
            )
        )

    # Snapshots.

    async def create_snapshot(
        self, message: csi.CreateSnapshotRequest
    ) -> csi.CreateSnapshotResponse:
        self.backend.require_feature(self.backend.config.features.snapshots, "CreateSnapshot")
        self.backend.check_secrets("CreateSnapshot", message.secrets)
        snapshot = await snapshots.create_snapshot(
            self.backend,
            name=message.name,
            source_volume_id=message.source_volume_id,
            parameters=message.parameters,
        )
        return csi.CreateSnapshotResponse(snapshot=self._snapshot_message(snapshot))

    async def delete_snapshot(
        self, message: csi.DeleteSnapshotRequest
    ) -> csi.DeleteSnapshotResponse:
        self.backend.require_feature(self.backend.config.features.snapshots, "DeleteSnapshot")
        self.backend.check_secrets("DeleteSnapshot", message.secrets)
        await snapshots.delete_snapshot(self.backend, require(message.snapshot_id, "snapshot_id"))
        return csi.DeleteSnapshotResponse()

    async def list_snapshots(self, message: csi.ListSnapshotsRequest) -> csi.ListSnapshotsResponse:
        features = self.backend.config.features
        self.backend.require_feature(
            features.snapshots and features.list_snapshots, "ListSnapshots"
        )
        self.backend.check_secrets("ListSnapshots", message.secrets)
        found = self.backend.state.sorted_snapshots()
        if message.snapshot_id:
            found = [s for s in found if s.snapshot_id == message.snapshot_id]
        if message.source_volume_id:
            found = [s for s in found if s.source_volume_id == message.source_volume_id]
        items, next_token = paging.page(
            found, starting_token=message.starting_token, max_entries=message.max_entries
        )
        entries = [
            csi.ListSnapshotsResponseEntry(snapshot=self._snapshot_message(s)) for s in items
        ]
        return csi.ListSnapshotsResponse(entries=entries, next_token=next_token)

    async def get_snapshot(self, message: csi.GetSnapshotRequest) -> csi.GetSnapshotResponse:
        features = self.backend.config.features
        self.backend.require_feature(features.snapshots and features.get_snapshot, "GetSnapshot")
        self.backend.check_secrets("GetSnapshot", message.secrets)
        snapshot = self.backend.snapshot(require(message.snapshot_id, "snapshot_id"))
        return csi.GetSnapshotResponse(snapshot=self._snapshot_message(snapshot))

    # Helpers.

    def _snapshot_message(self, snapshot: Snapshot) -> csi.Snapshot:
        return snapshot_message(snapshot, ready_after=self.backend.config.snapshot_ready_after)

    def _volume(self, volume: Volume) -> csi.Volume:
        return volume_message(volume, topology_key=self.backend.topology_key)

    def _published_nodes(self, volume: Volume) -> list[str]:
        return sorted(volume.attachments)

    def _condition(self, volume: Volume) -> csi.VolumeCondition | None:
        if not self.backend.config.features.volume_condition:
            return None
        return condition_message(self.backend.problem(volume))

    def _list_status(self, volume: Volume) -> csi.ListVolumesResponseVolumeStatus | None:
        """Set when published nodes or conditions are advertised (the spec then requires it)."""
        advertised = capabilities.controller_capabilities(self.backend.config.features)
        with_nodes = "LIST_VOLUMES_PUBLISHED_NODES" in advertised
        if not with_nodes and "VOLUME_CONDITION" not in advertised:
            return None
        return csi.ListVolumesResponseVolumeStatus(
            published_node_ids=self._published_nodes(volume) if with_nodes else [],
            volume_condition=self._condition(volume),
        )
