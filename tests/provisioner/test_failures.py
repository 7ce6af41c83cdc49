"""Failed provisioning end to end: each gRPC outcome class, bad classes, deleted claims, restarts.

We test these aspects:
- in progress (DEADLINE_EXCEEDED, UNAVAILABLE, ABORTED): ProvisioningFailed with the gRPC text,
  retried with the same name, one backend volume in the end;
- final (NOT_FOUND, INTERNAL, ...): ProvisioningFailed, retried while the claim lives, and no
  more once it is deleted, nothing of it kept (its topology memo);
- infeasible (INVALID_ARGUMENT): the reference's infeasible message, and a slow retry;
- reschedule (RESOURCE_EXHAUSTED, WaitForFirstConsumer, a node selected): selected-node removed,
  and retried if removing it failed; without a selected node it is a final error;
- a claim deleted while CreateVolume runs (slow, hung, or answered too late): no volume leaks,
  the PV is created for the deleted claim, released and deleted;
- an operator stopped while CreateVolume hangs, the claim deleted, a new operator started:
  no volume leaks (the in-flight state is persisted);
- bad StorageClass parameters (an unknown reserved key, both fstype keys) and claims (a
  selector): the Go message, the claim stays Pending, other claims are served;
- a claim whose StorageClass does not exist yet gets no event and is provisioned once it does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kopf_csi import names
from kopf_csi.csi import Code
from kopf_csi.driver import Driver, DriverError
from kopf_csi.driver import volumes as driver_volumes
from kopf_csi.driver.volumes import VolumeRequest
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import Body, EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from ..conftest import DRIVER_NAME
from .conftest import (
    NAMESPACE,
    NODE_2,
    RETRY_MAX,
    RETRY_START,
    assert_stays,
    changes_until_deleted,
    drain,
    events_for,
    make_claim,
    make_pod,
    make_storage_class,
    volume_name,
    wait_for_bound,
    wait_for_event,
    wait_for_gone,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("kcm")

FAILED = names.REASON_PROVISIONING_FAILED


def grpc_text(code: Code, message: str = "injected fault") -> str:
    """How Go prints a gRPC status error: the message of a ProvisioningFailed event."""
    return f"rpc error: code = {code.title} desc = {message}"


def ours(cluster: EmulatedCluster, claim: Body) -> list[Body]:
    """The events about the claim that the provisioner posted (not the KCM stand-in)."""
    return [
        e
        for e in events_for(cluster, claim)
        if e["source"]["component"] != "persistentvolume-controller"
    ]


def failure_messages(cluster: EmulatedCluster, claim: Body) -> list[str]:
    return [e["message"] for e in events_for(cluster, claim, FAILED)]


# --- In progress -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code", [Code.DEADLINE_EXCEEDED, Code.UNAVAILABLE, Code.ABORTED], ids=lambda code: code.name
)
async def test_in_progress_codes_retry_with_the_same_name_into_one_volume(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    calls: Calls,
    code: Code,
) -> None:
    driver.faults.fail("CreateVolume", code, times=2)
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster)
    pv = await wait_for_bound(cluster, claim)

    assert calls.count("CreateVolume") == 3
    (backend,) = driver.state.volumes.values()
    assert backend.name == volume_name(claim) == pv["metadata"]["name"]
    (event,) = events_for(cluster, claim, FAILED)  # one event, counted twice
    assert event["count"] == 2
    assert event["message"].startswith(f"rpc error: code = {code.title} desc = ")
    if code is not Code.DEADLINE_EXCEEDED:  # ours reads as Go's expired context; see states.py
        assert event["message"] == grpc_text(code)


async def test_claim_deleted_while_create_volume_runs_leaks_no_volume(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver, calls: Calls
) -> None:
    driver.faults.delay("CreateVolume", seconds=0.3, times=1)
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster)
    await wait_until(lambda: calls.count("CreateVolume"), what="CreateVolume started")
    cluster.delete("persistentvolumeclaims", NAMESPACE, "data")

    # The call succeeds: a PV is made for the deleted claim, released, and deleted with it.
    await cluster.wait_for("persistentvolumes", None, volume_name(claim))
    await wait_for_gone(cluster, "persistentvolumes", volume_name(claim))
    assert not driver.state.volumes


async def test_claim_deleted_during_a_hung_create_volume_leaks_no_volume(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver, calls: Calls
) -> None:
    driver.faults.hang("CreateVolume", times=1)  # until our 1 s deadline: DeadlineExceeded
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster)
    await wait_until(lambda: calls.count("CreateVolume"), what="CreateVolume started")
    cluster.delete("persistentvolumeclaims", NAMESPACE, "data")

    # Still in progress after the timeout: retried for the deleted claim, then cleaned up.
    await wait_until(lambda: calls.count("CreateVolume") >= 2, what="a retry", timeout=3)
    await wait_until(lambda: calls.count("DeleteVolume"), what="DeleteVolume")
    await wait_for_gone(cluster, "persistentvolumes", volume_name(claim))
    assert not driver.state.volumes


@pytest.fixture
def answer_lost(cluster: EmulatedCluster, monkeypatch: pytest.MonkeyPatch) -> list[VolumeRequest]:
    """The first CreateVolume creates the volume, then its answer is lost (DEADLINE_EXCEEDED);
    the claim is deleted at that very moment, before the operator can retry."""
    seen: list[VolumeRequest] = []
    original = driver_volumes.create_volume

    async def create(backend: Any, request: VolumeRequest) -> Any:
        seen.append(request)
        volume = await original(backend, request)
        if len(seen) == 1:
            cluster.delete("persistentvolumeclaims", NAMESPACE, "data")
            raise DriverError(Code.DEADLINE_EXCEEDED, "the backend is slow to answer")
        return volume

    monkeypatch.setattr(driver_volumes, "create_volume", create)
    return seen


async def test_volume_created_but_answer_lost_is_finished_for_the_deleted_claim(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    answer_lost: list[VolumeRequest],
) -> None:
    await make_storage_class(cluster, operator)
    with cluster.subscribe("persistentvolumes") as feed:
        claim = make_claim(cluster)
        changes = await changes_until_deleted(feed)

    # The driver had created the volume; the retry (same name) found it, the PV released it.
    assert [r.name for r in answer_lost] == [volume_name(claim)] * 2
    assert changes[0].type == "ADDED"
    assert changes[-1].type == "DELETED"
    assert "Released" in [(c.object.get("status") or {}).get("phase") for c in changes]
    await wait_until(lambda: not driver.state.volumes, what="the orphan deleted")
    assert failure_messages(cluster, claim)[0].startswith("rpc error: code = DeadlineExceeded")


# --- Final -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [Code.NOT_FOUND, Code.INTERNAL, Code.FAILED_PRECONDITION, Code.OUT_OF_RANGE],
    ids=lambda code: code.name,
)
async def test_final_codes_post_the_error_and_retry_while_the_claim_lives(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    calls: Calls,
    code: Code,
) -> None:
    driver.faults.fail("CreateVolume", code, times=2)
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster)
    await wait_for_bound(cluster, claim)

    assert calls.count("CreateVolume") == 3
    assert failure_messages(cluster, claim) == [grpc_text(code)]
    assert len(driver.state.volumes) == 1


async def test_final_error_is_not_retried_once_the_claim_is_deleted(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver, calls: Calls
) -> None:
    failing = driver.faults.fail("CreateVolume", Code.INTERNAL)
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster)
    await wait_for_event(cluster, claim, FAILED, message=grpc_text(Code.INTERNAL))
    cluster.delete("persistentvolumeclaims", NAMESPACE, "data")
    await wait_until(
        lambda: (
            "default/data" not in operator.memo.caches.claims
            and not operator.memo.claims_queue.in_flight
        ),
        what="the deletion seen by the operator, no attempt in flight",
    )
    driver.faults.remove(failing)
    attempts = calls.count("CreateVolume")

    # Nothing ran on the driver, so a deleted claim needs nothing more: no retry, no volume.
    await assert_stays(
        lambda: calls.count("CreateVolume") == attempts and not driver.state.volumes,
        duration=2 * RETRY_MAX,
        what="no CreateVolume for a deleted claim after a final error",
    )
    # And nothing is kept of it (its topology memo stayed for good, one per such claim).
    provisioner = operator.memo.provisioner
    assert claim["metadata"]["uid"] not in provisioner.topology_memos
    assert not provisioner.in_progress


# --- Infeasible --------------------------------------------------------------------------------


async def test_invalid_argument_is_infeasible_and_retried_slowly(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver, calls: Calls
) -> None:
    driver.faults.fail("CreateVolume", Code.INVALID_ARGUMENT, times=1)
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster)
    await wait_for_bound(cluster, claim)

    first, second = calls.times("CreateVolume")
    assert second - first >= RETRY_MAX * 0.9  # `--retry-interval-max`, not the 50 ms backoff
    assert failure_messages(cluster, claim) == [
        names.MESSAGE_INFEASIBLE.format(error=grpc_text(Code.INVALID_ARGUMENT))
    ]
    assert failure_messages(cluster, claim) == [
        "Volume provisioning failed with infeasible error. Retries will be delayed."
        " rpc error: code = InvalidArgument desc = injected fault"
    ]


async def test_other_final_errors_are_retried_quickly_for_comparison(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver, calls: Calls
) -> None:
    driver.faults.fail("CreateVolume", Code.INTERNAL, times=1)
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster)
    await wait_for_bound(cluster, claim)

    first, second = calls.times("CreateVolume")
    assert second - first < RETRY_MAX * 0.9


# --- Reschedule --------------------------------------------------------------------------------


def selected_nodes(changes: list[Any]) -> list[str | None]:
    """The claim's selected node after each change, consecutive repeats collapsed."""
    seen: list[str | None] = []
    for change in changes:
        node = (change.object["metadata"].get("annotations") or {}).get(names.ANN_SELECTED_NODE)
        if not seen or seen[-1] != node:
            seen.append(node)
    return seen


