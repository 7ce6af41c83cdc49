"""Topology terms: a segment set (`(key, value)` pairs, sorted), as `topology.go` handles them.

allowedTopologies are flattened into terms; terms are compared, de-duplicated and rotated, and
printed in errors the way Go prints its `topologyTerm` slices (`[{zone a} {rack 1}]`). The
StatefulSet spreading hash (FNV-1 of the set's name, plus the ordinal) lives here too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import gofmt

__all__ = [
    "Segment",
    "Term",
    "flatten",
    "fnv1_32",
    "go_term",
    "go_terms",
    "sorted_unique",
    "statefulset_hash",
    "subset",
    "to_csi",
]

Segment = tuple[str, str]
Term = tuple[Segment, ...]
"""Sorted by key, then value: the Go `topologyTerm` after its `sort()`."""

_DIGITS = re.compile(r"[0-9]+")
_UINT32 = 0xFFFFFFFF


def flatten(allowed_topologies: Sequence[Mapping[str, Any]] | None) -> list[Term]:
    """allowedTopologies as OR-ed terms: each term's per-key value lists are distributed out."""
    terms: list[Term] = []
    for selector in allowed_topologies or ():  # OR
        old: list[tuple[Segment, ...]] = []
        for expression in selector.get("matchLabelExpressions") or ():  # AND
            key, new = expression.get("key", ""), list[tuple[Segment, ...]]()
            for value in expression.get("values") or ():  # OR
                new.extend([(*term, (key, value)) for term in old] if old else [((key, value),)])
            old = new  # Go quirk kept: an empty value list restarts the distribution
        terms.extend(old)
    return [tuple(sorted(term)) for term in terms]


def subset(term: Term, other: Term) -> bool:
    """Every segment of `term` is in `other` (both sorted): Go's `topologyTerm.subset`."""
    if not term:
        return True
    j = 0
    for key, value in other:
        if term[j][0] != key:
            continue
        if term[j][1] != value:
            return False
        j += 1
        if j == len(term):
            return True
    return False


def sorted_unique(terms: list[Term]) -> list[Term]:
    """Go sorts terms by length, then segment by segment, and drops adjacent duplicates."""
    result: list[Term] = []
    for term in sorted(terms, key=lambda term: (len(term), term)):
        if not result or result[-1] != term:
            result.append(term)
    return result


def to_csi(terms: list[Term]) -> list[csi.Topology]:
    return [csi.Topology(segments=dict(term)) for term in terms if term]


def go_term(term: Term) -> str:
    return gofmt.go_list(f"{{{key} {value}}}" for key, value in term)


def go_terms(terms: Iterable[Term]) -> str:
    return gofmt.go_list(go_term(term) for term in terms)


def statefulset_hash(claim_name: str, random_hash: Callable[[], int]) -> tuple[int, int]:
    """Go's `getPVCNameHashAndIndexOffset`: hash `<set>` of `<claim>-<set>-<N>`, offset N."""
    if not claim_name:
        return random_hash() & _UINT32, 0
    hashed, index = claim_name, 0
    head, dash, tail = claim_name.rpartition("-")
    if dash and _DIGITS.fullmatch(tail) and int(tail) <= _UINT32:
        index, hashed = int(tail), head
        hashed = hashed.rpartition("-")[2]
    return fnv1_32(hashed.encode()), index


def fnv1_32(data: bytes) -> int:
    """FNV-1 (not FNV-1a), 32 bits: Go's `hash/fnv.New32`."""
    value = 0x811C9DC5
    for byte in data:
        value = (value * 0x01000193) & _UINT32
        value ^= byte
    return value
