"""Volume operations on records: create, delete, expand, modify, attach and detach.

Each function takes the `Backend` and plain values (never messages), holds the backend's lock
while it reads and writes records, and raises `DriverError` with the spec's code. The controller
servicer converts messages to these arguments and the results back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import time
import uuid
from collections.abc import Mapping, Sequence

from kopf_csi.csi.codes import Code
from kopf_csi.driver import attachments, capabilities, capacity, topology
from kopf_csi.driver.backend import Backend
from kopf_csi.driver.calllog import Outcome
from kopf_csi.driver.errors import DriverError
from kopf_csi.driver.records import Attachment, Capability, Source, Volume

__all__ = [
    "VolumeRequest",
    "attach_volume",
    "check_mutable_parameters",
    "create_volume",
    "delete_volume",
    "detach_volume",
    "expand_volume",
    "modify_volume",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class VolumeRequest:
    """CreateVolume's arguments, as plain values."""

    name: str
    capabilities: Sequence[Capability]
    required: int = 0
    limit: int = 0
    parameters: Mapping[str, str] = dataclasses.field(default_factory=dict)
    mutable_parameters: Mapping[str, str] = dataclasses.field(default_factory=dict)
    source: Source | None = None
    preferred: Sequence[Mapping[str, str]] = ()
    requisite: Sequence[Mapping[str, str]] = ()


async def create_volume(backend: Backend, request: VolumeRequest) -> Volume:
    """A new volume, or the existing compatible one of the same name (idempotency)."""
    config = backend.config
    if not request.name:
        raise DriverError(Code.INVALID_ARGUMENT, "name is required")
    block = capabilities.check_volume_capabilities(request.capabilities, features=config.features)
    if request.mutable_parameters:
        backend.require_feature(config.features.modify, "mutable_parameters")
        check_mutable_parameters(request.mutable_parameters, allowed=config.mutable_parameters)
    async with backend.lock:
        existing = backend.state.volume_named(request.name)
        if existing is not None:
            _check_compatible(existing, request, block=block, key=config.topology_key)
            backend.record(
                "CreateVolume", "existing", volume_id=existing.volume_id, name=request.name
            )
            return existing
        minimum, content = _content_source(backend, request.source, block=block)
        size, node = _place(backend, request, minimum=minimum)
        volume = Volume(
            volume_id=str(uuid.uuid4()),
            name=request.name,
            size=size,
            block=block,
            created_at=time.time(),
            parameters=dict(request.parameters),
            mutable_parameters=dict(request.mutable_parameters),
            context=dict(request.parameters),
            node=node,
            source=request.source,
        )
        if content is None:
            backend.storage.create_volume(volume.volume_id, block=block, size=size)
        else:
            await asyncio.to_thread(
                backend.storage.copy_volume, content, volume.volume_id, block=block, size=size
            )
        backend.state.save_volume(volume)
        backend.record("CreateVolume", "created", volume_id=volume.volume_id, name=request.name)
        return volume


def _place(backend: Backend, request: VolumeRequest, *, minimum: int) -> tuple[int, str | None]:
    """The size and node of a new volume; OUT_OF_RANGE or RESOURCE_EXHAUSTED if it cannot be."""
    config = backend.config
    size = capacity.size_for(
        required=request.required,
        limit=request.limit,
        default=config.limits.default_volume_size,
        maximum=config.limits.max_volume_size,
        minimum=minimum,
    )
    node = None
    if config.features.topology:
        node = topology.choose_node(
            preferred=request.preferred,
            requisite=request.requisite,
            default=config.node_id,
            key=config.topology_key,
            is_known=config.is_known_node,
        )
    available = backend.available(node or "")
    if size > available:
        raise DriverError(
            Code.RESOURCE_EXHAUSTED, f"{size} bytes requested, {available} bytes available"
        )
    return size, node


def _check_compatible(existing: Volume, request: VolumeRequest, *, block: bool, key: str) -> None:
    """ALREADY_EXISTS unless the existing volume satisfies every argument of the request."""
    problems = []
    if not capacity.fits_range(existing.size, required=request.required, limit=request.limit):
        problems.append(f"its size {existing.size} is outside the capacity range")
    if existing.block != block:
        problems.append("its access type differs")
    if dict(existing.parameters) != dict(request.parameters):
        problems.append("its parameters differ")
    if existing.source != request.source:
        problems.append("its content source differs")
    if not topology.satisfies(existing.node, requisite=request.requisite, key=key):
        problems.append("its topology is not among the requisite ones")
    if problems:
        raise DriverError(
            Code.ALREADY_EXISTS,
            f"volume {request.name!r} exists and is incompatible: {'; '.join(problems)}",
        )


def _content_source(
    backend: Backend, source: Source | None, *, block: bool
) -> tuple[int, pathlib.Path | None]:
    """(the minimum size, the path to copy from) for a content source, or (0, None)."""
    features = backend.config.features
    if source is None:
        return 0, None
    if source.kind == "snapshot":
        if not features.snapshots:
            raise DriverError(Code.INVALID_ARGUMENT, "restoring from snapshots is not enabled")
        snapshot = backend.state.snapshot(source.id)
        if snapshot is None:
            raise DriverError(Code.NOT_FOUND, f"source snapshot {source.id} does not exist")
        size, is_block, path = (
            snapshot.size,
            snapshot.block,
            backend.storage.snapshot_path(source.id),
        )
    else:
        if not features.clone:
            raise DriverError(Code.INVALID_ARGUMENT, "cloning volumes is not enabled")
        volume = backend.state.volume(source.id)
        if volume is None:
            raise DriverError(Code.NOT_FOUND, f"source volume {source.id} does not exist")
        size, is_block, path = volume.size, volume.block, backend.storage.volume_path(source.id)
    if is_block != block:
        raise DriverError(
            Code.INVALID_ARGUMENT, f"the source {source.kind} {source.id} has another access type"
        )
    return size, path


