"""Prometheus metrics under the Go sidecars' names and labels, so that existing dashboards work.

The only module that imports prometheus_client. One `Metrics` per operator, each with its own
`CollectorRegistry` (never the process-global one), so that several operators in one process
(tests, the sandbox) count separately. It lives in the memo as `memo.metrics` (`from_memo`).

It implements the hooks the rest of the code calls, and nothing else calls prometheus:

- `observe_call`: `CSIClient`'s call observer → `csi_sidecar_operations_seconds`
  (csi-lib-utils: labels driver_name, method_name = the full gRPC method, grpc_status_code =
  Go's code name; buckets 0.1 s … 600 s). The driver's name is `unknown-driver` until
  GetPluginInfo answered, as upstream.
- `kopf_csi.observing.ProvisioningObserver` → `controller_persistentvolumeclaim_provision_*`
  and `controller_persistentvolume_delete_*` (the provisioner library's, labels class/source).
- `kopf_csi.queueing.QueueObserver` → client-go's `workqueue_*` metrics (label `name`).
  Depth and the in-flight durations are read from the queues at scrape time (`ScrapedQueue`:
  what this module needs of a queue, so that it imports no queue module).
- `leader`: `leader_election_master_status{name}`, for the leader-election module.
- `watch_rate_limits`: each role's API rate limit (`--kube-api-qps`), read at scrape time:
  `kopf_csi_api_throttled_requests_total{manager}` and `kopf_csi_api_throttled_seconds_total
  {manager}`, the requests that waited for a token and the seconds they waited. Ours: the Go
  sidecars export no client-side throttling metric (client-go's own histogram is not
  registered there), and a claim slowed by it shows nowhere else but a log line.
- The operator's own waits, ours (no Go counterpart; a Go sidecar has goroutines on every core
  and one HTTP/2 connection, where this is one thread and a pool of HTTP/1.1 connections):
  `requested` and `connection_got` (`kube.RequestObserver`, from the shared API client) →
  `kopf_csi_api_requests_total`, `kopf_csi_api_request_duration_seconds`,
  `kopf_csi_api_connection_seconds`;
  `loop_lagged` (`looplag.LagProbe`) → `kopf_csi_event_loop_lag_seconds`; `watch_journal`:
  the in-flight journal's records, their wait and its writes, read at scrape time. Together
  they say where a slow burst's time went on a real server: the loop, the pool, the
  handshakes, the server's answers or the journal.

Upstream's `migrated` label exists only for drivers that replace an in-tree plugin (CSI
migration); this operator does not translate in-tree volumes, so the label is never added.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import prometheus_client
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from kopf_csi import names
from kopf_csi.csi.codes import Code

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_BUCKETS",
    "LAG_BUCKETS",
    "OPERATION_BUCKETS",
    "QUEUE_BUCKETS",
    "REQUEST_BUCKETS",
    "Metrics",
    "ScrapedBucket",
    "ScrapedJournal",
    "ScrapedQueue",
    "ScrapedReachability",
    "from_memo",
    "grpc_code_name",
]

CONTENT_TYPE = prometheus_client.exposition.CONTENT_TYPE_PLAIN_0_0_4
"""The classic text format (0.0.4), as the Go sidecars serve it without negotiation; every
Prometheus reads it (the Python client's newer default, 1.0.0, only adds UTF-8 names)."""

OPERATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600)
"""csi-lib-utils' buckets for CSI call durations, in seconds."""

DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""Go's `prometheus.DefBuckets`, which the provisioner library's histograms use (Python's
defaults differ: they would break dashboards that select `le` values)."""

QUEUE_BUCKETS = tuple(float(f"1e{exponent}") for exponent in range(-6, 4))
"""client-go's workqueue buckets: `ExponentialBuckets(10e-7, 10, 10)`, 1 µs … 1000 s."""

REQUEST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)
"""client-go's `rest_client_request_duration_seconds` buckets (since kubernetes #106911)."""

LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""The event loop's lag and the time to get a connection: from 1 ms (noise) to 10 s."""

