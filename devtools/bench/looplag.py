"""The event loop's lag: how late a callback runs after it was due.

The operator is one Python thread. While a callback or a task step runs, every other one that
is ready waits: a watch event, an API answer, a CSI answer. A `LagProbe` schedules itself
every `interval` seconds with `call_later` and notes how late it ran; that lateness is the
wait of anything that became ready at the same moment. It costs one callback per interval
(about 2 µs each: 0.02 % of a core at 10 ms).

    probe = LagProbe(interval=0.01)
    probe.start()            # on the loop to measure
    probe.summary()          # {"samples": ..., "mean_ms": ..., "p99_ms": ..., "max_ms": ...}
    probe.by_bucket(since=t0, width=0.1)   # the worst lag in each 100 ms since t0

The operator's own probe (`kopf_csi.looplag`, behind `kopf_csi_event_loop_lag_seconds`) keeps
no samples and is not used here: the benchmark measures earlier revisions of the operator too
(`KOPF_CSI_BENCH_OPERATOR_PATH`), which do not have it.
"""

from __future__ import annotations

import array
import asyncio
import math
import time
from typing import Any

__all__ = ["LagProbe"]


class LagProbe:
    """Samples of (when it was due, how late it ran), on `time.perf_counter`.

    Kept in two arrays of doubles of `keep` samples each, allocated and written through at the
    start (16 bytes a sample, 1.5 MiB for 100,000): the probe runs in the operator's process,
    whose RSS the churn mode watches for growth, and arrays that grew sample by sample added
    about 1 MiB over 10 minutes to what it watched."""

    def __init__(self, *, interval: float = 0.01, keep: int = 100_000) -> None:
        self.interval = interval
        self.keep = keep
        self._dues = array.array("d", [-1.0]) * keep  # written through: resident from now on
        self._lags = array.array("d", [-1.0]) * keep
        self._count = 0
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    def start(self) -> None:
        """Start sampling on the running loop (call it from the loop's thread)."""
        self._schedule(asyncio.get_running_loop())

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        self._due = time.perf_counter() + self.interval
        self._handle = loop.call_later(self.interval, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = time.perf_counter()
        if self._count < self.keep:
            self._dues[self._count] = self._due
            self._lags[self._count] = max(0.0, now - self._due)
            self._count += 1
        self._schedule(loop)

    @property
    def samples(self) -> list[tuple[float, float]]:
        count = self._count
        return list(zip(self._dues[:count], self._lags[:count], strict=True))

    def summary(self, *, since: float = 0.0) -> dict[str, Any]:
        lags = sorted(lag for due, lag in self.samples if due >= since)
        if not lags:
            return {"samples": 0}
        return {
            "samples": len(lags),
            "mean_ms": round(sum(lags) / len(lags) * 1000, 2),
            "p50_ms": round(_rank(lags, 50) * 1000, 2),
            "p99_ms": round(_rank(lags, 99) * 1000, 2),
            "max_ms": round(lags[-1] * 1000, 2),
        }

    def stalls(self, *, since: float, over: float = 0.25) -> list[tuple[float, float]]:
        """Every lag longer than `over` seconds: (seconds from `since` to when it began, ms),
        when a long run's worst moments came (a collection, a resync, the end's reports)."""
        return [
            (round(due - since, 1), round(lag * 1000, 1))
            for due, lag in self.samples
            if due >= since and lag > over
        ]

    def by_bucket(self, *, since: float, until: float, width: float = 0.1) -> list[float]:
        """The worst lag (ms) in each `width` seconds from `since` to `until`."""
        buckets = [0.0] * max(1, math.ceil((until - since) / width))
        for due, lag in self.samples:
            index = int((due - since) / width)
            if 0 <= index < len(buckets):
                buckets[index] = max(buckets[index], round(lag * 1000, 1))
        return buckets


def _rank(ordered: list[float], p: float) -> float:
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]
