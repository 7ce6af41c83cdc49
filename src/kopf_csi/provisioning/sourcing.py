"""A new volume's data source: read and check it, protect it, release it.

Clone (a PVC) and restore (a VolumeSnapshot) sources get a protection finalizer before
CreateVolume may use them; a restored snapshot loses it once the PV exists, a cloned PVC once
it is being deleted and no Pending claim clones it (external-provisioner's
CloningProtectionController), and a periodic sweep releases snapshots no claim needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from kopf_csi import kube, names
from kopf_csi.caches import Caches
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import protection, requests, sources
from kopf_csi.provisioning.access import meta as meta_of
from kopf_csi.provisioning.access import replace_finalizers
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.options import ProvisionerOptions
from kopf_csi.provisioning.states import ProvisioningState
from kopf_csi.queueing import DONE, RETRY, Outcome

__all__ = ["Sources"]

RELEASE_ATTEMPTS = 5
"""Guarded finalizer releases lost to a concurrent writer (409/422), re-read and retried."""

log = structlog.get_logger("kopf_csi.provisioning")
Body = Mapping[str, Any]


class Sources:
    """Data sources of new volumes, and their protection finalizers."""

    def __init__(
        self, *, api: kube.KubeClient, caches: Caches, options: ProvisionerOptions
    ) -> None:
        self.api = api
        self.caches = caches
        self.options = options

    async def content_source(
        self, claim: Body, plan: requests.RequestPlan, storage_class: Body
    ) -> csi.VolumeContentSource | None:
        ref = plan.data_source
        if ref is None or plan.source_kind is None:
            return None
        if plan.source_kind is sources.SourceKind.CLONE:
            source_claim = await self.api.get(kube.CLAIMS, ref.name, ref.namespace)
            if source_claim is None:
                raise sources.source_claim_unavailable(ref, claim=claim, error="not found")
            volume_name = source_claim.get("spec", {}).get("volumeName") or ""
            source_volume = await self.api.get(kube.VOLUMES, volume_name) if volume_name else None
            cloned = sources.clone_source(
                claim,
                ref=ref,
                storage_class=storage_class,
                source_claim=source_claim,
                source_volume=source_volume,
            )
            await self._protect(kube.CLAIMS, source_claim, protection.protect_clone_source)
            return cloned
        snapshot = await self.api.get(kube.SNAPSHOTS, ref.name, ref.namespace)
        if snapshot is None:
            raise sources.snapshot_unavailable(ref, error="not found")
        content_name = sources.snapshot_content_name(snapshot)
        content = await self.api.get(kube.SNAPSHOT_CONTENTS, content_name) if content_name else None
        source = sources.snapshot_source(
            claim,
            ref=ref,
            storage_class=storage_class,
            snapshot=snapshot,
            content=content,
            prevent_volume_mode_conversion=self.options.prevent_volume_mode_conversion,
        )
        await self._protect(kube.SNAPSHOTS, snapshot, protection.protect_snapshot_source)
        return source

    async def _protect(self, resource: kube.Resource, obj: Body, change: Any) -> None:
        """Put a source-protection finalizer on the source before CreateVolume may use it."""
        finalizers = change(obj)
        if finalizers is None:
            return
        try:
            await replace_finalizers(self.api, resource, obj, finalizers)
        except kube.KubeError as exc:
            # The source changed under us (422/409) or is gone: retry the claim, fresh.
            raise ProvisioningError(
                f"failed to protect the data source {meta_of(obj).get('name')}: {exc}",
                state=ProvisioningState.NO_CHANGE,
            ) from exc

    async def release_snapshot_source(self, claim: Body) -> None:
        """After the PV is saved, the restored snapshot loses its protection (errors: logged)."""
        ref = sources.data_source(claim)
        if ref is None or ref.kind != names.KIND_VOLUME_SNAPSHOT:
            return
        for _ in range(RELEASE_ATTEMPTS):
            try:
                snapshot = await self.api.get(kube.SNAPSHOTS, ref.name, ref.namespace)
                finalizers = protection.release_snapshot_source(snapshot) if snapshot else None
                if snapshot is not None and finalizers is not None:
                    await replace_finalizers(self.api, kube.SNAPSHOTS, snapshot, finalizers)
            except kube.KubeError as exc:
                if exc.status in (409, 422):  # written meanwhile (the snapshot-controller): again
                    continue
                log.warning("snapshot_release_failed", snapshot=ref.name, error=str(exc))
            except ProvisioningError as exc:
                log.warning("snapshot_release_failed", snapshot=ref.name, error=str(exc))
            return
        log.warning("snapshot_release_failed", snapshot=ref.name, error="conflicts kept coming")

    # -- source protection controllers ---------------------------------------------------------

    async def sync_clone_source(self, key: str) -> Outcome:
        """A deleting source PVC loses cloning-protection once no Pending claim clones it."""
        source = self.caches.claims.get(key)
        if source is None:
            return DONE
        finalizers = protection.release_clone_source(source, claims=self.caches.claims)
        if finalizers is None:
            if meta_of(source).get("deletionTimestamp") and names.FINALIZER_CLONING_PROTECTION in (
                meta_of(source).get("finalizers") or ()
            ):
                return RETRY  # a clone is still pending: look again later
            return DONE
        try:
            updated = await replace_finalizers(self.api, kube.CLAIMS, source, finalizers)
        except kube.KubeError as exc:
            log.warning("clone_source_release_failed", obj=source, error=str(exc))
            return RETRY
        self.caches.claims.store(updated)
        return DONE

    async def sweep_snapshot_sources(self) -> int:
        """Remove snapshot-as-source protection that no pending claim needs (upstream #1458)."""
        pending = protection.pending_snapshot_keys(self.caches.claims)
        released = 0
        for snapshot in await self.api.list(kube.SNAPSHOTS):
            finalizers = protection.release_orphaned_snapshot(snapshot, pending=pending)
            if finalizers is None:
                continue
            try:
                await replace_finalizers(self.api, kube.SNAPSHOTS, snapshot, finalizers)
                released += 1
            except kube.KubeError as exc:
                log.warning("snapshot_release_failed", snapshot=meta_of(snapshot).get("name"),
                            error=str(exc))  # fmt: skip
        return released