# Help texts (ours). component-base prefixes the stability level, as we do.
_HELP_OPERATIONS = "[ALPHA] Duration of CSI calls, by driver, gRPC method and gRPC status code"
_HELP_PROVISION = "Volumes provisioned for claims, by storage class and data source kind"
_HELP_PROVISION_FAILED = "Failed attempts to provision a claim, by storage class and source kind"
_HELP_PROVISION_DURATION = "Seconds a successful provisioning attempt took (failures excluded)"
_HELP_DELETE = "Released volumes deleted, by storage class"
_HELP_DELETE_FAILED = "Failed attempts to delete a released volume, by storage class"
_HELP_DELETE_DURATION = "Seconds a successful deletion attempt took (failures excluded)"
_HELP_DEPTH = "[BETA] Keys waiting in the work queue"
_HELP_ADDS = "[BETA] Keys added to the work queue"
_HELP_LATENCY = "[BETA] Seconds a key waited in the work queue before a worker took it"
_HELP_WORK = "[BETA] Seconds a worker spent on one key"
_HELP_UNFINISHED = "[BETA] Seconds of work in flight, not yet in work_duration (stuck workers)"
_HELP_LONGEST = "[BETA] Seconds the longest run in flight has been running"
_HELP_RETRIES = "[BETA] Delayed re-adds (retries) of the work queue"
_HELP_LEADER = "1 while this replica holds the named lease, 0 while it waits"
_HELP_THROTTLED = "API requests that waited for the role's client-side rate limit (--kube-api-qps)"
_HELP_THROTTLED_SECONDS = "Seconds API requests waited for the role's client-side rate limit"
_HELP_REQUESTS = "API requests of the operator's client, by role, HTTP method, resource, code"
_HELP_REQUEST_DURATION = "Seconds from sending an API request to its whole answer, by method"
_HELP_CONNECTION = "Seconds API requests took to get a connection (pool's wait, TCP and TLS)"
_HELP_LOOP_LAG = "Seconds the operator's event loop ran a timer late (due every 0.1 s)"
_HELP_JOURNAL_RECORDS = "Claims recorded in the in-flight journal before their CreateVolume"
_HELP_JOURNAL_WAIT = "Seconds claims waited for their in-flight journal record to be durable"
_HELP_JOURNAL_WRITES = "Writes of the in-flight journal's ConfigMaps (each commits many records)"
_HELP_UNREACHABLE = "1 while the API server does not answer the operator's requests, else 0"
_HELP_OUTAGES = "Times the API server stopped answering the operator's requests"
_HELP_UNREACHABLE_SECONDS = "Seconds the API server did not answer, over every outage so far"


class ScrapedQueue(Protocol):
    """What a scrape reads of a work queue (`kopf_csi.queueing.WorkQueue` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def depth(self) -> int: ...

    def processing_since(self) -> list[float]: ...


class ScrapedBucket(Protocol):
    """What the rate-limit counters need of a role's token bucket (`throttling.TokenBucket`)."""

    @property
    def delayed(self) -> int: ...
    @property
    def waited(self) -> float: ...


class ScrapedJournal(Protocol):
    """What a scrape reads of an in-flight journal (`provisioning.journal.Journal` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def records(self) -> int: ...
    @property
    def waited(self) -> float: ...
    @property
    def writes(self) -> int: ...


class ScrapedReachability(Protocol):
    """What a scrape reads of the API server's reachability (`reachability.Reachability`)."""

    @property
    def reachable(self) -> bool: ...
    @property
    def outages(self) -> int: ...
    @property
    def unreachable_seconds(self) -> float: ...
    @property
    def down_since(self) -> float | None: ...


def grpc_code_name(code: Code) -> str:
    """Go's `codes.Code.String()`: `OK`, `Canceled`, `DeadlineExceeded`, ..."""
    return "OK" if code is Code.OK else code.title


