"""Resizing end to end: a grown claim becomes ControllerExpandVolume, with the reference's
status, conditions, annotations and events.

We test these aspects:
- a filesystem volume: the PV gets the new capacity and `pre-resize-capacity`, the claim
  `allocatedResources`, NodeResizePending, FileSystemResizePending (Resizing kept), the events
  Resizing and FileSystemResizeRequired; the claim's capacity waits for kubelet;
- when kubelet has caught the claim up, the PV's `pre-resize-capacity` goes;
- a block volume needs no node step: capacity, `node-expansion-not-required: "true"`, no
  resize status or conditions, VolumeResizeSuccessful;
- the driver gets the exact bytes, the volume handle and the volume's capability;
- the events come from `external-resizer <driver>`;
- a claim that is not ours (another driver) is never expanded.
"""

from __future__ import annotations

import pytest

from kopf_csi import names
from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from ..conftest import DRIVER_NAME, field_managers
from ..provisioner.conftest import assert_stays, wait_until
from .conftest import (
    NAMESPACE,
    bound_claim,
    claim_of,
    conditions_of,
    events_of,
    grow,
    messages,
    pv_of,
    resize_status,
    status_of,
)

MiB = 1024 * 1024


async def test_a_filesystem_volume_grows_and_waits_for_the_node(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread
) -> None:
    claim, pv = await bound_claim(cluster, operator)
    volume = pv["metadata"]["name"]
    grow(cluster, "data", "2Mi")
    await wait_until(lambda: resize_status(cluster) == names.RESIZE_NODE_PENDING)

    updated = pv_of(cluster, volume)
    assert updated["spec"]["capacity"]["storage"] == "2Mi"
    assert updated["metadata"]["annotations"][names.ANN_PRE_RESIZE_CAPACITY] == "1Mi"
    assert ("csi-resizer", None) in field_managers(updated)  # the PV's capacity
    status = status_of(cluster)
    assert status["allocatedResources"] == {"storage": "2Mi"}
    assert status["capacity"]["storage"] == "1Mi"  # kubelet's NodeExpandVolume updates it
    claim_now = cluster.get("persistentvolumeclaims", claim["metadata"]["namespace"], "data")
    assert claim_now is not None
    assert ("csi-resizer", "status") in field_managers(claim_now)
    conditions = conditions_of(cluster)
    assert set(conditions) == {names.CONDITION_RESIZING, names.CONDITION_FS_RESIZE_PENDING}
    pending = conditions[names.CONDITION_FS_RESIZE_PENDING]
    assert pending["status"] == "True"
    assert pending["message"] == (
        "Waiting for user to (re-)start a pod to finish file system resize of volume on node."
    )
    assert driver.state.volumes[pv["spec"]["csi"]["volumeHandle"]].size == 2 * MiB
    await wait_until(lambda: messages(cluster, claim, "FileSystemResizeRequired"))
    assert messages(cluster, claim, "Resizing") == [f"External resizer is resizing volume {volume}"]
    assert messages(cluster, claim, "FileSystemResizeRequired") == [
        "Require file system resize of volume on node"
    ]
    sources = {e["source"]["component"] for e in events_of(cluster, claim, "Resizing")}
    assert sources == {f"external-resizer {DRIVER_NAME}"}
    assert names.ANN_NODE_EXPANSION_NOT_REQUIRED not in (
        claim_of(cluster)["metadata"].get("annotations") or {}
    )

    # kubelet's part: NodeExpandVolume done, the claim's capacity and status caught up.
    cluster.patch(
        "persistentvolumeclaims",
        NAMESPACE,
        "data",
        {"status": {"capacity": {"storage": "2Mi"}, "conditions": [],
                    "allocatedResourceStatuses": None}},
        subresource="status",
    )  # fmt: skip
    await wait_until(
        lambda: (
            names.ANN_PRE_RESIZE_CAPACITY
            not in (pv_of(cluster, volume)["metadata"].get("annotations") or {})
        )
    )


async def test_a_block_volume_is_finished_by_the_controller(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread, calls: Calls
) -> None:
    claim, pv = await bound_claim(cluster, operator, volume_mode="Block")
    grow(cluster, "data", "3Mi")
    await wait_until(lambda: status_of(cluster)["capacity"]["storage"] == "3Mi")

    status = status_of(cluster)
    assert "allocatedResourceStatuses" not in status or not status["allocatedResourceStatuses"]
    assert status["allocatedResources"] == {"storage": "3Mi"}
    assert not conditions_of(cluster)
    annotations = claim_of(cluster)["metadata"]["annotations"]
    assert annotations[names.ANN_NODE_EXPANSION_NOT_REQUIRED] == "true"
    updated = pv_of(cluster, pv["metadata"]["name"])
    assert updated["spec"]["capacity"]["storage"] == "3Mi"
    assert names.ANN_PRE_RESIZE_CAPACITY not in (updated["metadata"].get("annotations") or {})
    await wait_until(lambda: messages(cluster, claim, "VolumeResizeSuccessful"))
    assert messages(cluster, claim, "VolumeResizeSuccessful") == ["Resize volume succeeded"]
    assert calls.count("ControllerExpandVolume") == 1
    assert driver.state.volumes[pv["spec"]["csi"]["volumeHandle"]].size == 3 * MiB


async def test_a_second_growth_clears_the_not_required_annotation_first(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread
) -> None:
    await bound_claim(cluster, operator, volume_mode="Block")
    grow(cluster, "data", "2Mi")
    await wait_until(lambda: status_of(cluster)["capacity"]["storage"] == "2Mi")
    grow(cluster, "data", "4Mi")
    await wait_until(lambda: status_of(cluster)["capacity"]["storage"] == "4Mi")
    annotations = claim_of(cluster)["metadata"]["annotations"]
    assert annotations[names.ANN_NODE_EXPANSION_NOT_REQUIRED] == "true"
    assert status_of(cluster)["allocatedResources"] == {"storage": "4Mi"}


async def test_a_volume_of_another_driver_is_left_alone(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    cluster.create(
        "persistentvolumes",
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "foreign"},
         "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteOnce"],
                  "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                  "claimRef": {"namespace": NAMESPACE, "name": "data"},
                  "csi": {"driver": "other.csi.example.com", "volumeHandle": "x"}}},
    )  # fmt: skip
    cluster.create(
        "persistentvolumeclaims",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "data", "namespace": NAMESPACE},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                  "volumeName": "foreign", "resources": {"requests": {"storage": "1Mi"}}}},
    )  # fmt: skip
    await wait_until(lambda: status_of(cluster).get("phase") == "Bound")
    grow(cluster, "data", "2Mi")
    await assert_stays(
        lambda: (
            not status_of(cluster).get("allocatedResources")
            and calls.count("ControllerExpandVolume") == 0
        ),
        duration=0.5,
    )


@pytest.mark.parametrize("driver_options", [{"features": {"expansion": False}}], indirect=True)
async def test_a_driver_that_cannot_expand_disables_the_resizer(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    assert operator.memo.resizer is None
    claim, _ = await bound_claim(cluster, operator)
    grow(cluster, "data", "2Mi")
    await assert_stays(
        lambda: (
            not status_of(cluster).get("allocatedResources")
            and not events_of(cluster, claim, "Resizing")
        ),
        duration=0.5,
    )
