"""A claim is journaled ahead of the controller manager's request, off its critical path.

The controller manager asks for a claim's volume by annotating it, one write after the claim
appears; the operator sees the claim appear as early. A claim the annotation will make ours is
recorded then, so that when the request comes, CreateVolume waits for no journal write of its
own (on a loaded real server, about 28 ms before every first volume).

We test these aspects:
- end to end, with journal writes that take 2 s: the claim is recorded before any request,
  and once it is annotated, its PV comes without another journal write and without waiting
  a write's time;
- a claim recorded ahead and then deleted, or bound to an existing PV, without a request: its
  record is dropped and the driver is never called;
- the journal itself: a `record` while the write ahead is in flight joins that write (one
  write, not two); a record released while its write is in flight is removed after it; one
  recorded again while its removal is in flight is written again after it; a failed write
  ahead fails the request waiting on it, and the next request writes again;
- the promise across a restart: a claim recorded ahead, requested, sent to the driver and then
  deleted while the operator is down is finished after the restart (its record has no request
  in it, yet it is not forgotten): no volume is left on the driver.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kopf_csi import kube
from kopf_csi.csi import CSIClient
from kopf_csi.driver import Driver
from kopf_csi.introspection import object_state
from kopf_csi.provisioning.journal import Journal, JournalError, journal_name, lane_names
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.latency import Latency, LatencyModel
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from ..conftest import DRIVER_NAME, until
from .test_inflight_restart import _claim, _seed, create_volume_request

LANES = lane_names(journal_name(DRIVER_NAME))
PROVISIONER = "volume.kubernetes.io/storage-provisioner"
WRITE = 2.0  # seconds a journal write takes (the API server's time)


def _slow_journal(cluster: EmulatedCluster) -> None:
    """Journal writes take `WRITE`; every other request is answered at once."""
    cluster.latency = Latency(
        LatencyModel(means={"PATCH configmaps": WRITE, "POST configmaps": WRITE})
    )


def _recorded(cluster: EmulatedCluster) -> set[str]:
    found: set[str] = set()
    for name in LANES:
        found |= set((cluster.get("configmaps", "default", name) or {}).get("data") or {})
    return found


def _journal_writes(cluster: EmulatedCluster) -> int:
    return sum(cluster.requests.count(verb=v, resource="configmaps") for v in ("create", "patch"))


def _request(cluster: EmulatedCluster, name: str) -> None:
    """What the controller manager does for a claim no PV matches: ask for provisioning."""
    patch = {"metadata": {"annotations": {PROVISIONER: DRIVER_NAME}}}
    cluster.patch("persistentvolumeclaims", "default", name, patch)


@pytest.fixture
async def operator(cluster: EmulatedCluster, settings: Settings) -> AsyncIterator[OperatorThread]:
    """The operator, started on a cluster with our StorageClass and a node."""
    _seed(cluster)
    thread = OperatorThread(settings=settings)
    await thread.start()
    try:
        yield thread
    finally:
        await thread.stop()


async def test_the_request_finds_its_record_written(
    cluster: EmulatedCluster, driver: Driver, calls: Calls, operator: OperatorThread
) -> None:
    _slow_journal(cluster)
    uid = cluster.create("persistentvolumeclaims", _claim("data"), namespace="default")["metadata"][
        "uid"
    ]
    await until(lambda: uid in _recorded(cluster), timeout=WRITE * 5)  # nobody asked yet
    assert calls.count("CreateVolume") == 0
    writes = _journal_writes(cluster)
    state = await _operator_state(operator, uid)  # what explain --operator shows
    assert state["journal"] == {"recorded": True, "ahead": True}

    loop = asyncio.get_running_loop()
    requested = loop.time()
    _request(cluster, "data")
    volume = f"pvc-{uid}"
    await until(lambda: cluster.get("persistentvolumes", None, volume), timeout=WRITE * 5)
    took = loop.time() - requested
    assert took < WRITE * 0.75  # without the record ahead: a whole journal write, then more
    assert _journal_writes(cluster) == writes  # the request wrote nothing to the journal
    assert calls.count("CreateVolume") == 1
    await until(lambda: not _recorded(cluster), timeout=WRITE * 5)  # dropped with the outcome
    state = await _operator_state(operator, uid)
    assert state["journal"] == {"recorded": False, "ahead": False}


async def _operator_state(operator: OperatorThread, uid: str) -> dict[str, Any]:
    """The operator's debug answer for the claim (`introspection.object_state`, on its loop)."""

    async def state() -> dict[str, Any]:
        return object_state(operator.memo, "persistentvolumeclaim", "default", "data", uid)

    assert operator._loop is not None
    future = asyncio.run_coroutine_threadsafe(state(), operator._loop)
    return await asyncio.wrap_future(future)


