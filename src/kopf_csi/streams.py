"""Passing the operator's claim and PV streams on to the handlers of `kopf_csi.on`.

`kopf_csi_handlers.caches` hands every claim and PV event of its informers to `Streams` after the
controllers have had it. `volume_changes` decides, from what was seen of a PV before, which
of provisioned / released / deleted an event means (pure); a `_Worker` per handler calls it
in a task of its own, from a bounded queue, so that the informer never waits for a user's
handler and one handler's exception is logged and goes no further.

What is remembered: the uids of the PVs seen, and of those seen Released, only when some
handler wants provisioned or released events (about 100 bytes a PV).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import structlog

from kopf_csi import kube, logs, names

__all__ = ["MAX_QUEUED", "Event", "StreamHandler", "Streams", "volume_changes"]

MAX_QUEUED = 10_000
"""Events waiting per handler; more are dropped with a warning (the first, then every 1,000th)."""
DROPS_PER_WARNING = 1000

Body = Mapping[str, Any]
Event = Literal[
    "claim_event", "volume_event", "volume_provisioned", "volume_released", "volume_deleted"
]


@dataclasses.dataclass(frozen=True)
class StreamHandler:
    """One handler of `kopf_csi.on`: what it is called for, and how it is named in the logs."""

    event: Event
    fn: Callable[..., Any]
    id: str
    provisioner: str | None = None  # the volume events of this provisioner's PVs only


log = structlog.get_logger("kopf_csi.streams")


def _uid(obj: Body) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _released(volume: Body) -> bool:
    return (volume.get("status") or {}).get("phase") == "Released"


def _provisioner(volume: Body) -> str | None:
    annotations = (volume.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(names.ANN_PROVISIONED_BY)
    return str(value) if value else None


def volume_changes(type_: str, volume: Body, *, seen: bool, was_released: bool) -> list[str]:
    """What a PV's watch event means beyond itself: `volume_provisioned` (a dynamically
    provisioned PV not seen before), `volume_released` (its phase became Released),
    `volume_deleted`."""
    if type_ == "DELETED":
        return ["volume_deleted"]
    changes = []
    if not seen and _provisioner(volume) is not None:
        changes.append("volume_provisioned")
    if _released(volume) and not was_released:
        changes.append("volume_released")
    return changes


class _Worker:
    """One handler: its queue of keyword arguments, and the task that calls it in order."""

    def __init__(self, handler: StreamHandler, memo: Any) -> None:
        self.handler = handler
        self.memo = memo
        self.queue: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self.wakeup = asyncio.Event()
        self.dropped = 0
        self.busy = False  # calling the handler now
        self.task = asyncio.create_task(self._run(), name=f"stream handler {handler.id}")

    def put(self, kind: str, kwargs: dict[str, Any]) -> None:
        if len(self.queue) >= MAX_QUEUED:
            self.dropped += 1
            if self.dropped % DROPS_PER_WARNING == 1:
                log.warning(
                    "stream_events_dropped", handler=self.handler.id, queued=len(self.queue),
                    dropped=self.dropped,
                )  # fmt: skip
            return
        self.queue.append((kind, kwargs))
        self.wakeup.set()

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def _run(self) -> None:
        while True:
            while not self.queue:
                self.wakeup.clear()
                await self.wakeup.wait()
            kind, kwargs = self.queue.popleft()
            self.busy = True
            try:
                await self._handle(kind, kwargs)
            finally:
                self.busy = False

    async def _handle(self, kind: str, kwargs: dict[str, Any]) -> None:
        body: Body = kwargs["body"]
        logger = structlog.get_logger("kopf_csi.user").bind(
            handler=self.handler.id, **logs.object_fields(body, kind=kind)
        )
        try:
            if self.handler.event == "volume_provisioned":
                kwargs["claim"] = await self._claim_of(body)
            await self._call(dict(kwargs, logger=logger, memo=self.memo))
        except Exception as exc:  # the user's bug: said, and the next event comes
            log.exception(
                "stream_handler_failed", handler=self.handler.id, stream=self.handler.event,
                obj=body, kind=kind, error=str(exc) or repr(exc),
            )  # fmt: skip

    async def _call(self, kwargs: dict[str, Any]) -> None:
        fn = self.handler.fn
        if inspect.iscoroutinefunction(fn):
            await fn(**kwargs)
            return
        result = await asyncio.to_thread(fn, **kwargs)  # as kopf runs a sync handler
        if inspect.isawaitable(result):
            await result

    async def _claim_of(self, volume: Body) -> Body | None:
        """The claim in the PV's claimRef: the provisioner's cached copy, else read; None if
        it is gone or is another claim of the same name."""
        ref = (volume.get("spec") or {}).get("claimRef") or {}
        namespace, name = ref.get("namespace"), ref.get("name")
        if not namespace or not name:
            return None
        caches = getattr(self.memo, "caches", None)
        claim: Body | None = None
        if caches is not None:
            claim = caches.claims.get(f"{namespace}/{name}")
        if claim is None:
            claim = await self.memo.api.get(kube.CLAIMS, name, namespace)
        if claim is None or (ref.get("uid") and _uid(claim) != ref["uid"]):
            return None
        return claim


class Streams:
    """The handlers of `kopf_csi.on` for one operator run, fed by `kopf_csi_handlers.caches`."""

    def __init__(
        self, handlers: Sequence[StreamHandler], memo: Any, *, volumes: Iterable[Body] = ()
    ) -> None:
        self._workers = [_Worker(handler, memo) for handler in handlers]
        self._by_event: dict[str, list[_Worker]] = collections.defaultdict(list)
        for worker in self._workers:
            self._by_event[worker.handler.event].append(worker)
        # The PVs that exist already were seen (`volumes`: the primed cache): not provisioned.
        self._tracking = bool(self._by_event.keys() & {"volume_provisioned", "volume_released"})
        self._seen: set[str] = set()
        self._released: set[str] = set()
        if self._tracking:
            for volume in volumes:
                self._remember(volume)

    def __len__(self) -> int:
        return len(self._workers)

    @property
    def pending(self) -> int:
        """Events queued for the handlers or being handled now (0: every handler is idle)."""
        return sum(len(worker.queue) + worker.busy for worker in self._workers)

    async def stop(self) -> None:
        for worker in self._workers:
            await worker.stop()

    def claim(self, type_: str, claim: Body) -> None:
        for worker in self._by_event.get("claim_event", ()):
            worker.put("PersistentVolumeClaim", {"type": type_, "claim": claim, "body": claim})

    def volume(self, type_: str, volume: Body) -> None:
        provisioner = _provisioner(volume)
        self._put("volume_event", provisioner, {"type": type_, "volume": volume, "body": volume})
        if not self._tracking and "volume_deleted" not in self._by_event:
            return
        uid = _uid(volume)
        changes = volume_changes(
            type_, volume, seen=uid in self._seen, was_released=uid in self._released
        )
        if type_ == "DELETED":
            self._seen.discard(uid)
            self._released.discard(uid)
        elif self._tracking:
            self._remember(volume)
        for change in changes:
            self._put(change, provisioner, {"volume": volume, "body": volume})

    def _put(self, event: str, provisioner: str | None, kwargs: dict[str, Any]) -> None:
        for worker in self._by_event.get(event, ()):
            if worker.handler.provisioner in (None, provisioner):
                worker.put("PersistentVolume", dict(kwargs))

    def _remember(self, volume: Body) -> None:
        uid = _uid(volume)
        self._seen.add(uid)
        if _released(volume):
            self._released.add(uid)
        else:
            self._released.discard(uid)
