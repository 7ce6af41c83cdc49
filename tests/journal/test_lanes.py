"""The journal's lanes: a claim never waits behind another batch's commit, and every lane keeps
the promise (upstream #486) across a restart.

We test these aspects:
- with writes that take 1 s (as the API server serialises writes to one object), a claim
  recorded while another claim's commit is in flight is durable after one write, not two: it
  goes to a lane of its own (with one ConfigMap it waited for the other commit, then for its
  own);
- two claims recorded at once land in two lanes; deleted while their CreateVolume calls are
  on their way (the operator stops meanwhile), both are finished after a restart from their
  own lanes: the driver ends with no volume, every lane with no record;
- the lanes' names: the first is the journal's name (an older release's records are read),
  and every name fits in a ConfigMap name.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kopf_csi import kube, rbac
from kopf_csi.csi import CSIClient
from kopf_csi.driver import Driver
from kopf_csi.provisioning.journal import LANES, Journal, journal_name, lane_names
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME, until
from .test_inflight_restart import _claim, _seed, create_volume_request

OWN = rbac.NAMESPACE  # the operator's namespace: its journal's (kit_rbac)
LANE_NAMES = lane_names(journal_name(DRIVER_NAME))


@pytest.fixture
async def api(kubeconfig: pathlib.Path) -> AsyncIterator[kube.KubeClient]:
    async with await kube.KubeClient.connect(kubeconfig) as client:
        yield client


def _records(cluster: EmulatedCluster, names: list[str]) -> dict[str, str]:
    """Every lane's records: claim uid -> the lane (ConfigMap name) holding it."""
    found = {}
    for name in names:
        config_map = cluster.get("configmaps", OWN, name) or {}
        for uid in config_map.get("data") or {}:
            found[uid] = name
    return found


def _with_uid(name: str) -> dict[str, Any]:
    claim = _claim(name)
    claim["metadata"]["uid"] = f"uid-{name}"
    return claim


def test_lane_names_start_with_the_journal_and_fit() -> None:
    assert LANE_NAMES[0] == journal_name(DRIVER_NAME)
    assert len(set(LANE_NAMES)) == LANES > 1
    long = lane_names("x" * 253)
    assert all(len(name) <= 253 for name in long)
    assert len(set(long)) == LANES


async def test_a_claim_does_not_wait_behind_another_commit(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    journal = Journal(api, namespace=OWN, name="journal")
    assert await journal.load() == {}  # as at start-up: the lanes' ConfigMaps do not exist
    cluster.write_latency = 1.0
    loop = asyncio.get_running_loop()
    first = asyncio.create_task(journal.record(_with_uid("a")))
    await until(lambda: cluster.requests.count(resource="configmaps", verb="create"))
    started = loop.time()
    await journal.record(_with_uid("b"))
    waited = loop.time() - started
    await first
    assert 0.9 <= waited < 1.6  # its own write only (behind the other commit: about 2 s)
    lanes = _records(cluster, lane_names("journal"))
    assert set(lanes) == {"uid-a", "uid-b"}
    assert lanes["uid-a"] != lanes["uid-b"]
    assert json.loads(cluster.get("configmaps", OWN, lanes["uid-b"])["data"]["uid-b"])


async def test_claims_in_two_lanes_are_finished_after_a_restart(
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    driver: Driver,
    settings: Settings,
    socket_path: pathlib.Path,
) -> None:
    _seed(cluster)
    driver.faults.hang("CreateVolume")  # the calls are on their way when the operator dies
    cluster.write_latency = 0.5  # the second claim comes while the first one's commit runs
    first = OperatorThread(settings=settings)
    await first.start()
    uids = []
    for name in ("data-a", "data-b"):
        claim = cluster.create("persistentvolumeclaims", _claim(name), namespace="default")
        uids.append(claim["metadata"]["uid"])
    recorded = await until(
        lambda: (lanes := _records(cluster, LANE_NAMES)).keys() >= set(uids) and lanes,
        timeout=15,
    )
    await first.stop()
    assert len({recorded[uid] for uid in uids}) == 2  # two lanes, committed side by side

    # What the interrupted calls did on the driver: they created the volumes after all.
    driver.faults.clear()
    cluster.write_latency = 0.0
    async with CSIClient(str(socket_path)) as client:
        for uid in uids:
            await client.create_volume(create_volume_request(f"pvc-{uid}"))
    assert len(driver.state.volumes) == 2
    for name in ("data-a", "data-b"):  # meanwhile, the user gave up
        cluster.delete("persistentvolumeclaims", "default", name)

    second = OperatorThread(settings=settings)
    await second.start()
    try:
        await until(
            lambda: not driver.state.volumes and not _records(cluster, LANE_NAMES), timeout=20
        )
        await until(lambda: not cluster.objects("persistentvolumes"))
    finally:
        await second.stop()
