"""Topology end to end: requisite and preferred reach the driver; its answer becomes nodeAffinity.

We test these aspects:
- Immediate binding: requisite is every segment of the registered nodes (CSINode keys, Node
  labels), preferred the same rotated; the PV's nodeAffinity is the driver's accessible topology;
- allowedTopologies narrow the requisite, and the volume lands inside them;
- WaitForFirstConsumer: the selected node's segment comes first in preferred; with
  `--strict-topology` it is the only segment, requisite and preferred alike;
- `--immediate-topology=false`: an Immediate claim without allowedTopologies sends none;
- a driver without VOLUME_ACCESSIBILITY_CONSTRAINTS gets no requirement and the PV no affinity;
- a selected node that does not exist: Normal Provisioning, then ProvisioningFailed (with
  topology Go's "failed to get selected CSINode" text) and selected-node removed (reschedule),
  with or without topology, and the driver is never asked.
"""

from __future__ import annotations

import dataclasses

import pytest

from kopf_csi import names
from kopf_csi.driver import Driver, DriverConfig
from kopf_csi.driver.volumes import VolumeRequest
from kopf_csi.settings import ProvisionerOptions
from kopf_csi.testing.emulator import Body, EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..conftest import NODE
from .conftest import (
    NAMESPACE,
    NODE_2,
    TOPOLOGY_KEY,
    make_claim,
    make_pod,
    make_storage_class,
    wait_for_bound,
    wait_for_change,
    wait_for_event,
)

pytestmark = pytest.mark.usefixtures("kcm")


def segment(node: str) -> dict[str, str]:
    return {TOPOLOGY_KEY: node}


def given_back(claim: Body) -> bool:
    """The claim went back to the scheduler: annotated for us, but no node selected."""
    annotations = claim["metadata"].get("annotations") or {}
    return names.ANN_STORAGE_PROVISIONER in annotations and (
        names.ANN_SELECTED_NODE not in annotations
    )


def affinity_nodes(pv: Body) -> list[list[str]]:
    """The PV's nodeAffinity as the values of our key, one list per term."""
    return [
        [value for expr in term["matchExpressions"] for value in expr["values"]]
        for term in pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    ]


async def test_immediate_claim_asks_for_every_segment_and_gets_the_drivers_answer(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    created: list[VolumeRequest],
) -> None:
    await make_storage_class(cluster, operator)
    claim = make_claim(cluster)
    pv = await wait_for_bound(cluster, claim)

    (request,) = created
    assert sorted(map(str, request.requisite)) == sorted(map(str, [segment(NODE), segment(NODE_2)]))
    assert sorted(map(str, request.preferred)) == sorted(map(str, request.requisite))
    (backend,) = driver.state.volumes.values()
    assert backend.node == request.preferred[0][TOPOLOGY_KEY]  # the driver took the first
    assert affinity_nodes(pv) == [[backend.node]]
    term = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]
    assert term == {
        "matchExpressions": [{"key": TOPOLOGY_KEY, "operator": "In", "values": [backend.node]}]
    }


async def test_allowed_topologies_narrow_the_requisite(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    created: list[VolumeRequest],
) -> None:
    await make_storage_class(cluster, operator, allowed_topologies=[{TOPOLOGY_KEY: [NODE_2]}])
    claim = make_claim(cluster)
    pv = await wait_for_bound(cluster, claim)

    (request,) = created
    assert request.requisite == [segment(NODE_2)]
    assert request.preferred == [segment(NODE_2)]
    assert affinity_nodes(pv) == [[NODE_2]]


async def test_wait_for_first_consumer_prefers_the_selected_node(
    cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
) -> None:
    await make_storage_class(cluster, operator, binding="WaitForFirstConsumer")
    claim = make_claim(cluster)
    make_pod(cluster, "app", "data", node=NODE)
    pv = await wait_for_bound(cluster, claim)

    (request,) = created
    assert request.preferred == [segment(NODE), segment(NODE_2)]  # rotated to the node
    assert sorted(map(str, request.requisite)) == sorted(map(str, request.preferred))
    assert affinity_nodes(pv) == [[NODE]]


