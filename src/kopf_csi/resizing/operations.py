"""The resize controller's operations: read the caches, call the driver, write claim and PV.

The port of external-resizer's `resizeController.syncPVC` and `expandAndRecover`
(controller.go, expand_and_recover.go, resize_status.go) and of its two resizers: the CSI one
(ControllerExpandVolume) and the trivial one (no RPC, for drivers that expand only on the
node). Each `sync_claim` returns a `queueing.Outcome`; the queue does the retrying. No kopf.

In memory, as upstream: the claims whose last RPC failed finally (`final_errors`), with an
infeasible error (`slow`), or with "volume in use" (`in_use`). A restart forgets them; the
claim's status (`allocatedResourceStatuses`) carries what must survive.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from kopf_csi import events, kube, logs, names
from kopf_csi.caches import Cache, Caches
from kopf_csi.csi import CSIClient, CSIError, DriverInfo
from kopf_csi.csi import messages as csi
from kopf_csi.provisioning.capabilities import AccessModeError, volume_capability
from kopf_csi.provisioning.quantities import format_binary_si
from kopf_csi.queueing import DONE, RETRY, Outcome, retry_after
from kopf_csi.resizing import decisions, inuse, status
from kopf_csi.resizing.errors import ResizeError, error_text, is_final, is_in_use, is_infeasible
from kopf_csi.resizing.modes import ResizeMode
from kopf_csi.resizing.options import ResizerOptions
from kopf_csi.resizing.slowset import SlowSet
from kopf_csi.resizing.writes import patch_claim_status

__all__ = ["PODS", "Resizer"]

log = structlog.get_logger("kopf_csi.resizer")
Body = Mapping[str, Any]
PODS = kube.Resource("", "v1", "pods", namespaced=True)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Resizer:
    """The resize controller's state and its operation on one claim."""

    def __init__(
        self,
        *,
        csi_client: CSIClient,
        api: kube.KubeClient,
        caches: Caches,
        recorder: events.Recorder,
        driver: DriverInfo,
        mode: ResizeMode,
        options: ResizerOptions,
    ) -> None:
        self.csi = csi_client
        self.api = api
        self.caches = caches
        self.recorder = recorder
        self.driver = driver
        self.mode = mode
        self.options = options
        self.claims = Cache()
        """Claims with a resize requested or under way (bound claims at rest are not kept)."""
        self.slow = SlowSet(options.retry_interval_max)
        self.final_errors: set[str] = set()
        self.in_use: dict[str, str] = {}
        """Claims whose volume was "in use" for an offline-only driver, by key: their PV."""
        self._seen: dict[str, tuple[Any, ...]] = {}

    # -- watch events --------------------------------------------------------------------------

    def observe(self, claim: Body, *, deleted: bool = False) -> bool:
        """A watch event of a claim: keep it if it has resize work, say whether to queue it.

        Upstream queues a claim when its request grew, its resizer annotation changed, its
        capacity grew, or on resync. With recovery, a lowered request counts too.
        """
        key = decisions.claim_key(claim)
        if deleted:
            self.forget(key)
            return False
        if decisions.has_pending_resize(claim) or self._pre_resize_pending(claim):
            self.claims.store(claim)
        else:
            self.claims.remove(claim)
            self._seen.pop(key, None)
            return False
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        fingerprint = (
            decisions.request(claim),
            decisions.capacity(claim),
            annotations.get(names.ANN_STORAGE_RESIZER),
            (claim.get("status") or {}).get("phase"),
        )
        previous, self._seen[key] = self._seen.get(key), fingerprint
        return previous != fingerprint

    def forget(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        self.claims.remove({"metadata": {"namespace": namespace, "name": name}})
        self._seen.pop(key, None)
        self.slow.remove(key)
        self.final_errors.discard(key)
        self.in_use.pop(key, None)

    def claims_of_volume(self, volume: str) -> list[str]:
        """Queued-worthy claims bound to this PV (for PV and VA events)."""
        return [
            decisions.claim_key(claim)
            for claim in self.claims
            if (claim.get("spec") or {}).get("volumeName") == volume
        ]

    def pending(self) -> list[str]:
        """Every kept claim that still needs a resize (the resync)."""
        return [decisions.claim_key(c) for c in self.claims if decisions.needs_resize(c)]

    def _pre_resize_pending(self, claim: Body) -> bool:
        name = (claim.get("spec") or {}).get("volumeName")
        pv = self.caches.volumes.get(name) if name else None
        annotations = ((pv or {}).get("metadata") or {}).get("annotations") or {}
        return names.ANN_PRE_RESIZE_CAPACITY in annotations

    # -- the sync ------------------------------------------------------------------------------

    async def sync_claim(self, key: str) -> Outcome:
        claim = self.claims.get(key)
        volume_name = ((claim or {}).get("spec") or {}).get("volumeName")
        if claim is None or not volume_name:
            return DONE
        pv = self.caches.volumes.get(volume_name)
        if pv is None:
            log.info("resize_volume_missing", claim=key, volume=volume_name)
            return DONE  # the PV's watch event re-queues the claim
        with logs.bound_object(claim, kind="PersistentVolumeClaim"):
            try:
                await self._clear_pre_resize_capacity(claim, pv)
            except kube.KubeError as exc:
                log.warning("pre_resize_annotation_not_removed", error=str(exc))
                return RETRY
            if not decisions.needs_resize(claim):
                if not decisions.has_pending_resize(claim) and not self._pre_resize_pending(claim):
                    self.claims.remove(claim)
                return DONE
            return await self._expand_and_recover(key, claim, pv)

    async def _clear_pre_resize_capacity(self, claim: Body, pv: Body) -> None:
        """`deletePreResizeCapAnnotation` once kubelet has caught the claim up with the PV."""
        annotations = (pv.get("metadata") or {}).get("annotations") or {}
        if names.ANN_PRE_RESIZE_CAPACITY not in annotations:
            return
        if not decisions.is_ours(pv, self.driver.name):
            return
        if not decisions.node_expand_complete(claim, pv):
            return
        patch = status.without_pre_resize_annotation()
        self.caches.volumes.store(await self.api.patch(kube.VOLUMES, pv["metadata"]["name"], patch))
        log.info("pre_resize_annotation_removed", volume=pv["metadata"]["name"])

    async def _expand_and_recover(self, key: str, claim: Body, pv: Body) -> Outcome:
        slow = self.slow.contains(key)
        if decisions.resize_status(claim) == names.RESIZE_CONTROLLER_INFEASIBLE:
            self.slow.add(key)  # `markForSlowRetry`: also after a restart
        plan = decisions.plan_expansion(
            claim,
            pv,
            driver=self.driver.name,
            final_error=key in self.final_errors,
            slow=slow,
            controller_expansion=self.mode is ResizeMode.CSI,
        )
        if plan.action is decisions.Action.SKIP:
            return DONE
        if plan.action is decisions.Action.DELAY:
            log.info("resize_delayed", reason=names.MESSAGE_RESIZE_SLOW_RETRY.format(claim=key))
            return retry_after(max(self.slow.remaining(key), 0.001))
        try:
            claim = await self._mark_in_progress(claim, plan)
        except kube.KubeError as exc:
            log.warning(
                "resize_not_started", error=f"marking pvc {key!r} as resizing failed: {exc}"
            )
            return RETRY
        if self.options.handle_volume_inuse_error and key in self.in_use:
            try:
                users = await self._users(claim, pv)
            except kube.KubeError as exc:
                log.warning("resize_in_use_check_failed", error=str(exc))
                return RETRY
            if users:
                message = names.MESSAGE_OFFLINE_IN_USE.format(claim=key, driver=self.driver.name)
                log.info("resize_waits_for_offline", users=users)
                await self._event(claim, events.WARNING, names.REASON_VOLUME_RESIZE_FAILED, message)
                return RETRY
            del self.in_use[key]
        volume = pv["metadata"]["name"]
        message = names.MESSAGE_RESIZING.format(volume=volume)
        await self._event(claim, events.NORMAL, names.REASON_RESIZING, message)
        try:
            size, node_expansion = await self._resize(claim, pv, plan.size)
        except (CSIError, ResizeError) as exc:
            return await self._failed(key, claim, pv, exc)
        self.final_errors.discard(key)
        self.slow.remove(key)
        try:
            await self._record(claim, pv, size, node_expansion=node_expansion)
        except kube.KubeError as exc:
            error = f"error updating pv {volume!r} by resizer: {exc}"
            await self._event(claim, events.WARNING, names.REASON_VOLUME_RESIZE_FAILED, error)
            return RETRY
        log.info("volume_resized", volume=volume, size=size, node_expansion=node_expansion)
        return DONE

    async def _mark_in_progress(self, claim: Body, plan: decisions.Plan) -> Body:
        claim = await self._annotate(claim, not_required=False)
        stamp = now()
        return await self._patch_status(
            claim,
            lambda c: status.in_progress(c, plan.size, update_status=plan.update_status, now=stamp),
        )

    async def _users(self, claim: Body, pv: Body) -> list[str]:
        """What still uses the volume (see `inuse`): its VAs, else the namespace's pods."""
        name = pv["metadata"]["name"]
        attached = inuse.attachments_of(name, self.caches.attachments.indexed(name))
        if attached:
            return attached
        meta = claim["metadata"]
        pods = await self.api.list(PODS, meta["namespace"])
        return inuse.pods_using(meta["name"], pods)

    async def _resize(self, claim: Body, pv: Body, size: str) -> tuple[str, bool]:
        """The resizer's `Resize`: the new size (BinarySI) and whether the node must grow it."""
        if self.mode is ResizeMode.TRIVIAL:
            return size, True  # trivial_resizer.go: no RPC; kubelet's NodeExpandVolume grows it
        spec = pv.get("spec") or {}
        source = spec.get("csi") or {}
        try:
            capability = volume_capability(
                access_modes=list(spec.get("accessModes") or ()),
                block=spec.get("volumeMode") == "Block",
                fs_type=str(source.get("fsType") or ""),
                mount_flags=list(spec.get("mountOptions") or ()),
                single_node_multi_writer=self.driver.has_controller("SINGLE_NODE_MULTI_WRITER"),
            )
        except AccessModeError as exc:
            raise ResizeError(str(exc)) from None
        required = decisions.size_of(size)
        request = csi.ControllerExpandVolumeRequest(
            volume_id=str(source.get("volumeHandle") or ""),
            capacity_range=csi.CapacityRange(required_bytes=required),
            secrets=await self._secrets(source.get("controllerExpandSecretRef")),
            volume_capability=capability,
        )
        response = await self.csi.controller_expand_volume(request, timeout=self.options.timeout)
        # capacity_bytes is required by the spec; 0 (unset) is read as "as requested".
        return format_binary_si(response.capacity_bytes or required), bool(
            response.node_expansion_required
        )

    async def _secrets(self, ref: Body | None) -> dict[str, str]:
        if not ref:
            return {}
        name, namespace = str(ref.get("name") or ""), str(ref.get("namespace") or "")
        try:
            secret = await self.api.read(kube.SECRETS, name, namespace)
        except kube.KubeError as exc:  # a missing one included: the server's own text
            raise ResizeError(
                names.MESSAGE_RESIZE_SECRET_FAILED.format(
                    name=name, namespace=namespace, error=exc.message
                )
            ) from exc
        data = secret.get("data") or {}
        return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in data.items()}

    async def _failed(self, key: str, claim: Body, pv: Body, exc: BaseException) -> Outcome:
        """`callResizeOnPlugin`'s error branch: remember, mark the claim, tell the user."""
        text = error_text(exc)
        if is_in_use(exc):
            self.in_use[key] = pv["metadata"]["name"]
        outcome = RETRY
        try:
            if is_final(exc):
                self.final_errors.add(key)
                if is_infeasible(exc):
                    stamp = now()
                    await self._patch_status(claim, lambda c: status.infeasible(c, text, now=stamp))
                    self.slow.add(key)
                    outcome = retry_after(self.slow.remaining(key))
                else:
                    self.slow.remove(key)
                    stamp = now()
                    await self._patch_status(claim, lambda c: status.failed(c, text, now=stamp))
            else:
                self.slow.remove(key)
                self.final_errors.discard(key)
        except kube.KubeError as mark_error:
            text = (
                f"resizing failed in controller with {text} but failed to update PVC {key}"
                f" with: {mark_error}"
            )
            outcome = RETRY
        else:
            volume, driver = pv["metadata"]["name"], self.driver.name
            text = names.MESSAGE_RESIZE_FAILED.format(volume=volume, driver=driver, error=text)
        log.warning("resize_failed", error=text, final=is_final(exc), in_use=is_in_use(exc))
        await self._event(claim, events.WARNING, names.REASON_VOLUME_RESIZE_FAILED, text)
        return outcome

    async def _record(self, claim: Body, pv: Body, size: str, *, node_expansion: bool) -> None:
        """The PV's capacity first, then the claim: pending on the node, or finished."""
        patch = status.volume_capacity_patch(
            pv, size, old_capacity=decisions.capacity(claim), node_expansion=node_expansion
        )
        self.caches.volumes.store(await self.api.patch(kube.VOLUMES, pv["metadata"]["name"], patch))
        if node_expansion:
            claim = await self._annotate(claim, not_required=False)
            stamp = now()
            await self._patch_status(claim, lambda c: status.pending_on_node(c, now=stamp))
            message = names.MESSAGE_FS_RESIZE_REQUIRED
            await self._event(claim, events.NORMAL, names.REASON_FS_RESIZE_REQUIRED, message)
        else:
            claim = await self._annotate(claim, not_required=True)
            await self._patch_status(claim, lambda c: status.finished(c, size))
            message = names.MESSAGE_RESIZE_SUCCEEDED
            await self._event(claim, events.NORMAL, names.REASON_VOLUME_RESIZE_SUCCESSFUL, message)

    # -- writes --------------------------------------------------------------------------------

    async def _annotate(self, claim: Body, *, not_required: bool) -> Body:
        patch = status.annotation_patch(claim, not_required=not_required)
        if patch is None:
            return claim
        meta = claim["metadata"]
        updated = await self.api.patch(kube.CLAIMS, meta["name"], patch, meta["namespace"])
        self.claims.store(updated)
        return updated

    async def _patch_status(self, claim: Body, build: Callable[[Body], Mapping[str, Any]]) -> Body:
        updated = await patch_claim_status(self.api, claim, build)
        self.claims.store(updated)
        return updated

    async def _event(self, claim: Body, type_: str, reason: str, message: str) -> None:
        await self.recorder.post(claim, type_=type_, reason=reason, message=message)
