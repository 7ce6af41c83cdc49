"""The operator's counters and histograms, kept as plain numbers (`metrics._Counters`,
`metrics._Histograms`), expose exactly what prometheus_client's own `Counter` and `Histogram`
expose for the same observations: the same lines, byte for byte, so that dashboards, alerts
and recording rules written against the Go sidecars' metrics see no difference."""

from __future__ import annotations

import math

import prometheus_client
from hypothesis import given, settings
from hypothesis import strategies as st

from kopf_csi import metrics

BOUNDS = metrics.REQUEST_BUCKETS
LABELS = ("verb", "resource")
values = st.one_of(
    st.sampled_from([*BOUNDS, 0.0, -1.0, math.inf]),  # on a bound: counted in that bucket
    st.floats(min_value=-10, max_value=1e4, allow_nan=False),
)
label_values = st.tuples(st.sampled_from(["GET", "PATCH"]), st.sampled_from(["pv", "pvc"]))


def client_side(observations: list[tuple[tuple[str, str], float]]) -> bytes:
    prometheus_client.disable_created_metrics()  # as `Metrics` does
    registry = prometheus_client.CollectorRegistry()
    histogram = prometheus_client.Histogram(
        "h_seconds", "help", LABELS, buckets=BOUNDS, registry=registry
    )
    counter = prometheus_client.Counter("c_total", "help", LABELS, registry=registry)
    for labels, value in observations:
        histogram.labels(*labels).observe(value)
        counter.labels(*labels).inc(abs(value))
    return prometheus_client.generate_latest(registry)


def ours(observations: list[tuple[tuple[str, str], float]]) -> bytes:
    registry = prometheus_client.CollectorRegistry()
    histogram = metrics._Histograms("h_seconds", "help", LABELS, BOUNDS, registry)
    counter = metrics._Counters("c_total", "help", LABELS, registry)
    for labels, value in observations:
        histogram.observe(labels, value)
        counter.inc(labels, abs(value))
    return prometheus_client.generate_latest(registry)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(label_values, values), max_size=30))
def test_the_exposition_is_the_clients_own(
    observations: list[tuple[tuple[str, str], float]],
) -> None:
    assert ours(observations) == client_side(observations)


def test_a_touched_series_is_there_at_zero() -> None:
    registry = prometheus_client.CollectorRegistry()
    histogram = metrics._Histograms("h_seconds", "help", ("name",), (0.1, 1), registry)
    counter = metrics._Counters("c_total", "help", ("name",), registry)
    histogram.touch(("claims",))
    counter.touch(("claims",))
    text = prometheus_client.generate_latest(registry).decode()
    assert 'h_seconds_bucket{le="+Inf",name="claims"} 0.0' in text
    assert 'h_seconds_count{name="claims"} 0.0' in text
    assert 'c_total{name="claims"} 0.0' in text
    counter.inc(("claims",))
    counter.touch(("claims",))  # touching again keeps the count
    text = prometheus_client.generate_latest(registry).decode()
    assert 'c_total{name="claims"} 1.0' in text
