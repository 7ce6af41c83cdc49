"""The kit's stand-ins and driver as a user's test gets them, by fixture name.

We test these aspects:
- the driver's capacity is the kit's fixed figure, not the host's free disk: a 100Gi claim is
  provisioned on a host whose disk has 1 GiB free;
- `snapshot_controller` makes a VolumeSnapshot's content (its driver's default class), which
  the operator cuts on the driver: the snapshot becomes ready to use.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_csi.driver import Driver, DriverConfig, storage
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.pytest_plugin import KIT_CAPACITY, NODE, until
from kopf_csi.testing.snapshots import SnapshotController

from ..provisioner.conftest import make_claim, make_storage_class, wait_for_bound

GiB = 1024**3


@pytest.fixture
def cluster_nodes() -> tuple[str, ...]:
    return (NODE,)  # the kit's default (the suite's conftest starts clusters empty)


@pytest.fixture(autouse=True)
def small_host_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's disk, as the driver would see it, has 1 GiB free."""
    monkeypatch.setattr(storage.Storage, "free_bytes", lambda self: GiB)


async def test_a_100gi_claim_fits_whatever_the_hosts_disk(
    cluster: EmulatedCluster,
    kcm: Any,
    driver: Driver,
    driver_config: DriverConfig,
    operator: OperatorThread,
) -> None:
    await make_storage_class(cluster, operator)
    volume = await wait_for_bound(cluster, make_claim(cluster, size="100Gi"), timeout=20)
    assert volume["spec"]["capacity"]["storage"] == "100Gi"
    assert driver_config.limits.total_capacity == KIT_CAPACITY == 1024**4


async def test_the_snapshot_controller_fixture_makes_contents(
    cluster: EmulatedCluster,
    kcm: Any,
    driver: Driver,
    operator: OperatorThread,
    snapshot_controller: SnapshotController,
) -> None:
    await make_storage_class(cluster, operator)
    await wait_for_bound(cluster, make_claim(cluster), timeout=20)
    cluster.create(
        "volumesnapshotclasses",
        {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
         "metadata": {"name": "snaps", "annotations": {
             "snapshot.storage.kubernetes.io/is-default-class": "true"}},
         "driver": driver.config.name, "deletionPolicy": "Delete"},
    )  # fmt: skip
    cluster.create(
        "volumesnapshots",
        {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
         "metadata": {"name": "snap", "namespace": "default"},
         "spec": {"source": {"persistentVolumeClaimName": "data"}}},
    )  # fmt: skip

    def ready() -> bool:
        snapshot = cluster.get("volumesnapshots", "default", "snap") or {}
        return bool((snapshot.get("status") or {}).get("readyToUse"))

    await until(ready, timeout=20)
    snapshot = cluster.get("volumesnapshots", "default", "snap")
    assert snapshot is not None
    assert snapshot["spec"]["volumeSnapshotClassName"] == "snaps"
    assert snapshot_controller.passes > 0
