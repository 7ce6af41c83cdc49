"""Metrics after real provisioning runs: kopf + the emulated API + the reference driver.

We test these aspects, all scraped over HTTP from the operator's `/metrics`:
- every CSI call counted under csi-lib-utils' name and labels (the full gRPC method, Go's
  status code name, the driver's name once known, `unknown-driver` before);
- the provisioner library's provision and delete counters and histograms, labelled by class
  (and source), including failed attempts from injected driver faults;
- client-go's work-queue metrics for the queues the provisioner runs;
- the exact buckets the Go metrics use (dashboards select `le` values).
"""

from __future__ import annotations

import asyncio
import time

from prometheus_client.samples import Sample

from kopf_csi.csi.codes import Code
from kopf_csi.driver import Driver
from kopf_csi.metrics import (
    DEFAULT_BUCKETS,
    LAG_BUCKETS,
    OPERATION_BUCKETS,
    QUEUE_BUCKETS,
    REQUEST_BUCKETS,
)
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME
from ..provisioner.conftest import make_claim, make_storage_class, wait_for_bound, wait_for_gone
from .conftest import labelled, scrape, scrape_until, value

CREATE = "/csi.v1.Controller/CreateVolume"
DELETE = "/csi.v1.Controller/DeleteVolume"
OPS = "csi_sidecar_operations_seconds"


def _buckets(samples: list, name: str, /, **labels: str) -> list[float]:
    return sorted(
        float(s.labels["le"])
        for s in samples
        if s.name == f"{name}_bucket" and labels.items() <= s.labels.items()
        and s.labels["le"] != "+Inf"
    )  # fmt: skip


async def _scrape_when_idle(
    operator: OperatorThread, *queues: str, timeout: float = 5.0
) -> list[Sample]:
    """Scrape until the queues have nothing queued and nothing running."""
    deadline = time.monotonic() + timeout
    while True:
        samples = await scrape(operator)
        busy = [
            name for name in queues
            if value(samples, "workqueue_depth", name=name)
            or value(samples, "workqueue_unfinished_work_seconds", name=name)
        ]  # fmt: skip
        if not busy:
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"queues still busy after {timeout}s: {busy}")
        await asyncio.sleep(0.05)


async def test_a_provisioned_claim_shows_in_the_metrics(
    cluster: EmulatedCluster, kcm: ControllerManager, operator: OperatorThread
) -> None:
    await make_storage_class(cluster, operator, "fast")
    claim = make_claim(cluster, "data", storage_class="fast")
    await wait_for_bound(cluster, claim)

    # The binding wakes the claim once more; read the metrics once that pass is over.
    samples = await _scrape_when_idle(operator, "claims", "volumes")
    ok = {"driver_name": DRIVER_NAME, "method_name": CREATE, "grpc_status_code": "OK"}
    assert value(samples, f"{OPS}_count", **ok) == 1
    assert value(samples, f"{OPS}_sum", **ok) > 0
    assert _buckets(samples, OPS, **ok) == sorted(float(b) for b in OPERATION_BUCKETS)
    # The start-up calls, before the driver's name is known, count as `unknown-driver`; the
    # capability calls come after GetPluginInfo and carry the name, as the sidecars' do.
    assert value(
        samples, f"{OPS}_count", driver_name="unknown-driver",
        method_name="/csi.v1.Identity/GetPluginInfo", grpc_status_code="OK",
    ) == 1  # fmt: skip
    assert labelled(
        samples, f"{OPS}_count", driver_name="unknown-driver", method_name="/csi.v1.Identity/Probe"
    )
    for method in (
        "/csi.v1.Identity/GetPluginCapabilities", "/csi.v1.Controller/ControllerGetCapabilities",
    ):  # fmt: skip
        assert labelled(samples, f"{OPS}_count", method_name=method) == [
            {"driver_name": DRIVER_NAME, "method_name": method, "grpc_status_code": "OK"}
        ], method

    claim_labels = {"class": "fast", "source": ""}
    assert value(samples, "controller_persistentvolumeclaim_provision_total", **claim_labels) == 1
    assert value(
        samples, "controller_persistentvolumeclaim_provision_duration_seconds_count",
        **claim_labels,
    ) == 1  # fmt: skip
    assert _buckets(
        samples, "controller_persistentvolumeclaim_provision_duration_seconds", **claim_labels
    ) == sorted(float(b) for b in DEFAULT_BUCKETS)
    assert not labelled(samples, "controller_persistentvolumeclaim_provision_failed_total")

    assert value(samples, "workqueue_adds_total", name="claims") >= 1
    assert value(samples, "workqueue_depth", name="claims") == 0
    assert value(samples, "workqueue_depth", name="volumes") == 0
    assert value(samples, "workqueue_work_duration_seconds_count", name="claims") >= 1
    assert value(samples, "workqueue_queue_duration_seconds_count", name="claims") >= 1
    assert value(samples, "workqueue_unfinished_work_seconds", name="claims") == 0
    assert value(samples, "workqueue_longest_running_processor_seconds", name="claims") == 0
    assert value(samples, "workqueue_retries_total", name="claims") == 0
    assert _buckets(samples, "workqueue_work_duration_seconds", name="claims") == list(
        QUEUE_BUCKETS
    )
    le = {s.labels["le"] for s in samples if s.name == "workqueue_work_duration_seconds_bucket"}
    assert {"1e-06", "0.001", "0.01", "1.0", "1000.0", "+Inf"} <= le
    # Only Go's series: no `_created` samples of the Python client.
    assert not [s for s in samples if s.name.endswith("_created")]