@pytest.mark.parametrize("outcome", ["deleted", "bound elsewhere"])
async def test_a_claim_never_requested_leaves_no_record(
    cluster: EmulatedCluster, driver: Driver, calls: Calls, operator: OperatorThread, outcome: str
) -> None:
    _slow_journal(cluster)
    uid = cluster.create("persistentvolumeclaims", _claim("data"), namespace="default")["metadata"][
        "uid"
    ]
    await until(lambda: uid in _recorded(cluster), timeout=WRITE * 5)
    if outcome == "deleted":
        cluster.delete("persistentvolumeclaims", "default", "data")
    else:  # the controller manager found an existing PV for it instead: no request
        cluster.patch("persistentvolumeclaims", "default", "data", {"spec": {"volumeName": "pv-1"}})
    await until(lambda: not _recorded(cluster), timeout=WRITE * 5)
    await asyncio.sleep(0.5)
    assert calls.count("CreateVolume") == 0
    assert not cluster.objects("persistentvolumes")


# -- the journal itself ---------------------------------------------------------------------------


@pytest.fixture
async def api(kubeconfig: pathlib.Path) -> AsyncIterator[kube.KubeClient]:
    async with await kube.KubeClient.connect(kubeconfig) as client:
        yield client


def _with_uid(name: str) -> dict[str, Any]:
    claim = _claim(name)
    claim["metadata"]["uid"] = f"uid-{name}"
    return claim


async def _writing(cluster: EmulatedCluster, count: int) -> None:
    """Until `count` journal writes have been sent (the server is still taking its time)."""
    await until(lambda: _journal_writes(cluster) >= count, timeout=WRITE * 5)


async def test_a_record_joins_the_write_ahead_in_flight(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    journal = Journal(api, namespace="default", name="journal", lanes=1)
    assert await journal.load() == {}
    _slow_journal(cluster)
    journal.prerecord(_with_uid("a"))
    assert journal.holds("uid-a")
    await _writing(cluster, 1)
    await journal.record(_with_uid("a"))  # joins that write: returns when it is durable
    assert journal.writes == _journal_writes(cluster) == 1
    data = cluster.get("configmaps", "default", "journal")["data"]
    assert set(data) == {"uid-a"}
    await journal.record(_with_uid("a"))  # durable already: at once, nothing written
    assert journal.writes == 1


async def test_a_record_released_during_its_write_is_removed_after_it(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    journal = Journal(api, namespace="default", name="journal", lanes=1, removal_delay=0.0)
    await journal.load()
    _slow_journal(cluster)
    journal.prerecord(_with_uid("a"))
    await _writing(cluster, 1)
    journal.release("uid-a")
    assert not journal.holds("uid-a")
    await until(lambda: journal.writes == 2, timeout=WRITE * 5)  # the removal follows
    await until(
        lambda: (cluster.get("configmaps", "default", "journal") or {}).get("data") == {},
        timeout=WRITE * 5,
    )
    assert not journal.holds("uid-a")


async def test_a_record_made_again_during_its_removal_is_written_after_it(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    """Released (an outcome), then recorded again (a retry) while the removal is in flight:
    the record must be durable again when `record` returns, not removed after it."""
    journal = Journal(api, namespace="default", name="journal", lanes=1, removal_delay=0.0)
    await journal.load()
    await journal.record(_with_uid("a"))
    _slow_journal(cluster)
    journal.release("uid-a")
    await _writing(cluster, 2)  # the removal is on its way
    assert not journal.holds("uid-a")
    await journal.record(_with_uid("a"))
    assert journal.writes == 3  # the record, its removal, the record again
    assert "uid-a" in cluster.get("configmaps", "default", "journal")["data"]
    assert journal.holds("uid-a")


async def test_a_failed_write_ahead_fails_its_request_and_the_next_writes_again(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    journal = Journal(api, namespace="default", name="journal", lanes=1)
    await journal.load()
    _slow_journal(cluster)
    fault = cluster.faults.add(503, resource="configmaps", times=None)
    journal.prerecord(_with_uid("a"))
    await _writing(cluster, 1)
    with pytest.raises(JournalError):
        await journal.record(_with_uid("a"))
    cluster.faults.remove(fault)
    await journal.record(_with_uid("a"))
    assert "uid-a" in cluster.get("configmaps", "default", "journal")["data"]


# -- the promise across a restart -------------------------------------------------------------


async def test_a_claim_recorded_ahead_is_finished_after_a_restart(
    cluster: EmulatedCluster,
    driver: Driver,
    calls: Calls,
    settings: Settings,
    socket_path: pathlib.Path,
) -> None:
    _seed(cluster)
    driver.faults.hang("CreateVolume")  # the call is on its way when the operator dies
    first = OperatorThread(settings=settings)
    await first.start()
    uid = cluster.create("persistentvolumeclaims", _claim("data"), namespace="default")["metadata"][
        "uid"
    ]
    await until(lambda: uid in _recorded(cluster))  # ahead of the request: no annotation in it
    _request(cluster, "data")
    await until(lambda: calls.count("CreateVolume"))
    await first.stop()
    driver.faults.clear()
    # The interrupted call made the volume after all; meanwhile the user gave up.
    async with CSIClient(str(socket_path)) as client:
        await client.create_volume(create_volume_request(f"pvc-{uid}"))
    assert len(driver.state.volumes) == 1
    cluster.delete("persistentvolumeclaims", "default", "data")

    async with ControllerManager(cluster):  # lets the claim go, releases its PV
        second = OperatorThread(settings=settings)
        await second.start()
        try:
            await until(lambda: not driver.state.volumes and not _recorded(cluster), timeout=20)
            await until(lambda: not cluster.objects("persistentvolumes"))
        finally:
            await second.stop()
