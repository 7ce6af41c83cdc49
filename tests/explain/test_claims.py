"""`kopf-csi explain pvc/...` end to end: the operator, the reference driver and the KCM stand-in
running, explain run as a process; each case checks the first line, the evidence, the exit code
and the JSON form."""

from __future__ import annotations

import datetime
from typing import Any

from kopf_csi.csi import Code
from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME
from ..provisioner.conftest import make_claim, make_pod, make_storage_class
from .conftest import IDENTITY, LEASE_NAMESPACE, until_explained

CLAIM = "pvc/default/data"


def _has(lines: list[str], *parts: str) -> bool:
    return any(all(part in line for part in parts) for line in lines)


async def test_a_bound_claim_is_healthy(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    await make_storage_class(cluster, operator)
    make_claim(cluster)
    found = await until_explained(explain, CLAIM, "")
    assert found.text.code == 0
    assert found.text.first_line.startswith("OK: persistentvolumeclaim/default/data:")
    assert "the claim is Bound to pvc-" in found.text.first_line
    assert _has(found.text.evidence, "claim default/data: phase Bound")
    assert found.json["state"] == "healthy"
    assert found.json["next"] == []


async def test_no_storage_class(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    make_claim(cluster, storage_class="fast")
    found = await until_explained(explain, CLAIM, "storageclass-missing")
    assert found.text.code == 1
    assert found.text.first_line == (
        'BLOCKED: persistentvolumeclaim/default/data: StorageClass "fast" not found'
    )
    assert found.text.evidence == ["claim default/data: phase Pending"]
    assert 'create StorageClass "fast"' in found.json["next"][0]


async def test_a_class_whose_provisioner_no_operator_serves(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    await make_storage_class(cluster, operator, provisioner="other.example.com")
    make_claim(cluster)
    found = await until_explained(explain, CLAIM, "provisioner-unserved")
    assert found.json["summary"] == (
        "no operator with leader election serves other.example.com: no Lease other-example-com"
        " in any namespace; and nothing shows one running without it: no event from its"
        " provisioner in any namespace"
    )
    assert _has(found.text.evidence, "Lease other-example-com: none in any namespace")
    assert _has(found.text.evidence, "provisioner other.example.com: no event from it")
    assert any("without --leader-election" in step for step in found.json["next"])
    assert _has(found.text.evidence, "StorageClass sc: provisioner other.example.com")
    assert _has(found.text.evidence, "CSIDriver other.example.com: not registered")


async def test_a_lease_whose_holder_stopped_renewing(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    two_hours_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=2)
    stamp = two_hours_ago.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster.create(
        "leases",
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
         "metadata": {"name": "stale-example-com", "namespace": "kube-system"},
         "spec": {"holderIdentity": "gone-replica", "leaseDurationSeconds": 15,
                  "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 0}},
    )  # fmt: skip
    await make_storage_class(cluster, operator, provisioner="stale.example.com")
    make_claim(cluster)
    found = await until_explained(explain, CLAIM, "lease-stale")
    assert "the Lease is held by gone-replica, which stopped renewing it" in found.text.first_line
    assert _has(
        found.text.evidence, "Lease kube-system/stale-example-com: held by gone-replica",
        "renewed 2.0h ago", "expired",
    )  # fmt: skip


async def test_the_served_provisioner_shows_its_live_lease(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    """WaitForFirstConsumer without a pod: the operator serves the class (its Lease is live),
    and the claim waits for a consumer."""
    await make_storage_class(cluster, operator, binding="WaitForFirstConsumer")
    make_claim(cluster)
    found = await until_explained(explain, CLAIM, "no-consumer")
    assert "waiting for a first consumer: no pod uses this claim" in found.text.first_line
    lease = DRIVER_NAME.replace(".", "-")
    assert _has(
        found.text.evidence, f"Lease {LEASE_NAMESPACE}/{lease}: held by {IDENTITY}", "renewed"
    )
    assert found.text.code == 1


def _keep_the_selected_node(cluster: EmulatedCluster) -> None:
    """The claim's writes fail (500), the provisioner's reschedule among them: its selected
    node stays, and the claim is retried with the provisioner's backoff, not at once."""
    cluster.faults.add(
        500, verb="patch", resource="persistentvolumeclaims", name="data", times=None,
        message="injected: the claim cannot be written",
    )  # fmt: skip


async def test_a_selected_node_without_csinode(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    cluster.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bare"}})
    await make_storage_class(cluster, operator, binding="WaitForFirstConsumer")
    make_claim(cluster)
    # The scheduler puts the pod on "bare"; the provisioner gives the node back (reschedule),
    # but its write to the claim fails: the selected node stays for explain to see. (Given
    # back, a scheduler would select it again, after its back-off: a moment's window.)
    _keep_the_selected_node(cluster)
    make_pod(cluster, "app", "data", node="bare")
    found = await until_explained(explain, CLAIM, "csinode-missing")
    assert found.json["summary"] == (
        'the selected node bare has no CSINode: csinode.storage.k8s.io "bare" not found'
    )
    assert _has(found.text.evidence, "selected node: bare")


async def test_a_selected_node_whose_csinode_lacks_the_driver(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    cluster.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "other"}})
    cluster.create(
        "csinodes",
        {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "other"},
         "spec": {"drivers": []}},
    )  # fmt: skip
    await make_storage_class(cluster, operator, binding="WaitForFirstConsumer")
    make_claim(cluster)
    make_pod(cluster, "app", "data", node="other")
    found = await until_explained(explain, CLAIM, "csinode-without-driver")
    assert found.json["summary"] == f"CSINode other does not contain driver {DRIVER_NAME}"


async def test_a_missing_provisioner_secret(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    parameters = {
        "csi.storage.k8s.io/provisioner-secret-name": "creds",
        "csi.storage.k8s.io/provisioner-secret-namespace": "storage",
    }
    await make_storage_class(cluster, operator, parameters=parameters)
    make_claim(cluster)
    found = await until_explained(explain, CLAIM, "secret-missing")
    assert found.json["summary"] == (
        'the provisioner secret storage/creds does not exist: secrets "creds" not found'
    )
    assert found.json["next"] == ["create the secret creds in namespace storage"]


async def test_a_missing_data_source(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    await make_storage_class(cluster, operator)
    make_claim(cluster, data_source={"kind": "PersistentVolumeClaim", "name": "gone"})
    found = await until_explained(explain, CLAIM, "source-missing")
    assert found.json["summary"] == (
        "the data source PersistentVolumeClaim default/gone does not exist"
    )


async def test_a_data_source_not_ready(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    await make_storage_class(cluster, operator)
    await make_storage_class(cluster, operator, "later", binding="WaitForFirstConsumer")
    make_claim(cluster, "origin", storage_class="later")
    make_claim(cluster, data_source={"kind": "PersistentVolumeClaim", "name": "origin"})
    found = await until_explained(explain, CLAIM, "source-not-ready")
    assert (
        "the data source PersistentVolumeClaim default/origin is not Bound"
        in (found.json["summary"])
    )
    assert found.json["next"] == ["explain pvc/default/origin"]


async def test_capacity_exhausted_on_the_topology(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, driver: Driver, explain: Any
) -> None:
    driver.faults.fail("CreateVolume", Code.RESOURCE_EXHAUSTED, message="no room on node-1")
    cluster.create(
        "csidrivers",
        {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": DRIVER_NAME},
         "spec": {"storageCapacity": True, "attachRequired": True}},
    )  # fmt: skip
    cluster.create(
        "csistoragecapacities",
        {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
         "metadata": {"name": "node-1-sc", "namespace": "default"}, "storageClassName": "sc",
         "nodeTopology": {"matchLabels": {"topology.hostpath.csi.kopf.dev/node": "node-1"}},
         "capacity": "1Mi"},
    )  # fmt: skip
    await make_storage_class(cluster, operator, binding="WaitForFirstConsumer")
    make_claim(cluster, size="1Gi")
    _keep_the_selected_node(cluster)  # the provisioner's reschedule fails: node-1 stays
    make_pod(cluster, "app", "data")
    found = await until_explained(explain, CLAIM, "capacity-exhausted")
    assert found.json["summary"] == (
        "not enough capacity for class sc on node node-1: 1Mi, 1Gi requested"
    )
    assert _has(found.text.evidence, "CSINode node-1: driver", "registered")


async def test_createvolume_failing_with_a_final_code(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, driver: Driver, explain: Any
) -> None:
    driver.faults.fail("CreateVolume", Code.INTERNAL, message="the pool is read-only")
    await make_storage_class(cluster, operator)
    make_claim(cluster)
    found = await until_explained(explain, CLAIM, "createvolume-failed")
    assert found.json["summary"].startswith("the driver refused CreateVolume (Internal): ")
    assert "the pool is read-only" in found.json["summary"]
    assert _has(found.text.evidence, "event ProvisioningFailed", "the pool is read-only")
    assert "retrying alone will not help" in found.json["next"][0]


async def test_createvolume_failing_with_a_retried_code(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, driver: Driver, explain: Any
) -> None:
    driver.faults.fail("CreateVolume", Code.UNAVAILABLE, message="the back end is restarting")
    await make_storage_class(cluster, operator)
    make_claim(cluster)
    found = await until_explained(explain, CLAIM, "createvolume-transient")
    assert found.json["summary"] == (
        "CreateVolume did not finish (Unavailable): the driver may still be working;"
        " retried with backoff"
    )
    assert _has(found.text.evidence, "event ProvisioningFailed", "the back end is restarting")


async def test_createvolume_in_flight_longer_than_the_timeout(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, driver: Driver, explain: Any
) -> None:
    driver.faults.hang("CreateVolume")  # past the 1 s --timeout, every time
    await make_storage_class(cluster, operator)
    make_claim(cluster)
    found = await until_explained(explain, CLAIM, "createvolume-transient")
    assert "(DeadlineExceeded)" in found.json["summary"]
    assert "--timeout" in found.json["next"][0]


async def test_an_attach_error(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, driver: Driver, explain: Any
) -> None:
    driver.faults.fail("ControllerPublishVolume", Code.INTERNAL, message="no free LUN")
    await make_storage_class(cluster, operator)
    make_claim(cluster)
    make_pod(cluster, "app", "data")
    found = await until_explained(explain, CLAIM, "attach-failed")
    assert found.json["summary"].startswith("attaching to node node-1 fails: ")
    assert "no free LUN" in found.json["summary"]
    assert _has(found.text.evidence, "VolumeAttachment csi-", "node node-1, attached False")
    va = found.json["next"][0].split()[1]  # "explain va/<name>; ..."
    attachment = await until_explained(explain, va.rstrip(";"), "attach-failed")
    assert "no free LUN" in attachment.json["summary"]