class Metrics:
    """One operator's metrics: a registry of its own and the hooks that feed it."""

    def __init__(self, *, process: bool = True) -> None:
        # `*_created` series are a Python client extra; the Go sidecars expose none.
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        self.driver_name = names.METRIC_DRIVER_UNKNOWN
        registry = self.registry
        self.operations = _Histograms(
            names.METRIC_CSI_OPERATIONS, _HELP_OPERATIONS,
            (names.LABEL_DRIVER_NAME, names.LABEL_METHOD_NAME, names.LABEL_GRPC_STATUS_CODE),
            OPERATION_BUCKETS, registry,
        )  # fmt: skip
        claim_labels = (names.LABEL_CLASS, names.LABEL_SOURCE)
        self.provision_total = _Counters(
            names.METRIC_PROVISION_TOTAL, _HELP_PROVISION, claim_labels, registry
        )
        self.provision_failures = _Counters(
            names.METRIC_PROVISION_FAILED, _HELP_PROVISION_FAILED, claim_labels, registry
        )
        self.provision_duration = _Histograms(
            names.METRIC_PROVISION_DURATION, _HELP_PROVISION_DURATION, claim_labels,
            DEFAULT_BUCKETS, registry,
        )  # fmt: skip
        class_label = (names.LABEL_CLASS,)
        self.delete_total = _Counters(
            names.METRIC_DELETE_TOTAL, _HELP_DELETE, class_label, registry
        )
        self.delete_failures = _Counters(
            names.METRIC_DELETE_FAILED, _HELP_DELETE_FAILED, class_label, registry
        )
        self.delete_duration = _Histograms(
            names.METRIC_DELETE_DURATION, _HELP_DELETE_DURATION, class_label,
            DEFAULT_BUCKETS, registry,
        )  # fmt: skip
        queue_label = (names.LABEL_QUEUE_NAME,)
        self.queue_adds = _Counters(names.METRIC_QUEUE_ADDS, _HELP_ADDS, queue_label, registry)
        self.queue_retries = _Counters(
            names.METRIC_QUEUE_RETRIES, _HELP_RETRIES, queue_label, registry
        )
        self.queue_latency = _Histograms(
            names.METRIC_QUEUE_LATENCY, _HELP_LATENCY, queue_label, QUEUE_BUCKETS, registry
        )
        self.queue_work = _Histograms(
            names.METRIC_QUEUE_WORK_DURATION, _HELP_WORK, queue_label, QUEUE_BUCKETS, registry
        )
        self.leader_status = Gauge(
            names.METRIC_LEADER_STATUS, _HELP_LEADER, ("name",), registry=registry
        )
        self.api_requests = _Counters(
            names.METRIC_API_REQUESTS, _HELP_REQUESTS,
            (names.LABEL_MANAGER, names.LABEL_VERB, names.LABEL_RESOURCE, names.LABEL_CODE),
            registry,
        )  # fmt: skip
        self.api_request_duration = _Histograms(
            names.METRIC_API_REQUEST_DURATION, _HELP_REQUEST_DURATION,
            (names.LABEL_VERB, names.LABEL_RESOURCE), REQUEST_BUCKETS, registry,
        )  # fmt: skip
        self.api_connection = _Histograms(
            names.METRIC_API_CONNECTION, _HELP_CONNECTION, (), LAG_BUCKETS, registry
        )
        self.api_connection.touch(())
        self.loop_lag = _Histograms(
            names.METRIC_EVENT_LOOP_LAG, _HELP_LOOP_LAG, (), LAG_BUCKETS, registry
        )
        self.loop_lag.touch(())
        self.journals: dict[str, ScrapedJournal] = {}
        """The in-flight journals by name, read at scrape time (the newest of a name wins)."""
        registry.register(_JournalCollector(self.journals))
        self.queues: dict[str, ScrapedQueue] = {}
        """The started queues by name, read at scrape time (the newest of a name wins)."""
        registry.register(_QueueCollector(self.queues))
        if process:
            prometheus_client.ProcessCollector(registry=registry)

    # -- CSI calls (`CSIClient(observers=[metrics.observe_call])`) ------------------------------

    def set_driver_name(self, name: str) -> None:
        """Label the following calls with the driver's name (upstream: `SetDriverName`)."""
        self.driver_name = name or names.METRIC_DRIVER_UNKNOWN

    def observe_call(self, method: str, code: Code, seconds: float) -> None:
        code_name = grpc_code_name(code)
        self.operations.observe((self.driver_name, method, code_name), seconds)

    # -- provisioning (`kopf_csi.observing.ProvisioningObserver`) -------------------------------

    def provisioned(self, *, class_name: str, source: str, seconds: float) -> None:
        self.provision_duration.observe((class_name, source), seconds)
        self.provision_total.inc((class_name, source))

    def provision_failed(self, *, class_name: str, source: str) -> None:
        self.provision_failures.inc((class_name, source))

    def deleted(self, *, class_name: str, seconds: float) -> None:
        self.delete_duration.observe((class_name,), seconds)
        self.delete_total.inc((class_name,))

    def delete_failed(self, *, class_name: str) -> None:
        self.delete_failures.inc((class_name,))

    # -- work queues (`kopf_csi.queueing.QueueObserver`) ---------------------------------------

    def started(self, queue: ScrapedQueue) -> None:
        self.queues[queue.name] = queue
        # Present from the start, as client-go creates them with the queue: zero, not absent.
        for family in (self.queue_adds, self.queue_retries, self.queue_latency, self.queue_work):
            family.touch((queue.name,))

    def added(self, queue: str) -> None:
        self.queue_adds.inc((queue,))

    def retried(self, queue: str) -> None:
        self.queue_retries.inc((queue,))

    def waited(self, queue: str, seconds: float) -> None:
        self.queue_latency.observe((queue,), seconds)

    def worked(self, queue: str, seconds: float) -> None:
        self.queue_work.observe((queue,), seconds)

    # -- leader election ------------------------------------------------------------------------

    def leader(self, name: str, leading: bool) -> None:
        """Whether this replica holds the lease `name` (client-go's leader gauge)."""
        self.leader_status.labels(name).set(1 if leading else 0)

    # -- the API rate limit -----------------------------------------------------------------------

    def watch_rate_limits(self, buckets: Mapping[str, ScrapedBucket]) -> None:
        """Each role's bucket by field manager, read when scraped (roles added later count)."""
        self.registry.register(_RateLimitCollector(buckets))

    # -- the operator's own waits ------------------------------------------------------------------

    def requested(self, manager: str, verb: str, resource: str, code: str, seconds: float) -> None:
        """One API request of the shared client (`kube.RequestObserver`)."""
        self.api_requests.inc((manager, verb, resource, code))
        self.api_request_duration.observe((verb, resource), seconds)

    def connection_got(self, seconds: float) -> None:
        self.api_connection.observe((), seconds)

    def loop_lagged(self, lag: float) -> None:
        """How late the loop ran a timer (`looplag.LagProbe`'s observer)."""
        self.loop_lag.observe((), lag)

    def watch_journal(self, journal: ScrapedJournal) -> None:
        """Count a journal's records, their wait and its writes, read when scraped."""
        self.journals[journal.name] = journal

    def watch_reachability(self, reachability: ScrapedReachability) -> None:
        """Whether the API server answers, its outages and their seconds, read when scraped."""
        self.registry.register(_ReachabilityCollector(reachability))

    # -- exposition -----------------------------------------------------------------------------

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format (what `/metrics` serves)."""
        return prometheus_client.generate_latest(self.registry)


class _Scraped(Collector):
    """Families computed from live state each time they are scraped (`_families`)."""

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        return iter(self._families())

    def _families(self) -> list[Metric]:
        raise NotImplementedError


class _Counters(_Scraped):
    """A counter family kept as plain numbers by label values, made into samples when scraped.

    prometheus_client's own children take a lock for every increment, and its `labels()`
    validates and locks on every lookup: with several hooks per API request and per CSI call,
    that was about 3 % of the operator's CPU under churn (docs/benchmarks.md, "Seventh
    session"). Every hook runs on the operator's event loop, as does the scrape (the HTTP
    endpoint), so nothing here needs a lock. The exposition is byte for byte the client's
    (the order of the series is the order they first appeared, as there)."""

    def __init__(
        self, name: str, help_: str, labels: Sequence[str], registry: CollectorRegistry
    ) -> None:
        self._name, self._help, self._labels = name, help_, list(labels)
        self._values: dict[tuple[str, ...], float] = {}
        registry.register(self)

    def touch(self, labels: tuple[str, ...]) -> None:
        """Make the series exist at zero (client-go creates some with their owner)."""
        self._values.setdefault(labels, 0.0)

    def inc(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        values = self._values
        values[labels] = values.get(labels, 0.0) + amount

    def _families(self) -> list[Metric]:
        family = CounterMetricFamily(self._name, self._help, labels=self._labels)
        for labels, value in list(self._values.items()):
            family.add_metric(list(labels), value)
        return [family]


class _Histograms(_Scraped):
    """A histogram family kept as plain counts by label values (see `_Counters`): per series,
    the observations in each bucket alone (the last one +Inf), then their sum; the buckets are
    made cumulative when scraped."""

    def __init__(
        self,
        name: str,
        help_: str,
        labels: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        self._name, self._help, self._labels = name, help_, list(labels)
        self._bounds = tuple(float(bound) for bound in buckets)
        self._le = [floatToGoString(bound) for bound in self._bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self._series: dict[tuple[str, ...], list[float]] = {}
        registry.register(self)

    def touch(self, labels: tuple[str, ...]) -> list[float]:
        """The series of these label values, made (at zero) if it is not there yet."""
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = [0.0] * (len(self._bounds) + 2)
        return series

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        series = self._series.get(labels) or self.touch(labels)
        series[bisect.bisect_left(self._bounds, value)] += 1.0  # `le`: value <= bound
        series[-1] += value

    def _families(self) -> list[Metric]:
        family = HistogramMetricFamily(self._name, self._help, labels=self._labels)
        for labels, series in list(self._series.items()):
            counts, total = series[:-1], series[-1]
            cumulative, buckets = 0.0, []
            for le, count in zip(self._le, counts, strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric(list(labels), buckets, sum_value=total)
        return [family]


class _QueueCollector(_Scraped):
    """The gauges client-go keeps current with a ticker, computed when scraped instead."""

    def __init__(self, queues: dict[str, ScrapedQueue]) -> None:
        self._queues = queues

    def _families(self) -> list[Metric]:
        label = [names.LABEL_QUEUE_NAME]
        depth = GaugeMetricFamily(names.METRIC_QUEUE_DEPTH, _HELP_DEPTH, labels=label)
        unfinished = GaugeMetricFamily(
            names.METRIC_QUEUE_UNFINISHED, _HELP_UNFINISHED, labels=label
        )
        longest = GaugeMetricFamily(names.METRIC_QUEUE_LONGEST_RUNNING, _HELP_LONGEST, labels=label)
        now = time.monotonic()
        for name, queue in sorted(self._queues.items()):
            running = [now - since for since in queue.processing_since()]
            depth.add_metric([name], queue.depth)
            unfinished.add_metric([name], sum(running))
            longest.add_metric([name], max(running, default=0.0))
        return [depth, unfinished, longest]


class _RateLimitCollector(_Scraped):
    """The requests that waited for a token, and how long, per role (`watch_rate_limits`)."""

    def __init__(self, buckets: Mapping[str, ScrapedBucket]) -> None:
        self._buckets = buckets

    def _families(self) -> list[Metric]:
        label = [names.LABEL_MANAGER]
        throttled = CounterMetricFamily(names.METRIC_API_THROTTLED, _HELP_THROTTLED, labels=label)
        seconds = CounterMetricFamily(
            names.METRIC_API_THROTTLED_SECONDS, _HELP_THROTTLED_SECONDS, labels=label
        )
        for manager, bucket in sorted(self._buckets.items()):
            throttled.add_metric([manager], bucket.delayed)
            seconds.add_metric([manager], bucket.waited)
        return [throttled, seconds]


class _JournalCollector(_Scraped):
    """Each in-flight journal's records, their wait and its writes (`watch_journal`)."""

    def __init__(self, journals: dict[str, ScrapedJournal]) -> None:
        self._journals = journals

    def _families(self) -> list[Metric]:
        label = [names.LABEL_JOURNAL]
        records = CounterMetricFamily(
            names.METRIC_JOURNAL_RECORDS, _HELP_JOURNAL_RECORDS, labels=label
        )
        waited = CounterMetricFamily(
            names.METRIC_JOURNAL_RECORD_WAIT, _HELP_JOURNAL_WAIT, labels=label
        )
        writes = CounterMetricFamily(
            names.METRIC_JOURNAL_WRITES, _HELP_JOURNAL_WRITES, labels=label
        )
        for name, journal in sorted(self._journals.items()):
            records.add_metric([name], journal.records)
            waited.add_metric([name], journal.waited)
            writes.add_metric([name], journal.writes)
        return [records, waited, writes]


