"""A VolumeAttachment that goes while its attach is under way, end to end: kopf running the
handler modules, the emulated API over HTTP, the reference driver over its unix socket.

Under churn a pod is often deleted while its volume is being attached. Whatever the moment,
nothing may stay published on the driver, and no PV may stay "still attached to node". We
test these aspects:
- a pod deleted while kube-controller-manager's POST of its VolumeAttachment is on its way
  (the churn benchmark's stuck PVs): the VolumeAttachment lands, is attached and detached, and
  the claim's PV is deleted, with nothing left on the driver;
- a VolumeAttachment deleted while its ControllerPublish runs (our finalizer on it): the
  publish ends, then ControllerUnpublish, then the finalizer goes and the VA with it;
- a VolumeAttachment deleted before it has our finalizer, while its attach is under way (the
  PV's finalizer being written): it is gone at once, its finalizer cannot be added, and
  ControllerPublish is never called.
"""

from __future__ import annotations

import pathlib

import pytest

from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.latency import Latency, LatencyModel
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.pytest_plugin import seed_node as seed_cluster_node
from kopf_csi.testing.spies import Calls

from ..provisioner.conftest import make_claim, make_pod, make_storage_class, wait_until
from .helpers import FINALIZER, attached_volume, attachment, cached, seed_node, va

VAS = "volumeattachments"


def idle(operator: OperatorThread) -> bool:
    """Nothing queued, running or waiting for a retry in the attach and detach queues."""
    queues = (operator.memo.attach_queue, operator.memo.detach_queue)
    return not any(q.depth or q.in_flight or q.pending_delayed for q in queues)


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return (
        "kopf_csi_handlers.lifecycle",
        "kopf_csi_handlers.caches",
        "kopf_csi_handlers.provisioner",
        "kopf_csi_handlers.attacher",
    )


async def test_a_pod_deleted_while_its_attachment_is_posted_leaves_nothing_behind(
    cluster: EmulatedCluster, driver: Driver, operator: OperatorThread, calls: Calls
) -> None:
    # KCM's workers with a latency model: its POST of the VolumeAttachment takes 0.5 s.
    cluster.latency = Latency(LatencyModel(means={f"POST {VAS}": 0.5}))
    seed_cluster_node(cluster)
    await make_storage_class(cluster, operator)
    async with ControllerManager(cluster) as kcm:
        assert kcm.timed
        make_claim(cluster, "data")
        make_pod(cluster, "app", "data")
        await wait_until(
            lambda: any(name.startswith("attach-") for name in kcm.operations),
            timeout=30,
            what="the VolumeAttachment's POST under way",
        )
        cluster.delete("pods", "default", "app")
        cluster.delete("persistentvolumeclaims", "default", "data")
        await wait_until(
            lambda: cluster.writes[("kube-controller-manager", "create", VAS)],
            what="the POST landed",
        )
        await wait_until(
            lambda: not cluster.objects("persistentvolumes") and not cluster.objects(VAS),
            timeout=30,
            what="the attachment and the PV gone",
        )
        await kcm.settled()
    assert not driver.state.volumes
    assert calls.count("ControllerPublishVolume") == calls.count("ControllerUnpublishVolume")


async def test_an_attachment_deleted_during_its_controller_publish_is_unpublished(
    cluster: EmulatedCluster,
    driver: Driver,
    operator: OperatorThread,
    calls: Calls,
    socket_path: pathlib.Path,
) -> None:
    seed_node(cluster)
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    driver.faults.delay("ControllerPublishVolume", seconds=1.0, times=1)
    cluster.create(VAS, attachment("va-1", "pv-1"))
    await wait_until(lambda: calls.count("ControllerPublishVolume"), what="the publish under way")
    assert va(cluster, "va-1")["metadata"]["finalizers"] == [FINALIZER]  # written before it
    cluster.delete(VAS, None, "va-1")
    assert va(cluster, "va-1")["metadata"]["deletionTimestamp"]  # held by our finalizer

    await wait_until(lambda: not va(cluster, "va-1"), timeout=10, what="the VA gone")
    await wait_until(lambda: idle(operator), timeout=10, what="the attach and detach over")
    assert not driver.state.volumes[handle].attachments  # unpublished after the publish
    assert calls.count("ControllerPublishVolume") == 1
    assert calls.count("ControllerUnpublishVolume") == 1
    assert operator.memo.caches.attachments.get("va-1") is None


async def test_an_attachment_deleted_before_our_finalizer_is_never_published(
    cluster: EmulatedCluster,
    driver: Driver,
    operator: OperatorThread,
    calls: Calls,
    socket_path: pathlib.Path,
) -> None:
    seed_node(cluster)
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    await cached(operator, "volumes", "pv-1")
    # The attach writes the PV's finalizer first; that PATCH takes 1 s.
    cluster.latency = Latency(LatencyModel(means={"PATCH persistentvolumes": 1.0}))
    cluster.create(VAS, attachment("va-1", "pv-1"))
    await wait_until(
        lambda: cluster.requests.count(verb="patch", resource="persistentvolumes"),
        what="the PV finalizer's PATCH under way",
    )
    cluster.delete(VAS, None, "va-1")  # no finalizer yet: gone at once
    assert not va(cluster, "va-1")

    # The attach goes on to the VA's finalizer, which the server refuses (not found), and
    # saves its error (not found either): no publish, and no retry of a VA that is gone.
    await wait_until(
        lambda: cluster.requests.count(verb="patch", resource=VAS) and idle(operator),
        what="the attach over",
    )
    assert operator.memo.caches.attachments.get("va-1") is None
    assert calls.count("ControllerPublishVolume") == 0
    assert not driver.state.volumes[handle].attachments
