"""Writes whose answers were lost as the API server went away: races, never duplicates.

A server going away mid-request may commit a write and never answer it. The retry then meets
the object its own first attempt made or changed. We test these aspects:
- a PV POST that landed without an answer, the PVs' watch down meanwhile: the claim's next
  attempt finds the PV (read before any CreateVolume), so the driver is called once, one PV
  is made, and there is no Warning event, no warning line;
- during the deletion, the PV's finalizer removal that landed without an answer: the volume
  goes, DeleteVolume is called once, and nothing is logged as a failure.
"""

from __future__ import annotations

import pytest
import structlog

from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from ..conftest import DRIVER_NAME, until
from ..provisioner.conftest import (
    NAMESPACE,
    make_claim,
    make_storage_class,
    settled,
    wait_for_bound,
    wait_for_gone,
)

PROVISIONER_ANNOTATIONS = (
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
)


def _warnings(cluster: EmulatedCluster) -> list[tuple[str, str]]:
    return [
        (event["reason"], event["message"])
        for event in cluster.objects("events")
        if event["type"] == "Warning"
    ]


def _loud(logs: list[dict[str, object]]) -> list[dict[str, object]]:
    return [
        e for e in logs
        if e["log_level"] in ("warning", "error", "critical")
        and e["event"] not in ("api_unreachable", "api_reachable")
    ]  # fmt: skip


async def test_a_pv_saved_without_an_answer_is_found_not_made_again(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    """No KCM here: as in a real outage, nothing binds the claim to its PV meanwhile (that
    would stop the provisioner too), so only the provisioner's own read can find the PV."""
    await make_storage_class(cluster, operator)
    cluster.faults.lose_answer(verb="create", resource="persistentvolumes")
    # As when the server goes away: the PVs' watch is down too, so the claim's next attempt
    # comes before the PV's watch event (its watch is cut at its first event, for a while).
    cluster.faults.cut_watch("persistentvolumes", after=0, times=12)
    cluster.end_watches("persistentvolumes")
    annotations = dict.fromkeys(PROVISIONER_ANNOTATIONS, DRIVER_NAME)  # KCM's, by hand
    with structlog.testing.capture_logs() as logs:
        make_claim(cluster, "data", annotations=annotations)
        await until(lambda: len(cluster.objects("persistentvolumes")) == 1, timeout=10)
        await until(lambda: not cluster.faults, timeout=30)  # the PVs' watch works again
        await until(lambda: operator.memo.provisioner.in_progress == {}, timeout=10)
        await settled(cluster)
    assert calls.count("CreateVolume") == 1
    assert len(cluster.objects("persistentvolumes")) == 1
    assert _warnings(cluster) == []
    assert not _loud(logs), _loud(logs)


@pytest.mark.usefixtures("kcm")
async def test_a_finalizer_removed_without_an_answer_is_a_race_not_a_failure(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    await make_storage_class(cluster, operator)
    bound = await wait_for_bound(cluster, make_claim(cluster, "data"))
    volume = bound["metadata"]["name"]
    cluster.faults.lose_answer(verb="patch", resource="persistentvolumes", name=volume, times=2)
    with structlog.testing.capture_logs() as logs:
        cluster.delete("persistentvolumeclaims", NAMESPACE, "data")
        await wait_for_gone(cluster, "persistentvolumes", volume, timeout=20)
    assert calls.count("DeleteVolume") == 1
    assert _warnings(cluster) == []
    assert not _loud(logs), _loud(logs)
