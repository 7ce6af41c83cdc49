"""Snapshot operations on records: create (a copy of the volume's content) and delete.

Snapshots are independent of their source volume: deleting the volume leaves them usable, as
the spec recommends, so DeleteVolume never refuses because of snapshots. Listing and reading
need no lock and live in the controller servicer.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping

from kopf_csi.csi.codes import Code
from kopf_csi.driver.backend import Backend
from kopf_csi.driver.errors import DriverError
from kopf_csi.driver.records import Snapshot

__all__ = ["create_snapshot", "delete_snapshot"]


async def create_snapshot(
    backend: Backend, *, name: str, source_volume_id: str, parameters: Mapping[str, str]
) -> Snapshot:
    """A new snapshot, or the existing one of that name from the same volume (idempotency)."""
    if not name:
        raise DriverError(Code.INVALID_ARGUMENT, "name is required")
    if not source_volume_id:
        raise DriverError(Code.INVALID_ARGUMENT, "source_volume_id is required")
    async with backend.lock:
        existing = backend.state.snapshot_named(name)
        if existing is not None:
            if existing.source_volume_id != source_volume_id:
                raise DriverError(
                    Code.ALREADY_EXISTS,
                    f"snapshot {name!r} exists for another volume, {existing.source_volume_id}",
                )
            return existing
        volume = backend.state.volume(source_volume_id)
        if volume is None:
            raise DriverError(Code.NOT_FOUND, f"source volume {source_volume_id} does not exist")
        snapshot = Snapshot(
            snapshot_id=str(uuid.uuid4()),
            name=name,
            source_volume_id=source_volume_id,
            size=volume.size,
            block=volume.block,
            created_at=time.time(),
            parameters=dict(parameters),
        )
        await asyncio.to_thread(
            backend.storage.snapshot_volume,
            volume.volume_id,
            snapshot.snapshot_id,
            block=volume.block,
        )
        backend.state.save_snapshot(snapshot)
        return snapshot


async def delete_snapshot(backend: Backend, snapshot_id: str) -> None:
    """Delete a snapshot and its content; a missing one is already deleted."""
    async with backend.lock:
        snapshot = backend.state.snapshot(snapshot_id)
        if snapshot is None:
            return  # an id without a record is not a path to delete (see delete_volume)
        if snapshot.group_snapshot_id:
            raise DriverError(
                Code.FAILED_PRECONDITION,
                f"snapshot {snapshot_id} belongs to group snapshot {snapshot.group_snapshot_id}; "
                "delete the group snapshot instead",
            )
        backend.state.remove_snapshot(snapshot_id)
        await asyncio.to_thread(backend.storage.remove_snapshot, snapshot_id)
