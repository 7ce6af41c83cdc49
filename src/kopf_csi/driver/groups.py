"""Group snapshot operations on records: create (one member snapshot per volume), delete, get.

The members are ordinary snapshot records (so a volume is restored from one as from any
snapshot, and ListSnapshots and GetSnapshot show them) that carry their group's id; DeleteSnapshot
refuses them, as the spec allows for a member that must not be deleted on its own. All members
are cut under the backend's lock, so no write to any of the volumes through this driver can
fall between two of them: that is this driver's write-order consistency.

Writes go members first and the group record last; a crash in between leaves members whose
group does not exist, and `drop_orphaned_members` removes them at the next start.

Argument checks follow the spec's order: missing REQUIRED fields (INVALID_ARGUMENT) first, then
existence (NOT_FOUND, or OK for a delete), then the `snapshot_ids` a caller claims the group has
(INVALID_ARGUMENT on a mismatch: the spec's "snapshot list mismatch"). csi-sanity pins that
precedence: a missing group with no `snapshot_ids` is NOT_FOUND on Get and OK on Delete.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence

import structlog

from kopf_csi.csi.codes import Code
from kopf_csi.driver.backend import Backend
from kopf_csi.driver.errors import DriverError
from kopf_csi.driver.records import GroupSnapshot, Snapshot

__all__ = [
    "create_group_snapshot",
    "delete_group_snapshot",
    "drop_orphaned_members",
    "get_group_snapshot",
    "member_name",
]

logger = structlog.get_logger("kopf_csi.driver")


def member_name(group_name: str, volume_id: str) -> str:
    """The snapshot name of a member: unique per group and volume, never a CO's snapshot name."""
    return f"group:{group_name}:{volume_id}"


def _check_sources(source_volume_ids: Sequence[str]) -> tuple[str, ...]:
    if not source_volume_ids:
        raise DriverError(Code.INVALID_ARGUMENT, "source_volume_ids are required")
    if not all(source_volume_ids):
        raise DriverError(Code.INVALID_ARGUMENT, "source_volume_ids must not contain empty ids")
    if len(set(source_volume_ids)) != len(source_volume_ids):
        raise DriverError(Code.INVALID_ARGUMENT, "source_volume_ids must not repeat a volume")
    return tuple(source_volume_ids)


async def create_group_snapshot(
    backend: Backend,
    *,
    name: str,
    source_volume_ids: Sequence[str],
    parameters: Mapping[str, str],
) -> GroupSnapshot:
    """A new group snapshot, or the existing one of that name (idempotency)."""
    if not name:
        raise DriverError(Code.INVALID_ARGUMENT, "name is required")
    sources = _check_sources(source_volume_ids)
    async with backend.lock:
        existing = backend.state.group_named(name)
        if existing is not None:
            if set(existing.source_volume_ids) != set(sources):
                raise DriverError(
                    Code.ALREADY_EXISTS,
                    f"group snapshot {name!r} exists for other volumes",
                )
            if dict(existing.parameters) != dict(parameters):
                raise DriverError(
                    Code.ALREADY_EXISTS, f"group snapshot {name!r} exists with other parameters"
                )
            return existing
        volumes = [backend.volume(volume_id) for volume_id in sources]
        if backend.config.features.topology:
            nodes = sorted({str(v.node) for v in volumes})
            if len(nodes) > 1:
                raise DriverError(
                    Code.FAILED_PRECONDITION,
                    f"volumes on different nodes ({', '.join(nodes)}) cannot be snapshotted "
                    "together",
                )
        group_id = str(uuid.uuid4())
        created_at = time.time()
        members = [
            Snapshot(
                snapshot_id=str(uuid.uuid4()),
                name=member_name(name, volume.volume_id),
                source_volume_id=volume.volume_id,
                size=volume.size,
                block=volume.block,
                created_at=created_at,
                parameters=dict(parameters),
                group_snapshot_id=group_id,
            )
            for volume in volumes
        ]
        cut: list[str] = []
        try:
            for member in members:
                await asyncio.to_thread(
                    backend.storage.snapshot_volume,
                    member.source_volume_id,
                    member.snapshot_id,
                    block=member.block,
                )
                cut.append(member.snapshot_id)
        except BaseException:
            for snapshot_id in cut:  # no record names them yet: nothing else would clean up
                backend.storage.remove_snapshot(snapshot_id)
            raise
        for member in members:
            backend.state.save_snapshot(member)
        group = GroupSnapshot(
            group_snapshot_id=group_id,
            name=name,
            source_volume_ids=sources,
            snapshot_ids=tuple(m.snapshot_id for m in members),
            created_at=created_at,
            parameters=dict(parameters),
        )
        backend.state.save_group(group)
        return group


def _check_members(group: GroupSnapshot, snapshot_ids: Sequence[str]) -> None:
    if set(snapshot_ids) != set(group.snapshot_ids) or len(snapshot_ids) != len(group.snapshot_ids):
        raise DriverError(
            Code.INVALID_ARGUMENT,
            f"snapshot_ids do not match the {len(group.snapshot_ids)} snapshots of group "
            f"snapshot {group.group_snapshot_id}",
        )


def get_group_snapshot(
    backend: Backend, group_snapshot_id: str, *, snapshot_ids: Sequence[str]
) -> tuple[GroupSnapshot, list[Snapshot]]:
    """The group and its members; NOT_FOUND, or INVALID_ARGUMENT for a list mismatch."""
    if not group_snapshot_id:
        raise DriverError(Code.INVALID_ARGUMENT, "group_snapshot_id is required")
    group = backend.state.group(group_snapshot_id)
    if group is None:
        raise DriverError(Code.NOT_FOUND, f"group snapshot {group_snapshot_id} does not exist")
    _check_members(group, snapshot_ids)
    return group, [backend.snapshot(snapshot_id) for snapshot_id in group.snapshot_ids]


async def delete_group_snapshot(
    backend: Backend, group_snapshot_id: str, *, snapshot_ids: Sequence[str]
) -> None:
    """Delete a group and all its members; a missing group is already deleted."""
    if not group_snapshot_id:
        raise DriverError(Code.INVALID_ARGUMENT, "group_snapshot_id is required")
    async with backend.lock:
        group = backend.state.group(group_snapshot_id)
        if group is None:
            return
        _check_members(group, snapshot_ids)
        # The group record first: members without a group are removed at the next start.
        backend.state.remove_group(group_snapshot_id)
        for snapshot_id in group.snapshot_ids:
            backend.state.remove_snapshot(snapshot_id)
            await asyncio.to_thread(backend.storage.remove_snapshot, snapshot_id)


def drop_orphaned_members(backend: Backend) -> list[str]:
    """Remove member snapshots whose group record is missing (a crash mid-create or mid-delete)."""
    orphans = [
        s.snapshot_id
        for s in backend.state.snapshots.values()
        if s.group_snapshot_id and backend.state.group(s.group_snapshot_id) is None
    ]
    for snapshot_id in orphans:
        backend.state.remove_snapshot(snapshot_id)
        backend.storage.remove_snapshot(snapshot_id)
    if orphans:
        logger.info("orphaned_group_members_removed", snapshot_ids=orphans)
    return orphans
