"""Deleting volumes end to end: reclaim policies, attachments, the PV finalizer, failures.

We test these aspects:
- Delete: a released PV gets DeleteVolume, then the PV is deleted and our finalizer removed;
- Retain: the released PV and its backend volume stay, and the PV loses our finalizer;
- the finalizer lifecycle: on a new PV; removed when the policy becomes Retain; added again
  when it is Delete and Bound; added to a Bound PV of ours that lacks it;
- a VolumeAttachment still naming the PV blocks DeleteVolume, with a Normal VolumeDelete event
  (not the Go sidecar's Warning, upstream #1574) and the
  reference's message, until it is gone (only for drivers with PUBLISH_UNPUBLISH_VOLUME),
  and then at once, not at the volume's next retry;
- a failed DeleteVolume posts VolumeFailedDelete with the gRPC text and is retried;
- after a claim's whole life, the event recorders keep nothing of the claim or its PV.
"""

from __future__ import annotations

import dataclasses

import pytest

from kopf_csi import events, names
from kopf_csi.csi import Code
from kopf_csi.driver import Driver, DriverConfig
from kopf_csi.provisioning.options import ProvisionerOptions
from kopf_csi.testing.emulator import Body, EmulatedCluster
from kopf_csi.testing.kcm import FINALIZER_PV_PROTECTION as PV_PROTECTION
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from ..conftest import DRIVER_NAME, NODE
from .conftest import (
    NAMESPACE,
    RETRY_MAX,
    assert_stays,
    changes_until_deleted,
    events_for,
    make_claim,
    make_storage_class,
    wait_for_bound,
    wait_for_event,
    wait_for_gone,
    wait_for_phase,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("kcm")

FAILED_DELETE = names.REASON_VOLUME_FAILED_DELETE


def finalizers(cluster: EmulatedCluster, name: str) -> list[str]:
    """The PV's finalizers but pv-protection (every PV has it, from the admission plugin)."""
    pv = cluster.get("persistentvolumes", None, name)
    assert pv is not None
    return [f for f in pv["metadata"].get("finalizers") or () if f != PV_PROTECTION]


def set_policy(cluster: EmulatedCluster, name: str, policy: str) -> None:
    cluster.patch(
        "persistentvolumes", None, name, {"spec": {"persistentVolumeReclaimPolicy": policy}}
    )


def make_attachment(cluster: EmulatedCluster, pv_name: str, node: str = NODE) -> Body:
    return cluster.create(
        "volumeattachments",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "VolumeAttachment",
            "metadata": {"name": "va-1"},
            "spec": {"attacher": DRIVER_NAME, "nodeName": node,
                     "source": {"persistentVolumeName": pv_name}},
        },
    )  # fmt: skip


async def released_while_attached(cluster: EmulatedCluster, operator: OperatorThread) -> Body:
    """A bound volume with a VolumeAttachment (cached), whose claim is then deleted."""
    pv = await bound_volume(cluster, operator)
    make_attachment(cluster, pv["metadata"]["name"])
    await wait_until(lambda: "va-1" in operator.memo.caches.attachments, what="VA cached")
    cluster.delete("persistentvolumeclaims", NAMESPACE, "data")
    return pv


async def bound_volume(
    cluster: EmulatedCluster, operator: OperatorThread, *, reclaim: str = "Delete"
) -> Body:
    await make_storage_class(cluster, operator, reclaim=reclaim)
    return await wait_for_bound(cluster, make_claim(cluster))


async def test_delete_policy_deletes_the_backend_volume_then_the_pv(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver
) -> None:
    pv = await bound_volume(cluster, operator)
    name = pv["metadata"]["name"]
    assert finalizers(cluster, name) == [names.FINALIZER_PV]
    assert len(driver.state.volumes) == 1

    with cluster.subscribe("persistentvolumes") as feed:
        cluster.delete("persistentvolumeclaims", NAMESPACE, "data")
        changes = await changes_until_deleted(feed)

    assert not driver.state.volumes
    phases = [(c.object.get("status") or {}).get("phase") for c in changes]
    assert "Released" in phases
    last = changes[-1].object["metadata"]
    assert last.get("deletionTimestamp")  # deleted, then our finalizer removed: gone
    assert not events_for(cluster, pv, FAILED_DELETE)


async def test_nothing_of_a_claim_is_remembered_after_its_whole_life(
    cluster: EmulatedCluster, operator: OperatorThread
) -> None:
    """The recorder's aggregation entries and newest event of the claim (Provisioning,
    ProvisioningSucceeded) go with its DELETED event, and the PV's with the PV's: under a
    steady churn they were the state that kept growing (docs/benchmarks.md, "RSS over 10
    minutes")."""
    pv = await bound_volume(cluster, operator)
    claim = cluster.get("persistentvolumeclaims", NAMESPACE, "data")
    assert claim is not None
    recorder: events.Recorder = operator.memo.recorder
    await wait_until(lambda: recorder.remembered >= 2, what="the claim's events posted")
    assert events.last_event(claim["metadata"]["uid"]) is not None

    cluster.delete("persistentvolumeclaims", NAMESPACE, "data")
    await wait_for_gone(cluster, "persistentvolumes", pv["metadata"]["name"])

    await wait_until(lambda: recorder.remembered == 0, what="the recorder forgetting")
    assert events.last_event(claim["metadata"]["uid"]) is None
    assert events.last_event(pv["metadata"]["uid"]) is None


