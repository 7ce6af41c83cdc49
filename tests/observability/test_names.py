"""The metric names, labels and paths dashboards, alerts and probes depend on, byte for byte.

Sources: csi-lib-utils metrics/metrics.go (`csi_sidecar` subsystem, `operations_seconds`,
`unknownCSIDriverName`, `getErrorCode`) and leaderelection (`HealthCheckerAddress`);
sig-storage-lib-external-provisioner controller/metrics/metrics.go (`controller` subsystem);
k8s.io/component-base/metrics/prometheus/workqueue (subsystem `workqueue`, label `name`);
client-go's leader-election gauge.
"""

from __future__ import annotations

import pytest

from kopf_csi import names
from kopf_csi.csi.codes import Code
from kopf_csi.metrics import DEFAULT_BUCKETS, OPERATION_BUCKETS, QUEUE_BUCKETS, grpc_code_name

PINNED = {
    # The field managers: the Go sidecars' binary names, as managedFields show them.
    "MANAGER_PROVISIONER": "csi-provisioner",
    "MANAGER_ATTACHER": "csi-attacher",
    "MANAGER_RESIZER": "csi-resizer",
    "MANAGER_SNAPSHOTTER": "csi-snapshotter",
    "MANAGER_HEALTH_MONITOR": "csi-external-health-monitor-controller",
    "METRIC_CSI_OPERATIONS": "csi_sidecar_operations_seconds",
    "METRIC_DRIVER_UNKNOWN": "unknown-driver",
    "METRIC_PROVISION_TOTAL": "controller_persistentvolumeclaim_provision_total",
    "METRIC_PROVISION_FAILED": "controller_persistentvolumeclaim_provision_failed_total",
    "METRIC_PROVISION_DURATION": "controller_persistentvolumeclaim_provision_duration_seconds",
    "METRIC_DELETE_TOTAL": "controller_persistentvolume_delete_total",
    "METRIC_DELETE_FAILED": "controller_persistentvolume_delete_failed_total",
    "METRIC_DELETE_DURATION": "controller_persistentvolume_delete_duration_seconds",
    "METRIC_QUEUE_DEPTH": "workqueue_depth",
    "METRIC_QUEUE_ADDS": "workqueue_adds_total",
    "METRIC_QUEUE_LATENCY": "workqueue_queue_duration_seconds",
    "METRIC_QUEUE_WORK_DURATION": "workqueue_work_duration_seconds",
    "METRIC_QUEUE_UNFINISHED": "workqueue_unfinished_work_seconds",
    "METRIC_QUEUE_LONGEST_RUNNING": "workqueue_longest_running_processor_seconds",
    "METRIC_QUEUE_RETRIES": "workqueue_retries_total",
    "METRIC_LEADER_STATUS": "leader_election_master_status",
    "LABEL_DRIVER_NAME": "driver_name",
    "LABEL_METHOD_NAME": "method_name",
    "LABEL_GRPC_STATUS_CODE": "grpc_status_code",
    "LABEL_CLASS": "class",
    "LABEL_SOURCE": "source",
    "LABEL_QUEUE_NAME": "name",
    # Ours (no Go counterpart), pinned all the same: dashboards and alerts select them.
    "METRIC_API_THROTTLED": "kopf_csi_api_throttled_requests",
    "METRIC_API_THROTTLED_SECONDS": "kopf_csi_api_throttled_seconds",
    "LABEL_MANAGER": "manager",
    "METRIC_API_REQUESTS": "kopf_csi_api_requests",
    "METRIC_API_REQUEST_DURATION": "kopf_csi_api_request_duration_seconds",
    "METRIC_API_CONNECTION": "kopf_csi_api_connection_seconds",
    "METRIC_EVENT_LOOP_LAG": "kopf_csi_event_loop_lag_seconds",
    "METRIC_JOURNAL_RECORDS": "kopf_csi_journal_records",
    "METRIC_JOURNAL_RECORD_WAIT": "kopf_csi_journal_record_wait_seconds",
    "METRIC_JOURNAL_WRITES": "kopf_csi_journal_writes",
    "METRIC_API_UNREACHABLE": "kopf_csi_api_unreachable",
    "METRIC_API_OUTAGES": "kopf_csi_api_outages",
    "METRIC_API_UNREACHABLE_SECONDS": "kopf_csi_api_unreachable_seconds",
    "LABEL_VERB": "verb",
    "LABEL_RESOURCE": "resource",
    "LABEL_CODE": "code",
    "LABEL_JOURNAL": "journal",
    "PATH_METRICS": "/metrics",
    "PATH_HEALTHZ": "/healthz",
    "PATH_READYZ": "/readyz",
    "PATH_LEADER_ELECTION_HEALTHZ": "/healthz/leader-election",
}


@pytest.mark.parametrize(("name", "value"), sorted(PINNED.items()))
def test_pinned(name: str, value: str) -> None:
    assert getattr(names, name) == value


def test_buckets_are_go_s() -> None:
    assert OPERATION_BUCKETS == (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600)
    assert DEFAULT_BUCKETS == (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
    # Exact floats: the `le` labels must print as Go prints them ("0.001", not "0.0010000...2").
    assert QUEUE_BUCKETS == (1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10, 100, 1000)


@pytest.mark.parametrize(
    ("code", "label"),
    [
        (Code.OK, "OK"),
        (Code.CANCELLED, "Canceled"),
        (Code.UNKNOWN, "Unknown"),
        (Code.INVALID_ARGUMENT, "InvalidArgument"),
        (Code.DEADLINE_EXCEEDED, "DeadlineExceeded"),
        (Code.NOT_FOUND, "NotFound"),
        (Code.ALREADY_EXISTS, "AlreadyExists"),
        (Code.PERMISSION_DENIED, "PermissionDenied"),
        (Code.RESOURCE_EXHAUSTED, "ResourceExhausted"),
        (Code.FAILED_PRECONDITION, "FailedPrecondition"),
        (Code.ABORTED, "Aborted"),
        (Code.OUT_OF_RANGE, "OutOfRange"),
        (Code.UNIMPLEMENTED, "Unimplemented"),
        (Code.INTERNAL, "Internal"),
        (Code.UNAVAILABLE, "Unavailable"),
        (Code.DATA_LOSS, "DataLoss"),
        (Code.UNAUTHENTICATED, "Unauthenticated"),
    ],
)
def test_grpc_status_code_labels_are_go_s_code_names(code: Code, label: str) -> None:
    """grpc-go's `codes.Code.String()`, which csi-lib-utils puts into `grpc_status_code`."""
    assert grpc_code_name(code) == label
