"""Start-up and shutdown: log in, connect to the driver, prime the caches, report health.

Every other handler module depends on what this one puts into the memo: `memo.settings`
(Settings), `memo.api` (KubeClient), `memo.caches` (Caches, primed), `memo.recorder` (events),
`memo.csi` (CSIClient) and, last, `memo.driver` (DriverInfo): controllers wait for it.
"""

from __future__ import annotations

from typing import Any

import kopf
import structlog

from kopf_csi import events, kube, runtime
from kopf_csi.caches import Caches
from kopf_csi.csi import CSIClient, CSIError

log = structlog.get_logger("kopf_csi.lifecycle")


@kopf.on.login(id="lifecycle.login")
async def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    return await runtime.connection_info(runtime.settings_from_memo(memo))


@kopf.on.startup(id="lifecycle.connect")
async def connect(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config = runtime.settings_from_memo(memo)
    runtime.configure_kopf(settings, registry=getattr(memo, "registry", None))
    client = CSIClient(config.csi.address, timeout=config.csi.timeout)
    try:
        await client.wait_ready(wait=config.csi.connect_timeout)
        info = await client.driver_info()
    except CSIError as exc:
        # As the Go sidecars exit after their 30 s dial timeout or a failed identity call,
        # stop: kopf would otherwise retry a start-up handler after a minute, silently.
        await client.close()
        raise kopf.PermanentError(f"cannot start without the CSI driver: {exc}") from exc
    memo.csi = client
    memo.stoppers = []  # controllers' shutdown coroutines, run before the clients close
    memo.api = api = await kube.KubeClient.connect(config.kube.kubeconfig)
    memo.recorder = events.Recorder(api, component=events.component_name(info.name))
    memo.caches = caches = Caches()
    await _prime(api, caches)
    memo.driver = info
    log.info(
        "driver_connected",
        driver=info.name,
        version=info.vendor_version,
        plugin_capabilities=sorted(info.plugin_capabilities),
        controller_capabilities=sorted(info.controller_capabilities),
    )


async def _prime(api: kube.KubeClient, caches: Caches) -> None:
    """One LIST per cached kind before any controller starts (the Go WaitForCacheSync)."""
    kinds = {
        kube.STORAGE_CLASSES: caches.storage_classes,
        kube.VOLUMES: caches.volumes,
        kube.CSINODES: caches.csinodes,
        kube.NODES: caches.nodes,
        kube.VOLUME_ATTACHMENTS: caches.attachments,
    }
    for resource, cache in kinds.items():
        for obj in await api.list(resource):
            cache.store(obj)


@kopf.on.cleanup(id="lifecycle.disconnect")
async def disconnect(memo: kopf.Memo, **_: Any) -> None:
    # kopf runs cleanup handlers concurrently: the controllers stop here, first, so that no
    # operation is cut off by a closed client.
    for stop in reversed(getattr(memo, "stoppers", [])):
        try:
            await stop()
        except Exception as exc:
            log.warning("controller_stop_failed", error=str(exc))
    client = getattr(memo, "csi", None)
    if client is not None:
        await client.close()
    api = getattr(memo, "api", None)
    if api is not None:
        await api.close()


@kopf.on.probe(id="driver")
async def driver_ready(memo: kopf.Memo, **_: Any) -> str:
    """Liveness includes the driver: a failing Probe fails the operator's health check.

    kopf retries a failing probe handler (holding the HTTP request for a minute) unless the
    error is permanent; a health check must answer now, so every CSI failure is permanent.
    """
    client: CSIClient = memo.csi
    try:
        response = await client.probe()
    except CSIError as exc:
        raise kopf.PermanentError(f"the CSI driver does not answer Probe: {exc}") from exc
    return "ready" if response.ready is None or response.ready else "not-ready"
