"""Start-up and shutdown: log in, connect to the driver, prime the caches, report health.

Every other handler module depends on what this one puts into the memo: `memo.settings`
(Settings), `memo.api` (KubeClient), `memo.caches` (Caches, primed), `memo.recorder` (events),
`memo.csi` (CSIClient, timed by `memo.metrics`) and, last, `memo.driver` (DriverInfo):
controllers wait for it.
With `--leader-election`, `memo.driver` comes only once this replica holds every Lease
(`runtime.lead`: `memo.leadership`, `memo.health_checks["leader-election"]`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import kopf
import structlog

from kopf_csi import events, kube, metrics, runtime
from kopf_csi.caches import Cache, Caches, object_key
from kopf_csi.csi import CSIClient, CSIError

log = structlog.get_logger("kopf_csi.lifecycle")


@kopf.on.login(id="lifecycle.login")
async def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    return await runtime.connection_info(runtime.settings_from_memo(memo))


@kopf.on.startup(id="lifecycle.connect")
async def connect(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    try:
        await _connect(settings, memo)
    except Exception as exc:
        # The controllers' start-up handlers come next (kopf runs them one by one): they stop
        # at once, saying why, instead of each waiting for a driver that will not come.
        memo.connect_error = str(exc)
        raise


async def _connect(settings: kopf.OperatorSettings, memo: kopf.Memo) -> None:
    config = runtime.settings_from_memo(memo)
    runtime.configure_kopf(settings, registry=getattr(memo, "registry", None))
    observed = metrics.from_memo(memo)  # every CSI call is timed, from the first Probe on
    client = CSIClient(
        config.csi.address, timeout=config.csi.timeout, observers=[observed.observe_call]
    )
    try:
        await client.wait_ready(wait=config.csi.connect_timeout)
        info = await client.driver_info()
        observed.set_driver_name(info.name)
    except CSIError as exc:
        # As the Go sidecars exit after their 30 s dial timeout or a failed identity call,
        # stop: kopf would otherwise retry a start-up handler after a minute, silently.
        await client.close()
        raise kopf.PermanentError(f"cannot start without the CSI driver: {exc}") from exc
    memo.csi = client
    memo.stoppers = []  # controllers' shutdown coroutines, run before the clients close
    memo.api = api = await kube.KubeClient.connect(config.kube.kubeconfig)
    if getattr(memo, "health_checks", None) is None:
        memo.health_checks = {}  # name → () -> (ok, detail): served by the HTTP health endpoint
    try:
        # `--leader-election`: a standby replica waits here, healthy, until it holds the
        # Leases of all its controllers; nothing below (nor any watch) runs before that.
        await runtime.lead(memo, driver_name=info.name)
    except asyncio.CancelledError:  # stopped while standby: kopf runs no cleanup handlers then
        await runtime.stop_work(memo)  # releases the Leases it holds already
        await client.close()
        await api.close()
        raise
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
        await _prime_kind(api, resource, cache)


async def _prime_kind(
    api: kube.KubeClient, resource: kube.Resource, cache: Cache, *, delay: float = 0.2
) -> None:
    """LIST one kind into its cache, retried until it succeeds, as a client-go reflector does.

    A transient API error here would otherwise fail the start-up handler, which kopf retries
    only after a minute: a single 5xx at start-up stopped all work for 60 s (chaos suite).
    Objects stored by a failed attempt and absent from the complete LIST are dropped again.
    """
    stored: set[str] = set()
    while True:
        seen: set[str] = set()
        try:
            async for page in api.pages(resource):  # one page in memory at a time
                for obj in page:
                    cache.store(obj)
                    seen.add(object_key(obj))
        except (kube.KubeError, aiohttp.ClientError, OSError) as exc:
            stored |= seen
            log.warning("cache_prime_retry", resource=resource.plural, error=str(exc), delay=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        for key in stored - seen:
            if (gone := cache.get(key)) is not None:
                cache.remove(gone)
        return


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