async def test_resource_exhausted_with_a_selected_node_gives_the_node_back(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver
) -> None:
    driver.faults.fail("CreateVolume", Code.RESOURCE_EXHAUSTED, times=1)
    await make_storage_class(cluster, operator, binding="WaitForFirstConsumer")
    with cluster.subscribe("persistentvolumeclaims") as feed:
        claim = make_claim(cluster)
        make_pod(cluster, "app", "data", node=NODE_2)
        await wait_for_bound(cluster, claim)  # the scheduler stand-in selects the node again
        changes = await drain(feed)

    assert selected_nodes(changes) == [None, NODE_2, None, NODE_2]
    assert failure_messages(cluster, claim) == [grpc_text(Code.RESOURCE_EXHAUSTED)]


async def test_failed_reschedule_is_retried(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver, calls: Calls
) -> None:
    driver.faults.fail("CreateVolume", Code.RESOURCE_EXHAUSTED, times=1)
    cluster.faults.add(500, verb="patch", resource="persistentvolumeclaims", name="data")
    await make_storage_class(cluster, operator, binding="WaitForFirstConsumer")
    claim = make_claim(cluster)
    make_pod(cluster, "app", "data", node=NODE_2)

    # The node could not be given back: the claim is retried (and now succeeds on that node).
    await wait_for_bound(cluster, claim)
    assert calls.count("CreateVolume") == 2
    assert not cluster.faults


