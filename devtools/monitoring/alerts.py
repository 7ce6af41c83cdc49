"""The alert rules: one `Alert` each, rendered as a Prometheus rules file and a PrometheusRule.

Every threshold carries its reason (`Alert.reason`, one line, from what docs/benchmarks.md and
the real control plane measured); docs/runbooks.md has a section per alert, under its name.

An alert's `signals` are the PromQL parts its condition compares: they return data on any
running operator, healthy or not (the condition itself returns nothing while all is well).
tests/monitoring/test_live.py queries each of them against a real Prometheus scraping a real
operator, and checks that every metric an expression names is inside one of its signals.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "ALERTS",
    "GROUP",
    "JOB",
    "RUNBOOKS",
    "Alert",
    "alerts",
    "prometheus_rule",
    "rule_groups",
]

JOB = "kopf-csi"
"""The scrape job of the operator: the metrics Service's name (prometheus-operator's default
`job` label for a ServiceMonitor), and the job name in the plain scrape configuration. The
selector matters: kube-controller-manager and the Go sidecars export `workqueue_*` too."""

GROUP = "kopf-csi"
RUNBOOKS = "https://github.com/kopf-csi/kopf-csi/blob/main/docs/runbooks.md"
"""Where `runbook_url` points (an anchor per alert); `--runbooks` changes it for a mirror."""

BY = "job, namespace, instance"
"""One operator process: a replica (`instance` is its pod's address under prometheus-operator)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Alert:
    name: str
    severity: str  # critical: pages; warning: a ticket
    expr: str
    for_: str
    summary: str
    description: str
    reason: str
    """Why this threshold and duration, in one line (docs/runbooks.md repeats it)."""
    signals: tuple[str, ...]
    """The expressions the condition compares: each returns data on a running operator."""

    def rule(self, runbooks: str = RUNBOOKS) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook_url": f"{runbooks}#{self.name.lower()}",
            },
        }


def _sel(metric: str, extra: str = "", *, job: str) -> str:
    matchers = f'job="{job}"' + (f", {extra}" if extra else "")
    return f"{metric}{{{matchers}}}"


