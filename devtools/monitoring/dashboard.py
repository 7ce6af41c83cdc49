"""The Grafana dashboard, as code: grafana-foundation-sdk's builders, rendered to JSON.

Five rows: the CSI calls, provisioning and deletion, the work queues, the Kubernetes API, and
the operator itself. Every query selects the operator's series with `SELECTOR`: the scrape job
(`$job`), the namespace (`$namespace`) and the replicas that serve the chosen drivers
(`$instance`, hidden: the targets whose CSI calls carry those `driver_name`s). Several drivers,
each with its own operator, then share one Prometheus and one dashboard: the `driver`
variable picks them.

`QUERIES` lists (panel title, PromQL) for the tests: every one must return data from a real
Prometheus scraping a real operator (tests/monitoring/test_live.py).
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as builders
from grafana_foundation_sdk.builders import prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as models

from devtools.monitoring.alerts import JOB

__all__ = ["SELECTOR", "UID", "VARIABLES", "build", "queries", "render"]

UID = "kopf-csi"
SELECTOR = 'job=~"$job", namespace=~"$namespace", instance=~"$instance"'
RATE = "$__rate_interval"
DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")

VARIABLES = {
    # name: (label, the query's label_values(...), hidden)
    "namespace": (
        "Namespace",
        'label_values(kopf_csi_event_loop_lag_seconds_count{job=~"$job"}, namespace)',
        False,
    ),
    "driver": (
        "Driver",
        'label_values(csi_sidecar_operations_seconds_count{job=~"$job", namespace=~"$namespace",'
        ' driver_name!="unknown-driver"}, driver_name)',
        False,
    ),
    "instance": (
        "Replica",
        'label_values(csi_sidecar_operations_seconds_count{job=~"$job", namespace=~"$namespace",'
        ' driver_name=~"$driver"}, instance)',
        True,
    ),
}


def _sel(metric: str, extra: str = "") -> str:
    return f"{metric}{{{SELECTOR}{', ' + extra if extra else ''}}}"


def _rate(metric: str, by: str, extra: str = "") -> str:
    return f"sum by ({by}) (rate({_sel(metric, extra)}[{RATE}]))"


def _quantile(q: float, histogram: str, by: str, extra: str = "") -> str:
    series = _sel(histogram + "_bucket", extra)
    buckets = f"sum by ({by}{', ' if by else ''}le) (rate({series}[{RATE}]))"
    return f"histogram_quantile({q:g}, {buckets})"


def _mean(histogram: str, by: str) -> str:
    return f"{_rate(histogram + '_sum', by)}\n  /\n{_rate(histogram + '_count', by)}"


Target = tuple[str, str]  # (PromQL, legend)


def _panel(title: str, description: str, unit: str, *targets: Target) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .min(0)
        .height(8)
        .span(8)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["max", "lastNotNull"])
        )
        .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI))
    )
    for ref, (expr, legend) in zip("ABCDEFGH", targets, strict=False):
        panel = panel.with_target(
            prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).range()
        )
    return panel


OPERATIONS = "csi_sidecar_operations_seconds"
METHOD = "{{method_name}}"
DRIVER = 'driver_name=~"$driver"'


def _rows() -> list[tuple[str, list[timeseries.Panel]]]:
    by_method = "driver_name, method_name"
    return [
        ("Operations: CSI calls", [
            _panel(
                "CSI calls per second", "Every call to the driver, by method.", "reqps",
                (_rate(OPERATIONS + "_count", by_method, DRIVER), METHOD),
            ),
            _panel(
                "CSI call latency", "p50 and p99 per method (csi-lib-utils' buckets).", "s",
                (_quantile(0.99, OPERATIONS, by_method, DRIVER), f"p99 {METHOD}"),
                (_quantile(0.5, OPERATIONS, by_method, DRIVER), f"p50 {METHOD}"),
            ),
            _panel(
                "CSI errors per second",
                "Calls that did not end OK, by method and gRPC code (KopfCSIErrorRatio).",
                "reqps",
                (
                    _rate(OPERATIONS + "_count", f"{by_method}, grpc_status_code",
                          f'{DRIVER}, grpc_status_code!="OK"'),
                    f"{METHOD} {{{{grpc_status_code}}}}",
                ),
            ),
        ]),
        ("Provisioning and deletion", [
            _panel(
                "Provisioned and deleted per second", "Successful attempts, by class.", "ops",
                (_rate("controller_persistentvolumeclaim_provision_total", "class, source"),
                 "provisioned {{class}} {{source}}"),
                (_rate("controller_persistentvolume_delete_total", "class"),
                 "deleted {{class}}"),
            ),
            _panel(
                "Provisioning and deletion duration",
                "p99 of the successful attempts, by class (failures are not timed).", "s",
                (_quantile(0.99, "controller_persistentvolumeclaim_provision_duration_seconds",
                           "class"), "provision p99 {{class}}"),
                (_quantile(0.99, "controller_persistentvolume_delete_duration_seconds", "class"),
                 "delete p99 {{class}}"),
            ),
            _panel(
                "Failed attempts per second",
                "Every failed attempt counts, retries again; deletions of volumes still attached"
                " count as upstream counts them (KopfCSIProvisioningFailing,"
                " KopfCSIDeletionFailing).",
                "ops",
                (_rate("controller_persistentvolumeclaim_provision_failed_total", "class"),
                 "provision {{class}}"),
                (_rate("controller_persistentvolume_delete_failed_total", "class"),
                 "delete {{class}}"),
            ),
        ]),
        ("Queues", [
            _panel(
                "Depth", "Keys waiting for a worker, per queue (KopfCSIQueueBacklog).", "short",
                (f"sum by (name) ({_sel('workqueue_depth')})", "{{name}}"),
            ),
            _panel(
                "Adds and retries per second", "Keys queued, and delayed re-adds (retries).",
                "ops",
                (_rate("workqueue_adds_total", "name"), "adds {{name}}"),
                (_rate("workqueue_retries_total", "name"), "retries {{name}}"),
            ),
            _panel(
                "Wait for a worker", "p99 of the time a key waited in the queue.", "s",
                (_quantile(0.99, "workqueue_queue_duration_seconds", "name"), "{{name}}"),
            ),
            _panel(
                "Work duration", "p99 of one key's work.", "s",
                (_quantile(0.99, "workqueue_work_duration_seconds", "name"), "{{name}}"),
            ),
            _panel(
                "Longest running",
                "The key in work the longest, per queue: a line that climbs is stuck work"
                " (KopfCSIWorkStuck).",
                "s",
                (f"max by (name) ({_sel('workqueue_longest_running_processor_seconds')})",
                 "longest {{name}}"),
                (f"sum by (name) ({_sel('workqueue_unfinished_work_seconds')})",
                 "unfinished {{name}}"),
            ),
        ]),
        ("Kubernetes API", [
            _panel(
                "Requests per second", "The operator's own client, by role and HTTP code"
                " (5xx and <error>: KopfCSIAPIServerErrors).", "reqps",
                (_rate("kopf_csi_api_requests_total", "manager, code"), "{{manager}} {{code}}"),
            ),
            _panel(
                "Request latency", "p99 from sending to the whole answer, by verb and resource;"
                " and the time to get a connection.", "s",
                (_quantile(0.99, "kopf_csi_api_request_duration_seconds", "verb, resource"),
                 "{{verb}} {{resource}}"),
                (_quantile(0.99, "kopf_csi_api_connection_seconds", ""), "connection p99"),
            ),
            _panel(
                "Throttling", "Seconds per second that each role's requests waited for"
                " --kube-api-qps (KopfCSIThrottled), and requests that waited.", "short",
                (_rate("kopf_csi_api_throttled_seconds_total", "manager"),
                 "waited s/s {{manager}}"),
                (_rate("kopf_csi_api_throttled_requests_total", "manager"),
                 "requests/s {{manager}}"),
            ),
        ]),
        ("Operator", [
            _panel(
                "Event-loop lag", "How late the one thread runs a timer due every 0.1 s"
                " (KopfCSIEventLoopLag).", "s",
                (_quantile(0.99, "kopf_csi_event_loop_lag_seconds", "instance"),
                 "p99 {{instance}}"),
                (_mean("kopf_csi_event_loop_lag_seconds", "instance"), "mean {{instance}}"),
            ),
            _panel(
                "In-flight journal", "Claims recorded per second, ConfigMap writes per second,"
                " and a claim's mean wait for its record in seconds (KopfCSIJournalBacklog).",
                "short",
                (_rate("kopf_csi_journal_records_total", "journal"), "records/s {{journal}}"),
                (_rate("kopf_csi_journal_writes_total", "journal"), "writes/s {{journal}}"),
                (
                    f"{_rate('kopf_csi_journal_record_wait_seconds_total', 'journal')}\n  /\n"
                    f"{_rate('kopf_csi_journal_records_total', 'journal')}",
                    "mean wait {{journal}}",
                ),
            ),
            _panel(
                "Leader", "1 where this replica holds the role's Lease (KopfCSINoLeader).",
                "short",
                (f"max by (instance, name) ({_sel('leader_election_master_status')})",
                 "{{instance}} {{name}}"),
            ),
            _panel(
                "CPU", "Cores used by each replica.", "short",
                (_rate("process_cpu_seconds_total", "instance"), "{{instance}}"),
            ),
            _panel(
                "Memory", "Resident memory of each replica.", "bytes",
                (f"sum by (instance) ({_sel('process_resident_memory_bytes')})",
                 "{{instance}}"),
            ),
        ]),
    ]  # fmt: skip


def _variables() -> list[Any]:
    datasource = builders.DatasourceVariable("datasource").label("Data source").type("prometheus")
    job = builders.TextBoxVariable("job").label("Job").default_value(JOB)
    found: list[Any] = [datasource, job]
    for name, (label, query, hidden) in VARIABLES.items():
        variable = (
            builders.QueryVariable(name)
            .label(label)
            .datasource(DATASOURCE)
            .query(query)
            .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(models.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
        )
        if name == "namespace":
            variable = variable.all_value(".*")  # targets without the label match too
        if hidden:
            variable = variable.hide(models.VariableHide.HIDE_VARIABLE)
        found.append(variable)
    return found


def build() -> models.Dashboard:
    dashboard = (
        builders.Dashboard("kopf-csi")
        .uid(UID)
        .description(
            "kopf-csi, the CSI sidecars as one operator: its CSI calls, provisioning, queues,"
            " Kubernetes API and itself. Generated by `python -m devtools.monitoring`."
        )
        .tags(["kopf-csi", "csi", "storage"])
        .editable()
        .tooltip(models.DashboardCursorSync.CROSSHAIR)
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
    )
    for variable in _variables():
        dashboard = dashboard.with_variable(variable)
    ids = iter(range(1, 100))  # stable ids: Grafana links to a panel by its id
    for title, panels in _rows():
        dashboard = dashboard.with_row(builders.Row(title).id(next(ids)))
        for panel in panels:
            dashboard = dashboard.with_panel(panel.id(next(ids)))
    return dashboard.build()


def render() -> str:
    """The dashboard's JSON, as checked in (stable: keys in the SDK's order, 2-space indent)."""
    return json.dumps(build(), cls=JSONEncoder, indent=2, ensure_ascii=False) + "\n"


def queries(document: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expression) of every target of every panel of a rendered dashboard."""
    return [
        (panel["title"], target["expr"])
        for panel in document.get("panels", [])
        for target in panel.get("targets", [])
    ]
