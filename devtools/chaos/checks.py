"""The invariants the chaos suite counts, as pure functions over one snapshot of the world.

A snapshot is what the API holds (claims, PVs, VolumeAttachments, pods, every object being
deleted) plus what the driver holds (its volumes and their attachments). Each count names
objects that are in a state no quiet system should be in; every count must be 0 once the
system has converged:

- claims without a PV: a live claim of our class that is not Bound to a PV of ours;
- PVs without a backend volume: a PV of our driver whose volume handle the driver lacks;
- backend volumes without a PV (leaks): a driver volume no PV refers to;
- stuck VolumeAttachments: a VA of ours that is neither attached and wanted, nor gone; or a
  driver attachment without an attached VA for it (published behind the API's back);
- finalizers left: an object with a deletionTimestamp that is still there;
- operations done twice: counted as they happen (`Duplicates`), not from a snapshot;
- objects left: at the end only, after everything was deleted: any claim, PV or VA at all.

No I/O here: `running` takes the snapshots, waits and reports.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["COUNTS", "Counts", "World", "count"]

Body = Mapping[str, Any]

COUNTS = (
    "claims_without_pv",
    "pvs_without_volume",
    "volumes_without_pv",
    "attachments_stuck",
    "finalizers_left",
    "done_twice",
    "objects_left",
)
DETAILS = 5  # offenders named per count, for the report


@dataclasses.dataclass(frozen=True, kw_only=True)
class World:
    """One consistent snapshot (taken synchronously on the cluster's loop)."""

    driver: str
    storage_classes: frozenset[str]
    claims: Sequence[Body]
    volumes: Sequence[Body]
    attachments: Sequence[Body]
    deleting: Sequence[Body]
    """Every object of every kind with a deletionTimestamp."""
    backend: Mapping[str, frozenset[str]]
    """The driver's volumes: volume id → the node ids it is published to."""
    wanted_attachments: frozenset[tuple[str, str]] = frozenset()
    """(PV name, node) pairs that pods on nodes ask for (the attach/detach controller's view)."""


@dataclasses.dataclass(frozen=True)
class Counts:
    claims_without_pv: int = 0
    pvs_without_volume: int = 0
    volumes_without_pv: int = 0
    attachments_stuck: int = 0
    finalizers_left: int = 0
    done_twice: int = 0
    objects_left: int = 0
    details: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def total(self) -> int:
        return sum(getattr(self, name) for name in COUNTS)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in COUNTS}


def _meta(obj: Body) -> Body:
    return obj.get("metadata") or {}


def _spec(obj: Body) -> Body:
    return obj.get("spec") or {}


def _name(obj: Body) -> str:
    meta = _meta(obj)
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])


def _ours(volume: Body, driver: str) -> bool:
    return (_spec(volume).get("csi") or {}).get("driver") == driver


def claims_without_pv(world: World) -> list[str]:
    bound_uids = {
        (_spec(v).get("claimRef") or {}).get("uid") for v in world.volumes if _ours(v, world.driver)
    }
    return [
        _name(claim)
        for claim in world.claims
        if _spec(claim).get("storageClassName") in world.storage_classes
        and not _meta(claim).get("deletionTimestamp")
        and (
            _meta(claim).get("uid") not in bound_uids
            or (claim.get("status") or {}).get("phase") != "Bound"
        )
    ]


def pvs_without_volume(world: World) -> list[str]:
    return [
        _name(v)
        for v in world.volumes
        if _ours(v, world.driver) and _spec(v)["csi"].get("volumeHandle") not in world.backend
    ]


def volumes_without_pv(world: World) -> list[str]:
    handles = {_spec(v)["csi"].get("volumeHandle") for v in world.volumes if _ours(v, world.driver)}
    return sorted(set(world.backend) - handles)


def attachments_stuck(world: World) -> list[str]:
    handles = {
        _meta(v)["name"]: _spec(v)["csi"].get("volumeHandle")
        for v in world.volumes
        if _ours(v, world.driver)
    }
    stuck: list[str] = []
    attached_pairs: set[tuple[str, str]] = set()
    for va in world.attachments:
        spec = _spec(va)
        if spec.get("attacher") != world.driver:
            continue
        pv_name = (spec.get("source") or {}).get("persistentVolumeName") or ""
        node = spec.get("nodeName") or ""
        handle = handles.get(pv_name)
        published = handle is not None and node in world.backend.get(handle, frozenset())
        attached = bool((va.get("status") or {}).get("attached"))
        deleting = bool(_meta(va).get("deletionTimestamp"))
        if attached and published and handle is not None:
            attached_pairs.add((handle, node))
        if deleting or (pv_name, node) not in world.wanted_attachments:
            stuck.append(f"{_name(va)} (not wanted, still there)")
        elif not (attached and published):
            stuck.append(f"{_name(va)} (attached={attached}, published={published})")
    attached_nodes: dict[str, set[str]] = collections.defaultdict(set)
    for handle, node in attached_pairs:
        attached_nodes[handle].add(node)
    for handle, nodes in world.backend.items():
        for node in sorted(nodes - attached_nodes[handle]):
            stuck.append(f"volume {handle} published to {node} without an attached VA")
    return stuck


def finalizers_left(world: World) -> list[str]:
    return [
        f"{obj.get('kind', '?')} {_name(obj)} {_meta(obj).get('finalizers') or []}"
        for obj in world.deleting
    ]


def objects_left(world: World) -> list[str]:
    found = [*world.claims, *world.volumes, *world.attachments]
    return [f"{obj.get('kind', '?')} {_name(obj)}" for obj in found]


def count(world: World, *, done_twice: Iterable[str] = (), expect_empty: bool = False) -> Counts:
    """Every count over the snapshot, with the first few offenders of each for the report."""
    found: dict[str, list[str]] = {
        "claims_without_pv": claims_without_pv(world),
        "pvs_without_volume": pvs_without_volume(world),
        "volumes_without_pv": volumes_without_pv(world),
        "attachments_stuck": attachments_stuck(world),
        "finalizers_left": finalizers_left(world),
        "done_twice": list(done_twice),
        "objects_left": objects_left(world) if expect_empty else [],
    }
    return Counts(
        **{name: len(items) for name, items in found.items()},
        details={name: items[:DETAILS] for name, items in found.items() if items},
    )


def repeated(keys: Iterable[Any]) -> dict[Any, int]:
    """Keys seen more than once, and how often."""
    counter = collections.Counter(keys)
    return {key: n for key, n in counter.items() if n > 1}
