"""A new volume's data source: read and check it, protect it, release it.

Clone (a PVC) and restore (a VolumeSnapshot) sources get a protection finalizer before
CreateVolume may use them, and before anything else that can fail (the provisioner secret is
read after them, as external-provisioner's `prepareProvision` does), so a claim that waits and
retries keeps its source protected. A restored snapshot loses it once the PV exists or the
restoring claim is gone (and no other pending claim restores it), a cloned PVC once it is being
deleted and no Pending claim clones it (external-provisioner's CloningProtectionController),
and a periodic sweep releases snapshots no claim needs. Every finalizer write re-reads and
tries again on a lost race (`access.update_finalizers`).
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
from kopf_csi.provisioning.access import update_finalizers
from kopf_csi.provisioning.errors import ProvisioningError
from kopf_csi.provisioning.options import ProvisionerOptions
from kopf_csi.provisioning.states import ProvisioningState
from kopf_csi.queueing import DONE, RETRY, Outcome

__all__ = ["SNAPSHOT_KEY_PREFIX", "Sources"]

SNAPSHOT_KEY_PREFIX = "snapshot:"
"""Keys of the sources queue: `<namespace>/<claim>` for a clone source, this prefix and
`<namespace>/<snapshot>` for a snapshot whose restoring claim went away."""

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
            try:
                source_claim = await self.api.read(kube.CLAIMS, ref.name, ref.namespace)
            except kube.NotFoundError:
                # Go reads the claim from its informer: the lister's text, not the server's.
                error = sources.claim_not_found(ref.name)
                raise sources.source_claim_unavailable(ref, claim=claim, error=error) from None
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
        try:
            snapshot = await self.api.read(kube.SNAPSHOTS, ref.name, ref.namespace)
        except kube.NotFoundError as exc:  # Go asks the API server: its own text
            raise sources.snapshot_unavailable(ref, error=exc.message) from None
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
        try:
            protected = await update_finalizers(self.api, resource, obj, change)
        except kube.KubeError as exc:
            raise ProvisioningError(
                f"failed to protect the data source {meta_of(obj).get('name')}: {exc}",
                state=ProvisioningState.NO_CHANGE,
            ) from exc
        if protected is None:
            raise ProvisioningError(
                f"failed to protect the data source {meta_of(obj).get('name')}: it is gone",
                state=ProvisioningState.NO_CHANGE,
            )

    async def release_snapshot_source(self, claim: Body) -> None:
        """After the PV is saved, the restored snapshot loses its protection (errors: logged)."""
        ref = sources.data_source(claim)
        if ref is None or ref.kind != names.KIND_VOLUME_SNAPSHOT:
            return
        try:
            snapshot = await self.api.get(kube.SNAPSHOTS, ref.name, ref.namespace)
            if snapshot is not None:
                await update_finalizers(
                    self.api, kube.SNAPSHOTS, snapshot, protection.release_snapshot_source
                )
        except (kube.KubeError, ProvisioningError) as exc:
            log.warning("snapshot_release_failed", snapshot=ref.name, error=str(exc))

    # -- source protection controllers ---------------------------------------------------------

    async def sync_source(self, key: str) -> Outcome:
        """The sources queue: a clone's source PVC, or a snapshot a deleted claim restored."""
        if key.startswith(SNAPSHOT_KEY_PREFIX):
            return await self.sync_snapshot_source(key.removeprefix(SNAPSHOT_KEY_PREFIX))
        return await self.sync_clone_source(key)

    async def sync_snapshot_source(self, key: str) -> Outcome:
        """A restoring claim is gone: its snapshot loses the protection no pending claim needs."""
        namespace, _, name = key.partition("/")
        pending = protection.pending_snapshot_keys(self.caches.claims)

        def release(snapshot: Body) -> list[str] | None:
            return protection.release_orphaned_snapshot(snapshot, pending=pending)

        try:
            snapshot = await self.api.get(kube.SNAPSHOTS, name, namespace)
            if snapshot is not None:
                await update_finalizers(self.api, kube.SNAPSHOTS, snapshot, release)
        except kube.KubeError as exc:
            log.warning("snapshot_release_failed", snapshot=key, error=str(exc))
            return RETRY
        return DONE

    async def sync_clone_source(self, key: str) -> Outcome:
        """A deleting source PVC loses cloning-protection once no Pending claim clones it."""
        source = self.caches.claims.get(key)
        if source is None:
            return DONE
        claims = self.caches.claims

        def release(claim: Body) -> list[str] | None:
            return protection.release_clone_source(claim, claims=claims)

        try:
            updated = await update_finalizers(self.api, kube.CLAIMS, source, release)
        except kube.KubeError as exc:
            log.warning("clone_source_release_failed", obj=source, error=str(exc))
            return RETRY
        if updated is None:
            return DONE
        self.caches.claims.store(updated)
        if meta_of(updated).get("deletionTimestamp") and names.FINALIZER_CLONING_PROTECTION in (
            meta_of(updated).get("finalizers") or ()
        ):
            return RETRY  # a clone is still pending: look again later
        return DONE

    async def sweep_snapshot_sources(self) -> int:
        """Remove snapshot-as-source protection that no pending claim needs (upstream #1458)."""
        pending = protection.pending_snapshot_keys(self.caches.claims)
        released = 0

        def release(snapshot: Body) -> list[str] | None:
            return protection.release_orphaned_snapshot(snapshot, pending=pending)

        for snapshot in await self.api.list(kube.SNAPSHOTS):
            if release(snapshot) is None:
                continue
            try:
                await update_finalizers(self.api, kube.SNAPSHOTS, snapshot, release)
                released += 1
            except kube.KubeError as exc:
                log.warning("snapshot_release_failed", snapshot=meta_of(snapshot).get("name"),
                            error=str(exc))  # fmt: skip
        return released
