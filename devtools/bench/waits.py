"""Where the operator's claims wait, measured inside the operator process (for the benchmark).

`Waits.install` runs on the operator's event loop once it is ready, and measures:

- the event loop's lag (`devtools.bench.looplag.LagProbe`, every 10 ms);
- the shared API client's connection pools, through their request tracing (`httppool.Pool.trace`
  for the plain requests, aiohttp's for the watches): waits for a free connection (the pool's
  limit), new connections (TCP and the TLS handshake), and all the time spent in requests;
- the in-flight journal: the time `record` callers waited for their commit (`Journal.waited`);
- the claims queue: time from a claim's queueing to a worker taking it, and the CSI calls'
  durations, from the operator's own metrics (`workqueue_queue_duration_seconds`,
  `csi_sidecar_operations_seconds`).

- the client-side QPS limiter (`--kube-api-qps`, `--kube-api-burst`): each role's token
  bucket, its requests, how many waited for a token, and for how long.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
import types
from typing import Any

import aiohttp

from devtools.bench.looplag import LagProbe
from kopf_csi import httppool, names

__all__ = ["TRACE_LIMIT", "Waits"]


@dataclasses.dataclass
class _Tally:
    count: int = 0
    seconds: float = 0.0
    worst: float = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.seconds += seconds
        self.worst = max(self.worst, seconds)

    def summary(self) -> dict[str, float]:
        return {
            "count": self.count,
            "seconds": round(self.seconds, 3),
            "mean_ms": round(self.seconds / self.count * 1000, 2) if self.count else 0.0,
            "max_ms": round(self.worst * 1000, 1),
        }


class Waits:
    """The operator's waits, installed on its loop; `summary()` for the `stats` command."""

    def __init__(self, memo: Any, *, trace_limit: int | None = None) -> None:
        self.memo = memo
        self.trace_limit = TRACE_LIMIT if trace_limit is None else trace_limit
        self.probe = LagProbe(interval=0.01)
        self.pool = _Tally()  # waits for a free connection (the connector's limit)
        self.connect = _Tally()  # new connections: TCP and TLS handshake
        self.requests = _Tally()  # every API request, start to end (the server's time too)
        self.collections = [_Tally(), _Tally(), _Tally()]  # the cyclic GC's pauses, by generation
        self.trace: list[dict[str, Any]] = []  # every request's own steps, the newest last
        self.traced = True  # aiohttp's request tracing (else the operator's own observer)
        self._collecting = 0.0

    def install(self) -> None:
        """On the operator's loop.

        With `trace_limit` 0 (churn mode) the requests are timed by the operator's own
        observer (`KubeClient.observe`, about 2 µs a request, what `/metrics` uses) instead of
        aiohttp's request tracing (25-40 µs a request for its signals): a long run's CPU per
        volume is the operator's, not its instruments'. The pool's waits then include a new
        connection's set-up, which only the tracing tells apart.
        """
        self.probe.start()
        gc.callbacks.append(self._collected)
        if not self.trace_limit:
            self.memo.api.observe(_Observer(self))
            self.traced = False
            return
        loop = asyncio.get_running_loop()
        trace = aiohttp.TraceConfig()

        def timer(tally: _Tally, key: str) -> tuple[Any, Any]:
            async def start(_: Any, context: types.SimpleNamespace, __: Any) -> None:
                setattr(context, key, loop.time())

            async def end(_: Any, context: types.SimpleNamespace, __: Any) -> None:
                started = getattr(context, key, None)
                if started is not None:
                    setattr(context, f"{key}_end", loop.time())
                    tally.add(loop.time() - started)

            return start, end

        for tally, key, starts, ends in (
            (self.pool, "queued", trace.on_connection_queued_start, trace.on_connection_queued_end),
            (self.connect, "connect", trace.on_connection_create_start,
             trace.on_connection_create_end),
            (self.requests, "request", trace.on_request_start, trace.on_request_end),
        ):  # fmt: skip
            start, end = timer(tally, key)
            starts.append(start)
            ends.append(end)
        trace.on_request_end.append(self._traced)
        trace.on_request_exception.append(self._traced)
        trace.freeze()
        session = self.memo.api._api.rest_client.pool_manager  # the operator's one ApiClient
        session._trace_configs.append(trace)
        pool = _pool(self.memo.api)
        if pool is not None:
            pool.trace(self._pooled)

    def _pooled(self, trace: httppool.Trace) -> None:
        """One plain request's steps (`httppool.Pool.trace`)."""
        self.pool.add(trace.waited - trace.opened)
        if trace.opened:
            self.connect.add(trace.opened)
        self.requests.add(trace.ended - trace.started)
        if len(self.trace) < self.trace_limit:
            self.trace.append(
                {
                    "start": trace.started,
                    "ms": (trace.ended - trace.started) * 1000,
                    "queued_ms": (trace.waited - trace.opened) * 1000,
                    "connect_ms": trace.opened * 1000,
                    "request": f"{trace.method} {_resource(trace.target.split('?', 1)[0])}",
                }
            )

    async def _traced(self, _: Any, context: types.SimpleNamespace, params: Any) -> None:
        """One request's steps, for the first requests of a burst (`first_requests`)."""
        if len(self.trace) >= self.trace_limit:
            return
        loop = asyncio.get_running_loop()
        now, clock = loop.time(), time.perf_counter()
        started = getattr(context, "request", now)
        self.trace.append(
            {
                "start": clock - (now - started),  # on the benchmark's clock (perf_counter)
                "ms": (now - started) * 1000,
                "queued_ms": _span(context, "queued", "queued_end") * 1000,
                "connect_ms": _span(context, "connect", "connect_end") * 1000,
                "request": f"{params.method} {_resource(params.url.path)}",
            }
        )

    def first_requests(self, *, since: float, count: int = 40) -> list[dict[str, Any]]:
        """The first `count` requests started after `since`: each one's start (ms after
        `since`), duration, wait for a free connection and new connection's set-up."""
        chosen = sorted((r for r in self.trace if r["start"] >= since), key=lambda r: r["start"])
        return [
            {
                **{key: round(value, 1) for key, value in r.items() if key.endswith("ms")},
                "at_ms": round((r["start"] - since) * 1000, 1),
                "request": r["request"],
            }
            for r in chosen[:count]
        ]

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        """A pause of the garbage collector: every thread, the loop's included, waits."""
        if phase == "start":
            self._collecting = time.perf_counter()
        else:
            self.collections[info["generation"]].add(time.perf_counter() - self._collecting)

    def summary(self, *, since: float) -> dict[str, Any]:
        provisioner = getattr(self.memo, "provisioner", None)
        journal = getattr(provisioner, "journal", None)
        metrics = getattr(self.memo, "metrics", None)
        pool = _pool(self.memo.api) or self.memo.api._api.rest_client.pool_manager.connector
        return {
            "loop_lag": self.probe.summary(since=since),
            "pool_wait": self.pool.summary(),
            "new_connections": self.connect.summary() if self.traced else None,
            "api_requests": self.requests.summary(),
            "pool_limit": pool.limit,
            "journal": _journal(journal) if journal is not None else None,
            "claims_queue": _histogram(metrics, names.METRIC_QUEUE_LATENCY, "claims"),
            "create_volume": _histogram(metrics, names.METRIC_CSI_OPERATIONS, "CreateVolume"),
            "gc_pauses": [tally.summary() for tally in self.collections],
            "qps_limiter": _limiter(self.memo.api),
        }

    def lag_timeline(self, *, since: float, until: float) -> list[float]:
        return self.probe.by_bucket(since=since, until=until, width=0.1)


