"""Node deployment (`--node-deployment`): one provisioner per node, each for its own node.

We test these aspects:
- the pure decision: another node's claim is not ours; a WaitForFirstConsumer claim without a
  node is the scheduler's; an Immediate claim without a node is competed for (unless the
  switch is off); everything is ours when the mode is off;
- the competing delay grows with attempts, between the base and the max delay;
- the claim patch carries the resourceVersion, so that a second writer gets a conflict;
- end to end: claims selected for another node are left alone, ours are provisioned, an
  Immediate claim is claimed for our node (selected-node set) and then provisioned, and one
  too big for our node's capacity is not claimed;
- the settings: NODE_DEPLOYMENT without NODE_NAME is a clear settings error.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from kopf_csi import flags
from kopf_csi.driver import Driver, DriverConfig, Limits
from kopf_csi.provisioning.options import ProvisionerOptions
from kopf_csi.provisioning.ownership import (
    Ownership,
    claim_delay,
    ownership,
    selected_node_patch,
)
from kopf_csi.settings import Settings, SettingsError
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME, seed_node, until

SELECTED = "volume.kubernetes.io/selected-node"
KEY = "topology.hostpath.csi.kopf.dev/node"
OPTIONS = ProvisionerOptions(node_deployment=True, node_name="node-1")


def _claim(name: str, *, node: str | None = None, sc: str = "wffc") -> dict[str, Any]:
    annotations = {SELECTED: node} if node else {}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations,
                     "resourceVersion": "7"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                 "resources": {"requests": {"storage": "1Mi"}}},
    }  # fmt: skip


WFFC = {"volumeBindingMode": "WaitForFirstConsumer"}
IMMEDIATE = {"volumeBindingMode": "Immediate"}


@pytest.mark.parametrize(
    ("claim", "storage_class", "options", "expected"),
    [
        pytest.param(_claim("a", node="node-1"), WFFC, OPTIONS, Ownership.OURS,
                     id="selected for our node -> ours"),
        pytest.param(_claim("a", node="node-2"), WFFC, OPTIONS, Ownership.NOT_OURS,
                     id="selected for another node -> not ours"),
        pytest.param(_claim("a"), WFFC, OPTIONS, Ownership.NOT_OURS,
                     id="wffc without a node -> the scheduler's"),
        pytest.param(_claim("a", sc="imm"), IMMEDIATE, OPTIONS, Ownership.COMPETE,
                     id="immediate without a node -> compete"),
        pytest.param(_claim("a", sc="imm"), IMMEDIATE,
                     dataclasses.replace(OPTIONS, node_deployment_immediate_binding=False),
                     Ownership.NOT_OURS, id="immediate binding off -> not ours"),
        pytest.param(_claim("a", node="node-2"), WFFC, ProvisionerOptions(), Ownership.OURS,
                     id="mode off -> ours"),
    ],
)  # fmt: skip
def test_ownership(
    claim: dict[str, Any], storage_class: dict[str, Any], options: ProvisionerOptions,
    expected: Ownership,
) -> None:  # fmt: skip
    assert ownership(claim, storage_class, options=options) is expected


def test_the_delay_grows_within_base_and_max() -> None:
    options = dataclasses.replace(
        OPTIONS, node_deployment_base_delay=20, node_deployment_max_delay=60
    )
    bounds = [claim_delay(n, options=options, uniform=lambda lo, hi: (lo, hi)) for n in range(4)]  # type: ignore[arg-type, return-value]
    assert bounds == [(20, 20), (20, 40), (20, 60), (20, 60)]


def test_the_claim_patch_is_guarded_by_the_resource_version() -> None:
    patch = selected_node_patch(_claim("a"), node_name="node-1")
    assert patch == {"metadata": {"resourceVersion": "7", "annotations": {SELECTED: "node-1"}}}


def test_node_deployment_needs_a_node_name() -> None:
    with pytest.raises(SettingsError, match="NODE_NAME"):
        flags.from_env({"NODE_DEPLOYMENT": "true"})
    settings = flags.from_env({"NODE_DEPLOYMENT": "true", "NODE_NAME": "node-1"})
    assert settings.provisioner.node_deployment
    assert settings.provisioner.node_name == "node-1"


def _seed(cluster: EmulatedCluster) -> None:
    for node in ("node-1", "node-2"):
        seed_node(cluster, node)
    for name, mode in (("wffc", "WaitForFirstConsumer"), ("imm", "Immediate")):
        cluster.create(
            "storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": name},
                "provisioner": DRIVER_NAME,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": mode,
            },
        )


def _phase(cluster: EmulatedCluster, name: str) -> str | None:
    claim = cluster.get("persistentvolumeclaims", "default", name) or {}
    return claim.get("status", {}).get("phase")


async def test_only_our_nodes_claims_are_provisioned(
    cluster: EmulatedCluster, kcm: ControllerManager, driver: Driver, settings: Settings
) -> None:
    _seed(cluster)
    options = dataclasses.replace(
        OPTIONS, node_deployment_base_delay=0.05, node_deployment_max_delay=0.1
    )
    operator = OperatorThread(settings=dataclasses.replace(settings, provisioner=options))
    await operator.start()
    try:
        for claim in (_claim("theirs", node="node-2"), _claim("ours", node="node-1"),
                      _claim("immediate", sc="imm")):  # fmt: skip
            del claim["metadata"]["resourceVersion"]
            cluster.create("persistentvolumeclaims", claim, namespace="default")
        await until(lambda: _phase(cluster, "ours") == "Bound")
        await until(lambda: _phase(cluster, "immediate") == "Bound")
        immediate = cluster.get("persistentvolumeclaims", "default", "immediate")
        assert immediate is not None
        assert immediate["metadata"]["annotations"][SELECTED] == "node-1"
        assert _phase(cluster, "theirs") == "Pending"
        assert len(driver.state.volumes) == 2
    finally:
        await operator.stop()


class TestNoRoomOnOurNode:
    """An Immediate claim that does not fit our node's capacity is not claimed for it."""

    @pytest.fixture
    def driver_config(self, driver_config: DriverConfig) -> DriverConfig:
        return dataclasses.replace(driver_config, limits=Limits(total_capacity=512 * 1024))

    async def test_a_claim_too_big_for_our_node_is_left_alone(
        self, cluster: EmulatedCluster, kcm: ControllerManager, driver: Driver, settings: Settings
    ) -> None:
        _seed(cluster)
        options = dataclasses.replace(
            OPTIONS, node_deployment_base_delay=0.01, node_deployment_max_delay=0.02
        )
        operator = OperatorThread(settings=dataclasses.replace(settings, provisioner=options))
        await operator.start()
        try:
            claim = _claim("big", sc="imm")  # 1Mi, against 512Ki of room
            del claim["metadata"]["resourceVersion"]
            with cluster.subscribe("persistentvolumeclaims") as feed:
                cluster.create("persistentvolumeclaims", claim, namespace="default")
                await asyncio.sleep(0.5)  # several attempts' worth, with 10-20 ms delays
                versions = [change.object for change in await feed.batch()]
            # Never claimed, not even for a moment (a claim that then failed would be undone
            # by the reschedule, so the final state alone would not tell).
            assert all(SELECTED not in v["metadata"].get("annotations", {}) for v in versions)
            big = cluster.get("persistentvolumeclaims", "default", "big")
            assert big is not None
            assert SELECTED not in big["metadata"]["annotations"]
            assert _phase(cluster, "big") == "Pending"
            assert not driver.state.volumes
        finally:
            await operator.stop()
