"""The driver's records: volumes, snapshots, group snapshots, attachments, node stagings and
publications.

Frozen dataclasses, changed with `dataclasses.replace()` and saved whole by `state`, so that an
in-memory change can never skip the disk. Plain data and their JSON codec only: no CSI messages
(`messages` converts), no I/O (`state` persists), no rules (`capabilities`, `capacity`, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

__all__ = [
    "Attachment",
    "Capability",
    "GroupSnapshot",
    "Mount",
    "NodeVolume",
    "Snapshot",
    "Source",
    "Volume",
    "group_snapshot_from_dict",
    "snapshot_from_dict",
    "to_dict",
    "volume_from_dict",
]

SCHEMA = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class Capability:
    """One VolumeCapability, reduced to what the driver compares."""

    block: bool
    access_mode: str
    """The AccessMode.Mode name, e.g. `SINGLE_NODE_WRITER`."""
    fs_type: str = ""
    mount_flags: tuple[str, ...] = ()
    mount_group: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Attachment:
    """A ControllerPublishVolume of a volume to one node."""

    readonly: bool
    capability: Capability


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mount:
    """A NodeStageVolume (keyed by staging path) or NodePublishVolume (keyed by target path)."""

    capability: Capability
    readonly: bool = False
    staging_path: str = ""
    """For publications: the staging path it was published from."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodeVolume:
    """What one node did with a volume."""

    staged: Mapping[str, Mount] = dataclasses.field(default_factory=dict)
    published: Mapping[str, Mount] = dataclasses.field(default_factory=dict)
    expanded_size: int = 0
    """The size NodeExpandVolume last grew the volume's filesystem to."""

    @property
    def is_empty(self) -> bool:
        return not self.staged and not self.published


@dataclasses.dataclass(frozen=True, kw_only=True)
class Source:
    """The content source of a volume: a snapshot or another volume."""

    kind: Literal["snapshot", "volume"]
    id: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Volume:
    """A volume: a directory (mount) or a file (block) under the data directory."""

    volume_id: str
    name: str
    size: int
    block: bool
    created_at: float
    parameters: Mapping[str, str] = dataclasses.field(default_factory=dict)
    mutable_parameters: Mapping[str, str] = dataclasses.field(default_factory=dict)
    context: Mapping[str, str] = dataclasses.field(default_factory=dict)
    node: str | None = None
    """The node the volume is accessible from (topology); None without topology."""
    source: Source | None = None
    attachments: Mapping[str, Attachment] = dataclasses.field(default_factory=dict)
    """ControllerPublishVolume, by node id."""
    nodes: Mapping[str, NodeVolume] = dataclasses.field(default_factory=dict)
    """Node stagings and publications, by node id."""

    def on_node(self, node_id: str) -> NodeVolume:
        return self.nodes.get(node_id, NodeVolume())

    def with_node(self, node_id: str, node: NodeVolume) -> Volume:
        nodes = {**self.nodes, node_id: node}
        if node.is_empty:  # nothing left on that node: its expansion state goes with it
            del nodes[node_id]
        return dataclasses.replace(self, nodes=nodes)

    @property
    def is_in_use(self) -> bool:
        """Attached, staged or published anywhere: DeleteVolume must refuse it."""
        return bool(self.attachments) or any(not n.is_empty for n in self.nodes.values())


@dataclasses.dataclass(frozen=True, kw_only=True)
class Snapshot:
    """A snapshot: an independent copy of a volume's content, ready as soon as it exists."""

    snapshot_id: str
    name: str
    source_volume_id: str
    size: int
    block: bool
    created_at: float
    parameters: Mapping[str, str] = dataclasses.field(default_factory=dict)
    group_snapshot_id: str = ""
    """The group snapshot it was cut in; such a member is deleted only with its group."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupSnapshot:
    """A volume group snapshot: member snapshots of several volumes, cut together."""

    group_snapshot_id: str
    name: str
    source_volume_ids: tuple[str, ...]
    """In the order of the request; the idempotency check compares them as a set."""
    snapshot_ids: tuple[str, ...]
    """The member snapshots, one per source volume, in the same order."""
    created_at: float
    parameters: Mapping[str, str] = dataclasses.field(default_factory=dict)


def to_dict(record: Volume | Snapshot | GroupSnapshot) -> dict[str, Any]:
    """The record as JSON-ready data, with the schema version."""
    return {"schema": SCHEMA, **dataclasses.asdict(record)}


def volume_from_dict(raw: Mapping[str, Any]) -> Volume:
    source = raw.get("source")
    return Volume(
        volume_id=raw["volume_id"],
        name=raw["name"],
        size=raw["size"],
        block=raw["block"],
        created_at=raw["created_at"],
        parameters=dict(raw.get("parameters", {})),
        mutable_parameters=dict(raw.get("mutable_parameters", {})),
        context=dict(raw.get("context", {})),
        node=raw.get("node"),
        source=Source(kind=source["kind"], id=source["id"]) if source else None,
        attachments={
            node_id: Attachment(readonly=a["readonly"], capability=_capability(a["capability"]))
            for node_id, a in raw.get("attachments", {}).items()
        },
        nodes={node_id: _node_volume(n) for node_id, n in raw.get("nodes", {}).items()},
    )


def snapshot_from_dict(raw: Mapping[str, Any]) -> Snapshot:
    return Snapshot(
        snapshot_id=raw["snapshot_id"],
        name=raw["name"],
        source_volume_id=raw["source_volume_id"],
        size=raw["size"],
        block=raw["block"],
        created_at=raw["created_at"],
        parameters=dict(raw.get("parameters", {})),
        group_snapshot_id=raw.get("group_snapshot_id", ""),
    )


def group_snapshot_from_dict(raw: Mapping[str, Any]) -> GroupSnapshot:
    return GroupSnapshot(
        group_snapshot_id=raw["group_snapshot_id"],
        name=raw["name"],
        source_volume_ids=tuple(raw["source_volume_ids"]),
        snapshot_ids=tuple(raw["snapshot_ids"]),
        created_at=raw["created_at"],
        parameters=dict(raw.get("parameters", {})),
    )


def _capability(raw: Mapping[str, Any]) -> Capability:
    return Capability(
        block=raw["block"],
        access_mode=raw["access_mode"],
        fs_type=raw.get("fs_type", ""),
        mount_flags=tuple(raw.get("mount_flags", ())),
        mount_group=raw.get("mount_group", ""),
    )


def _mount(raw: Mapping[str, Any]) -> Mount:
    return Mount(
        capability=_capability(raw["capability"]),
        readonly=raw.get("readonly", False),
        staging_path=raw.get("staging_path", ""),
    )


def _node_volume(raw: Mapping[str, Any]) -> NodeVolume:
    return NodeVolume(
        staged={path: _mount(m) for path, m in raw.get("staged", {}).items()},
        published={path: _mount(m) for path, m in raw.get("published", {}).items()},
        expanded_size=raw.get("expanded_size", 0),
    )