class _ReachabilityCollector(_Scraped):
    """The API server's reachability as the operator's requests see it (`watch_reachability`):
    `kopf_csi_api_unreachable` (1 during an outage), `kopf_csi_api_outages_total` and
    `kopf_csi_api_unreachable_seconds_total` (the current outage's seconds included)."""

    def __init__(self, reachability: ScrapedReachability) -> None:
        self._reachability = reachability

    def _families(self) -> list[Metric]:
        state = self._reachability
        unreachable = GaugeMetricFamily(names.METRIC_API_UNREACHABLE, _HELP_UNREACHABLE)
        unreachable.add_metric([], 0 if state.reachable else 1)
        outages = CounterMetricFamily(names.METRIC_API_OUTAGES, _HELP_OUTAGES)
        outages.add_metric([], state.outages)
        since = state.down_since
        current = 0.0 if since is None else max(0.0, time.monotonic() - since)
        seconds = CounterMetricFamily(
            names.METRIC_API_UNREACHABLE_SECONDS, _HELP_UNREACHABLE_SECONDS
        )
        seconds.add_metric([], state.unreachable_seconds + current)
        return [unreachable, outages, seconds]


def from_memo(memo: Any) -> Metrics:
    """The operator's metrics (`memo.metrics`), created by whichever handler asks first."""
    metrics = getattr(memo, "metrics", None)
    if not isinstance(metrics, Metrics):
        metrics = Metrics()
        memo.metrics = metrics
    return metrics
