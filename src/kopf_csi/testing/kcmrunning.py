"""How the kube-controller-manager stand-in runs its controllers: caches, queues, passes, workers.

`kcm.ControllerManager` holds the controllers' decisions and writes (the PV controller, the
protection controllers, the scheduler's selected-node, the attach/detach controller); its base
class here, `ControllerRunner`, holds the machinery under them: which objects go to which
controller, when and in what order, and how long each write of theirs takes.

How it runs: in-process on the emulator's change feed, as one asyncio task. Every batch of
changes updates local caches (the informers) and triggers one pass: synchronous by default
(atomic for the emulator), or with ``yield_every`` letting the API serve others between
objects, as a KCM in its own process never holds the API server up. The PV
controller and the protection controllers sync only what the batch touched (marked by the
controllers' `_observe`), as the real ones work through queues of changed objects: a changed
claim, the volume it names and the volume naming it; a changed volume and the claim its
claimRef names; the claims of a changed pod; and everything when a StorageClass or CSIDriver
changes, or on the periodic resync (``resync_period``, KCM's ``--pvclaimbinder-sync-period``,
15 s). A full pass over every object per batch made the stand-in's cost grow with the cluster:
13-27 ms per pass with 200 claims, during which the emulated API served nobody. The scheduler
and the attach/detach controller still look at every pod. Writes go through the emulator's
Python API; their changes come back as the next batch, and a pass that writes nothing ends the
cycle.

With a latency model (the cluster's ``latency``, ``testing/latency.py``; decided when the
stand-in is made, so every test without one runs the passes above, unchanged), KCM's requests
take the real server's time, and its controllers work side by side as the real ones do. Each
write waits its drawn duration (by verb and resource, after the previous write to the same
object, the HTTP requests' own order) and is applied at its end, as a blocking client-go
round trip; a stale copy then loses with a 409, as the real one's does. A worker's waits
keep the model's pace when this process's loop is late to end them (`latency.Lateness`: what
one wait ended late is taken off the worker's next ones), or a busy benchmark process made
each of the claim worker's requests take 4.5 times its drawn duration, and the worker, not
the model, decided the churn's latencies. Each worker's queue is a plain workqueue's (the
PV controller's are not rate-limited): first queued, first synced; a key queued again while
it is synced goes to the back once that sync is done; its figures (busy, its requests'
drawn and taken seconds, queue waits, depth) are `worker_stats`. Who waits for whom, as read
in kubernetes/kubernetes:

- pv_controller_base.go ``Run``: one ``claimWorker`` and one ``volumeWorker`` goroutine, each
  taking one key at a time off its queue (the queue's comment: one worker each, ``syncClaim``
  is not reentrant); its ``resync`` queues every claim and volume to those two queues only.
  ``bind`` (pv_controller.go) runs in the claim worker: the PV's claimRef
  if needed, the PV's status, the claim's volumeName and annotations, the claim's status,
  each ``Update`` waiting for the one before. So N claims bind one after the other.
- pv_controller.go ``provisionClaim`` hands ``provisionClaimOperationExternal`` (the update
  that sets both storage-provisioner annotations, then the ``ExternalProvisioning`` event) to
  ``scheduleOperation``: a goroutine per claim (goroutinemap: one at a time per claim, a
  second request while it runs is skipped), so the claim worker goes on at once and the
  annotations of a burst go out side by side. Deletion of a volume (``reclaimVolume``) is such
  an operation too, started at every sync of a released volume unless one runs; for an
  external provisioner it only reads the volume afresh (``deleteVolumeOperation``'s GET).
- ``syncVolume``, for a claim it finds in neither cache, asks the API server (a GET, in the
  volume worker) before it marks the volume Released: that read waits its time too.
- The protection controllers run with ``Run(ctx, 1)`` (cmd/kube-controller-manager, core.go):
  one worker each, so claims' and volumes' finalizers go one at a time. pvc-protection's
  worker takes the claims queued for one namespace as a batch (pvc_protection_controller.go,
  ``processPVCsByNamespace``); a deleted claim that no pod in its informer uses is checked
  again against a live LIST of the namespace's pods, made once per batch (``askAPIServer``,
  ``LazyLivePodList``) and waited for like any request (`_live_pods`).
- Events go through client-go's broadcaster, which posts them from its own goroutine: nobody
  waits for them; each lands after its own time.
- The scheduler's selected-node and the attach/detach controller share one worker here; the
  VolumeAttachments' creation and deletion are operations of their own (the attach/detach
  controller's operation executor runs one goroutine per volume).

- Each controller has a client of its own (``ClientBuilder.ClientOrDie(name)``), and client-go
  gives each client a token bucket (``--kube-api-qps``/``--kube-api-burst``, KCM-wide; KCM's
  defaults are 20/30): with ``kube_api_qps``, every request of a controller (its workers', its
  operations', its events') first takes a token of its client's bucket, in the order asked
  (`kopf_csi.throttling.TokenBucket`, client-go's semantics), then takes its time. The PV
  controller's client is the busiest: its events, and in a deletion a GET of the claim, the
  PUT of the phase and a GET of the volume by every deletion operation (`kcm.py`,
  ``_reclaim``). The scheduler's writes are kube-scheduler's, not KCM's: not limited here.

Left out: any dependence of a request's duration on how many are in flight: the model's means
are the real server's averages over a whole burst. Unlike the real informers' handlers, a
changed claim also queues its volume and a changed volume its claim at once (the real ones
queue only their own kind; the volume worker queues a claim it finds unbound, the claim
worker a deleted claim's volume): more syncs here, none of them a write the real controller
would not make, so only this process's CPU differs.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

from kopf_csi.testing.emulator import Body, EmulatedCluster, StatusError, Subscription
from kopf_csi.testing.latency import Lateness, ObjectPath
from kopf_csi.testing.standins import StandIn
from kopf_csi.throttling import TokenBucket

__all__ = [
    "ATTACH_DETACH", "BINDER", "PVCS", "PVC_PROTECTION", "PVS", "PV_PROTECTION",
    "ControllerRunner",
]  # fmt: skip

log = logging.getLogger(__name__)

PVCS, PVS = "persistentvolumeclaims", "persistentvolumes"

# The controllers' clients, by the names KCM builds them with (cmd/kube-controller-manager,
# ``ClientBuilder.ClientOrDie``): one token bucket each.
BINDER = "persistent-volume-binder"
PVC_PROTECTION = "pvc-protection-controller"
PV_PROTECTION = "pv-protection-controller"
ATTACH_DETACH = "attachdetach-controller"

_T = TypeVar("_T")
Key = tuple[str, str]  # namespace ("" for a cluster-scoped object), name
Work = Callable[[], Awaitable[None]]

_IN_OPERATION = contextvars.ContextVar("kcm_in_operation", default=False)
"""Running in a per-object operation of its own (a goroutine in KCM: `scheduleOperation`),
not in one of the workers that write one object at a time (`LatencyModel.sequential`)."""

_CLIENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("kcm_client", default=None)
"""Whose requests these are: the client (and so the token bucket) of the controller running
(None: not limited). Set by each worker; its operations and events inherit it."""

_BATCH: contextvars.ContextVar[_Batch | None] = contextvars.ContextVar("kcm_batch", default=None)
"""The batch of claims pvc-protection's worker is on (None: not batched)."""

