"""What the reference driver is told at start: its identity, its features, its limits.

Frozen dataclasses only, grouped as kopf groups its settings; every field documented where it
is declared. Parsing argv into these lives in `__main__`; nothing else reads the environment.
What the driver *advertises* is derived from `Features` in `capabilities`, so that a switched-off
feature is both unadvertised and refused.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import pathlib
from collections.abc import Mapping

__all__ = [
    "DEFAULT_NAME",
    "DEFAULT_TOPOLOGY_KEY",
    "DriverConfig",
    "Features",
    "Limits",
    "SecretsPolicy",
]

DEFAULT_NAME = "hostpath.csi.kopf.dev"
DEFAULT_TOPOLOGY_KEY = "topology.hostpath.csi.kopf.dev/node"
GiB = 1024**3
# From the installed metadata, not `kopf_csi.__version__`: works however the package is on the path.
VERSION = importlib.metadata.version("kopf-csi")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Features:
    """Optional CSI features; each one switches an advertised capability and its RPCs."""

    attach: bool = False
    """ControllerPublish/Unpublish (PUBLISH_UNPUBLISH_VOLUME). Off by default, as in hostpath."""

    topology: bool = True
    """VOLUME_ACCESSIBILITY_CONSTRAINTS: volumes live on one node and say so."""

    expansion: bool = True
    """EXPAND_VOLUME on the controller and the node, online expansion."""

    controller_expansion: bool = True
    """Controller EXPAND_VOLUME; off (with `expansion` on): the node alone grows volumes."""

    online_expansion: bool = True
    """VolumeExpansion ONLINE; off: OFFLINE, and ControllerExpandVolume of a volume published
    to a node fails with FAILED_PRECONDITION ("volume in use", as the spec says)."""

    snapshots: bool = True
    """CREATE_DELETE_SNAPSHOT, LIST_SNAPSHOTS, GET_SNAPSHOT, and restoring from a snapshot."""

    list_snapshots: bool = True
    """LIST_SNAPSHOTS; advertised only together with `snapshots`."""

    get_snapshot: bool = True
    """GET_SNAPSHOT; advertised only together with `snapshots`."""

    group_snapshots: bool = True
    """The GroupController service (GROUP_CONTROLLER_SERVICE) with
    CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT; advertised only together with `snapshots`, as its
    member snapshots are restored like any snapshot."""

    clone: bool = True
    """CLONE_VOLUME: a volume as the content source of a new volume."""

    modify: bool = True
    """MODIFY_VOLUME: ControllerModifyVolume and `mutable_parameters` in CreateVolume."""

    list_volumes: bool = True
    """LIST_VOLUMES."""

    get_volume: bool = True
    """GET_VOLUME: ControllerGetVolume."""

    published_nodes: bool = True
    """LIST_VOLUMES_PUBLISHED_NODES; advertised only together with `attach` (the spec says so)."""

    volume_condition: bool = True
    """VOLUME_CONDITION on the controller and the node."""

    single_node_multi_writer: bool = True
    """SINGLE_NODE_MULTI_WRITER: the SINGLE_NODE_SINGLE_WRITER/MULTI_WRITER access modes."""

    publish_readonly: bool = True
    """PUBLISH_READONLY; advertised only together with `attach`."""

    capacity: bool = True
    """GET_CAPACITY."""

    node_stage: bool = True
    """STAGE_UNSTAGE_VOLUME on the node."""

    node_stats: bool = True
    """GET_VOLUME_STATS on the node."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Limits:
    """Sizes and counts the driver enforces."""

    total_capacity: int | None = None
    """Bytes per pool (a pool per node with topology); None: the data directory's free space."""

    max_volume_size: int | None = None
    """The largest volume, in bytes; None: no limit but the pool."""

    default_volume_size: int = GiB
    """The size of a volume whose request has no capacity range."""

    max_volumes_per_node: int = 0
    """Attachments per node (NodeGetInfo and ControllerPublishVolume); 0: unlimited."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SecretsPolicy:
    """Which RPCs must carry secrets, and which."""

    required_for: frozenset[str] = frozenset()
    """Full RPC names (`CreateVolume`); `secrets.parse_operations()` accepts short aliases."""

    expected: Mapping[str, str] | None = None
    """The exact secrets those RPCs must carry; None: any non-empty `secrets` map will do."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DriverConfig:
    """Everything one driver instance needs; the same data_dir after a restart keeps its state."""

    node_id: str
    """This node's id (NodeGetInfo), and the default node of new volumes."""

    data_dir: pathlib.Path
    """Where volumes, snapshots and the state records live; created if missing."""

    name: str = DEFAULT_NAME
    """GetPluginInfo.name, the provisioner name in StorageClasses."""

    vendor_version: str = VERSION
    """GetPluginInfo.vendor_version."""

    known_nodes: frozenset[str] | None = frozenset()
    """Other node ids ControllerPublishVolume and topology accept; None: any node id."""

    topology_key: str = DEFAULT_TOPOLOGY_KEY
    """The one topology segment key; its value is a node id."""

    mutable_parameters: frozenset[str] = frozenset({"iops", "throughput"})
    """Keys accepted in `mutable_parameters`; any other key is INVALID_ARGUMENT."""

    features: Features = Features()
    limits: Limits = Limits()
    secrets: SecretsPolicy = SecretsPolicy()

    faults_file: pathlib.Path | None = None
    """A JSON file of fault rules, re-read whenever it changes (see `faults`)."""

    faults_seed: int | None = None
    """Seed for fractional faults, for reproducible runs."""

    snapshot_ready_after: float = 0.0
    """Seconds after its creation before a snapshot reports `ready_to_use` (an upload phase)."""

    durable: bool = True
    """fsync each state record before renaming it into place; off trades safety for speed."""

    def is_known_node(self, node_id: str) -> bool:
        """Whether ControllerPublishVolume (and topology) may use this node."""
        if self.known_nodes is None:
            return bool(node_id)
        return node_id == self.node_id or node_id in self.known_nodes
