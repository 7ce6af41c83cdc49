"""Attach and detach failures end to end: what `attachError`/`detachError` say, and the retries.

We test these aspects:
- a node without a CSINode, or a CSINode without our driver: `attachError` with the Go text,
  no VA finalizer (the node ID is needed first), attached once the CSINode is right;
- a VA of a PV that does not exist (yet): `persistentvolume "..." not found`, then attached;
- a VA of a PV being deleted: refused, and neither the PV nor the VA gets our finalizer;
- every gRPC code ControllerPublishVolume can fail with, and a timeout: `attachError` carries
  the Go `rpc error: ...` text and the numeric `errorCode`, the VA keeps our finalizer (set
  before the call), and the retry attaches it and clears the error;
- ControllerUnpublishVolume failures: `detachError` with the code, retried until detached;
- a VA that keeps failing is retried with a growing backoff: our own error writes do not
  re-queue it (upstream's `shouldEnqueueVAChange`).
"""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from kopf_csi.attaching.options import AttacherOptions
from kopf_csi.csi import Code
from kopf_csi.driver import Driver, FaultRule
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME, NODE
from .conftest import FAST_ATTACHER
from .helpers import (
    FINALIZER,
    attached_volume,
    attachment,
    cached,
    has_status,
    next_matching,
    seed_node,
    status,
    until,
    va,
)

ERROR_CODES = [code for code in Code if code is not Code.OK]


