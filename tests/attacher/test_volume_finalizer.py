"""Our PV finalizer: held while a VA needs the PV, removed once none does, never racing.

We test these aspects:
- end to end: a deleted PV keeps our finalizer while its VA exists; once the VA is detached
  and gone, our finalizer goes and the other finalizers stay;
- against the emulated API with a stale cache (external-provisioner #1217: another controller
  removed its finalizer after our read): the removal fails its `test`, the other controller's
  finalizer is not written back, and one fresh read and patch follow at once.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kopf_csi import kube
from kopf_csi.attaching.operations import Attacher
from kopf_csi.caches import Caches
from kopf_csi.csi import CSIClient, DriverInfo
from kopf_csi.driver import Driver
from kopf_csi.queueing import DONE, RETRY
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME
from .conftest import FAST_ATTACHER
from .helpers import FINALIZER, attached_volume, attachment, seed_node, status, until, va, volume

PROVISIONER_FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"
PROTECTION = "kubernetes.io/pv-protection"


def _finalizers(cluster: EmulatedCluster, name: str) -> list[str] | None:
    pv = cluster.get("persistentvolumes", None, name)
    return None if pv is None else list(pv["metadata"].get("finalizers") or [])


def _deleted_volume(cluster: EmulatedCluster, *finalizers: str) -> Caches:
    """PV `pv-1` with `finalizers`, deleted (so waiting for them), read into a fresh cache."""
    body = volume("pv-1", "vol-1")
    body["metadata"]["finalizers"] = list(finalizers)
    cluster.create("persistentvolumes", body)
    cluster.delete("persistentvolumes", None, "pv-1")
    read = cluster.get("persistentvolumes", None, "pv-1")
    assert read is not None
    caches = Caches()
    caches.volumes.store(read)
    return caches


async def test_a_deleted_volume_keeps_our_finalizer_until_its_attachment_is_gone(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    seed_node(cluster)
    await attached_volume(cluster, socket_path, "pv-1")
    cluster.create("volumeattachments", attachment("va-1", "pv-1"))
    await until(lambda: status(cluster, "va-1").get("attached"))
    cluster.delete("persistentvolumes", None, "pv-1")  # pv-protection is the admission's
    await asyncio.sleep(0.2)  # the PV worker has seen the deletion
    assert _finalizers(cluster, "pv-1") == [PROTECTION, FINALIZER]  # the VA still needs it

    cluster.delete("volumeattachments", None, "va-1")
    await until(lambda: not va(cluster, "va-1"))
    await until(lambda: _finalizers(cluster, "pv-1") == [PROTECTION])


@pytest.fixture
async def api(kubeconfig: pathlib.Path) -> AsyncIterator[kube.KubeClient]:
    async with await kube.KubeClient.connect(kubeconfig) as client:
        yield client


async def test_a_stale_read_cannot_write_back_a_removed_finalizer(
    cluster: EmulatedCluster, api: kube.KubeClient, socket_path: pathlib.Path
) -> None:
    caches = _deleted_volume(cluster, PROVISIONER_FINALIZER, FINALIZER)
    # The provisioner removes its finalizer after our read (the #1217 race).
    cluster.patch("persistentvolumes", None, "pv-1", {"metadata": {"finalizers": [FINALIZER]}})
    async with CSIClient(str(socket_path)) as client:  # never called here
        attacher = Attacher(
            csi_client=client, api=api, caches=caches, driver=_driver(), options=FAST_ATTACHER
        )
        # The strategic patch removes our item from the list the server holds: nothing of the
        # stale read is written back, and there is no race to lose (no re-read, one patch).
        assert await attacher.sync_volume("pv-1") == DONE
    assert _finalizers(cluster, "pv-1") is None  # its last finalizer gone: deleted
    assert "pv-1" not in caches.volumes
    patches = cluster.requests.count(verb="patch", resource="persistentvolumes")
    gets = cluster.requests.count(verb="get", resource="persistentvolumes")
    assert (patches, gets) == (1, 0)


async def test_a_volume_still_referenced_keeps_the_finalizer(
    cluster: EmulatedCluster, api: kube.KubeClient, socket_path: pathlib.Path
) -> None:
    caches = _deleted_volume(cluster, PROVISIONER_FINALIZER, FINALIZER)
    caches.attachments.store(attachment("va-late", "pv-1"))  # any attacher's, deleting or not
    async with CSIClient(str(socket_path)) as client:
        attacher = Attacher(
            csi_client=client, api=api, caches=caches, driver=_driver(), options=FAST_ATTACHER
        )
        assert await attacher.sync_volume("pv-1") == DONE
    assert FINALIZER in (_finalizers(cluster, "pv-1") or [])
    assert cluster.requests.count(verb="patch", resource="persistentvolumes") == 0


async def test_other_errors_are_retried(
    cluster: EmulatedCluster, api: kube.KubeClient, socket_path: pathlib.Path
) -> None:
    caches = _deleted_volume(cluster, FINALIZER)
    cluster.faults.add(503, verb="patch", resource="persistentvolumes")
    async with CSIClient(str(socket_path)) as client:
        attacher = Attacher(
            csi_client=client, api=api, caches=caches, driver=_driver(), options=FAST_ATTACHER
        )
        assert await attacher.sync_volume("pv-1") == RETRY
        assert _finalizers(cluster, "pv-1") == [FINALIZER, PROTECTION]
        assert await attacher.sync_volume("pv-1") == DONE
    assert _finalizers(cluster, "pv-1") == [PROTECTION]  # no kcm here: it stays


def _driver() -> DriverInfo:
    return DriverInfo(
        name=DRIVER_NAME,
        vendor_version="test",
        manifest={},
        plugin_capabilities=frozenset({"CONTROLLER_SERVICE"}),
        volume_expansion=frozenset(),
        controller_capabilities=frozenset({"PUBLISH_UNPUBLISH_VOLUME"}),
    )


async def test_a_volume_gone_after_a_stale_read_leaves_the_cache_too(
    cluster: EmulatedCluster, api: kube.KubeClient, socket_path: pathlib.Path
) -> None:
    caches = _deleted_volume(cluster, PROVISIONER_FINALIZER, FINALIZER)
    async with CSIClient(str(socket_path)) as client:
        attacher = Attacher(
            csi_client=client, api=api, caches=caches, driver=_driver(), options=FAST_ATTACHER
        )
        # Our patch fails its `test` (the finalizers changed), and the fresh read finds nothing.
        real_get = api.get

        async def gone_meanwhile(*args: Any, **kwargs: Any) -> Any:
            cluster.patch("persistentvolumes", None, "pv-1", {"metadata": {"finalizers": []}})
            return await real_get(*args, **kwargs)

        cluster.patch("persistentvolumes", None, "pv-1", {"metadata": {"finalizers": [FINALIZER]}})
        api.get = gone_meanwhile  # type: ignore[method-assign]
        assert await attacher.sync_volume("pv-1") == DONE
    assert "pv-1" not in caches.volumes
    assert cluster.get("persistentvolumes", None, "pv-1") is None
