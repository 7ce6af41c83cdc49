"""The CSI GroupController service: group snapshots, messages in and out.

Each RPC checks its feature (UNIMPLEMENTED when switched off: it is then not advertised), its
secrets, then calls one operation of `groups`, where the argument checks and rules live.
"""

from __future__ import annotations

import datetime

from kopf_csi.csi import messages as csi
from kopf_csi.driver import capabilities, groups
from kopf_csi.driver.backend import Backend
from kopf_csi.driver.messages import rpc_capabilities, snapshot_message
from kopf_csi.driver.records import GroupSnapshot, Snapshot

__all__ = ["GroupControllerServicer"]


class GroupControllerServicer(csi.GroupControllerBase):
    """GroupController RPCs over one backend."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def group_controller_get_capabilities(
        self, message: csi.GroupControllerGetCapabilitiesRequest
    ) -> csi.GroupControllerGetCapabilitiesResponse:
        names = capabilities.group_controller_capabilities(self.backend.config.features)
        return csi.GroupControllerGetCapabilitiesResponse(
            capabilities=rpc_capabilities(
                names,
                capability=csi.GroupControllerServiceCapability,
                rpc=csi.GroupControllerServiceCapabilityRpc,
                types=csi.GroupControllerServiceCapabilityRpcType,
            )
        )

    def _require(self, method: str) -> None:
        enabled = bool(capabilities.group_controller_capabilities(self.backend.config.features))
        self.backend.require_feature(enabled, method)

    async def create_volume_group_snapshot(
        self, message: csi.CreateVolumeGroupSnapshotRequest
    ) -> csi.CreateVolumeGroupSnapshotResponse:
        self._require("CreateVolumeGroupSnapshot")
        self.backend.check_secrets("CreateVolumeGroupSnapshot", message.secrets)
        group = await groups.create_group_snapshot(
            self.backend,
            name=message.name,
            source_volume_ids=message.source_volume_ids,
            parameters=message.parameters,
        )
        members = [self.backend.snapshot(s) for s in group.snapshot_ids]
        response = csi.CreateVolumeGroupSnapshotResponse(
            group_snapshot=self._group_message(group, members)
        )
        return self.backend.faults.response("CreateVolumeGroupSnapshot", response)

    async def delete_volume_group_snapshot(
        self, message: csi.DeleteVolumeGroupSnapshotRequest
    ) -> csi.DeleteVolumeGroupSnapshotResponse:
        self._require("DeleteVolumeGroupSnapshot")
        self.backend.check_secrets("DeleteVolumeGroupSnapshot", message.secrets)
        await groups.delete_group_snapshot(
            self.backend, message.group_snapshot_id, snapshot_ids=message.snapshot_ids
        )
        return csi.DeleteVolumeGroupSnapshotResponse()

    async def get_volume_group_snapshot(
        self, message: csi.GetVolumeGroupSnapshotRequest
    ) -> csi.GetVolumeGroupSnapshotResponse:
        self._require("GetVolumeGroupSnapshot")
        self.backend.check_secrets("GetVolumeGroupSnapshot", message.secrets)
        group, members = groups.get_group_snapshot(
            self.backend, message.group_snapshot_id, snapshot_ids=message.snapshot_ids
        )
        return csi.GetVolumeGroupSnapshotResponse(
            group_snapshot=self._group_message(group, members)
        )

    def _group_message(
        self, group: GroupSnapshot, members: list[Snapshot]
    ) -> csi.VolumeGroupSnapshot:
        ready_after = self.backend.config.snapshot_ready_after
        snapshots = [snapshot_message(m, ready_after=ready_after) for m in members]
        return csi.VolumeGroupSnapshot(
            group_snapshot_id=group.group_snapshot_id,
            snapshots=snapshots,
            creation_time=datetime.datetime.fromtimestamp(group.created_at, tz=datetime.UTC),
            ready_to_use=all(s.ready_to_use for s in snapshots),
        )