_LANE: contextvars.ContextVar[_Lane | None] = contextvars.ContextVar("kcm_lane", default=None)
"""The worker whose sync this is (None: an operation or an event, not the worker's time)."""

_RESYNCING = contextvars.ContextVar("kcm_resyncing", default=False)
"""Syncing claims for a resync: their events are posted again (per task: a provisioning
operation started by a resync's sync posts again too)."""


@contextlib.contextmanager
def _setting(var: contextvars.ContextVar[_T], value: _T) -> Iterator[None]:
    """`var` is `value` inside (in this task's context), and as it was after."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


@dataclasses.dataclass
class _Batch:
    """The claims of one namespace that pvc-protection's worker takes together, and the live
    list of that namespace's pods once one of them asked for it (``LazyLivePodList``)."""

    pods: list[Body] | None = None


@dataclasses.dataclass
class _Lane:
    """One of KCM's workers, with a latency model: its queue of keys (each with "is it a
    resync"), synced one at a time, and whether it is busy with one. As client-go's plain
    workqueue (the PV controller's ``claims`` and ``volumes`` queues are not rate-limited): a
    key already queued keeps its place, keys are taken in the order first queued, and a key
    queued again while it is synced goes to the back of the queue once that sync is done
    (the queue's ``dirty`` and ``processing`` sets: ``Done`` queues it then)."""

    plural: str
    sync: Callable[[Body], Awaitable[None]] | None  # None: the scheduler and attach/detach
    client: str | None = None  # whose token bucket its requests take (None: no limit)
    by_namespace: bool = False  # a namespace's queued keys taken as one batch (pvc-protection)
    resyncs: bool = False  # every cached object queued at a resync (the PV controller's own)
    keys: dict[Key, bool] = dataclasses.field(default_factory=dict)
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    busy: bool = False
    queued_at: dict[Key, float] = dataclasses.field(default_factory=dict)
    lateness: Lateness = dataclasses.field(default_factory=Lateness)  # this loop's, owed to it
    processing: set[Key] = dataclasses.field(default_factory=set)
    again: dict[Key, bool] = dataclasses.field(default_factory=dict)  # queued while processed
    stats: dict[str, float] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(
            (
                "synced", "busy_seconds", "requests", "model_seconds", "request_seconds",
                "credited_seconds", "waited_seconds", "max_wait_seconds", "max_depth",
            ),
            0.0,
        )
    )  # fmt: skip
    """What the worker did (`ControllerRunner.worker_stats`): keys synced, seconds busy; its
    own requests, the durations the model drew for them, and the seconds from each request's
    start to its end (the drawn duration, a wait behind an earlier write to the same object,
    and this process's loop being late to wake the worker, less what `lateness` gave back:
    ``credited_seconds``); seconds keys waited in the queue (in all, and the longest), the
    deepest queue. Busy minus the requests' seconds is this process's CPU for the syncs and
    their writes, which a real KCM does not spend here."""

    def put(self, key: Key, resyncing: bool, now: float) -> None:
        """Queue `key` (a key already queued keeps its place; a resync's mark is kept; a key
        being synced is queued once its sync is done, `done`)."""
        if key in self.processing and key not in self.keys:
            self.again[key] = resyncing or self.again.get(key, False)
            return
        if key not in self.keys:
            self.queued_at[key] = now
        self.keys[key] = resyncing or self.keys.get(key, False)
        self.stats["max_depth"] = max(self.stats["max_depth"], len(self.keys))

    def take(self, now: float) -> list[tuple[Key, bool]]:
        """The next key (the oldest queued), or with `by_namespace` every key queued for its
        namespace, in the order queued; taken off the queue."""
        first = next(iter(self.keys))
        keys = [k for k in self.keys if k[0] == first[0]] if self.by_namespace else [first]
        for key in keys:
            waited = now - self.queued_at.pop(key, now)
            self.stats["waited_seconds"] += waited
            self.stats["max_wait_seconds"] = max(self.stats["max_wait_seconds"], waited)
        self.stats["synced"] += len(keys)
        self.processing.update(keys)
        return [(key, self.keys.pop(key)) for key in keys]

    def done(self, batch: list[tuple[Key, bool]], now: float) -> None:
        """The batch's syncs are over: a key queued meanwhile goes to the back now."""
        for key, _ in batch:
            self.processing.discard(key)
            if key in self.again:
                self.put(key, self.again.pop(key), now)


