"""Finalizers that protect a clone's source PVC and a restore's source VolumeSnapshot.

While a volume is being created from a source, the source must not vanish. external-provisioner
puts `provisioner.storage.kubernetes.io/cloning-protection` on a source PVC before CreateVolume
and removes it (once the source is being deleted) when no Pending claim in the namespace still
clones it. It puts `.../volumesnapshot-as-source-protection` on a source VolumeSnapshot, removes
it after the PV is made, and a periodic sweep removes it from snapshots that no pending claim
restores any more (a crash or a deleted claim would otherwise leave it forever).

Each function returns the new finalizer list, or None when nothing needs to change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kopf_csi import names

__all__ = [
    "add_finalizer",
    "clone_in_progress",
    "pending_snapshot_keys",
    "protect_clone_source",
    "protect_snapshot_source",
    "release_clone_source",
    "release_orphaned_snapshot",
    "release_snapshot_source",
    "remove_finalizer",
]


def _finalizers(obj: Mapping[str, Any]) -> list[str]:
    return list(obj.get("metadata", {}).get("finalizers") or ())


def add_finalizer(finalizers: Sequence[str], finalizer: str) -> list[str] | None:
    """The list with `finalizer` appended, or None if it is there already."""
    return None if finalizer in finalizers else [*finalizers, finalizer]


def remove_finalizer(finalizers: Sequence[str], finalizer: str) -> list[str] | None:
    """The list without `finalizer` (every copy), or None if it is not there."""
    return [f for f in finalizers if f != finalizer] if finalizer in finalizers else None


def protect_clone_source(source_claim: Mapping[str, Any]) -> list[str] | None:
    """Before cloning: the source PVC gets the cloning-protection finalizer."""
    return add_finalizer(_finalizers(source_claim), names.FINALIZER_CLONING_PROTECTION)


def clone_in_progress(
    source_claim: Mapping[str, Any], *, claims: Iterable[Mapping[str, Any]]
) -> str | None:
    """Why the finalizer must stay: a Pending claim in the namespace still clones the source."""
    source_meta = source_claim.get("metadata", {})
    for claim in claims:
        meta, spec = claim.get("metadata", {}), claim.get("spec", {})
        source = spec.get("dataSource") or {}
        if (
            meta.get("namespace") == source_meta.get("namespace")
            and source.get("kind") == names.KIND_PERSISTENT_VOLUME_CLAIM
            and source.get("name") == source_meta.get("name")
            and (claim.get("status") or {}).get("phase") == "Pending"
        ):
            return names.MESSAGE_CLONE_IN_PROGRESS.format(claim=meta.get("name", ""))
    return None


def release_clone_source(
    source_claim: Mapping[str, Any], *, claims: Iterable[Mapping[str, Any]]
) -> list[str] | None:
    """A deleted source PVC loses the finalizer once no pending clone needs it (else: retry)."""
    if not source_claim.get("metadata", {}).get("deletionTimestamp"):
        return None
    if names.FINALIZER_CLONING_PROTECTION not in _finalizers(source_claim):
        return None
    if clone_in_progress(source_claim, claims=claims) is not None:
        return None
    return remove_finalizer(_finalizers(source_claim), names.FINALIZER_CLONING_PROTECTION)


def protect_snapshot_source(snapshot: Mapping[str, Any]) -> list[str] | None:
    """Before restoring: the VolumeSnapshot gets the source-protection finalizer."""
    return add_finalizer(_finalizers(snapshot), names.FINALIZER_SNAPSHOT_SOURCE_PROTECTION)


def release_snapshot_source(snapshot: Mapping[str, Any]) -> list[str] | None:
    """After the PV is made: the finalizer goes (a failure here is only logged upstream)."""
    return remove_finalizer(_finalizers(snapshot), names.FINALIZER_SNAPSHOT_SOURCE_PROTECTION)


def _snapshot_reference(reference: Mapping[str, Any] | None) -> bool:
    return (
        reference is not None
        and reference.get("kind") == names.KIND_VOLUME_SNAPSHOT
        and reference.get("apiGroup") in (None, names.SNAPSHOT_API_GROUP)
    )


def pending_snapshot_keys(claims: Iterable[Mapping[str, Any]]) -> set[str]:
    """`namespace/name` of every snapshot a not-yet-bound claim restores from."""
    keys: set[str] = set()
    for claim in claims:
        if (claim.get("status") or {}).get("phase") not in (None, "", "Pending"):
            continue
        namespace, spec = claim.get("metadata", {}).get("namespace", ""), claim.get("spec", {})
        if _snapshot_reference(spec.get("dataSource")):
            keys.add(f"{namespace}/{spec['dataSource'].get('name', '')}")
        elif _snapshot_reference(spec.get("dataSourceRef")):
            ref = spec["dataSourceRef"]
            keys.add(f"{ref.get('namespace') or namespace}/{ref.get('name', '')}")
    return keys


def release_orphaned_snapshot(
    snapshot: Mapping[str, Any], *, pending: set[str]
) -> list[str] | None:
    """The sweep: a protected snapshot that no pending claim restores loses the finalizer."""
    meta = snapshot.get("metadata", {})
    if f"{meta.get('namespace', '')}/{meta.get('name', '')}" in pending:
        return None
    return release_snapshot_source(snapshot)