async def test_retain_policy_never_deletes(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver, calls: Calls
) -> None:
    pv = await bound_volume(cluster, operator, reclaim="Retain")
    name = pv["metadata"]["name"]
    await wait_until(lambda: not finalizers(cluster, name), what="our finalizer removed")

    cluster.delete("persistentvolumeclaims", NAMESPACE, "data")
    await wait_for_phase(cluster, "persistentvolumes", name, "Released")
    await assert_stays(
        lambda: (
            calls.count("DeleteVolume") == 0
            and len(driver.state.volumes) == 1
            and cluster.get("persistentvolumes", None, name) is not None
        ),
        duration=2 * RETRY_MAX,
        what="a retained volume stays, on the driver and in the API",
    )


async def test_finalizer_follows_the_reclaim_policy(
    cluster: EmulatedCluster, operator: OperatorThread
) -> None:
    pv = await bound_volume(cluster, operator)
    name = pv["metadata"]["name"]
    assert finalizers(cluster, name) == [names.FINALIZER_PV]

    set_policy(cluster, name, "Retain")
    await wait_until(lambda: not finalizers(cluster, name), what="finalizer removed on Retain")
    set_policy(cluster, name, "Delete")
    await wait_until(
        lambda: finalizers(cluster, name) == [names.FINALIZER_PV], what="finalizer added again"
    )


async def test_finalizer_is_added_to_a_bound_pv_of_ours_that_lacks_it(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver
) -> None:
    # A PV from before the finalizer existed (or whose finalizer someone removed).
    pv = await bound_volume(cluster, operator)
    name = pv["metadata"]["name"]
    cluster.patch("persistentvolumes", None, name, {"metadata": {"finalizers": None}})
    await wait_until(
        lambda: finalizers(cluster, name) == [names.FINALIZER_PV], what="finalizer restored"
    )

    cluster.delete("persistentvolumeclaims", NAMESPACE, "data")
    await wait_for_gone(cluster, "persistentvolumes", name)
    assert not driver.state.volumes


async def test_attachment_blocks_delete_volume_until_it_is_gone(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver, calls: Calls
) -> None:
    pv = await released_while_attached(cluster, operator)
    name = pv["metadata"]["name"]

    message = f"persistentvolume {name} is still attached to node {NODE}"
    await wait_for_event(cluster, pv, names.REASON_VOLUME_DELETE, message=message)
    assert message == names.MESSAGE_STILL_ATTACHED.format(volume=name, node=NODE)
    await wait_until(lambda: events_for(cluster, pv, names.REASON_VOLUME_DELETE)[0]["count"] >= 2)
    [waiting] = events_for(cluster, pv, names.REASON_VOLUME_DELETE)
    assert waiting["type"] == "Normal"
    assert not events_for(cluster, pv, FAILED_DELETE)  # a wait is not a failure
    assert calls.count("DeleteVolume") == 0
    assert len(driver.state.volumes) == 1
    assert cluster.get("persistentvolumes", None, name) is not None

    cluster.delete("volumeattachments", None, "va-1")
    await wait_for_gone(cluster, "persistentvolumes", name)
    assert not driver.state.volumes


class TestSlowRetries:
    """A released volume that waited for its detach is deleted as soon as its VolumeAttachment
    is gone, not at its next retry (external-provisioner waits for the retry: up to 5 min)."""

    @pytest.fixture
    def provisioner_options(self) -> ProvisionerOptions:
        return ProvisionerOptions(retry_interval_start=60.0, retry_interval_max=60.0)

    async def test_the_volume_goes_once_its_attachment_does(
        self, cluster: EmulatedCluster, operator: OperatorThread, driver: Driver
    ) -> None:
        pv = await released_while_attached(cluster, operator)
        name = pv["metadata"]["name"]
        await wait_for_event(cluster, pv, names.REASON_VOLUME_DELETE)  # waits: 60 s to retry
        cluster.delete("volumeattachments", None, "va-1")
        await wait_for_gone(cluster, "persistentvolumes", name)
        assert not driver.state.volumes


class TestDriverWithoutAttach:
    @pytest.fixture
    def driver_config(self, driver_config: DriverConfig) -> DriverConfig:
        features = dataclasses.replace(driver_config.features, attach=False)
        return dataclasses.replace(driver_config, features=features)

    async def test_attachments_do_not_block_deletion(
        self, cluster: EmulatedCluster, operator: OperatorThread, driver: Driver
    ) -> None:
        pv = await released_while_attached(cluster, operator)
        name = pv["metadata"]["name"]

        await wait_for_gone(cluster, "persistentvolumes", name)
        assert not driver.state.volumes
        assert not events_for(cluster, pv, FAILED_DELETE)


@pytest.mark.parametrize(
    "code",
    [Code.INTERNAL, Code.DEADLINE_EXCEEDED, Code.FAILED_PRECONDITION],
    ids=lambda code: code.name,
)
async def test_failed_delete_volume_posts_an_event_and_is_retried(
    cluster: EmulatedCluster, operator: OperatorThread, driver: Driver, calls: Calls, code: Code
) -> None:
    pv = await bound_volume(cluster, operator)
    name = pv["metadata"]["name"]
    driver.faults.fail("DeleteVolume", code, times=2)
    cluster.delete("persistentvolumeclaims", NAMESPACE, "data")

    await wait_for_gone(cluster, "persistentvolumes", name)
    assert calls.count("DeleteVolume") == 3
    assert not driver.state.volumes
    (event,) = events_for(cluster, pv, FAILED_DELETE)
    assert event["type"] == "Warning"
    assert event["count"] == 2
    assert event["message"].startswith(f"rpc error: code = {code.title} desc = ")
    if code is not Code.DEADLINE_EXCEEDED:
        assert event["message"] == f"rpc error: code = {code.title} desc = injected fault"
