"""client-go's work-queue metrics from our `WorkQueue`, through `Metrics` as its observer.

We test these aspects: adds count new keys only (dedupe), retries count every delayed re-add,
depth is read when scraped, the waiting and working histograms get one sample per run, and a
run in flight shows in unfinished-work and longest-running seconds until it finishes.
"""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from kopf_csi.metrics import Metrics
from kopf_csi.queueing import DONE, RETRY, Outcome, WorkQueue

from ..conftest import until


def _values(metrics: Metrics) -> dict[tuple[str, str], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, s.labels.get("name", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("workqueue_") and "le" not in s.labels
    }


async def test_queue_metrics_follow_the_queue() -> None:
    metrics = Metrics(process=False)
    release = asyncio.Event()
    runs: list[str] = []

    async def process(key: str) -> Outcome:
        runs.append(key)
        if key == "slow":
            await release.wait()
        if key == "flaky" and runs.count("flaky") < 3:
            return RETRY
        return DONE

    queue: WorkQueue[str] = WorkQueue(
        name="claims", process=process, workers=1, backoff_start=0.01, observer=metrics
    )
    assert _values(metrics) == {}  # unknown until started: client-go creates them with the queue
    queue.add("slow")
    queue.add("slow")  # deduplicated: not an add
    queue.add("flaky")
    queue.start()
    try:
        await until(lambda: runs == ["slow"])
        await asyncio.sleep(0.05)
        values = _values(metrics)
        assert values[("workqueue_adds_total", "claims")] == 2
        assert values[("workqueue_depth", "claims")] == 1  # flaky waits behind slow
        assert values[("workqueue_unfinished_work_seconds", "claims")] >= 0.05
        assert values[("workqueue_longest_running_processor_seconds", "claims")] >= 0.05
        assert values[("workqueue_work_duration_seconds_count", "claims")] == 0
        release.set()
        await until(lambda: runs.count("flaky") == 3)
        await queue.wait_idle(within=float("inf"))
        values = _values(metrics)
        assert values[("workqueue_retries_total", "claims")] == 2
        assert values[("workqueue_adds_total", "claims")] == 4  # the two retries come back
        assert values[("workqueue_depth", "claims")] == 0
        assert values[("workqueue_unfinished_work_seconds", "claims")] == 0
        assert values[("workqueue_longest_running_processor_seconds", "claims")] == 0
        assert values[("workqueue_work_duration_seconds_count", "claims")] == 4
        assert values[("workqueue_queue_duration_seconds_count", "claims")] == 4
        assert values[("workqueue_work_duration_seconds_sum", "claims")] >= 0.05
    finally:
        await queue.stop()


async def test_a_queue_without_an_observer_keeps_no_timestamps() -> None:
    seen: list[str] = []

    async def process(key: str) -> Outcome:
        seen.append(key)
        return DONE

    async with WorkQueue(name="plain", process=process) as queue:
        queue.add("a")
        await queue.wait_idle()
        assert queue.processing_since() == []
    assert seen == ["a"]
