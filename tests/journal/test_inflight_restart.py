"""In-flight claims survive an operator restart: no leaked backend volume (upstream #486).

We test these aspects:
- the claim is recorded in the journal ConfigMap before CreateVolume reaches the driver;
- an operator restarted after the claim was deleted finishes the claim's volume (PV created,
  Released, deleted) so that the driver ends with no volume, and the record is dropped;
- a successful provisioning leaves no record behind;
- a journal that cannot be written stops CreateVolume (nothing is sent unrecorded), with a
  ProvisioningFailed event, and the claim is provisioned once the API recovers.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from kopf_csi import rbac
from kopf_csi.csi import CSIClient
from kopf_csi.csi import messages as csi
from kopf_csi.driver import Driver
from kopf_csi.provisioning.journal import journal_name, snapshot_of
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME, seed_node, until

OWN = rbac.NAMESPACE  # the operator's namespace: its journal's (kit_rbac)
JOURNAL = journal_name(DRIVER_NAME)


def _seed(cluster: EmulatedCluster) -> None:
    cluster.create(
        "storageclasses",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "fast"},
            "provisioner": DRIVER_NAME,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        },
    )
    seed_node(cluster)


def _claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "fast",
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }


def create_volume_request(name: str) -> csi.CreateVolumeRequest:
    """What the provisioner asks for a 1 MiB filesystem claim (for the driver directly)."""
    return csi.CreateVolumeRequest(
        name=name,
        capacity_range=csi.CapacityRange(required_bytes=1024 * 1024),
        volume_capabilities=[
            csi.VolumeCapability(
                mount=csi.VolumeCapabilityMountVolume(),
                access_mode=csi.VolumeCapabilityAccessMode(
                    mode=csi.VolumeCapabilityAccessModeMode.SINGLE_NODE_WRITER
                ),
            )
        ],
    )


def _journal(cluster: EmulatedCluster) -> dict[str, Any]:
    config_map = cluster.get("configmaps", OWN, JOURNAL)
    return {k: json.loads(v) for k, v in ((config_map or {}).get("data") or {}).items()}


async def test_deleted_claim_is_finished_after_a_restart(
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    driver: Driver,
    settings: Settings,
    socket_path: pathlib.Path,
) -> None:
    _seed(cluster)
    driver.faults.hang("CreateVolume")  # the call is on its way when the operator dies
    first = OperatorThread(settings=settings)
    await first.start()
    claim = cluster.create("persistentvolumeclaims", _claim("data"), namespace="default")
    uid = claim["metadata"]["uid"]
    recorded = await until(lambda: _journal(cluster).get(uid))
    assert recorded["metadata"]["name"] == "data"
    assert recorded["spec"]["resources"]["requests"]["storage"] == "1Mi"
    await first.stop()

    # What the interrupted call did on the driver: it created the volume after all.
    driver.faults.clear()
    async with CSIClient(str(socket_path)) as client:
        await client.create_volume(create_volume_request(f"pvc-{uid}"))
    assert len(driver.state.volumes) == 1
    cluster.delete("persistentvolumeclaims", "default", "data")  # meanwhile, the user gave up

    second = OperatorThread(settings=settings)
    await second.start()
    try:
        await until(lambda: not driver.state.volumes and not _journal(cluster), timeout=15)
        await until(lambda: not cluster.objects("persistentvolumes"))
    finally:
        await second.stop()


async def test_a_provisioned_claim_leaves_no_record(
    cluster: EmulatedCluster, kcm: ControllerManager, driver: Driver, settings: Settings
) -> None:
    _seed(cluster)
    operator = OperatorThread(settings=settings)
    await operator.start()
    try:
        cluster.create("persistentvolumeclaims", _claim("data"), namespace="default")
        await until(
            lambda: (
                (cluster.get("persistentvolumeclaims", "default", "data") or {})
                .get("status", {})
                .get("phase")
                == "Bound"
            )
        )
        await until(lambda: cluster.get("configmaps", OWN, JOURNAL) is not None)
        await until(lambda: not _journal(cluster))
    finally:
        await operator.stop()


@pytest.mark.parametrize("status", [500, 503])
async def test_an_unwritable_journal_stops_create_volume(
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    driver: Driver,
    settings: Settings,
    status: int,
) -> None:
    _seed(cluster)
    operator = OperatorThread(settings=settings)
    await operator.start()
    try:
        faulted = ("create", "patch")
        faults = [
            cluster.faults.add(status, verb=verb, resource="configmaps", times=1000)
            for verb in faulted
        ]
        cluster.create("persistentvolumeclaims", _claim("data"), namespace="default")

        def failed() -> bool:
            return any(
                e.get("reason") == "ProvisioningFailed"
                and "cannot record in-flight claims" in e.get("message", "")
                for e in cluster.objects("events")
            )

        def tried() -> bool:
            writes = (cluster.requests.count(verb=v, resource="configmaps") for v in faulted)
            return sum(writes) >= 3

        if status == 503:
            # The server says it is away: an outage, told once by the client, with no
            # Warning event per claim (docs/decisions.md, "Control-plane outages").
            await until(tried)
            assert not failed()
        else:
            await until(failed)
        assert not driver.state.volumes  # nothing was sent to the driver unrecorded
        for fault in faults:
            cluster.faults.remove(fault)
        await until(
            lambda: (
                (cluster.get("persistentvolumeclaims", "default", "data") or {})
                .get("status", {})
                .get("phase")
                == "Bound"
            ),
            timeout=15,
        )
        assert len(driver.state.volumes) == 1
    finally:
        await operator.stop()


def _count_create_volume(driver: Driver, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    plan = driver.faults.plan

    def counting(method: str) -> Any:
        if method == "CreateVolume":
            calls.append(method)
        return plan(method)

    monkeypatch.setattr(driver.faults, "plan", counting)
    return calls


def _bound(cluster: EmulatedCluster, name: str) -> bool:
    claim = cluster.get("persistentvolumeclaims", "default", name) or {}
    return claim.get("status", {}).get("phase") == "Bound"


async def _provisioned_then_stopped(cluster: EmulatedCluster, settings: Settings) -> dict[str, Any]:
    """A claim provisioned by one operator, which then stops; its record is gone."""
    _seed(cluster)
    first = OperatorThread(settings=settings)
    await first.start()
    try:
        cluster.create("persistentvolumeclaims", _claim("data"), namespace="default")
        await until(lambda: _bound(cluster, "data"))
        await until(lambda: not _journal(cluster))
    finally:
        await first.stop()
    claim = cluster.get("persistentvolumeclaims", "default", "data")
    assert claim is not None
    return claim


async def _restart_until_the_journal_is_empty(
    cluster: EmulatedCluster, driver: Driver, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """Start an operator, wait until the journal has no record, stop it: its CreateVolumes."""
    calls = _count_create_volume(driver, monkeypatch)
    operator = OperatorThread(settings=settings)
    await operator.start()
    try:
        await until(lambda: not _journal(cluster))
    finally:
        await operator.stop()
    return calls


def _stale_record(cluster: EmulatedCluster, claim: dict[str, Any]) -> None:
    """The record's removal was lost (a kill right after the PV was saved): put it back."""
    record = json.dumps(snapshot_of(claim), separators=(",", ":"), sort_keys=True)
    patch = {"data": {claim["metadata"]["uid"]: record}}
    cluster.patch("configmaps", OWN, JOURNAL, patch)


async def test_a_stale_record_of_a_bound_claim_is_dropped_without_a_call(
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    driver: Driver,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    claim = await _provisioned_then_stopped(cluster, settings)
    _stale_record(cluster, claim)
    assert await _restart_until_the_journal_is_empty(cluster, driver, settings, monkeypatch) == []
    assert len(driver.state.volumes) == 1


async def test_a_stale_record_of_a_deleted_claim_with_its_pv_is_dropped_without_a_call(
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    driver: Driver,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    claim = await _provisioned_then_stopped(cluster, settings)
    volume = claim["spec"]["volumeName"]
    cluster.patch(
        "persistentvolumes", None, volume, {"spec": {"persistentVolumeReclaimPolicy": "Retain"}}
    )
    cluster.delete("persistentvolumeclaims", "default", "data")
    await until(
        lambda: (
            (cluster.get("persistentvolumes", None, volume) or {}).get("status", {}).get("phase")
            == "Released"
        )
    )
    _stale_record(cluster, claim)
    assert await _restart_until_the_journal_is_empty(cluster, driver, settings, monkeypatch) == []
    assert len(driver.state.volumes) == 1  # Retain: kept, and not made twice
    assert cluster.get("persistentvolumes", None, volume) is not None
