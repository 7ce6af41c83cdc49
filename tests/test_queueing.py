"""The rate-limited work queue, against client-go's workqueue semantics.

We test these aspects:
- dedupe: a queued key is queued once; FIFO order of first insertion;
- one key is never processed by two workers at once; a re-add during a run re-runs it once;
- the number of workers bounds the concurrency;
- backoff: per key, doubling from the start to the cap (a fake clock, no real waiting),
  the 1 s → 5 min defaults, and once over the loop's real timers with small delays;
- outcomes: `DONE` forgets the failures, `retry_after()` keeps the count, exceptions are
  logged and retried;
- `forget()` resets the backoff; `discard()` drops queued, delayed and in-flight retries;
- delayed adds: the sooner of two stays, an immediate add supersedes them;
- fairness: a burst of 1,000 keys on one queue does not delay another queue;
- stopping: in-flight work finishes within the grace period, or is cancelled after it;
- adds from another thread (kopf's sync handlers) hop onto the loop;
- `wait_idle()`, with and without a window for delayed adds; the depth callback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import structlog

from kopf_csi import queueing
from kopf_csi.queueing import DONE, RETRY, Outcome, WorkQueue, retry_after


@dataclasses.dataclass
class FakeTimer:
    when: float
    delay: float
    callback: Callable[[], object]
    cancelled: bool = False
    fired: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """Loop time that moves only when the test says so: backoffs take no real time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], object]) -> FakeTimer:
        timer = FakeTimer(when=self.now + delay, delay=delay, callback=callback)
        self.timers.append(timer)
        return timer

    @property
    def pending(self) -> list[FakeTimer]:
        return [timer for timer in self.timers if not timer.cancelled and not timer.fired]

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for timer in sorted(self.pending, key=lambda timer: timer.when):
            if timer.when <= self.now:
                timer.fired = True
                timer.callback()


class Recorder:
    """A `process` that records its calls and returns scripted outcomes, then `DONE`."""

    def __init__(self, *outcomes: Outcome) -> None:
        self.calls: list[str] = []
        self.outcomes = list(outcomes)

    async def __call__(self, key: str) -> Outcome:
        self.calls.append(key)
        return self.outcomes.pop(0) if self.outcomes else DONE