async def delete_volume(backend: Backend, volume_id: str) -> None:
    """Delete a volume and its content; a missing one is already deleted."""
    async with backend.lock:
        volume = backend.state.volume(volume_id)
        if volume is None:
            # Never touch the disk for an id we have no record of: it comes from the request.
            # Content left by a crash without its record is removed at the next start.
            backend.record("DeleteVolume", "absent", volume_id=volume_id)
            return
        if volume.is_in_use:
            raise DriverError(
                Code.FAILED_PRECONDITION,
                f"volume {volume_id} is still published or staged; unpublish it first",
            )
        # The record first: a crash after it leaves orphaned content, removed at the next start.
        backend.state.remove_volume(volume_id)
        backend.record("DeleteVolume", "deleted", volume_id=volume_id, name=volume.name)
        await asyncio.to_thread(backend.storage.remove_volume, volume_id)


async def expand_volume(
    backend: Backend,
    volume_id: str,
    *,
    required: int,
    limit: int,
    block: bool | None,
    offline: bool = False,
) -> Volume:
    """Grow a volume (never shrink it); the result says whether the node must grow its fs.

    `offline`: the plugin has only OFFLINE expansion, so a volume published to a node is
    refused with FAILED_PRECONDITION (the spec's "volume in use").
    """
    config = backend.config
    async with backend.lock:
        volume = backend.volume(volume_id)
        if offline and volume.attachments and required > volume.size:
            nodes = ", ".join(sorted(volume.attachments))
            raise DriverError(
                Code.FAILED_PRECONDITION,
                f"volume {volume_id} is published to {nodes}; it can only be expanded offline",
            )
        if block is not None and block != volume.block:
            raise DriverError(Code.INVALID_ARGUMENT, f"volume {volume_id} has another access type")
        if required <= volume.size:
            return volume  # "already larger than or equal to the target capacity": OK
        size = capacity.size_for(
            required=required,
            limit=limit,
            default=volume.size,
            maximum=config.limits.max_volume_size,
        )
        available = backend.available(capacity.pool_of(volume))
        if size - volume.size > available:
            raise DriverError(
                Code.OUT_OF_RANGE,
                f"growing by {size - volume.size} bytes needs more than the {available} available",
            )
        if volume.block:
            backend.storage.resize_block(volume_id, size)
        volume = dataclasses.replace(volume, size=size)
        backend.state.save_volume(volume)
        return volume


def check_mutable_parameters(parameters: Mapping[str, str], *, allowed: frozenset[str]) -> None:
    unknown = sorted(set(parameters) - allowed)
    if unknown:
        raise DriverError(
            Code.INVALID_ARGUMENT,
            f"mutable parameters {unknown} are not supported; supported: {sorted(allowed)}",
        )


async def modify_volume(backend: Backend, volume_id: str, parameters: Mapping[str, str]) -> Volume:
    """Change only the mutable parameters that are given (the spec forbids acting on absence)."""
    check_mutable_parameters(parameters, allowed=backend.config.mutable_parameters)
    async with backend.lock:
        volume = backend.volume(volume_id)
        merged = {**volume.mutable_parameters, **parameters}
        if merged != dict(volume.mutable_parameters):
            volume = dataclasses.replace(volume, mutable_parameters=merged)
            backend.state.save_volume(volume)
        return volume


async def attach_volume(
    backend: Backend, volume_id: str, *, node_id: str, attachment: Attachment
) -> Volume:
    """ControllerPublishVolume: record the attachment (it is only bookkeeping here)."""
    config = backend.config
    if attachment.readonly and not config.features.publish_readonly:
        raise DriverError(Code.INVALID_ARGUMENT, "readonly publishing is not enabled")
    capabilities.check_access_mode(attachment.capability.access_mode, features=config.features)
    async with backend.lock:
        volume = backend.volume(volume_id)
        if not config.is_known_node(node_id):
            raise DriverError(Code.NOT_FOUND, f"node {node_id} does not exist")
        done = attachments.check_controller_publish(
            volume,
            node_id=node_id,
            attachment=attachment,
            attached_to_node=backend.attached_to(node_id),
            max_per_node=config.limits.max_volumes_per_node,
        )
        if not done:
            volume = dataclasses.replace(
                volume, attachments={**volume.attachments, node_id: attachment}
            )
            backend.state.save_volume(volume)
        outcome: Outcome = "already" if done else "published"
        backend.record("ControllerPublishVolume", outcome, volume_id=volume_id, node_id=node_id)
        return volume


async def detach_volume(backend: Backend, volume_id: str, *, node_id: str) -> None:
    """ControllerUnpublishVolume from one node, or from all with an empty node id."""
    async with backend.lock:
        volume = backend.state.volume(volume_id)
        if volume is None:
            # nothing is attached to a volume that does not exist: safely unpublished
            backend.record("ControllerUnpublishVolume", "absent", volume_id=volume_id)
            return
        remaining = {n: a for n, a in volume.attachments.items() if node_id and n != node_id}
        outcome: Outcome = "not_published"
        if remaining != dict(volume.attachments):
            backend.state.save_volume(dataclasses.replace(volume, attachments=remaining))
            outcome = "unpublished"
        backend.record("ControllerUnpublishVolume", outcome, volume_id=volume_id, node_id=node_id)
