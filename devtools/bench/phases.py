"""One measured phase of the claims and attach modes: where it starts (`Mark`), the burst of
creations or deletions, the progress line while it runs, and its figures at the end.

The claims' burst is sent as the real server's test client sent it (`client_burst`): with the
cluster's latency model, 50 workers, each POST or DELETE taking the model's time before it
lands, so that "all Bound" and "all PVs gone" count from the same start as the real figures.

Part of the benchmark (`devtools.bench.running`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from devtools.bench import procfs, report
from devtools.bench.environment import CHUNK, NAMESPACE, Env
from kopf_csi.testing.latency import ObjectPath

__all__ = ["Mark", "burst", "client_burst", "phase_figures", "rate", "status_line", "take_mark"]

CLIENT_THREADS = 50
"""The real server's test client: 50 threads, each sending its claims' requests one at a time
(real-apiserver.md, "Burst latency")."""


@dataclasses.dataclass(frozen=True)
class Mark:
    """Where a phase starts: the request counts and operator CPU to subtract, and the time."""

    counts: collections.Counter[tuple[str, str]]
    cpu: float
    started: float
    writes: collections.Counter[tuple[str, str, str]]  # every client's, by manager
    watch_events: collections.Counter[tuple[str, str]]
    watch_bytes: collections.Counter[str]


def take_mark(env: Env) -> Mark:
    cluster = env.cluster
    counts, cpu = cluster.counts(), env.sample().cpu
    env.bench_cpu_before = procfs.cpu_seconds(os.getpid())
    env.errors_before = cluster.error_counts()
    return Mark(
        counts, cpu, time.perf_counter(), collections.Counter(cluster.writes),
        collections.Counter(cluster.watch_events), collections.Counter(cluster.watch_bytes),
    )  # fmt: skip


def status_line(
    env: Env,
    mark: Mark,
    *,
    label: str,
    n: int,
    done: Mapping[str, float],
    what: Callable[[], str],
) -> Callable[[], str]:
    """A progress line: `what()` so far, how many are `done` and at what rate, and the cost."""

    def status() -> str:
        sample = env.sample()
        elapsed = time.perf_counter() - mark.started
        count = len(done)
        until = max(done.values()) - mark.started if count >= n else elapsed
        return (
            f"{label:<9} {elapsed:6.1f}s  {what()} {count} ({count / max(until, 1e-9):.0f}/s)"
            f"  operator CPU {sample.cpu - mark.cpu:.2f}s RSS {sample.rss / procfs.MiB:.0f} MiB"
            f"  requests {env.operator_requests() - sum(mark.counts.values())}"
        )

    return status


async def burst(items: Sequence[Any], act: Callable[[int, Any], None]) -> None:
    """Act on every item at once, yielding to the loop every CHUNK items (the API serves)."""
    for index, item in enumerate(items):
        act(index, item)
        if index % CHUNK == CHUNK - 1:
            await asyncio.sleep(0)


async def client_burst(
    env: Env,
    method: str,
    items: Sequence[Any],
    act: Callable[[int, Any], None],
    *,
    name: Callable[[Any], str | None] = lambda item: None,
) -> None:
    """The claims' creation (POST) or deletion (DELETE, of the claim `name(item)`) as the
    real test client sent them: with a latency model, CLIENT_THREADS workers, each request
    applied once its time (the model's for the verb, in turn per object) has passed; without
    one, `burst` (at once)."""
    latency = env.cluster.latency
    if not latency.model.enabled:
        await burst(items, act)
        return
    queue = iter(enumerate(items))

    async def worker() -> None:
        for index, item in queue:  # shared: each item goes to the next free worker
            path = ObjectPath("persistentvolumeclaims", NAMESPACE, name(item))
            async with latency.request(method, path, watch=False):
                act(index, item)

    await asyncio.gather(*(worker() for _ in range(CLIENT_THREADS)))


def rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else float("nan")


def phase_figures(
    env: Env,
    n: int,
    mark: Mark,
    *,
    latencies: dict[str, list[float]],
) -> dict[str, Any]:
    sample = env.sample()
    cpu = sample.cpu - mark.cpu
    cluster = env.cluster
    phase: dict[str, Any] = {
        "claims": n,
        "rss_peak": sample.hwm,  # VmHWM: the peak so far, this phase included
        "watch_events": report.watch_summary(
            cluster.watch_events - mark.watch_events, cluster.watch_bytes - mark.watch_bytes, n
        ),
        "writes": report.writes_summary(cluster.writes - mark.writes, n),
        "settled_seconds": round(time.perf_counter() - mark.started, 3),
        "cpu_seconds": round(cpu, 2),
        "cpu_ms_per_volume": round(cpu * 1000 / n, 2),
        "bench_cpu_seconds": round(procfs.cpu_seconds(os.getpid()) - env.bench_cpu_before, 2),
        "requests": report.requests_summary(env.cluster.counts() - mark.counts, n),
        "errors": dict(sorted((env.cluster.error_counts() - env.errors_before).items())),
    }
    phase.update({name: report.latencies(values) for name, values in latencies.items()})
    return phase
