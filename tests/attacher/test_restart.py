"""An operator restart in the middle of an attach, end to end.

We test these aspects:
- the VA gets our finalizer and the node-ID annotation before ControllerPublishVolume, so an
  operator that dies during the call leaves a VA that says "maybe attached";
- the publish that the dying operator sent may have reached the driver after all: the next
  operator publishes again (idempotently) and marks the VA attached, with one attachment.
"""

from __future__ import annotations

import pathlib

import pytest

from kopf_csi.attaching.options import AttacherOptions
from kopf_csi.csi import CSIClient
from kopf_csi.csi import messages as csi
from kopf_csi.driver import Driver
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..conftest import NODE
from .helpers import (
    FINALIZER,
    NODE_ID_ANNOTATION,
    attached_volume,
    attachment,
    cached,
    seed_node,
    status,
    until,
    va,
)


@pytest.mark.parametrize(
    "attacher_options", [AttacherOptions(timeout=0.3, retry_interval_start=0.05)], indirect=True
)
async def test_an_attach_cut_off_by_a_restart_is_finished_by_the_next_operator(
    cluster: EmulatedCluster,
    driver: Driver,
    socket_path: pathlib.Path,
    settings: Settings,
    handler_modules: tuple[str, ...],
) -> None:
    seed_node(cluster)
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    driver.faults.hang("ControllerPublishVolume")  # the call is on its way when the operator dies
    first = OperatorThread(settings=settings, modules=handler_modules)
    await first.start()
    try:
        await cached(first, "volumes", "pv-1")
        cluster.create("volumeattachments", attachment("va-1", "pv-1"))
        await until(lambda: va(cluster, "va-1")["metadata"].get("finalizers") == [FINALIZER])
        assert va(cluster, "va-1")["metadata"]["annotations"] == {NODE_ID_ANNOTATION: NODE}
        assert not status(cluster, "va-1").get("attached")
    finally:
        await first.stop()

    # What the interrupted call did on the driver: it published the volume after all.
    driver.faults.clear()
    mode = csi.VolumeCapabilityAccessModeMode.SINGLE_NODE_MULTI_WRITER
    capability = csi.VolumeCapability(
        mount=csi.VolumeCapabilityMountVolume(),
        access_mode=csi.VolumeCapabilityAccessMode(mode=mode),
    )
    async with CSIClient(str(socket_path)) as client:
        request = csi.ControllerPublishVolumeRequest(
            volume_id=handle, node_id=NODE, volume_capability=capability
        )
        await client.controller_publish_volume(request)

    second = OperatorThread(settings=settings, modules=handler_modules)
    await second.start()
    try:
        await until(lambda: status(cluster, "va-1").get("attached"))
        assert "attachError" not in status(cluster, "va-1")
        assert list(driver.state.volumes[handle].attachments) == [NODE]
    finally:
        await second.stop()