class _Observer:
    """The operator's own request timing (`kube.RequestObserver`), into the tallies."""

    def __init__(self, waits: Waits) -> None:
        self.waits = waits

    def requested(self, manager: str, verb: str, resource: str, code: str, seconds: float) -> None:
        self.waits.requests.add(seconds)

    def connection_got(self, seconds: float) -> None:
        self.waits.pool.add(seconds)


TRACE_LIMIT = 5000  # requests traced (a 1,000-claim burst sends about 3,000)


def _span(context: types.SimpleNamespace, start: str, end: str) -> float:
    began, ended = getattr(context, start, None), getattr(context, end, None)
    return ended - began if began is not None and ended is not None else 0.0


def _pool(api: Any) -> httppool.Pool | None:
    """The plain requests' pool (`kube`): none through a proxy, nor before the eighth session
    (the benchmark also measures earlier revisions)."""
    return getattr(api, "_pool", None)


def _resource(path: str) -> str:
    """`/api/v1/namespaces/ns/persistentvolumeclaims/name` -> `persistentvolumeclaims`.

    `kopf_csi.kube.resource_of` does the same for the operator's metrics; this one stays, as
    the benchmark also measures earlier revisions, which lack it."""
    words = [w for w in path.split("/") if w]
    if "namespaces" in words and len(words) > words.index("namespaces") + 2:
        words = words[words.index("namespaces") + 2 :]
    else:
        words = words[2:] if words[:1] == ["api"] else words[3:]
    return "/".join(words[:1] + words[2:3])


def _journal(journal: Any) -> dict[str, Any]:
    """Records, commits and the time `record` waited (None where an older revision's journal
    does not count them)."""
    records = getattr(journal, "records", None)
    waited = getattr(journal, "waited", None)
    return {
        "records": records,
        "commits": journal.writes,
        "waited_seconds": None if waited is None else round(waited, 3),
        "mean_wait_ms": round(waited / records * 1000, 2) if records and waited else None,
    }


def _limiter(api: Any) -> dict[str, Any] | None:
    """Each role's token bucket (`--kube-api-qps`): requests, how many waited, and how long."""
    limits = getattr(api, "limits", None)  # an older revision's client has none
    if limits is None:
        return None
    return {manager: bucket.summary() for manager, bucket in sorted(limits.buckets.items())}


def _histogram(metrics: Any, name: str, label_part: str) -> dict[str, float] | None:
    """Count, sum and mean of one histogram's series whose labels mention `label_part`."""
    if metrics is None:
        return None
    count = total = 0.0
    for family in metrics.registry.collect():
        for sample in family.samples:
            if not sample.name.startswith(name) or not any(
                label_part in value for value in sample.labels.values()
            ):
                continue
            if sample.name == f"{name}_count":
                count += sample.value
            elif sample.name == f"{name}_sum":
                total += sample.value
    return {
        "count": int(count),
        "seconds": round(total, 3),
        "mean_ms": round(total / count * 1000, 2) if count else 0.0,
    }