class ControllerRunner(StandIn):
    """The machinery under KCM's controllers: the subclass's `_sync_*` methods are the
    controllers, and its `_observe` marks what each change touches (`_dirty_claims`,
    `_dirty_volumes`, `_everything`)."""

    def __init__(
        self,
        cluster: EmulatedCluster,
        *,
        enabled: dict[str, bool],  # "volumes", "attachments", "scheduler", "protection"
        resync_period: float | None,  # every claim and volume synced again (None: never)
        yield_every: int | None,  # objects per turn of the loop (None: a pass at once)
        kube_api_qps: float | None = None,  # each controller client's limit (None: none)
        kube_api_burst: int = 30,
    ) -> None:
        super().__init__(cluster)
        self.enabled = enabled
        self.resync_period = resync_period
        self.yield_every = yield_every
        """With a number, a pass lets the emulated API serve others after that many objects,
        as a KCM in its own process would (the benchmark's); its cache can then be stale, and
        a write of it lose a race, as the real one's can. None: each pass at once (atomic)."""
        self.kube_api_qps = kube_api_qps
        self.kube_api_burst = kube_api_burst
        """KCM's ``--kube-api-qps``/``--kube-api-burst``: a token bucket per controller's
        client, with a latency model only (without one, a pass stays atomic)."""
        self.buckets: dict[str, TokenBucket] = {}
        """The controllers' clients' buckets, by client name, as they were first used."""
        self._lock = asyncio.Lock()
        self.passes = 0
        self.resyncs = 0
        # what changed since the last take, in the order it first did (an ordered set)
        self._dirty_claims: dict[Key, None] = {}
        self._dirty_volumes: dict[Key, None] = {}
        self._everything = True  # the first pass looks at everything listed
        self._resync_due = False
        self._passed = asyncio.Event()
        self.timed = cluster.latency.model.enabled
        """The cluster has a latency model (`testing/latency.py`): each write of ours waits its
        duration, and the controllers work side by side as KCM's workers do (`_lanes`)."""
        self._lanes: dict[str, _Lane] = {}
        self._operations: dict[str, asyncio.Task[None]] = {}
        self._sent = itertools.count()
        self._wakeups: set[asyncio.TimerHandle] = set()
        self._woken: set[asyncio.Task[None]] = set()

    @property
    def operations(self) -> frozenset[str]:
        """The names of the operations running now (with a latency model), e.g.
        ``attach-<VolumeAttachment>``: what a test waits for to act in the middle of one."""
        return frozenset(self._operations)

    # --- The controllers (the subclass's) --------------------------------------------------

    @abc.abstractmethod
    async def _sync_claim(self, claim: Body) -> None:
        """The PV controller's claim worker: one claim."""

    @abc.abstractmethod
    async def _sync_volume(self, volume: Body) -> None:
        """The PV controller's volume worker: one volume."""

    @abc.abstractmethod
    async def _sync_claim_protection(self, claim: Body) -> None:
        """The pvc-protection controller: one claim."""

    @abc.abstractmethod
    async def _sync_volume_protection(self, volume: Body) -> None:
        """The pv-protection controller: one volume."""

    @abc.abstractmethod
    async def _sync_scheduler(self) -> None:
        """The scheduler's selected-node, over every pod."""

    @abc.abstractmethod
    async def _sync_attachments(self) -> None:
        """The attach/detach controller, over every pod."""

    # --- The feed's batches, resyncs, and the passes (without a latency model) -------------

    async def settled(self) -> None:
        """Wait until every change committed so far has been through a pass (with a latency
        model: through the workers, and every write of theirs has landed)."""
        # A pass drains the feed, so an empty feed and no pass running means "all seen".
        while self._feed is not None and (
            self._feed.pending
            or self._lock.locked()
            or self._operations
            or any(lane.keys or lane.busy for lane in self._lanes.values())
        ):
            self._passed.clear()
            await self._passed.wait()

    async def _run(self, feed: Subscription) -> None:
        resync = None if self.resync_period is None else asyncio.create_task(self._resync())
        workers = [
            asyncio.create_task(self._work(lane), name=f"kcm-{name}")
            for name, lane in self._timed_lanes().items()
        ]
        try:
            while changes := await feed.batch():
                for change in changes:
                    self._observe(change)
                if self.timed:
                    self._dispatch()
                else:
                    await self._pass()
        finally:
            if resync is not None:
                resync.cancel()
            for handle in self._wakeups:
                handle.cancel()
            tasks = [*workers, *self._operations.values(), *self._woken]  # not landed: dropped
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _resync(self) -> None:
        assert self.resync_period is not None
        while True:
            await asyncio.sleep(self.resync_period)
            await self.resync()

    async def resync(self) -> None:
        """A resync now: every claim and volume is synced again (pending claims' events are
        posted again), as KCM's PV controller does every ``--pvclaimbinder-sync-period``."""
        self.resyncs += 1
        self._resync_due = True
        if self.timed:
            self._dispatch()
        else:
            await self._pass()

    def _wake_at(self, when: float) -> None:
        """Look again at `when` (the loop's time), with nothing changed meanwhile: a requeue
        after a back-off (a workqueue's ``AddAfter``, the scheduler's back-off queue)."""
        loop = asyncio.get_running_loop()

        def wake() -> None:
            self._wakeups.discard(handle)
            if self.timed:
                self._dispatch()
                return
            task = loop.create_task(self._pass(), name=f"{self.task_name}-wake")
            self._woken.add(task)
            task.add_done_callback(self._woken.discard)

        handle = loop.call_at(when, wake)
        self._wakeups.add(handle)

    async def _pass(self) -> None:
        async with self._lock:
            try:
                for done, step in enumerate(self._steps(), 1):
                    await step()  # without a latency model, nothing in it waits: atomic
                    if self.yield_every and done % self.yield_every == 0:
                        await asyncio.sleep(0)  # the API serves others, as KCM is elsewhere
            except Exception:  # a controller logs and carries on; the next change retries
                log.exception("kcm stand-in pass failed")
        self._passed.set()

    def _take_dirty(self, *, resync: bool = True) -> tuple[list[Key], list[Key], bool]:
        """The claims and volumes changed since the last take, in the order they first did (a
        workqueue's), and whether a resync is due. With `resync` (the passes), a resync's
        take is every claim and volume; without, the caller adds them where they belong."""
        resyncing, self._resync_due = self._resync_due, False
        if self._everything or (resyncing and resync):
            self._everything = False
            self._dirty_claims.update(dict.fromkeys(self._cache[PVCS]))
            self._dirty_volumes.update(dict.fromkeys(self._cache[PVS]))
        claims, volumes = list(self._dirty_claims), list(self._dirty_volumes)
        self._dirty_claims, self._dirty_volumes = {}, {}
        return claims, volumes, resyncing

    def _steps(self) -> Iterator[Callable[[], Awaitable[None]]]:
        """A pass, one object at a time (each read from the cache when its turn comes): the PV
        and protection controllers over what changed since the last pass (everything after a
        resync), the scheduler and the attach/detach controller over every pod."""
        self.passes += 1
        claims, volumes, resyncing = self._take_dirty()
        step = functools.partial
        if self.enabled["scheduler"]:
            yield step(self._whole, self._sync_scheduler)
        if self.enabled["volumes"]:
            for key in claims:
                yield step(self._step, PVCS, key, self._sync_claim, resyncing=resyncing)
            for key in volumes:
                yield step(self._step, PVS, key, self._sync_volume)
        if self.enabled["attachments"]:
            yield step(self._whole, self._sync_attachments)
        if self.enabled["protection"]:
            for key in claims:
                yield step(self._step, PVCS, key, self._sync_claim_protection)
            for key in volumes:
                yield step(self._step, PVS, key, self._sync_volume_protection)

    async def _step(
        self, plural: str, key: Key, fn: Callable[[Body], Awaitable[None]], resyncing: bool = False
    ) -> None:
        obj = self._cache[plural].get(key)
        if obj is None:
            return  # deleted meanwhile
        with _setting(_RESYNCING, resyncing):
            try:
                await fn(obj)
            except Exception as error:  # e.g. deleted meanwhile (a 404, a stale 409): next pass
                self._failed(fn.__name__, plural, key, error)

    async def _whole(self, fn: Callable[[], Awaitable[None]]) -> None:
        """A controller that looks at every pod (the scheduler, attach/detach): a failure is
        logged and the rest of the pass goes on; the next pass looks at everything again."""
        try:
            await fn()
        except Exception as error:  # e.g. a stale claim's 409, a VolumeAttachment gone: 404
            self._failed(fn.__name__, "pods", ("", "every pod"), error)

    def _failed(self, what: str, plural: str, key: Key, error: Exception) -> None:
        if isinstance(error, StatusError) and error.code in (404, 409):
            # A lost race (the object changed or went away meanwhile), synced again on the next
            # pass: hundreds a minute under churn, which buried a benchmark's own output.
            log.debug("kcm stand-in: %s %s: %s", what, key[1], error)
        elif isinstance(error, StatusError):
            log.warning("kcm stand-in: %s %s: %s", what, key[1], error)
        else:  # a bug of ours: said loudly, and the rest of the pass goes on
            log.exception("kcm stand-in: %s %s failed", what, key[1])
        if plural in (PVCS, PVS):
            (self._dirty_claims if plural == PVCS else self._dirty_volumes)[key] = None

    @staticmethod
    def _resyncing() -> bool:
        """Whether the sync running now is a resync's (its events are posted again)."""
        return _RESYNCING.get()

    # --- With a latency model: KCM's workers side by side, each write waiting its time -----

    def _timed_lanes(self) -> dict[str, _Lane]:
        """The workers, as kube-controller-manager runs them (pv_controller_base.go `Run`: one
        claim worker, one volume worker; the protection controllers' `Run(ctx, 1)`); the
        scheduler and the attach/detach controller share one. None without a model."""
        if not self.timed:
            return {}
        enabled = self.enabled
        lanes = {
            "claims": (
                _Lane(PVCS, self._sync_claim, BINDER, resyncs=True) if enabled["volumes"] else None
            ),
            "volumes": (
                _Lane(PVS, self._sync_volume, BINDER, resyncs=True) if enabled["volumes"] else None
            ),
            "claim-protection": (
                _Lane(PVCS, self._sync_claim_protection, PVC_PROTECTION, by_namespace=True)
                if enabled["protection"]
                else None
            ),
            "volume-protection": (
                _Lane(PVS, self._sync_volume_protection, PV_PROTECTION)
                if enabled["protection"]
                else None
            ),
            "pods": _Lane("pods", None),
        }
        self._lanes = {name: lane for name, lane in lanes.items() if lane is not None}
        return self._lanes

    def _dispatch(self) -> None:
        """Queue what changed to every worker that syncs it, and wake them. A resync queues
        every cached claim and volume to the PV controller's two workers only (its own
        ``resync``, every ``--pvclaimbinder-sync-period``): the protection controllers'
        informers have no such period, so they get what changed, as at any other time."""
        claims, volumes, resyncing = self._take_dirty(resync=False)
        now = asyncio.get_running_loop().time()
        for lane in self._lanes.values():
            keys = {PVCS: claims, PVS: volumes}.get(lane.plural, [("", "")])
            resync = resyncing and lane.resyncs
            for key in keys:
                lane.put(key, resync, now)
            if resync:
                for key in list(self._cache[lane.plural]):
                    lane.put(key, True, now)
            lane.wake.set()

    def worker_stats(self) -> dict[str, dict[str, float]]:
        """Each worker's figures so far (with a latency model; empty without): keys synced,
        seconds busy, seconds keys waited in its queue (in all, and the longest), the deepest
        queue. The claim worker's busy share is how close KCM's binding is to its limit."""
        return {
            name: {key: round(value, 3) for key, value in lane.stats.items()}
            for name, lane in self._lanes.items()
        }

    async def _work(self, lane: _Lane) -> None:
        """One worker: its keys one at a time, in the order queued (a workqueue's)."""
        _CLIENT.set(lane.client)  # this task's: its operations and events inherit it
        _LANE.set(lane)
        while True:
            await lane.wake.wait()
            lane.wake.clear()
            loop = asyncio.get_running_loop()
            while lane.keys:
                started = loop.time()
                batch = lane.take(started)
                lane.busy = True
                try:
                    await self._work_on(lane, batch)
                except Exception:  # as `_pass`: said, and the next change retries
                    log.exception("kcm stand-in: %s worker failed", lane.plural)
                finally:
                    lane.busy = False
                    lane.stats["busy_seconds"] += loop.time() - started
                    lane.done(batch, loop.time())
            lane.lateness.forgive()  # nothing waits behind this worker now
            self._passed.set()

    async def _work_on(self, lane: _Lane, batch: list[tuple[Key, bool]]) -> None:
        if lane.sync is None:
            if self.enabled["scheduler"]:
                with _setting(_CLIENT, None):  # kube-scheduler's own client, not KCM's
                    await self._whole(self._sync_scheduler)
            if self.enabled["attachments"]:
                with _setting(_CLIENT, ATTACH_DETACH):
                    await self._whole(self._sync_attachments)
            return
        with _setting(_BATCH, _Batch() if lane.by_namespace else None):
            for key, resyncing in batch:
                await self._step(lane.plural, key, lane.sync, resyncing=resyncing)

    async def _live_pods(self, namespace: str) -> list[Body]:
        """The namespace's pods as a live LIST returns them (after its time), once per batch
        of pvc-protection's (``LazyLivePodList``: the first claim that needs it lists)."""
        batch = _BATCH.get()
        if batch is not None and batch.pods is not None:
            return batch.pods
        async with self._wait(ObjectPath("pods", namespace, None), "GET"):
            pods = self.cluster.objects("pods", namespace=namespace)
        if batch is not None:
            batch.pods = pods
        return pods

    @contextlib.asynccontextmanager
    async def _wait(self, path: ObjectPath, method: str) -> AsyncIterator[None]:
        """A request of ours waits for its client's token (with `kube_api_qps`), then takes
        its time (the cluster's model, each object's writes in turn, as the HTTP requests');
        the write is made inside. None without a model."""
        if not self.timed:
            yield
            return
        await self._throttle()
        sequential = not _IN_OPERATION.get()
        lane = _LANE.get() if sequential else None
        loop = asyncio.get_running_loop()
        started = loop.time()
        latency = self.cluster.latency
        async with latency.request(
            method,
            path,
            watch=False,
            sequential=sequential,
            lateness=None if lane is None else lane.lateness,
        ) as drawn:
            if lane is not None:
                lane.stats["credited_seconds"] = lane.lateness.credited
                lane.stats["requests"] += 1
                lane.stats["model_seconds"] += drawn
                lane.stats["request_seconds"] += loop.time() - started
            yield

    async def _throttle(self) -> None:
        """client-go's ``tryThrottle``: a token of the running controller's client, waited for
        in the order asked (none without `kube_api_qps`, or outside a controller's client)."""
        client = _CLIENT.get()
        if self.kube_api_qps is None or client is None:
            return
        bucket = self.buckets.get(client)
        if bucket is None:
            bucket = self.buckets[client] = TokenBucket(self.kube_api_qps, self.kube_api_burst)
        delay = bucket.reserve(asyncio.get_running_loop().time())
        if delay > 0:
            await asyncio.sleep(delay)

    async def _timed_update(
        self, plural: str, obj: Body, changes: Body, *, status: bool = False
    ) -> Body:
        """`_update`, once the PUT's time has passed (client-go's blocking `Update`)."""
        meta = obj["metadata"]
        path = ObjectPath(plural, meta.get("namespace"), meta["name"], "status" if status else None)
        async with self._wait(path, "PUT"):
            return self._update(plural, obj, changes, status=status)

    async def _operation(self, name: str, plural: str, key: Key, work: Work) -> None:
        """Work KCM does in a goroutine of its own (`scheduleOperation`, the attach/detach
        controller's operation executor): one at a time per name, the worker going on at
        once. Without a model: done here and now, as part of the pass."""
        if not self.timed:
            await work()
        else:
            self._start(name, plural, key, work)

    def _start(self, name: str, plural: str, key: Key, work: Work) -> None:
        """`work` as a task of its own, unless one of that name runs (with a model only)."""
        if name in self._operations:  # goroutinemap: already running, skipped
            return

        async def run() -> None:
            _IN_OPERATION.set(True)
            try:
                await work()
            except Exception as error:  # as a failed sync: said, and synced again
                self._failed(name, plural, key, error)
            finally:
                del self._operations[name]
                self._passed.set()

        self._operations[name] = asyncio.create_task(run(), name=f"kcm-{name}")

    def _send(
        self, method: str, namespace: str | None, name: str | None, write: Callable[[], Body]
    ) -> None:
        """An event, which client-go's broadcaster posts from its own goroutine: nobody
        waits for it (with a model, it lands after its time)."""
        if not self.timed:
            write()
            return

        async def post() -> None:
            async with self._wait(ObjectPath("events", namespace, name), method):
                write()

        self._start(f"event-{next(self._sent)}", "events", (namespace or "", name or ""), post)
