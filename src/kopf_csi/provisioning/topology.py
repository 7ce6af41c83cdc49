"""Where a new volume may live (CreateVolume's requisite and preferred), and the PV's affinity.

A port of external-provisioner's `topology.go`. The driver's topology keys come from the
CSINode of a node (its `spec.drivers[name=driver].topologyKeys`), their values from Node labels.
- With a selected node (WaitForFirstConsumer): that node's segment. `--strict-topology` sends
  only it (it must be inside allowedTopologies); otherwise requisite = allowedTopologies or every
  segment in the cluster, and preferred = requisite rotated to start at the node's segment.
- Without (Immediate): requisite as above from a random CSINode's keys; preferred rotated by a
  hash of the StatefulSet part of the claim name, to spread a StatefulSet's volumes. With no
  allowedTopologies and `--immediate-topology=false`: no requirement at all.

What an attempt learnt (keys, the cluster's segments, the node's labels) is returned as a
`TopologyMemo` for the caller to keep per claim UID and pass back on retries, so that a retry
asks for the same topology even if the node has gone meanwhile (upstream #1413, #1438, #1466).
The caller drops it once the claim is provisioned, or failed as Finished or Reschedule.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Mapping, MutableSequence, Sequence
from typing import Any

from kopf_csi import names
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import gofmt, terms
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.states import ProvisioningState

__all__ = [
    "Accessibility",
    "TopologyError",
    "TopologyMemo",
    "accessibility_requirements",
    "node_affinity",
    "supports_topology",
]

Term = terms.Term
_UINT32 = 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class TopologyMemo:
    """What earlier attempts for one claim found (the Go `pvcNodeStore` entry)."""

    topology_keys: tuple[str, ...] = ()
    requisite_terms: tuple[Term, ...] = ()
    node_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Accessibility:
    requirement: csi.TopologyRequirement | None
    memo: TopologyMemo


class TopologyError(ProvisioningError):
    """No requirement could be made; `memo` still holds what was learnt before the failure."""

    def __init__(self, message: str, *, state: ProvisioningState, memo: TopologyMemo) -> None:
        super().__init__(message, state=state)
        self.memo = memo


class _NotFound(Exception):
    """The selected node's CSINode is missing: the scheduler should pick again."""


class _Failed(Exception):
    """Any other reason; the claim retries with the same node."""


def supports_topology(plugin_capabilities: Iterable[str]) -> bool:
    """The driver reports VOLUME_ACCESSIBILITY_CONSTRAINTS (the `Topology` gate is GA, on)."""
    return "VOLUME_ACCESSIBILITY_CONSTRAINTS" in plugin_capabilities


def node_affinity(accessible_topology: Sequence[csi.Topology]) -> dict[str, Any] | None:
    """The PV's `spec.nodeAffinity`: one term per returned segment, each key `In [value]`.

    Go emits a term's expressions in map order; we sort them by key. Segments without keys are
    skipped; if none is left, no affinity is written (Go would write one without terms, which
    the API server rejects).
    """
    terms = [
        {
            "matchExpressions": [
                {"key": key, "operator": "In", "values": [value]}
                for key, value in sorted(topology.segments.items())
            ]
        }
        for topology in accessible_topology
        if topology.segments
    ]
    return {"required": {"nodeSelectorTerms": terms}} if terms else None


def accessibility_requirements(
    *,
    driver_name: str,
    claim_name: str,
    allowed_topologies: Sequence[Mapping[str, Any]] | None,
    selected_node: str,
    strict_topology: bool,
    immediate_topology: bool,
    csinodes: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    memo: TopologyMemo | None = None,
    shuffle: Callable[[MutableSequence[Any]], None] = random.shuffle,  # a seam for tests
    random_hash: Callable[[], int] = lambda: random.getrandbits(32),  # a seam for tests
) -> Accessibility:
    """CreateVolume's `accessibility_requirements` (external-provisioner's
    `GenerateAccessibilityRequirements`), from the cluster's CSINodes and Nodes as given.

    A missing CSINode of the selected node is a `RESCHEDULE`; every other failure leaves the
    claim unchanged (`NO_CHANGE`) and is prefixed as in Go.
    """
    work = _Work(driver_name, csinodes, nodes, memo or TopologyMemo(), shuffle)
    try:
        requirement = work.generate(
            claim_name=claim_name,
            allowed=allowed_topologies,
            selected=selected_node,
            strict=strict_topology,
            immediate=immediate_topology,
            random_hash=random_hash,
        )
    except _NotFound as exc:
        raise TopologyError(str(exc), state=ProvisioningState.RESCHEDULE, memo=work.memo) from None
    except _Failed as exc:
        message = f"error generating accessibility requirements: {exc}"
        raise TopologyError(message, state=ProvisioningState.NO_CHANGE, memo=work.memo) from None
    return Accessibility(requirement, work.memo)


