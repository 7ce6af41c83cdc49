"""Topology: which node a new volume lives on, and whether a node satisfies a requirement.

The driver has one topology key (`topology.hostpath.csi.kopf.dev/node` by default) whose value
is a node id, so a segment names a node. Segments are plain mappings here; `messages` converts
them from and to `csi.Topology`. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kopf_csi.csi.codes import Code
from kopf_csi.driver.errors import DriverError

__all__ = ["choose_node", "node_of", "satisfies", "segment"]

Segments = Mapping[str, str]


def segment(node_id: str, *, key: str) -> dict[str, str]:
    return {key: node_id}


def node_of(segments: Segments, *, key: str) -> str | None:
    """The node a segment names, or None if it does not use our key."""
    return segments.get(key) or None


def choose_node(
    *,
    preferred: Sequence[Segments],
    requisite: Sequence[Segments],
    default: str,
    key: str,
    is_known: Callable[[str], bool],
) -> str:
    """Pick the node for a new volume from CreateVolume's accessibility requirements.

    The spec's order: the first usable preferred topology, then any requisite one; with no
    requirements at all, this driver's own node. If requirements are given and none of them
    names a node we serve, the volume cannot be provisioned there: RESOURCE_EXHAUSTED
    ("Unable to provision in `accessible_topology`").
    """
    if not preferred and not requisite:
        return default
    for candidates in (preferred, requisite):
        for segments in candidates:
            node = node_of(segments, key=key)
            if node is not None and is_known(node):
                return node
    raise DriverError(
        Code.RESOURCE_EXHAUSTED,
        "none of the requested topologies is served by this driver",
    )


def satisfies(node: str | None, *, requisite: Sequence[Segments], key: str) -> bool:
    """Whether a volume on `node` meets the requisite topologies (idempotent CreateVolume)."""
    if not requisite or node is None:
        return True
    return any(node_of(segments, key=key) == node for segments in requisite)
