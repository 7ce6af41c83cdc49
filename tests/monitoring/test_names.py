"""Every metric name the rules and the dashboard use is one the operator exports.

We test these aspects, without Prometheus (test_live.py checks the same against a real run):
- each name in every alert's expression, every dashboard query and every dashboard variable is
  a sample name of the operator's registry (`kopf_csi.metrics.Metrics`, all its collectors;
  a counter `x` is sampled as `x_total`, a histogram as `x_bucket`, `x_sum`, `x_count`), or
  Prometheus' own `up`;
- the check is not blind: a misspelt name, a suffix a family does not have, and a name the
  operator never exported are each reported.
"""

from __future__ import annotations

import json
import re

import pytest

from devtools.monitoring import alerts, dashboard
from kopf_csi.metrics import Metrics

from .conftest import DASHBOARD
from .promql import metric_names

SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "gauge": ("",),
    "info": ("_info",),
}
PROMETHEUS_OWN = frozenset({"up"})


def exported() -> set[str]:
    """Every sample name the operator's registry can expose, its families all registered."""
    metrics = Metrics()
    metrics.watch_rate_limits({})  # registered by the runtime once the roles' limits exist
    return {
        family.name + suffix
        for family in metrics.registry.collect()
        for suffix in SUFFIXES[family.type]
    }


def unknown(expressions: list[str]) -> set[str]:
    used = {name for expr in expressions for name in metric_names(expr)}
    return used - exported() - PROMETHEUS_OWN


def _expressions() -> list[str]:
    document = json.loads(DASHBOARD.read_text())
    variables = [
        re.sub(r", \w+\)$", ")", query.removeprefix("label_values(")) for _, query, _ in
        dashboard.VARIABLES.values()
    ]  # fmt: skip
    rules = [rule["expr"] for group in alerts.rule_groups()["groups"] for rule in group["rules"]]
    return [*rules, *(expr for _, expr in dashboard.queries(document)), *variables]


def test_every_metric_name_used_is_exported() -> None:
    expressions = _expressions()
    assert len(expressions) > 40
    assert unknown(expressions) == set()


def test_the_registry_has_every_family_of_the_operations_docs() -> None:
    names = exported()
    for expected in (
        "csi_sidecar_operations_seconds_bucket",
        "workqueue_longest_running_processor_seconds",
        "kopf_csi_api_throttled_seconds_total",
        "kopf_csi_journal_records_total",
        "leader_election_master_status",
        "process_resident_memory_bytes",
    ):
        assert expected in names


@pytest.mark.parametrize(
    ("expr", "bad"),
    [
        ('rate(workqueue_adds{job="kopf-csi"}[5m])', "workqueue_adds"),  # `_total` left out
        ('sum by (le) (rate(kopf_csi_event_loop_lag_seconds_buckets{a="b"}[5m]))',
         "kopf_csi_event_loop_lag_seconds_buckets"),
        ("workqueue_depth > 0 unless workqueue_longest_running_seconds > 1",
         "workqueue_longest_running_seconds"),
        ("rest_client_requests_total", "rest_client_requests_total"),  # client-go's, not ours
    ],
)  # fmt: skip
def test_a_name_the_operator_does_not_export_is_caught(expr: str, bad: str) -> None:
    assert unknown([expr]) == {bad}