def alerts(*, job: str = JOB, stuck_after: float = 180, stuck_for: str = "2m") -> tuple[Alert, ...]:
    """The alerts; `stuck_after`/`stuck_for` are lowered only by the test of the stuck-work
    alert (tests/monitoring/test_live.py), which cannot wait minutes."""

    def sel(metric: str, extra: str = "") -> str:
        return _sel(metric, extra, job=job)

    up = sel("up")
    leader = f"max by (job, namespace, name) ({sel('leader_election_master_status')})"
    longest = f"max by ({BY}, name) ({sel('workqueue_longest_running_processor_seconds')})"
    depth = sel("workqueue_depth")
    calls = "csi_sidecar_operations_seconds_count"
    csi_by = "job, namespace, driver_name, method_name"
    not_ok = sel(calls, 'grpc_status_code!="OK"')
    csi_errors = f"sum by ({csi_by}, grpc_status_code) (rate({not_ok}[5m]))"
    csi_all = f"sum by ({csi_by}) (rate({sel(calls)}[5m]))"
    csi_ratio = f"{csi_errors}\n  / ignoring (grpc_status_code) group_left\n{csi_all}"

    def failing(failed: str, done: str) -> tuple[str, str]:
        by = "job, namespace, class"
        return (
            f"sum by ({by}) (increase({sel(failed)}[10m]))",
            f"sum by ({by}) (increase({sel(done)}[10m]))",
        )

    provision_failed, provisioned = failing(
        "controller_persistentvolumeclaim_provision_failed_total",
        "controller_persistentvolumeclaim_provision_total",
    )
    delete_failed, deleted = failing(
        "controller_persistentvolume_delete_failed_total",
        "controller_persistentvolume_delete_total",
    )
    requests = "kopf_csi_api_requests_total"
    unanswered = sel(requests, 'code=~"5..|<error>"')
    api_ratio = (
        f"sum by ({BY}) (rate({unanswered}[5m]))\n  /\nsum by ({BY}) (rate({sel(requests)}[5m]))"
    )
    throttled = f"sum by ({BY}, manager) (rate({sel('kopf_csi_api_throttled_seconds_total')}[5m]))"
    lag = (
        f"histogram_quantile(0.99, sum by ({BY}, le) "
        f"(rate({sel('kopf_csi_event_loop_lag_seconds_bucket')}[5m])))"
    )
    journal_wait = (
        f"sum by ({BY}, journal) (rate({sel('kopf_csi_journal_record_wait_seconds_total')}[10m]))"
        f"\n  /\nsum by ({BY}, journal) (rate({sel('kopf_csi_journal_records_total')}[10m]))"
    )
    return (
        Alert(
            name="KopfCSIDown",
            severity="critical",
            expr=f"{up} == 0\nor\nabsent({up})",
            for_="5m",
            summary="kopf-csi is down or not scraped",
            description=(
                "No kopf-csi target of job {{ $labels.job }} answers /metrics"
                " ({{ $labels.namespace }} {{ $labels.instance }}): nothing provisions,"
                " attaches, resizes or snapshots, and nothing below can alert."
            ),
            reason=(
                "a restarted operator serves /metrics before it connects (docs/operations.md),"
                " within seconds; the liveness probe restarts a stuck one after 5 probes 20 s"
                " apart: 5 min is no restart"
            ),
            signals=(up,),
        ),
        Alert(
            name="KopfCSINoLeader",
            severity="critical",
            expr=f"{leader} < 1",
            for_="1m",
            summary="No kopf-csi replica leads {{ $labels.name }}",
            description=(
                "Leader election is on and no replica of {{ $labels.namespace }} holds the"
                " Lease {{ $labels.name }}: that role's work (provisioning, attaching, ...)"
                " waits for a leader."
            ),
            reason=(
                "a standby takes a Lease over within its duration plus a retry period after a"
                " crash (15-20 s by default, 20 s measured after a kill -9); a minute without"
                " a holder is no handover"
            ),
            signals=(leader,),
        ),
        Alert(
            name="KopfCSIWorkStuck",
            severity="critical",
            expr=f"{longest} > {stuck_after:g}",
            for_=stuck_for,
            summary=(
                "kopf-csi has held an item of {{ $labels.name }}"
                " for {{ $value | humanizeDuration }}"
            ),
            description=(
                "A worker of queue {{ $labels.name }} on {{ $labels.instance }} has worked on"
                " one object far longer than any CSI deadline: its claim, attachment or snapshot"
                " (and whatever waits behind it) makes no progress."
            ),
            reason=(
                "an attempt ends at its CSI deadline (--timeout 10 s, the snapshotter's 1 min)"
                " plus its API requests; a claim's whole attempt took 0.65-1.27 s at p99 in"
                " 200-claim bursts. 3 min in work and 2 min pending: stuck 5 min, as the 48"
                " claims of the control-plane outage were"
            ),
            signals=(longest,),
        ),
        Alert(
            name="KopfCSIQueueBacklog",
            severity="warning",
            expr=f"{depth} > 0",
            for_="15m",
            summary="kopf-csi queue {{ $labels.name }} has not drained for 15 minutes",
            description=(
                "Queue {{ $labels.name }} on {{ $labels.instance }} has had keys waiting for a"
                " worker at every scrape for 15 minutes ({{ $value }} now)."
            ),
            reason=(
                "a burst drains in seconds (1,000 claims reached the driver in 7.7 s); at the"
                " default 100 requests/s even 10,000 claims (3.06 operator writes each) drain"
                " in about 5 min"
            ),
            signals=(depth,),
        ),
        Alert(
            name="KopfCSIErrorRatio",
            severity="warning",
            expr=f"(\n{csi_ratio}\n) > 0.1",
            for_="15m",
            summary=(
                "{{ $value | humanizePercentage }} of {{ $labels.method_name }} calls fail"
                " with {{ $labels.grpc_status_code }}"
            ),
            description=(
                "The CSI driver {{ $labels.driver_name }} answers {{ $labels.method_name }}"
                " with {{ $labels.grpc_status_code }} in {{ $value | humanizePercentage }} of"
                " the calls over 5 minutes, for 15 minutes."
            ),
            reason=(
                "the benchmarks' and the suite's healthy runs fail no CSI call; a transient"
                " error retried with backoff is a few per cent for minutes: 10 % for 15 min is"
                " a driver in trouble"
            ),
            signals=(csi_ratio,),
        ),
        Alert(
            name="KopfCSIProvisioningFailing",
            severity="warning",
            expr=f"{provision_failed} > 0\nunless on (job, namespace, class)\n{provisioned} > 0",
            for_="5m",
            summary="Provisioning fails for storage class {{ $labels.class }}",
            description=(
                "Claims of class {{ $labels.class }} failed to provision in the last 10"
                " minutes, and none of that class succeeded."
            ),
            reason=(
                "a failing claim is retried at least every --retry-interval-max (5 min), so a"
                " 10 min window sees every claim still failing; a burst's transient failures"
                " are followed by successes within seconds"
            ),
            signals=(provision_failed, provisioned),
        ),
        Alert(
            name="KopfCSIDeletionFailing",
            severity="warning",
            expr=f"{delete_failed} > 0\nunless on (job, namespace, class)\n{deleted} > 0",
            for_="15m",
            summary="Deleting released volumes fails for storage class {{ $labels.class }}",
            description=(
                "Released volumes of class {{ $labels.class }} failed to delete for 25 minutes"
                " and none of that class was deleted: they stay on the driver."
            ),
            reason=(
                "a volume still attached fails its deletion until detached (as upstream counts"
                " it), and a lost node's volume is force-detached after 6 min: 25 min is longer"
            ),
            signals=(delete_failed, deleted),
        ),
        Alert(
            name="KopfCSIAPIServerErrors",
            severity="warning",
            expr=f"(\n{api_ratio}\n) > 0.1",
            for_="5m",
            summary=(
                "The Kubernetes API fails {{ $value | humanizePercentage }} of kopf-csi's requests"
            ),
            description=(
                "Over 5 minutes, {{ $value | humanizePercentage }} of the API requests of"
                " {{ $labels.instance }} got no answer (the API server unreachable) or a 5xx."
            ),
            reason=(
                "a kube-apiserver restart answers 503 for about 20 s and refuses connections"
                " for about 2 s (measured on a real control plane); 5 min of 10 % is no restart"
            ),
            signals=(api_ratio,),
        ),
        Alert(
            name="KopfCSIThrottled",
            severity="warning",
            expr=f"{throttled} > 1",
            for_="15m",
            summary="kopf-csi's {{ $labels.manager }} waits for its own API rate limit",
            description=(
                "The requests of {{ $labels.manager }} on {{ $labels.instance }} spend"
                " {{ $value | humanize }} s per second waiting for the client-side limit"
                " (--kube-api-qps, --kube-api-burst): the limit, not the work, sets the pace."
            ),
            reason=(
                "at the default limit a 200-claim burst throttles about 300 of its 630 requests"
                " for about a second; at least one request always waiting, for 15 min, is a"
                " limit too low for the load"
            ),
            signals=(throttled,),
        ),
        Alert(
            name="KopfCSIEventLoopLag",
            severity="warning",
            expr=f"{lag} > 0.1",
            for_="15m",
            summary="kopf-csi's event loop runs {{ $value | humanizeDuration }} late (p99)",
            description=(
                "The operator's one thread on {{ $labels.instance }} ran its 0.1 s timer"
                " {{ $value | humanizeDuration }} late at the 99th percentile for 15 minutes:"
                " everything it does waits that long. It is short of CPU."
            ),
            reason=(
                "in 200-claim bursts the loop ran its timer 1 ms late on average and 26 ms at"
                " most (92 ms before the burst fixes); a whole 0.1 s tick at p99 for 15 min is"
                " CPU starvation"
            ),
            signals=(lag,),
        ),
        Alert(
            name="KopfCSIJournalBacklog",
            severity="warning",
            expr=f"(\n{journal_wait}\n) > 1",
            for_="10m",
            summary="Claims wait {{ $value | humanizeDuration }} for the in-flight journal",
            description=(
                "A claim of {{ $labels.instance }} waits {{ $value | humanizeDuration }} on"
                " average for its record in the in-flight journal {{ $labels.journal }} (a"
                " ConfigMap write) before its CreateVolume."
            ),
            reason=(
                "a claim waited 123-297 ms on average for its record in bursts of 200-1,000"
                " claims at the real server's 28 ms ConfigMap writes; over 1 s for 10 min, the"
                " writes are slow or failing"
            ),
            signals=(journal_wait,),
        ),
    )


ALERTS = alerts()


def rule_groups(rules: Iterable[Alert] = ALERTS, *, runbooks: str = RUNBOOKS) -> dict[str, Any]:
    """The plain Prometheus rules file (`rule_files:`)."""
    return {"groups": [{"name": GROUP, "rules": [alert.rule(runbooks) for alert in rules]}]}


def prometheus_rule(
    rules: Iterable[Alert] = ALERTS, *, runbooks: str = RUNBOOKS
) -> Mapping[str, Any]:
    """The same rules as prometheus-operator's PrometheusRule (monitoring.coreos.com/v1)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "kopf-csi", "labels": {"app.kubernetes.io/name": "kopf-csi"}},
        "spec": rule_groups(rules, runbooks=runbooks),
    }
