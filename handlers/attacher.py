"""external-attacher as kopf handlers: VolumeAttachments are attached and detached.

Thin on purpose. kopf's watches feed the caches and three work queues; the operations live in
`kopf_csi.attaching.operations`. Unlike upstream, which runs attach and detach through one
`csi-attacher-va` queue (external-attacher #761: a burst of detaches starves the attaches),
attach and detach have queues of their own, each with `workers.attacher` workers (Go's
`--worker-threads`, 10), so a detach storm never delays an attach. The PV queue
(`csi-attacher-pv`) removes our PV finalizer. Each key backs off 1 s → 5 min while it fails.

A watch event that only changed `attachError`/`detachError` (our own write after a failure) is
not queued: it would run the VA again at once and defeat its backoff. Watch-event handlers
write nothing on the objects, and the queues do the retrying.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import kopf
import structlog

from kopf_csi import kube, metrics, names, runtime
from kopf_csi.attaching.decisions import Route, has_finalizer, is_deleting, volume_name
from kopf_csi.attaching.operations import Attacher
from kopf_csi.csi import CSIError
from kopf_csi.queueing import WorkQueue

log = structlog.get_logger("kopf_csi.attacher")


@kopf.on.startup(id="attacher.start")
async def start(memo: kopf.Memo, **_: Any) -> None:
    settings = runtime.settings_from_memo(memo)
    if not await runtime.wait_for_driver(memo):
        return
    options = settings.attacher
    attacher = Attacher(
        csi_client=memo.csi,
        api=memo.api.as_manager(names.MANAGER_ATTACHER),
        caches=runtime.caches_from_memo(memo),
        driver=memo.driver,
        options=options,
    )
    memo.attacher = attacher

    def queue(name: str, process: Callable[[str], Awaitable[Any]]) -> WorkQueue[str]:
        return WorkQueue(
            name=name,
            process=process,
            workers=settings.workers.attacher,
            backoff_start=options.retry_interval_start,
            backoff_max=options.retry_interval_max,
            observer=metrics.from_memo(memo),
        )

    memo.attach_queue = queue("attach", attacher.sync_attach)
    memo.detach_queue = queue("detach", attacher.sync_detach)
    memo.attacher_volumes_queue = queue("attacher-volumes", attacher.sync_volume)
    for work_queue in (memo.attach_queue, memo.detach_queue, memo.attacher_volumes_queue):
        work_queue.start()
    memo.reconciler = None
    if attacher.can_reconcile:
        memo.reconciler = runtime.supervise(
            memo, _reconcile(memo, options.reconcile_sync), name="attacher-reconciler"
        )
    memo.stoppers.append(_stopper(memo))
    runtime.subscribe(memo, kube.VOLUME_ATTACHMENTS, _attachment_changed(memo))
    runtime.subscribe(memo, kube.VOLUMES, _volume_changed(memo))
    log.info("attacher_started", trivial=attacher.trivial, reconcile=attacher.can_reconcile)
    for va in attacher.caches.attachments:  # the primed cache: pending attaches and detaches
        _dispatch(memo, attacher.route(va["metadata"]["name"]), va["metadata"]["name"])
    for pv in attacher.caches.volumes:
        if is_deleting(pv) and has_finalizer(pv, attacher.finalizer):
            memo.attacher_volumes_queue.add(pv["metadata"]["name"])


def _stopper(memo: kopf.Memo) -> Callable[[], Awaitable[None]]:
    async def stop() -> None:
        if memo.reconciler is not None:
            memo.reconciler.cancel()
        await asyncio.gather(
            memo.attach_queue.stop(grace=5.0),
            memo.detach_queue.stop(grace=5.0),
            memo.attacher_volumes_queue.stop(grace=5.0),
        )

    return stop


def _dispatch(memo: kopf.Memo, route: Route, name: str) -> None:
    if route is Route.ATTACH:
        memo.attach_queue.add(name)
    elif route is Route.DETACH:
        memo.attach_queue.discard(name)  # a pending attach retry is moot now
        memo.detach_queue.add(name)


async def _reconcile(memo: kopf.Memo, interval: float) -> None:
    """`--reconcile-sync`: re-sync VAs whose `attached` disagrees with ListVolumes."""
    attacher: Attacher = memo.attacher
    while True:
        await asyncio.sleep(interval)
        try:
            plan = await attacher.reconcile()
        except (CSIError, kube.KubeError) as exc:
            log.warning("reconcile_failed", error=str(exc))
            continue
        except Exception as exc:  # a bug: say so, and keep reconciling
            log.warning("reconcile_failed", error=repr(exc), exc_info=exc)
            continue
        for name in plan.resync:
            _dispatch(memo, attacher.route(name), name)


def _attachment_changed(memo: kopf.Memo) -> runtime.Listener:
    def changed(va: dict[str, Any], deleted: bool) -> None:  # the cache is current already
        attacher: Attacher = memo.attacher
        name = va["metadata"]["name"]
        if deleted:
            attacher.observe(va, deleted=True)
            memo.attach_queue.discard(name)
            memo.detach_queue.discard(name)
            pv_name = volume_name(va)
            if pv_name is not None:  # its PV may be free of VAs now
                memo.attacher_volumes_queue.add(pv_name)
            return
        _dispatch(memo, attacher.observe(va), name)

    return changed


def _volume_changed(memo: kopf.Memo) -> runtime.Listener:
    def changed(pv: dict[str, Any], deleted: bool) -> None:
        attacher: Attacher = memo.attacher
        name = pv["metadata"]["name"]
        if deleted:
            memo.attacher_volumes_queue.discard(name)
        elif is_deleting(pv) and has_finalizer(pv, attacher.finalizer):
            memo.attacher_volumes_queue.add(name)

    return changed
