"""The volume health monitor end to end: events on the claim of an unhealthy volume.

We test these aspects:
- healthy volumes cost no events;
- with ListVolumes (one paged call a round) and with ControllerGetVolume (no LIST_VOLUMES):
  an abnormal volume gets a Warning `VolumeConditionAbnormal` with the driver's message on its
  bound claim, from `csi-pv-monitor-controller-<driver>`; its recovery a Normal
  `VolumeConditionNormal` "The Volume returns to the healthy state", once;
- a recovery is still reported after a restart, from the abnormal event left in the cluster;
- a driver without VOLUME_CONDITION gets no monitor.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

from kopf_csi.attaching.options import HealthMonitorOptions
from kopf_csi.driver import Driver, Features
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread, running_operator

from ..conftest import DRIVER_NAME
from .helpers import attached_volume, until

FAST = HealthMonitorOptions(monitor_interval=0.05, list_volumes_interval=0.05)
COMPONENT = f"csi-pv-monitor-controller-{DRIVER_NAME}"
ABNORMAL, NORMAL = "VolumeConditionAbnormal", "VolumeConditionNormal"


async def _bound_volume(cluster: EmulatedCluster, socket_path: pathlib.Path) -> tuple[str, str]:
    """A driver volume, its PV bound to the claim `default/data`: (volume ID, claim UID)."""
    claim = cluster.create(
        "persistentvolumeclaims",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "data", "namespace": "default"},
         "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1",
                  "resources": {"requests": {"storage": "1Mi"}}}},
    )  # fmt: skip
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    ref = {"kind": "PersistentVolumeClaim", "namespace": "default", "name": "data",
           "uid": claim["metadata"]["uid"]}  # fmt: skip
    cluster.patch("persistentvolumes", None, "pv-1", {"spec": {"claimRef": ref}})
    cluster.patch(
        "persistentvolumes", None, "pv-1", {"status": {"phase": "Bound"}}, subresource="status"
    )
    return handle, claim["metadata"]["uid"]


def _events(cluster: EmulatedCluster, reason: str) -> list[dict[str, Any]]:
    return [e for e in cluster.objects("events", namespace="default") if e["reason"] == reason]


@pytest.mark.parametrize("health_options", [FAST], indirect=True)
@pytest.mark.parametrize(
    "driver_options",
    [
        pytest.param({}, id="list-volumes"),
        pytest.param({"features": Features(attach=True, list_volumes=False)}, id="get-volume"),
    ],
    indirect=True,
)
async def test_an_abnormal_volume_and_its_recovery_are_reported_on_the_claim(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    handle, claim_uid = await _bound_volume(cluster, socket_path)
    await asyncio.sleep(0.2)  # a few healthy rounds
    assert not cluster.objects("events", namespace="default")

    driver.faults.mark_abnormal(handle, "disk on fire")
    [warning] = await until(lambda: _events(cluster, ABNORMAL))
    assert warning["type"] == "Warning"
    assert warning["message"] == "disk on fire"
    assert warning["source"]["component"] == COMPONENT
    assert warning["involvedObject"]["kind"] == "PersistentVolumeClaim"
    assert warning["involvedObject"]["uid"] == claim_uid

    driver.faults.mark_normal(handle)
    [recovered] = await until(lambda: _events(cluster, NORMAL))
    assert recovered["type"] == "Normal"
    assert recovered["message"] == "The Volume returns to the healthy state"
    assert recovered["involvedObject"]["uid"] == claim_uid
    await asyncio.sleep(0.2)
    assert len(_events(cluster, NORMAL)) == 1
    assert _events(cluster, NORMAL)[0]["count"] == 1  # told once, not every round


@pytest.mark.parametrize("health_options", [FAST], indirect=True)
async def test_a_recovery_is_reported_after_a_restart(
    cluster: EmulatedCluster,
    driver: Driver,
    socket_path: pathlib.Path,
    settings: Settings,
    handler_modules: tuple[str, ...],
) -> None:
    handle, claim_uid = await _bound_volume(cluster, socket_path)
    driver.faults.mark_abnormal(handle, "disk on fire")
    async with running_operator(settings=settings, modules=handler_modules):
        await until(lambda: _events(cluster, ABNORMAL))
    driver.faults.mark_normal(handle)  # recovered while no operator ran
    async with running_operator(settings=settings, modules=handler_modules):
        [recovered] = await until(lambda: _events(cluster, NORMAL))
    assert recovered["involvedObject"]["uid"] == claim_uid


@pytest.mark.parametrize("health_options", [FAST], indirect=True)
@pytest.mark.parametrize(
    "driver_options", [{"features": Features(attach=True, volume_condition=False)}], indirect=True
)
async def test_a_driver_without_volume_conditions_gets_no_monitor(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    await _bound_volume(cluster, socket_path)
    await asyncio.sleep(0.1)
    assert getattr(operator.memo, "health_monitor", None) is None
    assert not cluster.objects("events", namespace="default")
