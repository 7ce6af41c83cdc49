"""The attacher's operations: attach, detach, release a PV, reconcile with the driver.

Async orchestration only, the port of external-attacher's `csiHandler` and `trivialHandler`:
each step reads (the caches, as the Go code reads its listers; the API for secrets), calls a
pure function from this package, calls the driver, writes. Each `sync_*` returns a
`queueing.Outcome`; the queues (`handlers/attacher.py`) do the retrying. No kopf here.

Attach and detach run in two queues, so one VA could be in both at once (an attach still
running when the VA is deleted). A per-VA lock keeps them apart, as upstream's single queue
does: the detach waits for the attach to finish, then reads the VA again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
from collections.abc import AsyncIterator, Mapping
from typing import Any

import structlog

from kopf_csi import kube, logs, names
from kopf_csi.attaching import decisions, requests
from kopf_csi.attaching.errors import AttachError, error_text, is_final
from kopf_csi.attaching.options import AttacherOptions
from kopf_csi.caches import Caches
from kopf_csi.csi import CSIClient, CSIError, DriverInfo
from kopf_csi.queueing import DONE, RETRY, Outcome

UNPUBLISHED_REMEMBERED = 10_000

__all__ = ["Attacher", "is_trivial"]

log = structlog.get_logger("kopf_csi.attacher")
Body = Mapping[str, Any]


def is_trivial(driver: DriverInfo) -> bool:
    """No CONTROLLER_SERVICE or no PUBLISH_UNPUBLISH_VOLUME: only mark VAs attached (main.go)."""
    publishes = driver.has_controller("PUBLISH_UNPUBLISH_VOLUME")
    return not (driver.has_plugin("CONTROLLER_SERVICE") and publishes)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Attacher:
    """The attacher's state and its operations on VolumeAttachments and PVs."""

    def __init__(
        self,
        *,
        csi_client: CSIClient,
        api: kube.KubeClient,
        caches: Caches,
        driver: DriverInfo,
        options: AttacherOptions,
    ) -> None:
        self.csi = csi_client
        self.api = api
        self.caches = caches
        self.driver = driver
        self.options = options
        self.finalizer = decisions.finalizer_name(driver.name)
        self.trivial = is_trivial(driver)
        self.publish_readonly = driver.has_controller("PUBLISH_READONLY")
        self.single_node_multi_writer = driver.has_controller("SINGLE_NODE_MULTI_WRITER")
        self.can_reconcile = (
            not self.trivial
            and driver.has_controller("LIST_VOLUMES")
            and driver.has_controller("LIST_VOLUMES_PUBLISHED_NODES")
        )
        self.force_sync: set[str] = set()
        self.unpublished: collections.OrderedDict[str, None] = collections.OrderedDict()
        """UIDs of VAs whose ControllerUnpublish succeeded and whose writes are not done."""
        self.published: collections.OrderedDict[str, dict[str, str]] = collections.OrderedDict()
        """Publish contexts by VA UID, of VAs whose ControllerPublish succeeded and whose status
        write met an outage: the next attempt writes it without publishing again."""
        """VAs the reconciler found out of sync: attach or detach them even if done (forceSync)."""
        self._seen: dict[str, Body] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._lock_users: collections.Counter[str] = collections.Counter()

    # -- watch events --------------------------------------------------------------------------

    def observe(self, va: Body, *, deleted: bool = False) -> decisions.Route:
        """A watch event of a VA: where it goes (remembering it for the next event's filter)."""
        name = str(va["metadata"]["name"])
        if deleted:
            self._seen.pop(name, None)
            self.force_sync.discard(name)
            return decisions.Route.IGNORE
        target = decisions.route(va, driver=self.driver.name, trivial=self.trivial)
        if target is decisions.Route.IGNORE:
            return target
        previous, self._seen[name] = self._seen.get(name), va
        if not decisions.should_enqueue_change(previous, va):
            log.debug("attachment_change_ignored", attachment=name)
            return decisions.Route.IGNORE
        return target

    def route(self, name: str) -> decisions.Route:
        """The queue for a cached VA now (for the reconciler and the start-up)."""
        va = self.caches.attachments.get(name)
        if va is None:
            return decisions.Route.IGNORE
        return decisions.route(va, driver=self.driver.name, trivial=self.trivial)

    # -- attach --------------------------------------------------------------------------------

    async def sync_attach(self, name: str) -> Outcome:
        async with self._exclusive(name):
            va = self.caches.attachments.get(name)
            if va is None or not decisions.is_ours(va, self.driver.name):
                return DONE
            with logs.bound_object(va, kind="VolumeAttachment"):
                if self.trivial:
                    return await self._mark_trivially_attached(va)
                if decisions.is_deleting(va):
                    return DONE  # the detach queue has it
                return await self._sync_attach(name, va)

    async def _sync_attach(self, name: str, va: Body) -> Outcome:
        forced = name in self.force_sync
        self.force_sync.discard(name)
        if not forced and (va.get("status") or {}).get("attached"):
            self.published.pop(va["metadata"].get("uid", ""), None)
            return DONE
        uid = va["metadata"].get("uid", "")
        publish_context = None if forced else self.published.pop(uid, None)
        try:
            if publish_context is None:
                va, publish_context = await self._attach(va)
        except (AttachError, CSIError) as exc:
            if kube.is_unavailable(exc):  # the outage is told once; no status error for it
                log.debug("attach_failed", error=error_text(exc))
                return RETRY
            log.warning("attach_failed", error=error_text(exc), final=is_final(exc))
            await self._save_error(va, "attachError", exc)
            return RETRY
        try:
            await self._patch_status(va, decisions.attached_status(publish_context))
        except kube.KubeError as exc:
            if kube.is_unavailable(exc):  # published: only the status is left to write
                self.published[uid] = publish_context
                while len(self.published) > UNPUBLISHED_REMEMBERED:
                    self.published.popitem(last=False)
                log.debug("attach_not_recorded", error=str(exc))
                return RETRY
            log.warning("attach_not_recorded", error=f"failed to mark as attached: {exc.message}")
            return RETRY
        log.info("volume_attached", node=(va.get("spec") or {}).get("nodeName"))
        return DONE

    async def _attach(self, va: Body) -> tuple[Body, dict[str, str]]:
        """`csiAttach`: every check that can fail comes before the VA gets our finalizer."""
        spec, pv = decisions.volume_spec(va, self.caches.volumes.get)
        if pv is not None:
            if decisions.is_deleting(pv):
                raise AttachError(names.MESSAGE_PV_DELETING.format(volume=pv["metadata"]["name"]))
            await self._add_volume_finalizer(pv)
        requests.volume_capability_for(
            spec,
            single_node_multi_writer=self.single_node_multi_writer,
            default_fstype=self.options.default_fstype,
        )
        secrets = await self._secrets(spec)
        node_id = self._node_id(va, fallback=False)
        va = await self._prepare(va, node_id)
        request = requests.publish_request(
            spec,
            node_id=node_id,
            secrets=secrets,
            publish_readonly=self.publish_readonly,
            single_node_multi_writer=self.single_node_multi_writer,
            default_fstype=self.options.default_fstype,
        )
        response = await self.csi.controller_publish_volume(request, timeout=self.options.timeout)
        return va, dict(response.publish_context)

    async def _add_volume_finalizer(self, pv: Body) -> None:
        try:
            updated = await self._patch(
                kube.VOLUMES, pv, decisions.add_finalizer_patch(pv, self.finalizer)
            )
        except kube.KubeError as exc:
            raise AttachError(names.MESSAGE_PV_FINALIZER_FAILED.format(error=exc.message)) from exc
        if updated is not None:
            self.caches.volumes.store(updated)

    async def _prepare(self, va: Body, node_id: str) -> Body:
        """The finalizer and the node-ID annotation, saved before ControllerPublish."""
        patch = decisions.va_metadata_patch(va, finalizer=self.finalizer, node_id=node_id)
        try:
            updated = await self._patch(kube.VOLUME_ATTACHMENTS, va, patch)
        except kube.KubeError as exc:
            raise AttachError(names.MESSAGE_VA_SAVE_FAILED.format(error=exc.message)) from exc
        if updated is None:  # nothing to write
            return va
        self.caches.attachments.store(updated)
        return updated

    async def _mark_trivially_attached(self, va: Body) -> Outcome:
        """`trivialHandler`: attached, no metadata, no finalizer, no RPC."""
        if (va.get("status") or {}).get("attached"):
            return DONE
        try:
            await self._patch_status(va, decisions.attached_status(None))
        except kube.KubeError as exc:
            log.warning("attach_not_recorded", error=str(exc))
            return RETRY
        log.info("volume_attached_trivially")
        return DONE

    # -- detach --------------------------------------------------------------------------------

    async def sync_detach(self, name: str) -> Outcome:
        async with self._exclusive(name):
            va = self.caches.attachments.get(name)
            if va is None or not decisions.is_ours(va, self.driver.name) or self.trivial:
                return DONE
            if not decisions.is_deleting(va):
                return DONE  # the attach queue has it
            forced = name in self.force_sync
            self.force_sync.discard(name)
            if not forced and not decisions.has_finalizer(va, self.finalizer):
                return DONE  # already detached
            with logs.bound_object(va, kind="VolumeAttachment"):
                try:
                    await self._detach(va)
                except (AttachError, CSIError) as exc:
                    if kube.is_unavailable(exc):  # the outage is told once; no status error
                        log.debug("detach_failed", error=error_text(exc))
                        return RETRY
                    log.warning("detach_failed", error=error_text(exc), final=is_final(exc))
                    await self._save_error(va, "detachError", exc)
                    return RETRY
                log.info("volume_detached")
                return DONE

    async def _detach(self, va: Body) -> None:
        """`csiDetach`: ControllerUnpublish, then the finalizer goes first, the status after.

        A VA whose ControllerUnpublish succeeded is not unpublished again by a retry that only
        has the writes left to do (`unpublished`, by uid).
        """
        uid = va["metadata"].get("uid", "")
        if uid not in self.unpublished:
            spec, _ = decisions.volume_spec(va, self.caches.volumes.get)
            requests.csi_source(spec)
            secrets = await self._secrets(spec)
            node_id = self._node_id(va, fallback=True)
            request = requests.unpublish_request(spec, node_id=node_id, secrets=secrets)
            await self.csi.controller_unpublish_volume(request, timeout=self.options.timeout)
            self.unpublished[uid] = None
            while len(self.unpublished) > UNPUBLISHED_REMEMBERED:
                self.unpublished.popitem(last=False)
        try:
            await self._mark_detached(va)
        except kube.KubeError as exc:
            raise AttachError(f"could not mark as detached: {exc.message}") from exc
        self.unpublished.pop(uid, None)

    async def _mark_detached(self, va: Body) -> None:
        """`markAsDetached`: the finalizer first, so that a VA without it counts as detached.

        The other order would leave a VA with the finalizer and `attached: false`, which reads
        as "a timed-out attach" and costs a second ControllerUnpublish. The status patch is
        skipped when removing the finalizer deleted the VA (upstream sends it and gets 404).
        """
        patch = decisions.remove_finalizer_patch(va, self.finalizer)
        if patch is None and not (va.get("status") or {}).get("attached"):
            return
        if patch is not None:
            try:
                patched = await self._patch(kube.VOLUME_ATTACHMENTS, va, patch)
            except kube.NotFoundError:
                # Gone: e.g. our earlier finalizer removal went through but its answer was
                # lost, or it went while no watch saw it (a restart). A cached copy would keep
                # its PV "still attached" for the provisioner forever (chaos suite).
                self.caches.attachments.remove(va)
                return
            va = patched or va
            if decisions.is_deleted(va):
                self.caches.attachments.deleted(va)
                return
            self.caches.attachments.store(va)
        # NotFound: deleted by the API server as soon as its last finalizer went.
        with contextlib.suppress(kube.NotFoundError):
            await self._patch_status(va, decisions.detached_status())

    # -- the PV finalizer ----------------------------------------------------------------------

    async def sync_volume(self, name: str) -> Outcome:
        """Remove our PV finalizer once the PV is deleting and no VA references it."""
        pv = self.caches.volumes.get(name)
        if pv is None:
            return DONE
        releasable = decisions.should_release_volume(
            pv, finalizer=self.finalizer, attachments=self.caches.attachments.indexed(name)
        )
        if not releasable:
            return DONE
        try:
            updated = await self._patch(
                kube.VOLUMES, pv, decisions.remove_finalizer_patch(pv, self.finalizer)
            )
        except kube.NotFoundError:
            return DONE
        except kube.KubeError as exc:
            log.warning("volume_finalizer_not_removed", obj=pv, error=str(exc))
            return RETRY
        if updated is None:
            return DONE
        if decisions.is_deleted(updated):
            self.caches.volumes.deleted(updated)
        else:
            self.caches.volumes.store(updated)
        log.info("volume_finalizer_removed", obj=pv)
        return DONE

    async def _patch(
        self, resource: kube.Resource, obj: Body, patch: decisions.StrategicPatch | None
    ) -> Body | None:
        """Send a strategic merge patch of `obj` (None: nothing to send) and return the answer.

        No resourceVersion: the attacher's patches (`decisions`) add or remove single items,
        which the server merges into what it holds, so there is no race to lose. NotFoundError
        when the object is gone.
        """
        if patch is None:
            return None
        name = obj["metadata"]["name"]
        return await self.api.patch(resource, name, patch, patch_type="strategic")

    # -- reconciliation ------------------------------------------------------------------------

    async def reconcile(self) -> decisions.ReconcilePlan:
        """`ReconcileVA`: compare ListVolumes' published nodes with the VAs' `attached`.

        The VAs found out of sync are marked for a forced sync; the caller queues them.
        """
        published: dict[str, list[str]] = {}
        async for entry in self.csi.iter_volumes(
            max_entries=self.options.max_entries, timeout=self.options.timeout
        ):
            if entry.volume is not None:
                nodes = entry.status.published_node_ids if entry.status is not None else []
                published[entry.volume.volume_id] = list(nodes)
        handles = [
            str(source.get("volumeHandle"))
            for pv in self.caches.volumes
            if (source := (pv.get("spec") or {}).get("csi") or {}).get("driver") == self.driver.name
        ]
        plan = decisions.reconcile(
            driver=self.driver.name,
            attachments=self.caches.attachments,
            volumes=self.caches.volumes.get,
            csinodes=self.caches.csinodes.get,
            published=published,
            known_handles=handles,
        )
        for name in plan.resync:
            log.warning("attachment_out_of_sync", attachment=name)
            self.force_sync.add(name)
        for handle, node in plan.unexpected:
            log.warning("volume_published_without_attachment", volume_id=handle, node_id=node)
        return plan

    # -- shared steps --------------------------------------------------------------------------

    def _node_id(self, va: Body, *, fallback: bool) -> str:
        node_name = str((va.get("spec") or {}).get("nodeName") or "")
        return decisions.node_id(
            driver=self.driver.name,
            node_name=node_name,
            csinode=self.caches.csinodes.get(node_name),
            va=va if fallback else None,
        )

    async def _secrets(self, spec: Body) -> dict[str, str]:
        """`getCredentialsFromPV`: the controller-publish secret's data, or nothing."""
        ref = requests.publish_secret_ref(spec)
        if ref is None:
            return {}
        cause: Exception | None = None
        try:
            secret = await self.api.get(kube.SECRETS, ref.name, ref.namespace)
        except kube.KubeError as exc:
            secret, error, cause = None, exc.message, exc
        else:
            error = names.MESSAGE_SECRET_NOT_FOUND.format(name=ref.name)
        if secret is not None:
            try:
                return kube.decode_secret_data(secret)
            except ValueError as exc:
                error = str(exc)
        message = names.MESSAGE_SECRET_LOAD_FAILED.format(
            namespace=ref.namespace, name=ref.name, error=error
        )
        raise AttachError(message) from cause  # an outage stays one (`kube.is_unavailable`)

    async def _patch_status(self, va: Body, patch: Mapping[str, Any]) -> None:
        try:
            updated = await self.api.patch(
                kube.VOLUME_ATTACHMENTS, va["metadata"]["name"], patch, subresource="status"
            )
        except kube.NotFoundError:
            self.caches.attachments.remove(va)  # gone: never keep a ghost (see _mark_detached)
            raise
        self.caches.attachments.store(updated)

    async def _save_error(self, va: Body, field: str, error: BaseException) -> None:
        """`saveAttachError`/`saveDetachError`; a failure to save is only logged."""
        try:
            await self._patch_status(va, decisions.error_status(field, error, now=_now()))
        except kube.KubeError as exc:
            log.warning("error_not_saved", field=field, error=str(exc))

    @contextlib.asynccontextmanager
    async def _exclusive(self, name: str) -> AsyncIterator[None]:
        """One operation per VA at a time, across the attach and detach queues."""
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        self._lock_users[name] += 1
        try:
            async with lock:
                yield
        finally:
            self._lock_users[name] -= 1
            if not self._lock_users[name]:
                del self._lock_users[name]
                del self._locks[name]