class TestStrictTopology:
    @pytest.fixture
    def provisioner_options(self, provisioner_options: ProvisionerOptions) -> ProvisionerOptions:
        return dataclasses.replace(provisioner_options, strict_topology=True)

    async def test_only_the_selected_nodes_segment_is_sent(
        self, cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
    ) -> None:
        await make_storage_class(cluster, operator, binding="WaitForFirstConsumer")
        claim = make_claim(cluster)
        make_pod(cluster, "app", "data", node=NODE_2)
        pv = await wait_for_bound(cluster, claim)

        (request,) = created
        assert request.requisite == [segment(NODE_2)]
        assert request.preferred == [segment(NODE_2)]
        assert affinity_nodes(pv) == [[NODE_2]]


class TestWithoutImmediateTopology:
    @pytest.fixture
    def provisioner_options(self, provisioner_options: ProvisionerOptions) -> ProvisionerOptions:
        return dataclasses.replace(provisioner_options, immediate_topology=False)

    async def test_immediate_claim_sends_no_requirement(
        self, cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
    ) -> None:
        await make_storage_class(cluster, operator)
        claim = make_claim(cluster)
        pv = await wait_for_bound(cluster, claim)

        (request,) = created
        assert request.requisite == []
        assert request.preferred == []
        assert affinity_nodes(pv) == [[NODE]]  # the driver's own node, as it reports it

    async def test_allowed_topologies_are_still_sent(
        self, cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
    ) -> None:
        await make_storage_class(cluster, operator, allowed_topologies=[{TOPOLOGY_KEY: [NODE_2]}])
        claim = make_claim(cluster)
        pv = await wait_for_bound(cluster, claim)

        assert created[0].requisite == [segment(NODE_2)]
        assert affinity_nodes(pv) == [[NODE_2]]


class TestDriverWithoutTopology:
    @pytest.fixture
    def driver_config(self, driver_config: DriverConfig) -> DriverConfig:
        features = dataclasses.replace(driver_config.features, topology=False)
        return dataclasses.replace(driver_config, features=features)

    async def test_no_requirement_and_no_node_affinity(
        self, cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
    ) -> None:
        await make_storage_class(cluster, operator)
        claim = make_claim(cluster)
        pv = await wait_for_bound(cluster, claim)

        assert created[0].requisite == []
        assert created[0].preferred == []
        assert "nodeAffinity" not in pv["spec"]

    async def test_selected_node_that_does_not_exist_is_still_given_back(
        self, cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
    ) -> None:
        await make_storage_class(cluster, operator, binding="WaitForFirstConsumer")
        with cluster.subscribe("persistentvolumeclaims") as feed:
            claim = make_claim(cluster)
            make_pod(cluster, "app", "data", node="node-gone")
            await wait_for_event(
                cluster,
                claim,
                names.REASON_PROVISIONING_FAILED,
                message='node "node-gone" not found',
            )
            await wait_for_change(feed, given_back)
            cluster.delete("pods", NAMESPACE, "app")
        assert not created  # the Node is checked before the driver is asked


async def test_selected_node_that_does_not_exist_is_given_back(
    cluster: EmulatedCluster, operator: OperatorThread, created: list[VolumeRequest]
) -> None:
    await make_storage_class(cluster, operator, binding="WaitForFirstConsumer")
    with cluster.subscribe("persistentvolumeclaims") as feed, cluster.subscribe("events") as posted:
        claim = make_claim(cluster)
        make_pod(cluster, "app", "data", node="node-gone")
        failed = await wait_for_event(
            cluster,
            claim,
            names.REASON_PROVISIONING_FAILED,
            message="failed to get selected CSINode node-gone: "
            'csinode.storage.k8s.io "node-gone" not found',  # the Go text on a real server
        )
        assert failed["type"] == "Warning"
        reasons = (names.REASON_PROVISIONING, names.REASON_PROVISIONING_FAILED)
        order = [  # in the order they were posted (repeats are PATCHed, not created)
            (c.object["type"], c.object["reason"]) for c in await posted.batch()
            if c.type == "ADDED" and c.object["reason"] in reasons
            and c.object["involvedObject"]["uid"] == claim["metadata"]["uid"]
        ]  # fmt: skip
        assert order[:2] == [("Normal", "Provisioning"), ("Warning", "ProvisioningFailed")]

        def given_back(obj: Body) -> bool:
            annotations = obj["metadata"].get("annotations") or {}
            return names.ANN_STORAGE_PROVISIONER in annotations and (
                names.ANN_SELECTED_NODE not in annotations
            )

        await wait_for_change(feed, given_back)
        cluster.delete("pods", NAMESPACE, "app")  # stop the scheduler stand-in selecting it again
    assert not created  # never asked the driver