async def test_a_node_without_csinode_waits_for_it(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    cluster.create("volumeattachments", attachment("va-1", "pv-1"))
    message = f'csinode.storage.k8s.io "{NODE}" not found'
    await until(
        lambda: (status(cluster, "va-1").get("attachError") or {}).get("message") == message
    )
    assert not va(cluster, "va-1")["metadata"].get("finalizers")
    seed_node(cluster)
    await until(lambda: status(cluster, "va-1").get("attached"))
    assert NODE in driver.state.volumes[handle].attachments


async def test_a_csinode_without_our_driver_is_not_enough(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    cluster.create(
        "csinodes",
        {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": NODE},
         "spec": {"drivers": [{"name": "other.csi.example.com", "nodeID": "x"}]}},
    )  # fmt: skip
    await attached_volume(cluster, socket_path, "pv-1")
    cluster.create("volumeattachments", attachment("va-1", "pv-1"))
    message = f"CSINode {NODE} does not contain driver {DRIVER_NAME}"
    await until(
        lambda: (status(cluster, "va-1").get("attachError") or {}).get("message") == message
    )


async def test_a_missing_volume_is_an_error_until_it_exists(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    seed_node(cluster)
    cluster.create("volumeattachments", attachment("va-1", "pv-1"))
    message = 'persistentvolume "pv-1" not found'
    error = await until(lambda: status(cluster, "va-1").get("attachError"))
    assert error["message"] == message
    assert "errorCode" not in error
    assert error["time"].endswith("Z")
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    await until(lambda: status(cluster, "va-1").get("attached"))
    assert "attachError" not in status(cluster, "va-1")
    assert NODE in driver.state.volumes[handle].attachments


async def test_a_deleting_volume_is_not_attached(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    seed_node(cluster)
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    cluster.patch("persistentvolumes", None, "pv-1", {"metadata": {"finalizers": ["other/keep"]}})
    cluster.delete("persistentvolumes", None, "pv-1")
    cluster.create("volumeattachments", attachment("va-1", "pv-1"))
    message = 'PersistentVolume "pv-1" is marked for deletion'
    await until(
        lambda: (status(cluster, "va-1").get("attachError") or {}).get("message") == message
    )
    await asyncio.sleep(0.2)  # a few retries
    assert (cluster.get("persistentvolumes", None, "pv-1") or {})["metadata"]["finalizers"] == [
        "other/keep"
    ]
    assert not va(cluster, "va-1")["metadata"].get("finalizers")
    assert not driver.state.volumes[handle].attachments


@pytest.mark.parametrize("code", ERROR_CODES, ids=[code.name for code in ERROR_CODES])
async def test_every_publish_error_is_saved_with_its_code_and_retried(
    cluster: EmulatedCluster,
    driver: Driver,
    socket_path: pathlib.Path,
    operator: OperatorThread,
    code: Code,
) -> None:
    seed_node(cluster)
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    await cached(operator, "volumes", "pv-1")
    driver.faults.fail("ControllerPublishVolume", code, times=1, message="no way")
    with cluster.subscribe("volumeattachments") as feed:
        cluster.create("volumeattachments", attachment("va-1", "pv-1"))
        failed = await next_matching(feed, has_status("attachError"))
    error = failed["status"]["attachError"]
    # A DeadlineExceeded answered by the driver keeps the driver's text, as in Go.
    assert error["message"] == f"rpc error: code = {code.title} desc = no way"
    assert error["errorCode"] == code.value
    assert failed["metadata"]["finalizers"] == [FINALIZER]  # set before the call
    await until(lambda: status(cluster, "va-1").get("attached"))
    assert "attachError" not in status(cluster, "va-1")
    assert NODE in driver.state.volumes[handle].attachments
    assert not cluster.dropped  # nothing written that a real API server would drop


@pytest.mark.parametrize(
    "attacher_options", [AttacherOptions(timeout=0.2, retry_interval_start=0.05)], indirect=True
)
async def test_a_publish_timeout_is_deadline_exceeded_and_retried(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    seed_node(cluster)
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    await cached(operator, "volumes", "pv-1")
    driver.faults.hang("ControllerPublishVolume", times=1)
    with cluster.subscribe("volumeattachments") as feed:
        cluster.create("volumeattachments", attachment("va-1", "pv-1"))
        error = (await next_matching(feed, has_status("attachError")))["status"]["attachError"]
    expected = "rpc error: code = DeadlineExceeded desc = context deadline exceeded"
    assert error["message"] == expected
    assert error["errorCode"] == Code.DEADLINE_EXCEEDED.value
    await until(lambda: status(cluster, "va-1").get("attached"))
    assert NODE in driver.state.volumes[handle].attachments


DETACH_CODES = [Code.UNAVAILABLE, Code.FAILED_PRECONDITION, Code.NOT_FOUND, Code.INTERNAL]


@pytest.mark.parametrize("code", DETACH_CODES, ids=[code.name for code in DETACH_CODES])
async def test_unpublish_errors_are_saved_and_retried(
    cluster: EmulatedCluster,
    driver: Driver,
    socket_path: pathlib.Path,
    operator: OperatorThread,
    code: Code,
) -> None:
    seed_node(cluster)
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    cluster.create("volumeattachments", attachment("va-1", "pv-1"))
    await until(lambda: status(cluster, "va-1").get("attached"))
    driver.faults.fail("ControllerUnpublishVolume", code, times=2, message="busy")
    with cluster.subscribe("volumeattachments") as feed:
        cluster.delete("volumeattachments", None, "va-1")
        failed = await next_matching(feed, has_status("detachError"))
    error = failed["status"]["detachError"]
    assert error["message"] == f"rpc error: code = {code.title} desc = busy"
    assert error["errorCode"] == code.value
    assert failed["metadata"]["finalizers"] == [FINALIZER]
    await until(lambda: not va(cluster, "va-1"))
    assert not driver.state.volumes[handle].attachments


@pytest.mark.parametrize(
    "attacher_options",
    [AttacherOptions(timeout=2.0, retry_interval_start=0.1, retry_interval_max=10.0)],
    indirect=True,
)
async def test_our_error_writes_do_not_reset_the_backoff(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    seed_node(cluster)
    await attached_volume(cluster, socket_path, "pv-1")
    await cached(operator, "volumes", "pv-1")
    rule = driver.faults.add(
        FaultRule(method="ControllerPublishVolume", code=Code.INTERNAL, times=1000)
    )
    cluster.create("volumeattachments", attachment("va-1", "pv-1"))
    await until(lambda: status(cluster, "va-1").get("attachError"))
    await asyncio.sleep(1.2)
    calls = 1000 - (rule.times or 0)
    # Backoff 0.1, 0.2, 0.4, 0.8 s (plus one re-run for our finalizer write): about 5 calls
    # in 1.2 s. Re-queueing on our own attachError writes would make hundreds.
    assert 3 <= calls <= 7, calls
    assert FAST_ATTACHER.retry_interval_start < 0.1  # the other tests retry faster