async def test_failed_attempts_are_counted_with_their_grpc_code(
    cluster: EmulatedCluster, kcm: ControllerManager, operator: OperatorThread, driver: Driver
) -> None:
    driver.faults.fail("CreateVolume", Code.ABORTED, times=2)
    await make_storage_class(cluster, operator, "slow")
    claim = make_claim(cluster, "data", storage_class="slow")
    await wait_for_bound(cluster, claim)

    samples = await scrape(operator)
    aborted = {"driver_name": DRIVER_NAME, "method_name": CREATE, "grpc_status_code": "Aborted"}
    assert value(samples, f"{OPS}_count", **aborted) == 2
    assert value(samples, f"{OPS}_count", **{**aborted, "grpc_status_code": "OK"}) == 1
    labels = {"class": "slow", "source": ""}
    assert value(samples, "controller_persistentvolumeclaim_provision_failed_total", **labels) == 2
    assert value(samples, "controller_persistentvolumeclaim_provision_total", **labels) == 1
    # Failed attempts stay out of the duration histogram (the library's rule).
    assert value(
        samples, "controller_persistentvolumeclaim_provision_duration_seconds_count", **labels
    ) == 1  # fmt: skip
    assert value(samples, "workqueue_retries_total", name="claims") >= 2


async def test_a_timed_out_call_is_labelled_deadline_exceeded(
    cluster: EmulatedCluster, kcm: ControllerManager, operator: OperatorThread, driver: Driver
) -> None:
    driver.faults.hang("CreateVolume", times=1)
    await make_storage_class(cluster, operator, "sc")
    claim = make_claim(cluster, "data")
    await wait_for_bound(cluster, claim)

    samples = await scrape(operator)
    timed_out = {
        "driver_name": DRIVER_NAME, "method_name": CREATE, "grpc_status_code": "DeadlineExceeded",
    }  # fmt: skip
    assert value(samples, f"{OPS}_count", **timed_out) == 1
    assert value(samples, f"{OPS}_sum", **timed_out) >= 0.9  # the 1 s CSI timeout


async def test_deletions_are_counted_by_class(
    cluster: EmulatedCluster, kcm: ControllerManager, operator: OperatorThread, driver: Driver
) -> None:
    await make_storage_class(cluster, operator, "gold")
    claim = make_claim(cluster, "data", storage_class="gold")
    volume = await wait_for_bound(cluster, claim)
    driver.faults.fail("DeleteVolume", Code.INTERNAL, times=1)
    cluster.delete("persistentvolumeclaims", "default", "data")
    await wait_for_gone(cluster, "persistentvolumes", volume["metadata"]["name"])

    samples = await scrape_until(operator, "controller_persistentvolume_delete_total", 1.0)
    assert value(samples, "controller_persistentvolume_delete_total", **{"class": "gold"}) == 1
    assert (
        value(samples, "controller_persistentvolume_delete_failed_total", **{"class": "gold"}) == 1
    )
    assert value(
        samples, "controller_persistentvolume_delete_duration_seconds_count", **{"class": "gold"}
    ) == 1  # fmt: skip
    failed = {"driver_name": DRIVER_NAME, "method_name": DELETE, "grpc_status_code": "Internal"}
    assert value(samples, f"{OPS}_count", **failed) == 1
    assert value(samples, f"{OPS}_count", **{**failed, "grpc_status_code": "OK"}) == 1
    assert value(samples, "workqueue_adds_total", name="volumes") >= 2


