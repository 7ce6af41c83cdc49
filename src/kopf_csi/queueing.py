"""A rate-limited work queue: the asyncio port of client-go's `workqueue` every controller runs on.

What belongs here: keys waiting to be processed, a fixed set of workers, per-key retries with
exponential backoff, delayed adds, and the counts a metrics module reads. What does not: what
a key means, reading or writing objects, kopf, or the Kubernetes client. Those are the
`process` coroutine's business; it returns an `Outcome` saying what happens to the key next.

The guarantees are client-go's (`k8s.io/client-go/util/workqueue`):

- a key is queued at most once: adding a queued key does nothing (dedupe);
- a key is never processed by two workers at once: a key added while it is being processed is
  marked dirty and queued again when that run finishes, so events are never lost;
- keys are taken in the order they were first queued (FIFO);
- a failing key is retried forever with its own exponential backoff (1 s doubling to 5 min by
  default: the sidecars' `--retry-interval-start/-max`, see `next_delay`);
  a success forgets its failures. external-attacher ignores `isFinalError` and retries every
  error this way; external-provisioner retries a live claim forever (#154 → PR #216).

Where this port decides differently from client-go, it is for fewer redundant runs, and safe
because `process` is level-triggered (it looks at the object's state now, not at the event):

- an immediate `add()` supersedes a pending delayed add of the same key (the run it causes
  decides the next one), and so does a re-add that arrives while the key is processing: the
  key runs again at once, and that run's outcome counts instead of the superseded retry;
- `discard()` also drops the outcome of a run in flight, so a deleted object is not retried.

Fairness between concerns comes from separate queues, not priorities: each concern gets its own
queue with its own workers (attach and detach one each, claims and volumes one each), so a
burst of one kind cannot starve another. That is external-attacher issue #761 (detach bursts
starving attach in its single shared VA queue) and #706 (a backlog nobody could see: hence
`depth`, `in_flight`, `pending_delayed` and `on_depth`).

kopf runs sync handlers in executor threads, so `add`, `add_after`, `forget` and `discard`
called from another thread than the started queue's loop hop onto the loop
(`call_soon_threadsafe`) and take effect there, in the order they were called.

Delayed adds are the event loop's timers (`call_later`), not a sleeping task per key, so 10,000
backing-off keys cost 10,000 timer handles and no tasks.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import math
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, Protocol, TypeVar

import structlog

__all__ = [
    "DONE",
    "RETRY",
    "Clock",
    "KeyState",
    "Outcome",
    "QueueObserver",
    "WorkQueue",
    "next_delay",
    "retry_after",
    "started_queues",
]

logger = structlog.get_logger("kopf_csi.queueing")

_started: weakref.WeakSet[WorkQueue[Any]] = weakref.WeakSet()


def started_queues(loop: asyncio.AbstractEventLoop) -> list[WorkQueue[Any]]:
    """The queues started on `loop` (one operator's), for its read-only debug endpoint."""
    return [queue for queue in list(_started) if queue._loop is loop]


@dataclasses.dataclass(frozen=True)
class KeyState:
    """Where one key stands in a queue (`WorkQueue.key_state`), read-only."""

    queue: str
    position: int | None
    """1-based place among the keys waiting for a worker; None when not waiting."""
    depth: int
    processing_for: float | None
    """Seconds a worker has been on it (known with an observer); None when not processing."""
    processing: bool
    failures: int
    next_retry_in: float | None
    """Seconds until its delayed add fires; None when none is pending."""


def next_delay(failures: int, *, start: float = 1.0, maximum: float = 300.0) -> float:
    """The wait after the `failures`-th consecutive failure (1 = the first failure).

    client-go's `ItemExponentialFailureRateLimiter(retry-interval-start, retry-interval-max)`,
    which external-provisioner gives every claim and every volume: the n-th consecutive failure
    waits `start * 2**(n-1)`, capped at `max`; a success resets the count.
    """
    if failures < 1:
        return 0.0
    exponent = failures - 1
    if exponent >= 64 or start * 2.0**exponent > maximum:  # also guards float overflow
        return maximum
    return start * 2.0**exponent


K = TypeVar("K", bound=Hashable)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What happens to a key after `process` returns: forget it, or run it again later."""

    retry: bool
    delay: float | None = None
    """An explicit delay in seconds (`retry_after`); None with `retry`: the per-key backoff."""


DONE = Outcome(retry=False)
"""Success: forget the key's failures; it runs again only when added again."""

RETRY = Outcome(retry=True)
"""A failure: count it and run the key again after its backoff (1 s, 2 s, 4 s … 5 min)."""


def retry_after(seconds: float) -> Outcome:
    """Run the key again after exactly `seconds`, leaving its failure count as it is.

    Neither bumped nor reset, because an explicit delay is not a verdict on the attempt: for
    the infeasible slow retry (5 min) the backoff should not grow behind it, and for "still in
    progress, look again soon" it should not be forgotten either. Only `RETRY` counts a failure
    and only `DONE` (or `forget()`) clears the count.
    """
    if not seconds >= 0:  # also rejects NaN
        raise ValueError(f"a retry delay must be a non-negative number, not {seconds!r}")
    return Outcome(retry=True, delay=seconds)


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """The two things the queue needs of the event loop; a seam for tests (a fake clock)."""

    def time(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], object]) -> Cancellable: ...


