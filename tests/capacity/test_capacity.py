"""Storage capacity tracking: pure decisions and the CSIStorageCapacity objects end to end.

We test these aspects:
- segments come from CSINode topology keys and Node labels, once each, only for our driver;
- only our WaitForFirstConsumer classes are published (Immediate ones with the switch);
- the objects carry the Go sidecar's labels, generateName, class, topology and BinarySI sizes;
- end to end: objects appear with the driver's GetCapacity answer, follow it as volumes are
  created, and go away with their StorageClass; nothing is published when the mode is off.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from kopf_csi import rbac
from kopf_csi.driver import Driver, DriverConfig, Limits
from kopf_csi.provisioning import capacity
from kopf_csi.settings import CapacitySettings, Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME, seed_node, until

KEY = "topology.hostpath.csi.kopf.dev/node"
MiB = 1024 * 1024


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def _csinode(
    name: str, driver: str = DRIVER_NAME, keys: tuple[str, ...] = (KEY,)
) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {"drivers": [{"name": driver, "nodeID": name, "topologyKeys": list(keys)}]},
    }


def _class(name: str, mode: str, provisioner: str = DRIVER_NAME, **params: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
        "parameters": params,
    }


def test_segments_are_distinct_and_only_ours() -> None:
    nodes = [_node("a", **{KEY: "a"}), _node("b", **{KEY: "b"}), _node("c", **{KEY: "a"})]
    csinodes = [_csinode("a"), _csinode("b"), _csinode("c"), _csinode("d"),
                _csinode("b", driver="other.csi")]  # fmt: skip
    found = capacity.segments(driver_name=DRIVER_NAME, csinodes=csinodes, nodes=nodes)
    assert found == [((KEY, "a"),), ((KEY, "b"),)]


def test_nodes_without_the_keys_have_no_segment() -> None:
    found = capacity.segments(
        driver_name=DRIVER_NAME, csinodes=[_csinode("a")], nodes=[_node("a", other="x")]
    )
    assert found == []


@pytest.mark.parametrize(
    ("immediate", "expected"),
    [pytest.param(False, ["wffc"], id="default -> only WaitForFirstConsumer classes"),
     pytest.param(True, ["imm", "wffc"], id="for immediate binding -> both")],
)  # fmt: skip
def test_wanted_classes(immediate: bool, expected: list[str]) -> None:
    classes = [
        _class("wffc", "WaitForFirstConsumer", **{"csi.storage.k8s.io/fstype": "ext4", "a": "1"}),
        _class("imm", "Immediate"),
        _class("foreign", "WaitForFirstConsumer", provisioner="other.csi"),
        _class("broken", "WaitForFirstConsumer", **{"csi.storage.k8s.io/unknown": "x"}),
    ]
    wants = capacity.wanted(
        driver_name=DRIVER_NAME,
        storage_classes=classes,
        segments=[((KEY, "a"),)],
        immediate_binding=immediate,
    )
    assert sorted(w.storage_class for w in wants) == expected
    wffc = next(w for w in wants if w.storage_class == "wffc")
    assert wffc.parameters == {"a": "1"}  # reserved keys are not the driver's business


def test_capacity_object_is_what_the_go_sidecar_writes() -> None:
    want = capacity.Want("wffc", ((KEY, "a"),), {})
    body = capacity.capacity_object(
        want, capacity=10 * 1024**3, maximum_volume_size=MiB, driver_name=DRIVER_NAME,
        namespace="kube-system",
    )  # fmt: skip
    assert body["metadata"] == {
        "generateName": "csisc-",
        "namespace": "kube-system",
        "labels": {
            "csi.storage.k8s.io/drivername": DRIVER_NAME,
            "csi.storage.k8s.io/managed-by": "external-provisioner",
        },
    }
    assert body["storageClassName"] == "wffc"
    assert body["nodeTopology"] == {"matchLabels": {KEY: "a"}}
    assert body["capacity"] == "10Gi"
    assert body["maximumVolumeSize"] == "1Mi"


def test_diff_creates_updates_and_deletes() -> None:
    keep = capacity.Want("wffc", ((KEY, "a"),), {})
    new = capacity.Want("wffc", ((KEY, "b"),), {})
    existing = [
        {"metadata": {"name": "csisc-1"}, "storageClassName": "wffc",
         "nodeTopology": {"matchLabels": {KEY: "a"}}},
        {"metadata": {"name": "csisc-2"}, "storageClassName": "gone",
         "nodeTopology": {"matchLabels": {KEY: "a"}}},
        {"metadata": {"name": "csisc-3"}, "storageClassName": "wffc",
         "nodeTopology": {"matchLabels": {KEY: "a"}}},
    ]  # fmt: skip
    create, update, obsolete = capacity.diff(existing, [keep, new])
    assert create == [new]
    assert update == {"csisc-1": keep}
    assert [o["metadata"]["name"] for o in obsolete] == ["csisc-2", "csisc-3"]


@pytest.fixture
def driver_config(driver_config: DriverConfig) -> DriverConfig:
    return dataclasses.replace(driver_config, limits=Limits(total_capacity=64 * MiB))


def _seed(cluster: EmulatedCluster) -> None:
    seed_node(cluster)
    cluster.create("storageclasses", _class("wffc", "WaitForFirstConsumer"))
    cluster.create("storageclasses", _class("imm", "Immediate"))


def _capacities(cluster: EmulatedCluster) -> list[dict[str, Any]]:
    return cluster.objects("csistoragecapacities")


async def test_capacity_objects_follow_the_driver(
    cluster: EmulatedCluster, driver: Driver, settings: Settings
) -> None:
    _seed(cluster)
    enabled = dataclasses.replace(
        settings, capacity=CapacitySettings(enabled=True, poll_interval=0.1)
    )
    operator = OperatorThread(settings=enabled)
    await operator.start()
    try:
        [obj] = await until(lambda: _capacities(cluster))
        assert obj["metadata"]["namespace"] == rbac.NAMESPACE  # the operator's (kit_rbac)
        assert obj["metadata"]["name"].startswith("csisc-")
        assert obj["metadata"]["labels"]["csi.storage.k8s.io/managed-by"] == "external-provisioner"
        assert obj["storageClassName"] == "wffc"
        assert obj["nodeTopology"] == {"matchLabels": {KEY: "node-1"}}
        assert obj["capacity"] == "64Mi"

        await _create_volume(driver)
        await until(lambda: [o for o in _capacities(cluster) if o["capacity"] == "48Mi"])

        cluster.delete("storageclasses", None, "wffc")
        await until(lambda: not _capacities(cluster))
    finally:
        await operator.stop()


async def _create_volume(driver: Driver) -> None:
    from kopf_csi.csi import CSIClient
    from kopf_csi.csi import messages as csi

    async with CSIClient(str(driver.socket_path)) as client:
        await client.create_volume(
            csi.CreateVolumeRequest(
                name="v1",
                capacity_range=csi.CapacityRange(required_bytes=16 * MiB),
                volume_capabilities=[
                    csi.VolumeCapability(
                        mount=csi.VolumeCapabilityMountVolume(),
                        access_mode=csi.VolumeCapabilityAccessMode(
                            mode=csi.VolumeCapabilityAccessModeMode.SINGLE_NODE_WRITER
                        ),
                    )
                ],
                accessibility_requirements=csi.TopologyRequirement(
                    requisite=[csi.Topology(segments={KEY: "node-1"})]
                ),
            )
        )


async def test_nothing_is_published_when_the_mode_is_off(
    cluster: EmulatedCluster, driver: Driver, settings: Settings
) -> None:
    _seed(cluster)
    operator = OperatorThread(settings=settings)
    await operator.start()
    try:
        await asyncio.sleep(0.3)  # a few poll intervals' worth, had it been on
        assert _capacities(cluster) == []
    finally:
        await operator.stop()