class _Work:
    """One generation, remembering what it learns in `memo` as it goes."""

    def __init__(
        self,
        driver_name: str,
        csinodes: Sequence[Mapping[str, Any]],
        nodes: Sequence[Mapping[str, Any]],
        memo: TopologyMemo,
        shuffle: Callable[[MutableSequence[Any]], None],
    ) -> None:
        self.driver_name = driver_name
        self.csinodes = csinodes
        self.nodes = nodes
        self.memo = memo
        self.shuffle = shuffle

    def generate(
        self,
        *,
        claim_name: str,
        allowed: Sequence[Mapping[str, Any]] | None,
        selected: str,
        strict: bool,
        immediate: bool,
        random_hash: Callable[[], int],
    ) -> csi.TopologyRequirement | None:
        keys: tuple[str, ...] = ()
        selected_term: Term = ()
        requisite: list[Term] = []
        if selected:
            keys = self._selected_keys(selected)
            selected_term = self._selected_term(selected, keys)
            if strict:
                _check_allowed(selected, selected_term, allowed)
                requisite = [selected_term]
        if not requisite:
            if allowed:
                requisite = terms.flatten(allowed)
            elif not selected and not immediate:
                return None  # neither the claim nor the class limits where; the driver knows
            else:
                requisite = self._aggregate(selected, keys)
                if not requisite:
                    raise _Failed(names.MESSAGE_NO_TOPOLOGY)
        if not requisite:
            return None  # allowedTopologies without values: as if topology were off
        requisite = terms.sorted_unique(requisite)
        if not selected:
            hash_, index = terms.statefulset_hash(claim_name, random_hash)
            shift = ((hash_ + index) & _UINT32) % len(requisite)
            preferred = requisite[shift:] + requisite[:shift]
        elif strict:
            preferred = requisite
        else:
            preferred = _rotated_to(selected, selected_term, requisite)
        return csi.TopologyRequirement(
            requisite=terms.to_csi(requisite), preferred=terms.to_csi(preferred)
        )

    def _remember(self, **changes: Any) -> None:
        self.memo = dataclasses.replace(self.memo, **changes)

    def _driver_keys(self, csinode: Mapping[str, Any]) -> tuple[str, ...]:
        for driver in csinode.get("spec", {}).get("drivers") or ():
            if driver.get("name") == self.driver_name:
                return tuple(driver.get("topologyKeys") or ())
        return ()

    def _selected_keys(self, selected: str) -> tuple[str, ...]:
        keys = self.memo.topology_keys
        if not keys:
            csinode = _by_name(self.csinodes, selected)
            if csinode is None:
                raise _NotFound(
                    f"failed to get selected CSINode {selected}: "
                    f"csinode.storage.k8s.io {gofmt.go_quote(selected)} not found"
                )
            keys = self._driver_keys(csinode)
            if keys:
                self._remember(topology_keys=keys)
        if not keys:
            # The node plugin is not (yet) registered on the selected node.
            raise _Failed(f"no topology key found for node {selected}")
        return keys

    def _selected_term(self, selected: str, keys: tuple[str, ...]) -> Term:
        labels: Mapping[str, str] | None = self.memo.node_labels or None
        if labels is None:
            node = _by_name(self.nodes, selected)
            labels = (node or {}).get("metadata", {}).get("labels") or {}
            if labels:
                self._remember(node_labels=dict(labels))
        if any(key not in labels for key in keys):
            # Go loses the labels on this path: the message always shows an empty map.
            raise _Failed(
                f"topology labels from selected node {gofmt.go_map({})} does not match"
                f" topology keys from CSINode {gofmt.go_list(keys)}"
            )
        return tuple(sorted((key, labels[key]) for key in keys))

    def _aggregate(self, selected: str, selected_keys: tuple[str, ...]) -> list[Term]:
        keys = selected_keys
        if not selected:
            keys = self.memo.topology_keys or self._random_keys()
            if not keys:
                return []  # no node has registered keys: "no available topology found"
        elif not keys:
            raise _Failed(f"no topology key found on CSINode {selected}")
        found = list(self.memo.requisite_terms)
        if not found:
            for node in self.nodes:
                labels = node.get("metadata", {}).get("labels") or {}
                if keys and all(key in labels for key in keys):
                    found.append(tuple(sorted((key, labels[key]) for key in keys)))
            if not found:
                raise _Failed(f"topologyKeys {gofmt.go_list(keys)} were not found on any nodes")
            self._remember(requisite_terms=tuple(found))
        return found

    def _random_keys(self) -> tuple[str, ...]:
        csinodes = list(self.csinodes)
        self.shuffle(csinodes)
        for csinode in csinodes:
            keys = self._driver_keys(csinode)
            if keys:
                self._remember(topology_keys=keys)
                return keys
        return ()


def _by_name(objects: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    return next((o for o in objects if o.get("metadata", {}).get("name") == name), None)


def _check_allowed(selected: str, term: Term, allowed: Sequence[Mapping[str, Any]] | None) -> None:
    if not allowed:
        return
    flat = terms.flatten(allowed)
    if not any(terms.subset(candidate, term) for candidate in flat):
        raise _Failed(
            f"selected node '{gofmt.go_quote(selected)}' topology '{terms.go_term(term)}' is not in"
            f" allowed topologies: {terms.go_terms(flat)}"
        )


def _rotated_to(selected: str, term: Term, requisite: list[Term]) -> list[Term]:
    for index, candidate in enumerate(requisite):
        if terms.subset(candidate, term):
            return requisite[index:] + requisite[:index]
    raise _Failed(
        f"topology {terms.go_term(term)} from selected node {gofmt.go_quote(selected)} is not in"
        f" requisite: {terms.go_terms(requisite)}"
    )
