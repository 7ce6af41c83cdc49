"""The health monitor's rounds: read the volumes' conditions, post events on their claims.

The port of external-health-monitor's controller (`PVHealthConditionChecker`). Kept cheap with
thousands of volumes: with LIST_VOLUMES one round is one paged ListVolumes for every volume;
without it, ControllerGetVolume calls run through a fixed number of workers. Events are posted
only for abnormal volumes and recoveries, so a healthy cluster costs no API writes at all.

Which claims were told "abnormal" is remembered by claim UID, and seeded at start from the
abnormal events still in the cluster (upstream reads them from an event informer), so that a
restart does not forget to post a recovery.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from kopf_csi import events, kube, names
from kopf_csi.attaching.conditions import Check, Mode, monitored, transition
from kopf_csi.attaching.options import HealthMonitorOptions
from kopf_csi.caches import Caches
from kopf_csi.csi import CSIClient, CSIError
from kopf_csi.csi import messages as csi

__all__ = ["HealthMonitor"]

log = structlog.get_logger("kopf_csi.health")
Body = Mapping[str, Any]


class HealthMonitor:
    """Periodic volume-condition checks for one driver."""

    def __init__(
        self,
        *,
        csi_client: CSIClient,
        api: kube.KubeClient,
        caches: Caches,
        recorder: events.Recorder,
        driver_name: str,
        mode: Mode,
        options: HealthMonitorOptions,
    ) -> None:
        self.csi = csi_client
        self.api = api
        self.caches = caches
        self.recorder = recorder
        self.driver_name = driver_name
        self.mode = mode
        self.options = options
        self.abnormal: set[str] = set()
        """UIDs of the claims told "abnormal" and not yet told "recovered"."""

    @property
    def interval(self) -> float:
        if self.mode is Mode.LIST_VOLUMES:
            return self.options.list_volumes_interval
        return self.options.monitor_interval

    async def run(self) -> None:
        """Check every `interval` seconds until cancelled; a failed round is logged."""
        await self.seed()
        while True:
            try:
                await self.check()
            except (CSIError, kube.KubeError) as exc:
                log.warning("health_check_failed", error=str(exc))
            except Exception as exc:  # a bug: say so, and keep monitoring
                log.warning("health_check_failed", error=repr(exc), exc_info=exc)
            await asyncio.sleep(self.interval)

    async def seed(self) -> None:
        """Remember the claims whose abnormal event (ours) is still in the cluster."""
        component = names.HEALTH_EVENT_COMPONENT.format(driver=self.driver_name)
        selector = f"reason={names.REASON_VOLUME_CONDITION_ABNORMAL}"
        try:
            found = await self.api.list(kube.EVENTS, field_selector=selector)
        except kube.KubeError as exc:
            log.warning("health_events_not_read", error=str(exc))
            return
        for event in found:
            if (event.get("source") or {}).get("component") == component:
                uid = (event.get("involvedObject") or {}).get("uid")
                if uid:
                    self.abnormal.add(str(uid))

    async def check(self) -> int:
        """One round over the bound volumes of our driver; returns the events posted."""
        checks = list(monitored(self.caches.volumes, driver=self.driver_name))
        if not checks:
            return 0
        if self.mode is Mode.LIST_VOLUMES:
            conditions = await self._listed_conditions()
        else:
            conditions = await self._fetched_conditions(checks)
        posted = 0
        for check in checks:
            condition = conditions.get(check.volume_handle)
            if condition is not None and await self._report(check, condition):
                posted += 1
        return posted

    async def _report(self, check: Check, condition: csi.VolumeCondition) -> bool:
        claim = await self._claim(check)
        if claim is None:
            return False
        uid = str(claim["metadata"].get("uid", ""))
        post = transition(
            abnormal=condition.abnormal,
            message=condition.message,
            was_abnormal=uid in self.abnormal,
        )
        if condition.abnormal:
            self.abnormal.add(uid)
        else:
            self.abnormal.discard(uid)
        if post is None:
            return False
        log.info("volume_condition", volume_id=check.volume_handle, reason=post.reason)
        await self.recorder.post(claim, type_=post.type_, reason=post.reason, message=post.message)
        return True

    async def _claim(self, check: Check) -> Body | None:
        cached = self.caches.claims.get(f"{check.claim_namespace}/{check.claim_name}")
        if cached is not None:
            return cached
        try:
            return await self.api.get(kube.CLAIMS, check.claim_name, check.claim_namespace)
        except kube.KubeError as exc:
            log.warning("claim_not_read", claim=check.claim_name, error=str(exc))
            return None

    async def _listed_conditions(self) -> dict[str, csi.VolumeCondition]:
        """`ControllerListVolumeConditions`: every volume's condition from ListVolumes pages."""
        conditions: dict[str, csi.VolumeCondition] = {}
        async for entry in self.csi.iter_volumes(timeout=self.options.timeout):
            if entry.volume is None or entry.status is None:
                continue
            if entry.status.volume_condition is not None:
                conditions[entry.volume.volume_id] = entry.status.volume_condition
        return conditions

    async def _fetched_conditions(self, checks: Iterable[Check]) -> dict[str, csi.VolumeCondition]:
        """ControllerGetVolume per volume, through `workers` workers over one shared iterator."""
        conditions: dict[str, csi.VolumeCondition] = {}
        handles = iter(sorted({check.volume_handle for check in checks}))

        async def work() -> None:
            for handle in handles:  # shared: each handle is taken by one worker
                request = csi.ControllerGetVolumeRequest(volume_id=handle)
                try:
                    response = await self.csi.controller_get_volume(
                        request, timeout=self.options.timeout
                    )
                except CSIError as exc:
                    log.warning("volume_condition_unknown", volume_id=handle, error=str(exc))
                    continue
                status = response.status
                if status is not None and status.volume_condition is not None:
                    conditions[handle] = status.volume_condition

        await asyncio.gather(*(work() for _ in range(self.options.workers)))
        return conditions
