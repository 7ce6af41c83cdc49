"""Conversions between the generated CSI messages and the driver's records.

Requests in: capabilities, capacity ranges, topology requirements and content sources become
plain values, with INVALID_ARGUMENT for a malformed one. Records out: volumes, snapshots and
conditions become messages. No decisions here beyond "is this field well-formed".
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from kopf_csi.csi import messages as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver.errors import DriverError
from kopf_csi.driver.records import Capability, Snapshot, Source, Volume

__all__ = [
    "absolute",
    "capabilities_of",
    "capability_of",
    "capacity_of",
    "condition_message",
    "require",
    "requirements_of",
    "rpc_capabilities",
    "snapshot_message",
    "source_message",
    "source_of",
    "volume_message",
]

_M = TypeVar("_M")


def require(value: str, field: str) -> str:
    """A REQUIRED string field, or INVALID_ARGUMENT."""
    if not value:
        raise DriverError(Code.INVALID_ARGUMENT, f"{field} is required")
    return value


def absolute(value: str, field: str, *, required: bool = True) -> str:
    """A path field: the spec requires absolute paths in the node's root filesystem."""
    if not value and not required:
        return value
    if not require(value, field).startswith("/"):
        raise DriverError(Code.INVALID_ARGUMENT, f"{field} must be an absolute path")
    return value


def capability_of(message: csi.VolumeCapability | None, *, field: str) -> Capability:
    if message is None:
        raise DriverError(Code.INVALID_ARGUMENT, f"{field} is required")
    if message.access_mode is None:
        raise DriverError(Code.INVALID_ARGUMENT, f"{field}.access_mode is required")
    kind, _ = csi.which_one_of(message, "access_type")
    if not kind:
        raise DriverError(Code.INVALID_ARGUMENT, f"{field}.access_type is required")
    mount = message.mount
    return Capability(
        block=kind == "block",
        access_mode=message.access_mode.mode.name or "UNKNOWN",
        fs_type=mount.fs_type if mount else "",
        mount_flags=tuple(mount.mount_flags) if mount else (),
        mount_group=mount.volume_mount_group if mount else "",
    )


def capabilities_of(messages: Sequence[csi.VolumeCapability], *, field: str) -> list[Capability]:
    return [capability_of(m, field=f"{field}[{i}]") for i, m in enumerate(messages)]


def capacity_of(message: csi.CapacityRange | None) -> tuple[int, int]:
    """(required_bytes, limit_bytes); 0 means unset, as in the proto."""
    if message is None:
        return 0, 0
    return message.required_bytes, message.limit_bytes


def requirements_of(
    message: csi.TopologyRequirement | None,
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(preferred, requisite) segments."""
    if message is None:
        return [], []
    return (
        [dict(t.segments) for t in message.preferred],
        [dict(t.segments) for t in message.requisite],
    )


def source_of(message: csi.VolumeContentSource | None) -> Source | None:
    if message is None:
        return None
    kind, value = csi.which_one_of(message, "type")
    if kind == "snapshot" and isinstance(value, csi.VolumeContentSourceSnapshotSource):
        return Source(kind="snapshot", id=require(value.snapshot_id, "snapshot_id"))
    if kind == "volume" and isinstance(value, csi.VolumeContentSourceVolumeSource):
        return Source(kind="volume", id=require(value.volume_id, "volume_id"))
    raise DriverError(Code.INVALID_ARGUMENT, "volume_content_source has no type")


def source_message(source: Source | None) -> csi.VolumeContentSource | None:
    if source is None:
        return None
    if source.kind == "snapshot":
        snapshot = csi.VolumeContentSourceSnapshotSource(snapshot_id=source.id)
        return csi.VolumeContentSource(snapshot=snapshot)
    return csi.VolumeContentSource(volume=csi.VolumeContentSourceVolumeSource(volume_id=source.id))


def volume_message(volume: Volume, *, topology_key: str | None) -> csi.Volume:
    """The Volume message; `topology_key` None when topology is off."""
    topology = []
    if topology_key is not None and volume.node is not None:
        topology = [csi.Topology(segments={topology_key: volume.node})]
    return csi.Volume(
        volume_id=volume.volume_id,
        capacity_bytes=volume.size,
        volume_context=dict(volume.context),
        content_source=source_message(volume.source),
        accessible_topology=topology,
    )


def snapshot_message(snapshot: Snapshot, *, ready_after: float = 0.0) -> csi.Snapshot:
    """A copy is ready the moment it exists, unless the config pretends an upload phase."""
    ready = ready_after <= 0 or time.time() >= snapshot.created_at + ready_after
    return csi.Snapshot(
        snapshot_id=snapshot.snapshot_id,
        source_volume_id=snapshot.source_volume_id,
        size_bytes=snapshot.size,
        creation_time=datetime.datetime.fromtimestamp(snapshot.created_at, tz=datetime.UTC),
        ready_to_use=ready,
        group_snapshot_id=snapshot.group_snapshot_id,
    )


def rpc_capabilities(
    names: Sequence[str], *, capability: Callable[..., _M], rpc: Callable[[Any], Any], types: Any
) -> list[_M]:
    """Capability messages of RPC type names, for the three services' GetCapabilities:
    `rpc_capabilities(names, capability=csi.NodeServiceCapability, rpc=csi.NodeServiceCapabilityRpc,
    types=csi.NodeServiceCapabilityRpcType)`."""
    return [capability(rpc=rpc(types.from_string(name))) for name in names]


def condition_message(problem: str | None) -> csi.VolumeCondition:
    if problem is None:
        return csi.VolumeCondition(abnormal=False, message="volume is healthy")
    return csi.VolumeCondition(abnormal=True, message=problem)


def secrets_of(message: object) -> Mapping[str, str]:
    """The request's `secrets` map, or an empty one for requests without the field."""
    secrets = getattr(message, "secrets", None)
    return secrets if isinstance(secrets, dict) else {}