class Gate:
    """A `process` that holds every run until released, counting concurrent runs."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.started = asyncio.Event()
        self.entered = asyncio.Semaphore(0)  # one token per run started
        self.released = asyncio.Event()
        self.active: dict[str, int] = {}
        self.max_active = 0
        self.max_active_per_key = 0
        self.outcome = DONE

    async def __call__(self, key: str) -> Outcome:
        self.calls.append(key)
        self.active[key] = self.active.get(key, 0) + 1
        self.max_active = max(self.max_active, sum(self.active.values()))
        self.max_active_per_key = max(self.max_active_per_key, self.active[key])
        self.started.set()
        self.entered.release()
        try:
            await self.released.wait()
        finally:
            self.active[key] -= 1
        return self.outcome


async def failing_forever(key: str) -> Outcome:
    return RETRY


async def retried_delays(queue: WorkQueue[str], clock: FakeClock, *, runs: int) -> list[float]:
    """Run a failing key `runs` times, jumping the fake clock to each retry."""
    queue.add("k")
    for _ in range(runs - 1):
        await queue.wait_idle()
        [timer] = clock.pending
        clock.advance(timer.delay)
    await queue.wait_idle()
    return [timer.delay for timer in clock.timers]


async def test_duplicate_adds_are_queued_once_in_order_of_first_insertion() -> None:
    process = Recorder()
    queue = WorkQueue[str](name="q", process=process, workers=1)
    for key in ["c", "a", "c", "b", "a", "c"]:
        queue.add(key)
    assert len(queue) == queue.depth == 3
    async with queue:
        await queue.wait_idle()
    assert process.calls == ["c", "a", "b"]


async def test_a_key_added_while_processing_waits_and_reruns_once() -> None:
    process = Gate()
    async with WorkQueue[str](name="q", process=process, workers=4) as queue:
        queue.add("x")
        await process.started.wait()
        for _ in range(3):
            queue.add("x")
        assert (queue.depth, queue.in_flight) == (0, 1)  # dirty, not queued next to itself
        process.released.set()
        await queue.wait_idle()
    assert process.calls == ["x", "x"]
    assert process.max_active_per_key == 1


async def test_workers_bound_the_concurrency() -> None:
    process = Gate()
    async with WorkQueue[str](name="q", process=process, workers=3) as queue:
        for index in range(20):
            queue.add(f"k{index}")
        for _ in range(3):
            await process.entered.acquire()
        for _ in range(10):  # give a 4th worker every chance to appear, if there were one
            await asyncio.sleep(0)
        assert (queue.in_flight, queue.depth) == (3, 17)
        process.released.set()
        await queue.wait_idle()
    assert process.max_active == 3
    assert sorted(process.calls) == sorted(f"k{index}" for index in range(20))


async def test_backoff_doubles_per_failure_up_to_the_cap() -> None:
    clock = FakeClock()
    queue = WorkQueue[str](
        name="q", process=failing_forever, backoff_start=0.01, backoff_max=0.08, clock=clock
    )
    async with queue:
        delays = await retried_delays(queue, clock, runs=6)
    assert delays == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.08, 0.08])
    assert queue.failures("k") == 6


async def test_backoff_defaults_to_one_second_doubling_to_five_minutes() -> None:
    clock = FakeClock()
    async with WorkQueue[str](name="q", process=failing_forever, clock=clock) as queue:
        delays = await retried_delays(queue, clock, runs=11)
    assert delays == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]


async def test_backoff_runs_on_the_loop_timers() -> None:
    process = Recorder(RETRY, RETRY, RETRY)
    queue = WorkQueue[str](name="q", process=process, backoff_start=0.01, backoff_max=0.02)
    loop = asyncio.get_running_loop()
    async with queue:
        started = loop.time()
        queue.add("k")
        await queue.wait_idle(within=math.inf)
        elapsed = loop.time() - started
    assert process.calls == ["k"] * 4
    assert elapsed >= 0.01 + 0.02 + 0.02 - 0.005  # a lower bound only: never flaky
    assert queue.failures("k") == 0


async def test_done_forgets_the_failures() -> None:
    clock = FakeClock()
    process = Recorder(RETRY, RETRY, DONE, RETRY)
    async with WorkQueue[str](name="q", process=process, clock=clock) as queue:
        queue.add("k")
        for expected_failures in [1, 2]:
            await queue.wait_idle()
            assert queue.failures("k") == expected_failures
            clock.advance(clock.pending[0].delay)
        await queue.wait_idle()
        assert (queue.failures("k"), queue.pending_delayed) == (0, 0)
        queue.add("k")
        await queue.wait_idle()
    assert [timer.delay for timer in clock.timers] == [1, 2, 1]


async def test_retry_after_uses_its_delay_and_keeps_the_failure_count() -> None:
    clock = FakeClock()
    process = Recorder(RETRY, retry_after(300), RETRY)
    async with WorkQueue[str](name="q", process=process, clock=clock) as queue:
        queue.add("k")
        for expected_failures in [1, 1]:
            await queue.wait_idle()
            assert queue.failures("k") == expected_failures
            clock.advance(clock.pending[0].delay)
        await queue.wait_idle()
    assert [timer.delay for timer in clock.timers] == [1, 300, 2]
    assert queue.failures("k") == 2


@pytest.mark.parametrize("seconds", [-1.0, math.nan])
def test_retry_after_rejects_negative_delays(seconds: float) -> None:
    with pytest.raises(ValueError, match="non-negative"):
        retry_after(seconds)


async def test_an_exception_is_logged_and_retried() -> None:
    clock = FakeClock()

    async def process(key: str) -> Outcome:
        raise ValueError("boom")

    with structlog.testing.capture_logs() as logs:
        async with WorkQueue[str](name="q", process=process, clock=clock) as queue:
            queue.add("k")
            await queue.wait_idle()
            clock.advance(1)
            await queue.wait_idle()
            assert (queue.failures("k"), queue.pending_delayed) == (2, 1)
    failures = [log for log in logs if log["event"] == "work_failed"]
    assert [log["failures"] for log in failures] == [1, 2]
    assert failures[0]["queue"] == "q"
    assert failures[0]["key"] == "k"
    assert failures[0]["error"] == "boom"
    assert failures[0]["error_type"] == "ValueError"
    assert failures[0]["log_level"] == "warning"


async def test_forget_resets_the_backoff() -> None:
    clock = FakeClock()
    async with WorkQueue[str](name="q", process=failing_forever, clock=clock) as queue:
        queue.add("k")
        await queue.wait_idle()
        clock.advance(1)
        await queue.wait_idle()
        assert queue.failures("k") == 2
        queue.forget("k")
        assert queue.failures("k") == 0
        clock.advance(2)
        await queue.wait_idle()
    assert [timer.delay for timer in clock.timers] == [1, 2, 1]


async def test_discard_cancels_a_delayed_retry() -> None:
    clock = FakeClock()
    process = Recorder(RETRY)
    async with WorkQueue[str](name="q", process=process, clock=clock) as queue:
        queue.add("k")
        await queue.wait_idle()
        assert (queue.pending_delayed, queue.failures("k")) == (1, 1)
        queue.discard("k")
        assert (queue.pending_delayed, queue.failures("k")) == (0, 0)
        clock.advance(100)
        await queue.wait_idle()
    assert process.calls == ["k"]


async def test_discard_drops_a_queued_key() -> None:
    process = Recorder()
    queue = WorkQueue[str](name="q", process=process)
    queue.add("a")
    queue.add("b")
    queue.discard("a")
    async with queue:
        await queue.wait_idle()
    assert process.calls == ["b"]


async def test_discard_during_a_run_drops_its_retry_unless_added_again() -> None:
    clock = FakeClock()
    process = Gate()
    process.outcome = RETRY
    async with WorkQueue[str](name="q", process=process, clock=clock, workers=2) as queue:
        queue.add("gone")
        queue.add("back")
        for _ in range(2):
            await process.entered.acquire()
        queue.discard("gone")
        queue.discard("back")
        queue.add("back")
        process.released.set()
        await queue.wait_idle()
        # "gone" left no retry; "back" re-ran at once, and only its re-run's retry is pending.
        assert (queue.failures("gone"), queue.failures("back")) == (0, 2)
        assert [timer.delay for timer in clock.pending] == [2]
    assert sorted(process.calls) == ["back", "back", "gone"]


async def test_of_two_delayed_adds_the_sooner_stays() -> None:
    clock = FakeClock()
    process = Recorder()
    async with WorkQueue[str](name="q", process=process, clock=clock) as queue:
        queue.add_after("k", 5)
        queue.add_after("k", 10)  # later than the pending one: not duplicated
        assert [timer.when for timer in clock.pending] == [5]
        queue.add_after("k", 2)  # sooner: replaces it
        assert [timer.when for timer in clock.pending] == [2]
        assert queue.pending_delayed == 1
        clock.advance(2)
        await queue.wait_idle()
        clock.advance(100)
        await queue.wait_idle()
    assert process.calls == ["k"]


async def test_an_immediate_add_supersedes_a_delayed_add() -> None:
    clock = FakeClock()
    process = Recorder()
    async with WorkQueue[str](name="q", process=process, clock=clock) as queue:
        queue.add_after("k", 5)
        queue.add("k")
        assert queue.pending_delayed == 0
        await queue.wait_idle()
        clock.advance(5)
        await queue.wait_idle()
    assert process.calls == ["k"]


async def test_a_burst_on_one_queue_does_not_delay_another() -> None:
    busy = Gate()
    other = Recorder()
    async with (
        WorkQueue[str](name="detach", process=busy, workers=2) as detaching,
        WorkQueue[str](name="attach", process=other, workers=1) as attaching,
    ):
        for index in range(1000):
            detaching.add(f"d{index}")
        await busy.started.wait()
        attaching.add("a")
        await attaching.wait_idle()
        assert other.calls == ["a"]
        assert (detaching.in_flight, detaching.depth) == (2, 998)
        busy.released.set()
        await detaching.wait_idle()
    assert len(busy.calls) == 1000


async def test_stop_lets_in_flight_work_finish_within_the_grace() -> None:
    finished: list[str] = []
    started = asyncio.Event()

    async def process(key: str) -> Outcome:
        started.set()
        await asyncio.sleep(0.01)
        finished.append(key)
        return DONE

    queue = WorkQueue[str](name="q", process=process)
    queue.start()
    queue.add("running")
    await started.wait()
    queue.add("queued")
    await queue.stop(grace=5)
    assert finished == ["running"]
    assert (queue.depth, queue.in_flight) == (0, 0)
    queue.add("late")  # ignored after stop
    assert queue.depth == 0
    await queue.wait_idle()  # returns at once on a stopped queue


async def test_stop_cancels_in_flight_work_after_the_grace() -> None:
    cancelled: list[str] = []
    started = asyncio.Event()

    async def process(key: str) -> Outcome:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(key)
            raise
        return DONE

    clock = FakeClock()
    queue = WorkQueue[str](name="q", process=process, clock=clock)
    queue.start()
    queue.add("stuck")
    queue.add_after("later", 5)
    await started.wait()
    with structlog.testing.capture_logs() as logs:
        await queue.stop(grace=0.01)
    assert cancelled == ["stuck"]
    assert (queue.in_flight, queue.pending_delayed) == (0, 0)
    assert clock.pending == []
    assert [log["event"] for log in logs] == ["work_cancelled"]
    assert logs[0]["key"] == "stuck"


async def test_wait_idle_counts_delayed_adds_only_within_the_window() -> None:
    clock = FakeClock()
    process = Recorder()
    async with WorkQueue[str](name="q", process=process, clock=clock) as queue:
        queue.add_after("k", 5)
        await queue.wait_idle()  # a delayed add is not work yet
        await queue.wait_idle(within=4)  # nor one beyond the window
        waiting = asyncio.create_task(queue.wait_idle(within=10))
        await asyncio.sleep(0)
        assert not waiting.done()
        clock.advance(5)
        await waiting
    assert process.calls == ["k"]


async def test_the_depth_callback_sees_every_change() -> None:
    depths: list[tuple[str, int]] = []
    queue = WorkQueue[str](
        name="q", process=Recorder(), on_depth=lambda name, depth: depths.append((name, depth))
    )
    queue.add("a")
    queue.add("b")
    async with queue:
        await queue.wait_idle()
    assert depths[:2] == [("q", 1), ("q", 2)]
    assert [depth for _, depth in depths[2:]] == [1, 0, 0]  # two taken, then the stop


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"workers": 0}, id="no workers"),
        pytest.param({"backoff_start": 0}, id="zero start"),
        pytest.param({"backoff_start": 10, "backoff_max": 1}, id="start above max"),
    ],
)
def test_invalid_settings_are_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"worker|backoff"):
        WorkQueue[str](name="q", process=Recorder(), **kwargs)


async def test_adds_from_another_thread_hop_onto_the_loop() -> None:
    process = Recorder()
    async with WorkQueue[str](name="q", process=process) as queue:
        seen_in_thread: list[int] = []

        def sync_handler() -> None:  # what kopf runs in its executor threads
            queue.add("a")
            queue.add_after("b", 0.001)
            seen_in_thread.append(queue.depth + queue.pending_delayed)

        # Joined while blocking the loop on purpose: the hopped calls cannot have run yet.
        thread = threading.Thread(target=sync_handler)
        thread.start()
        thread.join()
        assert seen_in_thread == [0]
        await asyncio.sleep(0)  # one loop iteration runs the hopped calls
        assert queue.depth + queue.pending_delayed == 2
        await queue.wait_idle(within=math.inf)
    assert process.calls == ["a", "b"]


def test_next_delay_is_the_provisioner_backoff() -> None:
    assert queueing.next_delay(3, start=1.0, maximum=300.0) == 4.0


async def test_a_return_of_the_api_server_runs_what_failed_since_at_once() -> None:
    """`retry_failed_since`: the keys waiting for a retry that failed at or after the outage's
    start run now, not after their backoff; a key that failed before it, or whose delay was
    asked for explicitly (`retry_after`), keeps its wait; the failure counts stay."""
    clock = FakeClock()
    outcomes = {"before": [RETRY], "during": [RETRY, RETRY], "slow": [retry_after(300)]}

    async def process(key: str) -> Outcome:
        return outcomes[key].pop(0) if outcomes[key] else DONE

    calls: list[str] = []

    async def recorded(key: str) -> Outcome:
        calls.append(key)
        return await process(key)

    async with WorkQueue[str](name="q", process=recorded, clock=clock) as queue:
        queue.add("before")
        await queue.wait_idle()
        since = time.monotonic()
        for key in ("during", "slow"):
            queue.add(key)
        await queue.wait_idle()
        assert queue.retry_failed_since(since) == 1
        await queue.wait_idle()
        assert calls == ["before", "during", "slow", "during"]
        assert queue.failures("during") == 2
        assert sorted(t.delay for t in clock.pending) == [1, 2, 300]  # before, during, slow
