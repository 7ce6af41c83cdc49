"""external-resizer as kopf handlers: claims grow (ControllerExpandVolume) and change their
VolumeAttributesClass (ControllerModifyVolume).

Thin on purpose. kopf's watches of claims, PVs and VolumeAttachments feed two work queues, one
for resizes (`resizer`) and one for modifications (`modifier`), each with `resizer.workers`
workers (Go's `--workers`, 10), retried per claim with backoff (1 s → 5 min); the operations
live in `kopf_csi.resizing`. Which resizer runs is decided once, from the driver's
capabilities: the CSI one, the trivial one (node-only expansion), or none (logged once).

No pods are watched: a claim whose offline-only driver said "volume in use" is re-checked when
a VolumeAttachment of its PV changes, and on its backoff (see `kopf_csi.resizing.inuse`).
Watch-event handlers write nothing on the objects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import kopf
import structlog

from kopf_csi import events, kube, metrics, names, runtime
from kopf_csi.caches import object_key
from kopf_csi.csi import CSIError
from kopf_csi.queueing import WorkQueue
from kopf_csi.resizing.modes import ResizeMode, can_modify, resize_mode
from kopf_csi.resizing.modifier import Modifier
from kopf_csi.resizing.operations import Resizer

log = structlog.get_logger("kopf_csi.resizer")


@kopf.on.startup(id="resizer.start")
async def start(memo: kopf.Memo, **_: Any) -> None:
    settings = runtime.settings_from_memo(memo)
    if not await runtime.wait_for_driver(memo):
        return
    options = settings.resizer
    memo.resizer = memo.modifier = None
    memo.resize_queue = memo.modify_queue = memo.resizer_resync = None
    if not options.enabled:
        log.info("resizer_disabled", reason="disabled by the settings")
        return
    try:
        node_capabilities = await memo.csi.node_capabilities()
    except CSIError as exc:  # a controller-only driver may not serve the node service here
        log.info("node_capabilities_unknown", error=str(exc))
        node_capabilities = frozenset()
    mode = resize_mode(memo.driver, node_capabilities)
    component = names.RESIZER_EVENT_COMPONENT.format(driver=memo.driver.name)
    api = memo.api.as_manager(names.MANAGER_RESIZER)
    recorder = events.Recorder(api, component=component)
    common = {"csi_client": memo.csi, "api": api, "caches": memo.caches,
              "recorder": recorder, "driver": memo.driver, "options": options}  # fmt: skip

    def queue(name: str, process: Callable[[str], Awaitable[Any]]) -> WorkQueue[str]:
        work_queue: WorkQueue[str] = WorkQueue(
            name=name,
            process=process,
            workers=options.workers,
            backoff_start=options.retry_interval_start,
            backoff_max=options.retry_interval_max,
            observer=metrics.from_memo(memo),
        )
        work_queue.start()
        return work_queue

    if mode is ResizeMode.DISABLED:
        log.info("resizer_disabled", reason="the driver can expand neither on the controller"
                 " nor on the node (or has no controller service)")  # fmt: skip
    else:
        memo.resizer = Resizer(mode=mode, **common)
        memo.resize_queue = queue("resizer", memo.resizer.sync_claim)
    if can_modify(memo.driver):
        memo.modifier = Modifier(**common)
        memo.modify_queue = queue("modifier", memo.modifier.sync_claim)
    if memo.resizer is not None or memo.modifier is not None:
        memo.resizer_resync = runtime.supervise(
            memo, _resync(memo, options.resync_period), name="resizer-resync"
        )
    memo.stoppers.append(_stopper(memo))
    runtime.subscribe(memo, kube.CLAIMS, _claim_changed(memo))
    runtime.subscribe(memo, kube.VOLUMES, _volume_changed(memo))
    runtime.subscribe(memo, kube.VOLUME_ATTACHMENTS, _attachment_changed(memo))
    log.info("resizer_started", mode=mode.value, modify=memo.modifier is not None)


def _stopper(memo: kopf.Memo) -> Callable[[], Awaitable[None]]:
    async def stop() -> None:
        if memo.resizer_resync is not None:
            memo.resizer_resync.cancel()
        queues = [q for q in (memo.resize_queue, memo.modify_queue) if q is not None]
        await asyncio.gather(*(q.stop(grace=5.0) for q in queues))

    return stop


async def _resync(memo: kopf.Memo, interval: float) -> None:
    """`--resync-period`: every claim with work ahead is looked at again."""
    while True:
        await asyncio.sleep(interval)
        if memo.resizer is not None:
            for key in memo.resizer.pending():
                memo.resize_queue.add(key)
        if memo.modifier is not None:
            for key in memo.modifier.pending():
                memo.modify_queue.add(key)


def _claim_changed(memo: kopf.Memo) -> runtime.Listener:
    def changed(claim: dict[str, Any], deleted: bool) -> None:
        key = object_key(claim)
        pairs = ((memo.resizer, memo.resize_queue), (memo.modifier, memo.modify_queue))
        for controller, work_queue in pairs:
            if controller is None or work_queue is None:
                continue
            if controller.observe(claim, deleted=deleted):
                work_queue.add(key)
            elif deleted:
                work_queue.discard(key)

    return changed


def _volume_changed(memo: kopf.Memo) -> runtime.Listener:
    """A PV's change may be what a claim waits for (the cache is current already)."""

    def changed(volume: dict[str, Any], deleted: bool) -> None:
        if memo.resizer is not None and not deleted:
            for key in memo.resizer.claims_of_volume(volume["metadata"]["name"]):
                memo.resize_queue.add(key)

    return changed


def _attachment_changed(memo: kopf.Memo) -> runtime.Listener:
    """A detached volume may be expandable now by an offline-only driver."""

    def changed(va: dict[str, Any], deleted: bool) -> None:
        resizer: Resizer | None = memo.resizer
        if resizer is None or not resizer.in_use:
            return
        volume = ((va.get("spec") or {}).get("source") or {}).get("persistentVolumeName")
        for key, waiting_for in list(resizer.in_use.items()):
            if waiting_for == volume:
                memo.resize_queue.add(key)

    return changed
