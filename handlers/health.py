"""external-health-monitor's controller as a kopf handler module: events on unhealthy volumes.

Runs when the driver has VOLUME_CONDITION and LIST_VOLUMES or GET_VOLUME (otherwise it logs
why and does nothing, where upstream would exit). Every round it reads the conditions of the
bound volumes of our driver and posts `VolumeConditionAbnormal` / `VolumeConditionNormal`
events on their claims; `kopf_csi.attaching.monitor` does the work. It reads the shared PV
cache, which `kopf_csi_handlers.provisioner` or `kopf_csi_handlers.attacher` keep current;
it watches nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import structlog

from kopf_csi import events, names, runtime
from kopf_csi.attaching.conditions import monitor_mode
from kopf_csi.attaching.monitor import HealthMonitor

log = structlog.get_logger("kopf_csi.health")


@kopf.on.startup(id="health.start")
async def start(memo: kopf.Memo, **_: Any) -> None:
    settings = runtime.settings_from_memo(memo)
    if not settings.health.enabled:
        return
    if not await runtime.wait_for_driver(memo):
        return
    mode = monitor_mode(memo.driver)
    if mode is None:
        log.info("health_monitor_off", reason="no VOLUME_CONDITION with LIST_VOLUMES/GET_VOLUME")
        return
    component = names.HEALTH_EVENT_COMPONENT.format(driver=memo.driver.name)
    api = memo.api.as_manager(names.MANAGER_HEALTH_MONITOR)
    monitor = HealthMonitor(
        csi_client=memo.csi,
        api=api,
        caches=runtime.caches_from_memo(memo),
        recorder=events.Recorder(api, component=component),
        driver_name=memo.driver.name,
        mode=mode,
        options=settings.health,
    )
    memo.health_monitor = monitor
    task = runtime.supervise(memo, monitor.run(), name="health-monitor")

    async def stop() -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    memo.stoppers.append(stop)
    log.info("health_monitor_started", mode=mode.value, interval=monitor.interval)