class QueueObserver(Protocol):
    """What a metrics module learns from a queue: client-go's workqueue metrics, as events.

    Depth and the in-flight durations are read when scraped (`depth`, `processing_since`),
    so the observer gets the queue itself once, at `start()`.
    """

    def started(self, queue: WorkQueue[Any]) -> None: ...

    def added(self, queue: str) -> None:
        """A key was queued that was not queued already (`workqueue_adds_total`)."""

    def retried(self, queue: str) -> None:
        """A delayed add: a retry or `add_after` (client-go counts every `AddAfter`)."""

    def waited(self, queue: str, seconds: float) -> None:
        """A worker took a key that had waited this long in the queue."""

    def worked(self, queue: str, seconds: float) -> None:
        """A worker finished a key after this long (done, retried or failed alike)."""


@dataclasses.dataclass(frozen=True)
class _Delayed:
    when: float
    handle: Cancellable


class WorkQueue(Generic[K]):
    """Keys to process, each by one worker at a time, with per-key retries and backoff."""

    def __init__(
        self,
        *,
        name: str,
        process: Callable[[K], Awaitable[Outcome]],
        workers: int = 1,
        backoff_start: float = 1.0,
        backoff_max: float = 300.0,
        on_depth: Callable[[str, int], None] | None = None,
        observer: QueueObserver | None = None,
        clock: Clock | None = None,  # for tests; the running loop otherwise
    ) -> None:
        if workers < 1:
            raise ValueError(f"a work queue needs at least one worker, not {workers}")
        if not 0 < backoff_start <= backoff_max:
            raise ValueError(f"backoff needs 0 < start <= max, not {backoff_start}, {backoff_max}")
        self.name = name
        self.workers = workers
        self.backoff_start = backoff_start
        self.backoff_max = backoff_max
        self._process = process
        self._on_depth = on_depth
        self._observer = observer
        self._clock = clock

        # An OrderedDict is a FIFO with O(1) removal by key (for `discard`); the values are
        # when each key was queued (monotonic seconds; 0.0 without an observer).
        self._queue: collections.OrderedDict[K, float] = collections.OrderedDict()
        self._started: dict[K, float] = {}  # in flight, since when (only with an observer)
        self._dirty: set[K] = set()  # queued, or re-added while processing
        self._processing: set[K] = set()
        self._discarded: set[K] = set()  # processing now, and its outcome must be dropped
        self._delayed: dict[K, _Delayed] = {}
        self._failures: dict[K, int] = {}
        self._failed_at: dict[K, float] = {}  # a retrying key's last failure (monotonic)

        # One token per push; a discarded key leaves a stale token, which only costs a worker
        # a spurious wake-up (it finds the queue empty and waits again).
        self._available = asyncio.Semaphore(0)
        self._watchers: list[asyncio.Future[None]] = []  # `wait_idle` callers
        self._tasks: list[asyncio.Task[None]] = []
        self._busy: set[asyncio.Task[None]] = set()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None

    # -- observing ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def depth(self) -> int:
        """Keys queued now, waiting for a worker (client-go's `depth` metric)."""
        return len(self._queue)

    @property
    def in_flight(self) -> int:
        """Keys being processed now (at most `workers`)."""
        return len(self._processing)

    @property
    def pending_delayed(self) -> int:
        """Keys waiting for a delayed add: retries and `add_after`."""
        return len(self._delayed)

    def failures(self, key: K) -> int:
        """Consecutive `RETRY` outcomes (and exceptions) of the key since its last `DONE`."""
        return self._failures.get(key, 0)

    def processing_since(self) -> list[float]:
        """When each run in flight started (`time.monotonic()`); empty without an observer."""
        return list(self._started.values())

    def key_state(self, key: K) -> KeyState | None:
        """Where `key` stands (waiting, processing, retrying), or None when the queue has no
        trace of it. Read-only; call it on the queue's loop."""
        position = None
        if key in self._queue:
            position = next(i for i, queued in enumerate(self._queue, 1) if queued == key)
        delayed = self._delayed.get(key)
        processing = key in self._processing
        failures = self._failures.get(key, 0)
        if position is None and delayed is None and not processing and not failures:
            return None
        since = self._started.get(key)
        return KeyState(
            queue=self.name,
            position=position,
            depth=len(self._queue),
            processing_for=None if since is None else time.monotonic() - since,
            processing=processing,
            failures=failures,
            next_retry_in=None if delayed is None else delayed.when - self._get_clock().time(),
        )

    # -- adding and removing -----------------------------------------------------------------

    def add(self, key: K) -> None:
        """Queue the key now, unless it is queued already; never resets its failure count."""
        if self._hopped(self.add, key):
            return
        if self._closed:
            return
        self._cancel_delayed(key)
        self._discarded.discard(key)
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:  # otherwise, re-queued when its current run finishes
            self._push(key)

    def add_after(self, key: K, delay: float) -> None:
        """Queue the key after `delay` seconds; of two delayed adds of a key, the sooner stays."""
        if self._hopped(self.add_after, key, delay):
            return
        if self._closed:
            return
        if self._observer is not None:
            self._observer.retried(self.name)
        if delay <= 0:
            self.add(key)
            return
        clock = self._get_clock()
        when = clock.time() + delay
        existing = self._delayed.get(key)
        if existing is not None:
            if existing.when <= when:
                return
            existing.handle.cancel()
        handle = clock.call_later(delay, functools.partial(self._fire, key))
        self._delayed[key] = _Delayed(when=when, handle=handle)
        self._notify()

    def retry_failed_since(self, since: float) -> int:
        """Run at once every key waiting for a retry that failed at or after `since`
        (`time.monotonic()`): the API server is back after an outage that began then, and
        its backoff would only hold it up. Its failure count stays (an outage is no success).
        How many keys were woken."""
        if self._hopped(self.retry_failed_since, since):
            return 0
        woken = [key for key in list(self._delayed) if self._failed_at.get(key, -math.inf) >= since]
        for key in woken:
            self.add(key)
        if woken:
            logger.debug("work_woken", queue=self.name, keys=len(woken))
        return len(woken)

    def forget(self, key: K) -> None:
        """Reset the key's failure count, so its next failure waits `backoff_start` again."""
        if self._hopped(self.forget, key):
            return
        self._failures.pop(key, None)

    def discard(self, key: K) -> None:
        """Drop everything pending for the key (its object is gone): queued, delayed, retries.

        A run in flight cannot be taken back, but its outcome is dropped, unless the key is
        added again meanwhile.
        """
        if self._hopped(self.discard, key):
            return
        self._cancel_delayed(key)
        self._failures.pop(key, None)
        self._failed_at.pop(key, None)
        self._dirty.discard(key)
        if key in self._queue:
            del self._queue[key]
            self._depth_changed()
        if key in self._processing:
            self._discarded.add(key)
        self._notify()

    def _hopped(self, method: Callable[..., object], *args: object) -> bool:
        """From a foreign thread (a sync kopf handler): schedule the call on the loop instead."""
        if self._loop is None or threading.get_ident() == self._thread:
            return False
        self._loop.call_soon_threadsafe(method, *args)
        return True

    def _push(self, key: K) -> None:
        if self._observer is None:
            self._queue[key] = 0.0
        else:
            self._queue[key] = time.monotonic()
            self._observer.added(self.name)
        self._available.release()
        self._depth_changed()
        self._notify()

    def _fire(self, key: K) -> None:
        self._delayed.pop(key, None)
        self.add(key)

    def _cancel_delayed(self, key: K) -> None:
        delayed = self._delayed.pop(key, None)
        if delayed is not None:
            delayed.handle.cancel()

    # -- processing --------------------------------------------------------------------------

    async def _worker(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        while not self._closed:
            await self._available.acquire()
            if not self._queue:
                continue  # a stale token of a discarded key
            key, queued_at = self._queue.popitem(last=False)
            self._dirty.discard(key)
            self._processing.add(key)
            self._depth_changed()
            self._busy.add(task)
            observer = self._observer
            if observer is not None:
                started = self._started[key] = time.monotonic()
                observer.waited(self.name, started - queued_at)
            try:
                outcome = await self._run(key)
            except asyncio.CancelledError:
                # Stopped past the grace period: the run counts as neither done nor failed.
                logger.warning("work_cancelled", queue=self.name, key=key)
                self._processing.discard(key)
                self._discarded.discard(key)
                raise
            finally:
                self._busy.discard(task)
                if observer is not None:
                    self._started.pop(key, None)
            if observer is not None:
                observer.worked(self.name, time.monotonic() - started)
            self._finish(key, outcome)

    async def _run(self, key: K) -> Outcome:
        try:
            return await self._process(key)
        except Exception as exc:
            # A bug or an unclassified error: retry it like a failure, never lose the key.
            # The traceback is worth its noise: `process` should return outcomes for the
            # errors it expects, so whatever reaches here is unexpected. Except an outage
            # (an exception with `outage = True`, as `kube.UnavailableError`): its start
            # and end are logged once, by the client that saw it, not once per key.
            if getattr(exc, "outage", False):
                logger.debug("work_failed", queue=self.name, key=key, error=str(exc))
                return RETRY
            logger.warning(
                "work_failed",
                queue=self.name,
                key=key,
                error=str(exc),
                error_type=type(exc).__name__,
                failures=self.failures(key) + 1,
                exc_info=exc,
            )
            return RETRY

    def _finish(self, key: K, outcome: Outcome) -> None:
        self._processing.discard(key)
        if key in self._discarded:
            self._discarded.discard(key)
            self._failures.pop(key, None)
            self._failed_at.pop(key, None)
            self._notify()
            return

        delay: float | None = None
        if not outcome.retry:
            self._failures.pop(key, None)
            self._failed_at.pop(key, None)
        elif outcome.delay is not None:
            delay = outcome.delay
        else:
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            delay = next_delay(failures, start=self.backoff_start, maximum=self.backoff_max)
            self._failed_at[key] = time.monotonic()

        if key in self._dirty:
            self._push(key)  # re-added during the run: that supersedes the retry's delay
        elif delay is not None:
            logger.debug("work_retry", queue=self.name, key=key, delay=delay)
            self.add_after(key, delay)
        self._notify()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the workers; call it in the running loop. Keys added before are kept."""
        if self._closed or self._tasks:
            raise RuntimeError(f"work queue {self.name!r} cannot start twice")
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        _started.add(self)
        if self._observer is not None:
            self._observer.started(self)
        self._tasks = [
            asyncio.create_task(self._worker(), name=f"{self.name}-worker-{index}")
            for index in range(self.workers)
        ]

    async def stop(self, *, grace: float = 5.0) -> None:
        """Stop: drop queued and delayed keys, let runs in flight finish within `grace`, cancel.

        The queue ignores adds from now on; it does not start again.
        """
        self._closed = True
        for delayed in self._delayed.values():
            delayed.handle.cancel()
        self._delayed.clear()
        self._queue.clear()
        self._dirty.clear()
        self._depth_changed()
        try:
            for task in self._tasks:
                if task not in self._busy:
                    task.cancel()  # idle: waiting for a key that will never come
            busy = set(self._busy)
            if busy:
                await asyncio.wait(busy, timeout=grace)
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._tasks.clear()
            self._notify()

    async def __aenter__(self) -> WorkQueue[K]:
        self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    async def wait_idle(self, *, within: float = 0.0) -> None:
        """Wait until nothing is queued, in flight, or delayed to come in `within` seconds.

        With the default, pending retries do not count. With `within=math.inf`, every delayed
        add counts, so a key failing forever never lets this return. It returns at once on a
        stopped queue (nothing will change any more).
        """
        while not self._is_idle(within=within):
            future = asyncio.get_running_loop().create_future()
            self._watchers.append(future)
            await future

    def _is_idle(self, *, within: float) -> bool:
        if self._closed and not self._tasks:
            return True
        if self._queue or self._processing:
            return False
        if not self._delayed:
            return True
        if math.isinf(within):
            return False
        horizon = self._get_clock().time() + within
        return all(delayed.when > horizon for delayed in self._delayed.values())

    def _notify(self) -> None:
        watchers, self._watchers = self._watchers, []
        for future in watchers:
            if not future.done():
                future.set_result(None)

    def _depth_changed(self) -> None:
        if self._on_depth is not None:
            self._on_depth(self.name, len(self._queue))

    def _get_clock(self) -> Clock:
        return self._clock if self._clock is not None else asyncio.get_running_loop()
