"""Start-up and shutdown: log in, connect to the driver, prime the caches, report health.

Every other handler module depends on what this one puts into the memo: `memo.settings`
(Settings), `memo.api` (KubeClient), `memo.caches` (Caches, primed), `memo.recorder` (events),
`memo.csi` (CSIClient, timed by `memo.metrics`) and, last, `memo.driver` (DriverInfo):
controllers wait for it. With `--no-csi` there is no driver, client or recorder (None), and
`memo.without_driver` is set instead: the CSI controllers stay idle.
With `--leader-election`, `memo.driver` comes only once this replica holds every Lease
(`runtime.lead`: `memo.leadership`, `memo.health_checks["leader-election"]`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import kopf
import structlog

from kopf_csi import events, kube, metrics, names, queueing, runtime
from kopf_csi.caches import Cache, Caches, object_key
from kopf_csi.csi import CSIClient, CSIError
from kopf_csi.settings import Settings

log = structlog.get_logger("kopf_csi.lifecycle")

RESYNC_FIRST_DELAY = 30.0
"""Seconds from the start to the first cache resync (kopf's watches are up by then)."""
EVENTS_FLUSH_TIMEOUT = 5.0
"""Seconds a stop waits for queued events to be posted before the API client closes."""


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
    if config.csi.disabled:
        await _connect_without_driver(memo, config)
        return
    observed = metrics.from_memo(memo)  # every CSI call is timed, from the first Probe on
    client = CSIClient(
        config.csi.address, timeout=config.csi.timeout, observers=[observed.observe_call]
    )
    try:
        await client.wait_ready(wait=config.csi.connect_timeout)
        info = await client.driver_info(named=observed.set_driver_name)
    except CSIError as exc:
        # As the Go sidecars exit after their 30 s dial timeout or a failed identity call,
        # stop: kopf would otherwise retry a start-up handler after a minute, silently.
        await client.close()
        raise kopf.PermanentError(f"cannot start without the CSI driver: {exc}") from exc
    memo.csi = client
    api = await _connect_api(memo, config)
    try:
        # `--leader-election`: a standby replica waits here, healthy, until it holds the
        # Leases of all its controllers; nothing below (nor any watch) runs before that.
        await runtime.lead(memo, driver_name=info.name)
    except asyncio.CancelledError:  # stopped while standby: kopf runs no cleanup handlers then
        await runtime.stop_work(memo)  # releases the Leases it holds already
        await client.close()
        await api.close()
        raise
    memo.recorder = events.Recorder(  # the provisioner's: its writes are csi-provisioner's
        api.as_manager(names.MANAGER_PROVISIONER), component=events.component_name(info.name)
    )
    await _start_caches(memo, api, config)
    memo.driver = info
    log.info(
        "driver_connected",
        driver=info.name,
        version=info.vendor_version,
        plugin_capabilities=sorted(info.plugin_capabilities),
        controller_capabilities=sorted(info.controller_capabilities),
    )


async def _connect_without_driver(memo: kopf.Memo, config: Settings) -> None:
    """`--no-csi`: the API and the caches only. Each registered provisioner back end holds its
    own Lease (`kopf_csi_handlers.provisioner`); the CSI controllers find no driver and stay
    idle."""
    memo.csi = memo.recorder = memo.leadership = None
    api = await _connect_api(memo, config)
    await _start_caches(memo, api, config)
    memo.without_driver = True
    log.info("started_without_driver")


async def _connect_api(memo: kopf.Memo, config: Settings) -> kube.KubeClient:
    """`memo.api`, with the places the controllers register into: `memo.stoppers` (shutdown
    coroutines, run before the clients close) and `memo.health_checks` (name → () -> (ok,
    detail), served by the HTTP health endpoint)."""
    memo.stoppers = []
    try:
        memo.api = api = await kube.KubeClient.connect(
            config.kube.kubeconfig, qps=config.kube.qps, burst=config.kube.burst
        )
    except kube.LoginError as exc:
        # No service account and no usable kubeconfig: retrying changes nothing. Stop, as the
        # Go sidecars exit when they cannot build their client (kopf would retry in a minute).
        raise kopf.PermanentError(str(exc)) from exc
    api.observe(metrics.from_memo(memo))  # every request, the pool's waits, new connections
    metrics.from_memo(memo).watch_reachability(api.reachability)  # outages, in /metrics
    # Back after an outage: what failed during it runs now, not after its backoff (which grew
    # while every attempt failed); the watches reconnect on their own (`informers`).
    loop = asyncio.get_running_loop()
    api.reachability.on_back(lambda since: _wake_queues(loop, since))
    if api.limits is not None:  # each role's throttled requests, in /metrics
        metrics.from_memo(memo).watch_rate_limits(api.limits.buckets)
    # Connections for a burst's first requests, opened now and not during the burst: 100
    # handshakes at once made each request wait 50-300 ms for its own (kube.WARM_CONNECTIONS).
    connections = min(config.workers.provisioner, kube.WARM_CONNECTIONS)
    warming = asyncio.create_task(api.warm(connections), name="api-warm")
    memo.stoppers.append(_cancel(warming))
    if getattr(memo, "health_checks", None) is None:
        memo.health_checks = {}
    return api


def _wake_queues(loop: asyncio.AbstractEventLoop, since: float) -> None:
    woken = sum(queue.retry_failed_since(since) for queue in queueing.started_queues(loop))
    log.info("work_resumed", keys=woken)


async def _start_caches(memo: kopf.Memo, api: kube.KubeClient, config: Settings) -> None:
    """The caches, primed (`memo.caches`), and their periodic resync."""
    memo.caches = caches = Caches()
    memo.primed_versions = await _prime(api, caches)
    if config.kube.cache_resync > 0:
        resync = runtime.supervise(
            memo, _resync(memo, config.kube.cache_resync), name="cache-resync"
        )
        memo.stoppers.append(_cancel(resync))


def _primed_kinds(caches: Caches) -> dict[kube.Resource, Cache]:
    return {
        kube.STORAGE_CLASSES: caches.storage_classes,
        kube.VOLUMES: caches.volumes,
        kube.CSINODES: caches.csinodes,
        kube.NODES: caches.nodes,
        kube.VOLUME_ATTACHMENTS: caches.attachments,
    }


async def _prime(api: kube.KubeClient, caches: Caches) -> dict[str, str]:
    """One LIST per cached kind before any controller starts (the Go WaitForCacheSync).

    Returns each kind's list resourceVersion: the PV informer watches on from there instead of
    listing every PV a second time (`kopf_csi_handlers.caches`)."""
    return {
        resource.plural: await _prime_kind(api, resource, cache)
        for resource, cache in _primed_kinds(caches).items()
    }


async def _resync(memo: kopf.Memo, interval: float) -> None:
    """Every `interval`, LIST the primed kinds again and drop the objects that are gone.

    kopf's watches start with a LIST of their own, after ours: an object deleted in between
    never gets a DELETED event, and would stay cached (a VA "still attached"). The first round
    comes soon after the start, then one every `interval`. Each dropped object is passed to
    the controllers as deleted (`runtime.notify`). Not the PVs: their informer watches on from
    the priming LIST itself, and lists again (reporting the gap's deletions) after a 410.
    """
    caches: Caches = memo.caches
    delay = min(interval, RESYNC_FIRST_DELAY)
    while True:
        await asyncio.sleep(delay)
        delay = interval
        for resource, cache in _primed_kinds(caches).items():
            if resource == kube.VOLUMES:
                continue
            before = cache.mark()
            try:
                listed = {object_key(obj) async for page in memo.api.pages(resource)
                          for obj in page}  # fmt: skip
            except kube.REQUEST_ERRORS as exc:
                log.warning("cache_resync_failed", resource=resource.plural, error=str(exc))
                continue
            for gone in cache.prune(listed, before=before):
                log.info("cache_entry_gone", obj=gone, resource=resource.plural)
                await runtime.notify(memo, resource, gone, deleted=True)


async def _prime_kind(
    api: kube.KubeClient, resource: kube.Resource, cache: Cache, *, delay: float = 0.2
) -> str:
    """LIST one kind into its cache, retried until it succeeds, as a client-go reflector does.

    A transient API error here would otherwise fail the start-up handler, which kopf retries
    only after a minute: a single 5xx at start-up stopped all work for 60 s (chaos suite).
    Objects stored by a failed attempt (or a pass the pager started over) and absent from the
    complete LIST are dropped again. Returns the complete LIST's resourceVersion.
    """
    stored: set[str] = set()
    while True:
        seen: set[str] = set()
        versions: list[str] = []
        try:
            async for page in api.pages(resource, versions=versions):  # a page at a time
                if len(versions) > 1:  # the pager started over (an expired continue token)
                    del versions[:-1]
                    stored |= seen
                    seen = set()
                for obj in page:
                    cache.store(obj)
                    seen.add(object_key(obj))
        except kube.REQUEST_ERRORS as exc:
            stored |= seen
            log.warning("cache_prime_retry", resource=resource.plural, error=str(exc), delay=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        for key in stored - seen:
            if (gone := cache.get(key)) is not None:
                cache.remove(gone)
        return versions[-1] if versions else ""


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
    await events.flush_all(timeout=EVENTS_FLUSH_TIMEOUT)  # the events still queued go out
    api = getattr(memo, "api", None)
    if api is not None:
        await api.close()


@kopf.on.probe(id="driver")
async def driver_ready(memo: kopf.Memo, **_: Any) -> str:
    """Liveness includes the driver: a failing Probe fails the operator's health check.

    kopf retries a failing probe handler (holding the HTTP request for a minute) unless the
    error is permanent; a health check must answer now, so every CSI failure is permanent.
    """
    client: CSIClient | None = memo.csi
    if client is None:
        return "no-csi"  # `--no-csi`: no driver to ask
    try:
        response = await client.probe()
    except CSIError as exc:
        raise kopf.PermanentError(f"the CSI driver does not answer Probe: {exc}") from exc
    return "ready" if response.ready is None or response.ready else "not-ready"


def _cancel(task: asyncio.Task[Any]) -> Callable[[], Awaitable[None]]:
    async def stop() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return stop
