"""A VolumeAttachment that is gone from the API leaves the cache too (found by the chaos suite).

The chaos suite lost the answer to the patch that removed our finalizer from a deleted VA: the
API deleted the VA, but it stayed in the operator's cache (the restarted operator had not seen
it through its watch yet), and the provisioner waited "for detach" of its PV forever.

We test these aspects:
- detaching a cached VA that the API no longer has: ControllerUnpublish, the finalizer patch
  answers 404, and the VA is dropped from the cache (DONE);
- a failed detach whose error cannot be saved because the VA is gone: dropped as well, and the
  retry finds nothing left to do.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest

from kopf_csi import kube
from kopf_csi.attaching.operations import Attacher
from kopf_csi.caches import Caches
from kopf_csi.csi import CSIClient, DriverInfo
from kopf_csi.csi.codes import Code
from kopf_csi.driver import Driver
from kopf_csi.queueing import DONE, RETRY
from kopf_csi.testing.emulator import EmulatedCluster

from ..conftest import DRIVER_NAME
from .conftest import FAST_ATTACHER
from .helpers import FINALIZER, attached_volume, attachment, seed_node

DRIVER_INFO = DriverInfo(
    name=DRIVER_NAME,
    vendor_version="test",
    manifest={},
    plugin_capabilities=frozenset({"CONTROLLER_SERVICE"}),
    volume_expansion=frozenset(),
    controller_capabilities=frozenset({"PUBLISH_UNPUBLISH_VOLUME"}),
)


@pytest.fixture
async def api(kubeconfig: pathlib.Path) -> AsyncIterator[kube.KubeClient]:
    async with await kube.KubeClient.connect(kubeconfig) as client:
        yield client


async def _ghost(cluster: EmulatedCluster, socket_path: pathlib.Path) -> Caches:
    """A cache holding a deleting VA (with our finalizer) that the API no longer has."""
    seed_node(cluster)
    _, pv = await attached_volume(cluster, socket_path, "pv-1")
    body = attachment("va-1", "pv-1")
    body["metadata"]["finalizers"] = [FINALIZER]
    cluster.create("volumeattachments", body)
    cluster.delete("volumeattachments", None, "va-1")
    ghost = cluster.get("volumeattachments", None, "va-1")
    cluster.patch("volumeattachments", None, "va-1", {"metadata": {"finalizers": None}})
    assert ghost is not None
    assert cluster.get("volumeattachments", None, "va-1") is None
    caches = Caches()
    caches.volumes.store(pv)
    csinode = cluster.get("csinodes", None, "node-1")
    assert csinode is not None
    caches.csinodes.store(csinode)
    caches.attachments.store(ghost)
    return caches


async def test_a_vanished_attachment_is_dropped_from_the_cache_on_detach(
    cluster: EmulatedCluster, driver: Driver, api: kube.KubeClient, socket_path: pathlib.Path
) -> None:
    caches = await _ghost(cluster, socket_path)
    async with CSIClient(str(socket_path)) as client:
        attacher = Attacher(
            csi_client=client, api=api, caches=caches, driver=DRIVER_INFO, options=FAST_ATTACHER
        )
        assert await attacher.sync_detach("va-1") == DONE
    assert "va-1" not in caches.attachments


async def test_a_failed_detach_of_a_vanished_attachment_drops_it_too(
    cluster: EmulatedCluster, driver: Driver, api: kube.KubeClient, socket_path: pathlib.Path
) -> None:
    caches = await _ghost(cluster, socket_path)
    driver.faults.fail("ControllerUnpublishVolume", Code.INTERNAL, times=1)
    async with CSIClient(str(socket_path)) as client:
        attacher = Attacher(
            csi_client=client, api=api, caches=caches, driver=DRIVER_INFO, options=FAST_ATTACHER
        )
        assert await attacher.sync_detach("va-1") == RETRY  # the error could not be saved: 404
        assert "va-1" not in caches.attachments
        assert await attacher.sync_detach("va-1") == DONE