async def test_requests_held_by_the_rate_limit_are_counted_per_role(
    cluster: EmulatedCluster, kcm: ControllerManager, operator: OperatorThread
) -> None:
    """The API rate limit (`--kube-api-qps`) per role in `/metrics`: present from the start,
    and rising when a burst of requests must wait for tokens."""
    samples = await scrape(operator)
    assert value(samples, "kopf_csi_api_throttled_requests_total", manager="kopf-csi") == 0
    bucket = operator.memo.api.limits.bucket("csi-provisioner")
    bucket.tokens = -200.0  # the burst and 2 s of tokens spent, as by a burst of claims
    await make_storage_class(cluster, operator)
    await wait_for_bound(cluster, make_claim(cluster, "throttled"), timeout=15.0)
    samples = await scrape(operator)
    assert value(samples, "kopf_csi_api_throttled_requests_total", manager="csi-provisioner") >= 1
    assert value(samples, "kopf_csi_api_throttled_seconds_total", manager="csi-provisioner") > 0


async def test_the_operators_own_waits_are_counted(
    cluster: EmulatedCluster, kcm: ControllerManager, operator: OperatorThread
) -> None:
    """Where a slow claim's time went, from `/metrics` alone (ours, no Go counterpart): each
    API request by role, method, resource and code, its duration, new connections, the loop's
    lag and the in-flight journal; a failed request counted with its code, and nothing lost."""
    await make_storage_class(cluster, operator, "fast")
    cluster.faults.add(500, verb="create", resource="persistentvolumes", times=1)
    await wait_for_bound(cluster, make_claim(cluster, "data", storage_class="fast"))

    samples = await scrape_until(operator, "kopf_csi_event_loop_lag_seconds_count", 1)
    post_pv = {"manager": "csi-provisioner", "verb": "POST", "resource": "persistentvolumes"}
    assert value(samples, "kopf_csi_api_requests_total", **post_pv, code="500") == 1
    assert value(samples, "kopf_csi_api_requests_total", **post_pv, code="201") == 1
    timed = {"verb": "POST", "resource": "persistentvolumes"}
    assert value(samples, "kopf_csi_api_request_duration_seconds_count", **timed) == 2
    assert value(samples, "kopf_csi_api_request_duration_seconds_sum", **timed) > 0
    assert _buckets(samples, "kopf_csi_api_request_duration_seconds", **timed) == [
        float(b) for b in REQUEST_BUCKETS
    ]
    # The events went out as the provisioner, to their own resource.
    assert labelled(samples, "kopf_csi_api_requests_total", manager="csi-provisioner",
                    verb="POST", resource="events")  # fmt: skip
    assert value(samples, "kopf_csi_api_connection_seconds_count") >= 3  # one per request
    assert value(samples, "kopf_csi_event_loop_lag_seconds_count") >= 1
    assert _buckets(samples, "kopf_csi_event_loop_lag_seconds") == [float(b) for b in LAG_BUCKETS]

    (journal,) = labelled(samples, "kopf_csi_journal_records_total")
    assert value(samples, "kopf_csi_journal_records_total", **journal) >= 1
    assert value(samples, "kopf_csi_journal_writes_total", **journal) >= 1
    assert value(samples, "kopf_csi_journal_record_wait_seconds_total", **journal) > 0


async def test_an_outage_of_the_api_server_shows_in_the_metrics(
    cluster: EmulatedCluster, operator: OperatorThread
) -> None:
    """`kopf_csi_api_unreachable` is 1 while the API server is away and 0 once it is back;
    the outage is counted, and its seconds (at least the time the server was gone)."""
    samples = await scrape(operator)
    assert value(samples, "kopf_csi_api_unreachable") == 0
    assert value(samples, "kopf_csi_api_outages_total") == 0
    await cluster.stop_apiserver(drain=0.0)
    try:
        started = time.monotonic()
        while operator.memo.api.reachability.reachable:  # a watch or the probe finds out
            assert time.monotonic() - started < 15, "the outage was never noticed"
            await asyncio.sleep(0.05)
        samples = await scrape(operator)
        assert value(samples, "kopf_csi_api_unreachable") == 1
        await asyncio.sleep(0.5)
    finally:
        await cluster.start_apiserver()
    started = time.monotonic()
    while not operator.memo.api.reachability.reachable:
        assert time.monotonic() - started < 15, "the return was never noticed"
        await asyncio.sleep(0.05)
    samples = await scrape(operator)
    assert value(samples, "kopf_csi_api_unreachable") == 0
    assert value(samples, "kopf_csi_api_outages_total") == 1
    assert (value(samples, "kopf_csi_api_unreachable_seconds_total") or 0) >= 0.5
