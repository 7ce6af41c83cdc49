"""Two replicas, one cluster, one driver: active/passive end to end.

We test these aspects:
- the first replica takes every Lease of its roles and provisions; the second stays standby,
  starts no controller, writes nothing, and is healthy;
- a clean stop of the leader releases its Leases: the standby takes over at once (one more
  transition) and provisions the claims created meanwhile;
- a leader that dies without releasing: the standby takes over within the lease duration;
- across every handover each claim gets exactly one volume on the driver, and one PV;
- a Lease held by a foreign identity (a Go sidecar left running) keeps us standby until that
  holder stops renewing; then we take it over;
- several roles: the replica holds the provisioner's and the attacher's Leases, and a Go
  attacher holding its Lease keeps the whole replica standby (still holding the provisioner's);
- a leader whose renewals fail stops its queues, then the operator, within the renew deadline;
- a clean stop whose release collides with a change of the Lease (a 409: our own renewal that
  landed late, or an injected one) reads it again and releases it: the standby takes over at
  once, not after a lease duration.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
from typing import Any, Literal

import aiohttp
import pytest

from kopf_csi import leadership, names, rbac
from kopf_csi.driver import Driver
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager

from ..conftest import DRIVER_NAME, field_managers, seed_node, until
from .conftest import FAST, MODULES, Replica, start_replica

NAMESPACE = "default"  # the claims'
LEASES = rbac.NAMESPACE  # the operator's namespace, where its Leases are (kit_rbac)
PROVISIONER_LEASE = names.lease_name(names.LEASE_PREFIX_PROVISIONER, DRIVER_NAME)
ATTACHER_LEASE = names.lease_name(names.LEASE_PREFIX_ATTACHER, DRIVER_NAME)


def storage_class(cluster: EmulatedCluster) -> None:
    """A node with its CSINode (for topology), and an Immediate class of our driver."""
    seed_node(cluster)
    cluster.create(
        "storageclasses",
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "sc"},
         "provisioner": DRIVER_NAME, "reclaimPolicy": "Delete",
         "volumeBindingMode": "Immediate"},
    )  # fmt: skip


def claim(cluster: EmulatedCluster, name: str) -> None:
    cluster.create(
        "persistentvolumeclaims",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": name, "namespace": NAMESPACE},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "sc",
                  "resources": {"requests": {"storage": "1Mi"}}}},
    )  # fmt: skip


def bound(cluster: EmulatedCluster, names_: list[str]) -> bool:
    for name in names_:
        found = cluster.get("persistentvolumeclaims", NAMESPACE, name)
        if found is None or found.get("status", {}).get("phase") != "Bound":
            return False
    return True


def lease(cluster: EmulatedCluster, name: str = PROVISIONER_LEASE) -> dict[str, Any]:
    found = cluster.get("leases", LEASES, name)
    assert found is not None, f"no Lease {name}"
    return found


def holder(cluster: EmulatedCluster, name: str = PROVISIONER_LEASE) -> str | None:
    found = cluster.get("leases", LEASES, name)
    return None if found is None else found["spec"].get("holderIdentity")


def assert_one_volume_per_claim(cluster: EmulatedCluster, driver: Driver, count: int) -> None:
    pvs = cluster.objects("persistentvolumes")
    handles = sorted(pv["spec"]["csi"]["volumeHandle"] for pv in pvs)
    assert len(pvs) == count
    assert len(set(handles)) == count
    assert sorted(driver.backend.state.volumes) == handles  # no volume without its PV


def leader_gauge(replica: Replica) -> float | None:
    """`leader_election_master_status{name=<the provisioner's Lease>}` of this replica."""
    registry = replica.operator.memo.metrics.registry  # type: ignore[attr-defined]
    value: float | None = registry.get_sample_value(
        names.METRIC_LEADER_STATUS, {"name": PROVISIONER_LEASE}
    )
    return value


async def stopped(*replicas: Replica) -> None:
    for replica in replicas:
        await replica.stop()


async def leader_and_standby(settings: Settings, started: list[Replica]) -> tuple[Replica, Replica]:
    """replica-a leads; replica-b waits, and has seen replica-a hold the provisioner's Lease.

    Both go into `started` as soon as they start, for the caller to stop whatever happens.
    """
    first = start_replica(settings, "replica-a")
    started.append(first)
    await first.wait_leading()
    second = start_replica(settings, "replica-b")
    started.append(second)
    standby = await second.wait_standby()
    await until(lambda: standby.holders.get(PROVISIONER_LEASE) == "replica-a")
    return first, second


@pytest.mark.usefixtures("kcm")
async def test_one_leader_provisions_and_the_standby_takes_over_on_release(
    cluster: EmulatedCluster, driver: Driver, settings: Settings
) -> None:
    storage_class(cluster)
    started: list[Replica] = []
    try:
        first, second = await leader_and_standby(settings, started)

        batch = [f"first-{i}" for i in range(5)]
        for name in batch:
            claim(cluster, name)
        await until(lambda: bound(cluster, batch), timeout=20)
        await asyncio.sleep(3 * FAST.lease_duration / 2)  # the leader renews; the standby waits
        assert not second.working
        assert not second.is_leader
        assert second.elector is not None
        assert second.elector.check()[0]  # a standby is healthy
        assert first.elector is not None
        assert first.elector.check()[0]
        spec = lease(cluster)["spec"]
        assert spec["holderIdentity"] == "replica-a"
        assert spec["leaseDurationSeconds"] == 2
        assert spec["leaseTransitions"] == 0
        assert leader_gauge(first) == 1.0
        assert leader_gauge(second) == 0.0

        await first.stop()  # a clean stop releases the Lease
        released_at = time.monotonic()
        await second.wait_leading()
        assert time.monotonic() - released_at < FAST.lease_duration  # no wait for expiry
        spec = lease(cluster)["spec"]
        assert spec["holderIdentity"] == "replica-b"
        assert spec["leaseTransitions"] == 1
        assert leader_gauge(first) == 0.0
        assert leader_gauge(second) == 1.0

        more = [f"second-{i}" for i in range(5)]
        for name in more:
            claim(cluster, name)
        await until(lambda: bound(cluster, batch + more), timeout=20)
        assert_one_volume_per_claim(cluster, driver, len(batch + more))
    finally:
        await stopped(*started)


class GoSidecar:
    """A foreign holder renewing a Lease the way client-go does, until told to stop."""

    def __init__(self, cluster: EmulatedCluster, name: str, identity: str) -> None:
        self.cluster = cluster
        self.name = name
        self.identity = identity
        self.acquired = now = leadership.format_microtime(datetime.datetime.now(datetime.UTC))
        cluster.create(
            "leases",
            {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": name, "namespace": LEASES},
             "spec": {"holderIdentity": identity, "leaseDurationSeconds": 2,
                      "acquireTime": now, "renewTime": now, "leaseTransitions": 4}},
        )  # fmt: skip
        self.task = asyncio.create_task(self._renew())

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(0.3)
            now = leadership.format_microtime(datetime.datetime.now(datetime.UTC))
            self.cluster.patch("leases", LEASES, self.name, {"spec": {"renewTime": now}})

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def test_a_foreign_holder_keeps_us_standby_until_it_stops_renewing(
    cluster: EmulatedCluster, driver: Driver, kcm: ControllerManager, settings: Settings
) -> None:
    storage_class(cluster)
    go = GoSidecar(cluster, PROVISIONER_LEASE, "csi-provisioner-go-0")
    replica = start_replica(settings, "replica-a")
    try:
        elector = await replica.wait_standby()
        claim(cluster, "waiting")
        await until(lambda: elector.holders.get(PROVISIONER_LEASE) == "csi-provisioner-go-0")
        await asyncio.sleep(3 * FAST.lease_duration / 2)  # longer than a Lease, renewed meanwhile
        assert not replica.working
        assert not replica.is_leader
        assert elector.check()[0]
        assert cluster.objects("persistentvolumes") == []
        assert holder(cluster) == "csi-provisioner-go-0"

        await go.stop()
        stopped_at = time.monotonic()
        await replica.wait_leading()
        waited = time.monotonic() - stopped_at
        assert waited > FAST.lease_duration / 2  # it waited for the Lease to expire
        assert waited < FAST.lease_duration + 2.0
        spec = lease(cluster)["spec"]
        assert spec["holderIdentity"] == "replica-a"
        assert spec["leaseTransitions"] == 5
        assert spec["acquireTime"] > go.acquired  # a new term, not the Go sidecar's
        await until(lambda: bound(cluster, ["waiting"]), timeout=20)
        assert_one_volume_per_claim(cluster, driver, 1)
    finally:
        await go.stop()
        await replica.stop()


@pytest.mark.usefixtures("kcm")
async def test_a_crashed_leader_is_replaced_within_the_lease_duration(
    cluster: EmulatedCluster, driver: Driver, settings: Settings
) -> None:
    storage_class(cluster)
    started: list[Replica] = []
    try:
        first, second = await leader_and_standby(settings, started)
        batch = [f"first-{i}" for i in range(3)]
        for name in batch:
            claim(cluster, name)
        await until(lambda: bound(cluster, batch), timeout=20)

        # A crash: the leader neither renews nor releases (every Lease write fails meanwhile).
        fault = cluster.faults.add(503, verb="update", resource="leases", times=None)
        await first.stop()
        cluster.faults.remove(fault)
        crashed_at = time.monotonic()
        assert holder(cluster) == "replica-a"  # not released

        await second.wait_leading()
        assert time.monotonic() - crashed_at < FAST.lease_duration + 2.0
        assert lease(cluster)["spec"]["leaseTransitions"] == 1
        more = [f"second-{i}" for i in range(3)]
        for name in more:
            claim(cluster, name)
        await until(lambda: bound(cluster, batch + more), timeout=20)
        assert_one_volume_per_claim(cluster, driver, len(batch + more))
    finally:
        await stopped(*started)


@pytest.mark.usefixtures("kcm")
async def test_a_leader_that_cannot_renew_stops_its_work_and_the_operator(
    cluster: EmulatedCluster, driver: Driver, settings: Settings
) -> None:
    storage_class(cluster)
    first = start_replica(settings, "replica-a")
    second = None
    try:
        await first.wait_leading()
        claim(cluster, "before")
        await until(lambda: bound(cluster, ["before"]), timeout=20)
        second = start_replica(settings, "replica-b")
        await second.wait_standby()

        fault = cluster.faults.add(500, verb="update", resource="leases", times=None)
        failing_since = time.monotonic()
        await until(lambda: not first.operator.alive, timeout=20)
        assert time.monotonic() - failing_since < FAST.renew_deadline + 6.0
        assert first.operator.stop_reason is not None
        assert "leader election lost" in first.operator.stop_reason
        assert PROVISIONER_LEASE in first.operator.stop_reason
        assert first.operator.error is None  # a graceful stop
        assert first.elector is not None
        assert first.elector.lost is not None
        assert first.memo.stoppers == []  # type: ignore[attr-defined]  # every queue stopped

        claim(cluster, "after")  # nobody may provision it while the API refuses Lease writes
        await asyncio.sleep(FAST.lease_duration)
        assert not second.is_leader
        assert bound(cluster, ["before"])
        assert not bound(cluster, ["after"])

        cluster.faults.remove(fault)
        await second.wait_leading()
        await until(lambda: bound(cluster, ["before", "after"]), timeout=20)
        assert_one_volume_per_claim(cluster, driver, 2)
    finally:
        await stopped(first, *([second] if second else []))


async def test_every_role_has_its_lease_and_a_go_attacher_keeps_us_standby(
    cluster: EmulatedCluster, driver: Driver, settings: Settings
) -> None:
    modules = (
        "kopf_csi_handlers.lifecycle",
        "kopf_csi_handlers.caches",
        "kopf_csi_handlers.provisioner",
        "kopf_csi_handlers.attacher",
    )
    go = GoSidecar(cluster, ATTACHER_LEASE, "csi-attacher-go-0")
    replica = start_replica(settings, "replica-a", modules)
    try:
        elector = await replica.wait_standby()
        assert elector.leases == (PROVISIONER_LEASE, ATTACHER_LEASE)
        # It takes what it can in order (the provisioner's), and waits for the attacher's.
        await until(lambda: holder(cluster, PROVISIONER_LEASE) == "replica-a")
        await asyncio.sleep(FAST.lease_duration)
        assert holder(cluster, PROVISIONER_LEASE) == "replica-a"  # renewed while waiting
        assert not replica.working
        assert not replica.is_leader

        await go.stop()
        await replica.wait_leading()
        assert holder(cluster, ATTACHER_LEASE) == "replica-a"
        assert getattr(replica.memo, "attacher", None) is not None
        assert lease(cluster, ATTACHER_LEASE)["spec"]["leaseTransitions"] == 5
        # Each Lease is written under the Go sidecar's name, as that sidecar writes it.
        assert ("csi-provisioner", None) in field_managers(lease(cluster, PROVISIONER_LEASE))
        assert ("csi-attacher", None) in field_managers(lease(cluster, ATTACHER_LEASE))
    finally:
        await go.stop()
        await replica.stop()
    # A clean stop released both Leases.
    assert holder(cluster, PROVISIONER_LEASE) == ""
    assert holder(cluster, ATTACHER_LEASE) == ""


async def test_a_standby_that_stops_releases_what_it_holds(
    cluster: EmulatedCluster, driver: Driver, settings: Settings
) -> None:
    modules = (
        "kopf_csi_handlers.lifecycle",
        "kopf_csi_handlers.caches",
        "kopf_csi_handlers.provisioner",
        "kopf_csi_handlers.attacher",
    )
    go = GoSidecar(cluster, ATTACHER_LEASE, "csi-attacher-go-0")
    replica = start_replica(settings, "replica-a", modules)
    try:
        await replica.wait_standby()
        await until(lambda: holder(cluster, PROVISIONER_LEASE) == "replica-a")
        await replica.stop()  # while standby: kopf cancels the start-up, we clean up
        assert not replica.operator.alive
        assert holder(cluster, PROVISIONER_LEASE) == ""
        assert holder(cluster, ATTACHER_LEASE) == "csi-attacher-go-0"
    finally:
        await go.stop()
        await replica.stop()


async def test_a_standby_is_healthy_over_http(
    cluster: EmulatedCluster, driver: Driver, settings: Settings, unused_tcp_port: int
) -> None:
    address = f"127.0.0.1:{unused_tcp_port}"
    http = dataclasses.replace(settings.http, endpoint=address)
    settings = dataclasses.replace(settings, http=http)
    go = GoSidecar(cluster, PROVISIONER_LEASE, "csi-provisioner-go-0")
    # kopf runs start-up handlers one by one, in the order of loading: the endpoint's comes
    # first (as in DEFAULT_MODULES), so that it serves while the election waits.
    replica = start_replica(settings, "replica-a", ("kopf_csi_handlers.observability", *MODULES))
    try:
        elector = await replica.wait_standby()
        await until(lambda: elector.holders.get(PROVISIONER_LEASE) == "csi-provisioner-go-0")
        await asyncio.sleep(FAST.lease_duration)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://{address}/healthz") as response:
                text = await response.text()
                assert response.status == 200, text
                assert "[+]leader-election ok: standby as replica-a" in text
                assert f"held by csi-provisioner-go-0: {PROVISIONER_LEASE}" in text
                assert "None" not in text
            async with session.get(f"http://{address}/healthz/leader-election") as response:
                assert response.status == 200
                assert await response.text() == "ok"
            async with session.get(f"http://{address}/readyz") as response:  # rolling updates
                assert response.status == 200
                assert "standby" in await response.text()
        assert not replica.working
    finally:
        await go.stop()
        await replica.stop()


class Collision:
    """An observer of the stopping leader that changes its Lease after the last renewal.

    The Elector reports "not leading" once it has stopped renewing, and releases only then:
    exactly where the release's resourceVersion goes stale when a renewal lands late. `how`:
    "landed" writes what our own cut-off renewal would have (a new renewTime, still ours);
    "conflict" answers the first release with an injected 409 instead.
    """

    def __init__(self, cluster: EmulatedCluster, how: Literal["landed", "conflict"]) -> None:
        self.cluster = cluster
        self.how = how
        self.loop = asyncio.get_running_loop()  # the emulator's; the observer runs in kopf's
        self.fault: Any = None
        self.happened = False

    def __call__(self, name: str, leading: bool) -> None:
        if leading or name != PROVISIONER_LEASE or self.happened:
            return
        self.happened = True
        if self.how == "conflict":
            self.fault = self.cluster.faults.add(409, verb="update", resource="leases", name=name)
        else:
            asyncio.run_coroutine_threadsafe(self._land(name), self.loop).result(timeout=10)

    async def _land(self, name: str) -> None:
        now = leadership.format_microtime(datetime.datetime.now(datetime.UTC))
        self.cluster.patch("leases", LEASES, name, {"spec": {"renewTime": now}})


@pytest.mark.parametrize("how", ["landed", "conflict"])
async def test_a_release_that_meets_a_conflict_reads_again_and_releases(
    cluster: EmulatedCluster, driver: Driver, settings: Settings, how: Literal["landed", "conflict"]
) -> None:
    started: list[Replica] = []
    try:
        first, second = await leader_and_standby(settings, started)
        assert first.elector is not None
        collision = Collision(cluster, how)
        first.elector.observers = (*first.elector.observers, collision)

        await first.stop()  # a clean stop: stop renewing, then release
        released_at = time.monotonic()
        assert collision.happened
        assert collision.fault is None or collision.fault.times == 0  # the release met the 409
        assert holder(cluster) in ("", "replica-b")  # released, not left to expire
        await second.wait_leading()
        assert time.monotonic() - released_at < FAST.lease_duration  # no wait for expiry
        spec = lease(cluster)["spec"]
        assert spec["holderIdentity"] == "replica-b"
        assert spec["leaseTransitions"] == 1
    finally:
        await stopped(*started)