async def test_resource_exhausted_without_a_selected_node_is_final(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver, calls: Calls
) -> None:
    driver.faults.fail("CreateVolume", Code.RESOURCE_EXHAUSTED, times=2)
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster)
    await wait_for_bound(cluster, claim)

    assert calls.count("CreateVolume") == 3
    assert failure_messages(cluster, claim) == [grpc_text(Code.RESOURCE_EXHAUSTED)]
    current = cluster.get("persistentvolumeclaims", NAMESPACE, "data")
    assert current is not None
    assert names.ANN_SELECTED_NODE not in current["metadata"]["annotations"]


# --- Operator restart --------------------------------------------------------------------------


@pytest.fixture
def hangs_after_creating(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """The first CreateVolume creates the volume, then never answers (until cancelled)."""
    started = asyncio.Event()
    original = driver_volumes.create_volume

    async def create(backend: Any, request: VolumeRequest) -> Any:
        volume = await original(backend, request)
        if not started.is_set():
            started.set()
            await asyncio.Event().wait()  # grpclib cancels this at the caller's deadline
        return volume

    monkeypatch.setattr(driver_volumes, "create_volume", create)
    return started


async def test_operator_restarted_mid_create_volume_leaks_no_volume(
    cluster: EmulatedCluster,
    settings: Settings,
    driver: Driver,
    hangs_after_creating: asyncio.Event,
) -> None:
    first = OperatorThread(settings=settings)
    await first.start()
    try:
        await make_storage_class(cluster, first)
        claim = make_claim(cluster)
        await asyncio.wait_for(hangs_after_creating.wait(), timeout=5)
    finally:
        await first.stop()
    assert len(driver.state.volumes) == 1  # created by the driver; the answer never came
    cluster.delete("persistentvolumeclaims", NAMESPACE, "data")

    second = OperatorThread(settings=settings)
    await second.start()
    try:
        await wait_until(lambda: not driver.state.volumes, what="the orphan deleted", timeout=5)
        await wait_for_gone(cluster, "persistentvolumes", volume_name(claim))
    finally:
        await second.stop()


# --- Bad classes and claims --------------------------------------------------------------------


BAD_CLASSES = [
    pytest.param(
        {"csi.storage.k8s.io/foo": "bar"},
        "failed to strip CSI Parameters of prefixed keys: found unknown parameter key"
        ' "csi.storage.k8s.io/foo" with reserved namespace csi.storage.k8s.io/',
        id="unknown-reserved-key",
    ),
    pytest.param(
        {names.PARAM_FSTYPE: "ext4", "fstype": "xfs"},
        'fstype specified in parameters with both "fstype" and "csi.storage.k8s.io/fstype" keys',
        id="both-fstype-keys",
    ),
]


@pytest.mark.parametrize(("parameters", "message"), BAD_CLASSES)
async def test_bad_class_parameters_fail_clearly_while_other_claims_are_served(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    calls: Calls,
    parameters: dict[str, str],
    message: str,
) -> None:
    await make_storage_class(cluster, operator, "bad", parameters=parameters)
    await make_storage_class(cluster, operator, "good")
    bad = make_claim(cluster, "bad", storage_class="bad")
    await wait_for_event(cluster, bad, FAILED, message=message)
    good = make_claim(cluster, "good", storage_class="good")
    await wait_for_bound(cluster, good)

    await wait_until(
        lambda: events_for(cluster, bad, FAILED)[0]["count"] >= 2, what="the bad claim retried"
    )
    assert failure_messages(cluster, bad) == [message]
    current = cluster.get("persistentvolumeclaims", NAMESPACE, "bad")
    assert current is not None
    assert current["status"]["phase"] == "Pending"
    assert calls.count("CreateVolume") == 1  # the good claim's only
    assert operator.alive


async def test_claim_with_a_selector_fails_clearly_and_is_not_provisioned(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster, extra_spec={"selector": {"matchLabels": {"disk": "ssd"}}})
    await wait_for_event(cluster, claim, FAILED, message="claim Selector is not supported")
    await wait_until(lambda: events_for(cluster, claim, FAILED)[0]["count"] >= 2, what="retried")
    assert calls.count("CreateVolume") == 0


async def test_claim_for_a_missing_class_gets_no_event_and_waits_for_the_class(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    # As if the KCM had annotated it before the class was deleted (to be recreated).
    claim = make_claim(
        cluster,
        annotations={
            names.ANN_STORAGE_PROVISIONER: DRIVER_NAME,
            names.ANN_BETA_STORAGE_PROVISIONER: DRIVER_NAME,
        },
    )
    # The Go library only logs and retries a missing class (shouldProvision's error).
    await assert_stays(
        lambda: not ours(cluster, claim), duration=4 * RETRY_START, what="no event from us"
    )
    await make_storage_class(cluster, operator)
    await wait_for_bound(cluster, claim)
    await wait_for_event(cluster, claim, names.REASON_PROVISIONING_SUCCEEDED)
    assert [e["reason"] for e in ours(cluster, claim)] == [
        names.REASON_PROVISIONING,
        names.REASON_PROVISIONING_SUCCEEDED,
    ]
