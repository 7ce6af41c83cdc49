"""The modify controller's operation on one claim: ControllerModifyVolume for a new class.

The port of external-resizer's `modifyController.syncPVC` and `modify` (modify_volume.go,
modify_status.go): mark the claim InProgress, call the driver with the class's parameters,
then write the PV's `spec.volumeAttributesClassName` (first) and the claim's status. A
non-final error leaves the claim "uncertain": the same target is retried even if the user
changed the class meanwhile (the driver may still be applying it). InvalidArgument is
Infeasible and retried slowly, unless the user picks another class. No kopf.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from kopf_csi import events, kube, logs, names
from kopf_csi.caches import Cache, Caches
from kopf_csi.csi import Code, CSIClient, CSIError, DriverInfo
from kopf_csi.csi import messages as csi
from kopf_csi.queueing import DONE, RETRY, Outcome, retry_after
from kopf_csi.resizing import decisions, modifications
from kopf_csi.resizing.errors import error_text, is_final
from kopf_csi.resizing.modifications import Step
from kopf_csi.resizing.operations import now
from kopf_csi.resizing.options import ResizerOptions
from kopf_csi.resizing.slowset import SlowSet
from kopf_csi.resizing.writes import patch_claim_status

__all__ = ["Modifier"]

log = structlog.get_logger("kopf_csi.modifier")
Body = Mapping[str, Any]


class Modifier:
    """The modify controller's state and its operation on one claim."""

    def __init__(
        self,
        *,
        csi_client: CSIClient,
        api: kube.KubeClient,
        caches: Caches,
        recorder: events.Recorder,
        driver: DriverInfo,
        options: ResizerOptions,
    ) -> None:
        self.csi = csi_client
        self.api = api
        self.caches = caches
        self.recorder = recorder
        self.driver = driver
        self.options = options
        self.claims = Cache()
        """Claims naming a class they are not at yet (or with a modify status)."""
        self.slow = SlowSet(options.retry_interval_max)
        self.uncertain: set[str] = set()
        self._seen: dict[str, tuple[Any, ...]] = {}

    def observe(self, claim: Body, *, deleted: bool = False) -> bool:
        """Keep claims with modify work; queue them when the class or the phase changed."""
        key = decisions.claim_key(claim)
        if deleted or not modifications.has_modify_work(claim):
            self.claims.remove(claim)
            self._seen.pop(key, None)
            if deleted:
                self.slow.remove(key)
                self.uncertain.discard(key)
            return False
        self.claims.store(claim)
        fingerprint = (modifications.spec_class(claim), (claim.get("status") or {}).get("phase"))
        previous, self._seen[key] = self._seen.get(key), fingerprint
        if previous is None:
            # `initUncertainPVCs`: after a restart, an InProgress claim may still be running.
            status = modifications.modify_status(claim) or {}
            if status.get("status") == names.MODIFY_IN_PROGRESS:
                self.uncertain.add(key)
        return previous != fingerprint

    def pending(self) -> list[str]:
        return [decisions.claim_key(c) for c in self.claims]

    async def sync_claim(self, key: str) -> Outcome:
        claim = self.claims.get(key)
        if claim is None or not modifications.has_modify_work(claim):
            return DONE
        pv = self.caches.volumes.get(str(claim["spec"]["volumeName"]))
        if pv is None or not decisions.is_ours(pv, self.driver.name):
            return DONE
        with logs.bound_object(claim, kind="PersistentVolumeClaim"):
            return await self._modify(key, claim, pv)

    async def _modify(self, key: str, claim: Body, pv: Body) -> Outcome:
        status = modifications.modify_status(claim) or {}
        wanted = modifications.spec_class(claim)
        if not status or status.get("targetVolumeAttributesClassName") != wanted:
            self.slow.remove(key)  # a new class may be feasible
        slow = self.slow.contains(key)
        if status.get("status") == names.MODIFY_INFEASIBLE:
            self.slow.add(key)
        target = modifications.plan_modify(claim, uncertain=key in self.uncertain, slow=slow)
        if target.step is Step.SKIP:
            return DONE
        if target.step is Step.DELAY:
            log.info("modify_delayed", reason=names.MESSAGE_MODIFY_SLOW_RETRY.format(claim=key))
            return retry_after(max(self.slow.remaining(key), 0.001))
        try:
            vac = await self._class(claim, target.vac)
            if vac is None:
                stamp = now()
                await self._patch_status(
                    claim,
                    lambda c: modifications.with_status(
                        c, names.MODIFY_PENDING, target="", error=None, now=stamp
                    ),
                )
                return RETRY
            if target.step is Step.START:
                stamp, wanted = now(), target.vac
                claim = await self._patch_status(
                    claim,
                    lambda c: modifications.with_status(
                        c, names.MODIFY_IN_PROGRESS, target=wanted, error=None, now=stamp
                    ),
                )
                message = names.MESSAGE_MODIFYING.format(
                    claim=claim["metadata"]["name"], vac=target.vac
                )
                await self._event(claim, events.NORMAL, names.REASON_VOLUME_MODIFY, message)
        except kube.KubeError as exc:
            log.warning("modify_not_started", error=str(exc))
            return RETRY
        try:
            await self._call(claim, pv, vac)
        except CSIError as exc:
            return await self._failed(key, claim, target.vac, exc)
        self.uncertain.discard(key)
        self.slow.remove(key)
        try:
            await self._completed(claim, pv, target.vac)
        except kube.KubeError as exc:
            name = claim["metadata"]["name"]
            error = f"modify volume failed to mark pvc {name} modify volume completed: {exc} "
            await self._event(claim, events.WARNING, names.REASON_VOLUME_MODIFY_FAILED, error)
            return RETRY
        message = names.MESSAGE_MODIFIED.format(claim=claim["metadata"]["name"], vac=target.vac)
        await self._event(claim, events.NORMAL, names.REASON_VOLUME_MODIFY_SUCCESSFUL, message)
        log.info("volume_modified", vac=target.vac)
        return DONE

    async def _class(self, claim: Body, name: str) -> Body | None:
        """The VolumeAttributesClass; a missing one is a warning event and a Pending status."""
        vac = await self.api.get(kube.VOLUME_ATTRIBUTES_CLASSES, name) if name else None
        if vac is None:
            message = names.MESSAGE_VAC_NOT_FOUND.format(vac=name)
            await self._event(claim, events.WARNING, names.REASON_VOLUME_MODIFY_FAILED, message)
        return vac

    async def _call(self, claim: Body, pv: Body, vac: Body) -> None:
        parameters = {str(k): str(v) for k, v in (vac.get("parameters") or {}).items()}
        if self.options.extra_modify_metadata:
            parameters[names.PARAM_PVC_NAME] = claim["metadata"]["name"]
            parameters[names.PARAM_PVC_NAMESPACE] = claim["metadata"]["namespace"]
            parameters[names.PARAM_PV_NAME] = pv["metadata"]["name"]
        source = (pv.get("spec") or {}).get("csi") or {}
        request = csi.ControllerModifyVolumeRequest(
            volume_id=str(source.get("volumeHandle") or ""),
            secrets=await self._secrets(pv),
            mutable_parameters=parameters,
        )
        await self.csi.controller_modify_volume(request, timeout=self.options.timeout)

    async def _secrets(self, pv: Body) -> dict[str, str]:
        """The controller-modify secret named in the PV's annotations (set by the provisioner)."""
        annotations = (pv.get("metadata") or {}).get("annotations") or {}
        name = annotations.get(names.ANN_MODIFY_SECRET_NAME)
        namespace = annotations.get(names.ANN_MODIFY_SECRET_NAMESPACE)
        if not name or not namespace:
            return {}
        try:
            secret = await self.api.read(kube.SECRETS, name, namespace)
        except kube.NotFoundError as exc:  # the server's own text
            raise CSIError(exc.message, method="ControllerModifyVolume", code=Code.UNKNOWN) from exc
        data = secret.get("data") or {}
        return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in data.items()}

    async def _failed(self, key: str, claim: Body, vac: str, exc: CSIError) -> Outcome:
        text = message = error_text(exc)
        value = names.MODIFY_IN_PROGRESS
        if not is_final(exc):
            self.uncertain.add(key)
            message = names.MESSAGE_STILL_MODIFYING.format(error=text, vac=vac)
        else:
            if exc.code is Code.INVALID_ARGUMENT:  # only InvalidArgument is Infeasible
                value = names.MODIFY_INFEASIBLE
            self.uncertain.discard(key)
        outcome = RETRY
        try:
            stamp = now()
            await self._patch_status(
                claim,
                lambda c: modifications.with_status(c, value, target=vac, error=text, now=stamp),
            )
        except kube.KubeError as mark_error:
            log.warning("modify_status_not_saved", error=str(mark_error))
        if value == names.MODIFY_INFEASIBLE:
            self.slow.add(key)
            outcome = retry_after(self.slow.remaining(key))
        log.warning("modify_failed", error=text, final=is_final(exc))
        await self._event(claim, events.WARNING, names.REASON_VOLUME_MODIFY_FAILED, message)
        return outcome

    async def _completed(self, claim: Body, pv: Body, vac: str) -> None:
        """The PV first, so that a claim never says "done" for a PV that does not."""
        patch = {"spec": {"volumeAttributesClassName": vac}}
        self.caches.volumes.store(await self.api.patch(kube.VOLUMES, pv["metadata"]["name"], patch))
        await self._patch_status(claim, lambda c: modifications.completed(c, vac))

    async def _patch_status(self, claim: Body, build: Callable[[Body], Mapping[str, Any]]) -> Body:
        updated = await patch_claim_status(self.api, claim, build)
        if modifications.has_modify_work(updated):
            self.claims.store(updated)
        else:
            self.claims.remove(updated)
        return updated

    async def _event(self, claim: Body, type_: str, reason: str, message: str) -> None:
        await self.recorder.post(claim, type_=type_, reason=reason, message=message)
