"""A restart on the same data directory loses nothing.

We test these aspects:
- volumes, snapshots, attachments, stagings and publications survive `driver.restart()`, and
  also a brand-new driver process-equivalent on the same data directory;
- the content survives: a restored volume after the restart has the snapshot's files;
- a channel opened before the restart keeps working after one failed call;
- content without a record (a crash between the copy and the record) is removed at start.
"""

from __future__ import annotations

import pathlib

from driver_helpers import NODE, Start, create, mount
from grpclib.client import Channel
from grpclib.exceptions import GRPCError, StreamTerminatedError

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.driver import Driver, DriverConfig


async def test_everything_survives_a_restart(
    driver: Driver, controller: csi.ControllerStub, node: csi.NodeStub, tmp_path: pathlib.Path
) -> None:
    volume = await create(controller)
    vid = volume.volume_id
    (driver.backend.storage.volume_path(vid) / "data.txt").write_text("kept")
    await controller.controller_publish_volume(
        csi.ControllerPublishVolumeRequest(volume_id=vid, node_id=NODE, volume_capability=mount())
    )
    staging, target = tmp_path / "s", tmp_path / "t"
    await node.node_stage_volume(
        csi.NodeStageVolumeRequest(
            volume_id=vid, staging_target_path=str(staging), volume_capability=mount()
        )
    )
    await node.node_publish_volume(
        csi.NodePublishVolumeRequest(
            volume_id=vid,
            target_path=str(target),
            staging_target_path=str(staging),
            volume_capability=mount(),
        )
    )
    snap = await controller.create_snapshot(
        csi.CreateSnapshotRequest(name="snap-1", source_volume_id=vid)
    )
    assert snap.snapshot is not None
    before = driver.state.volume(vid)

    await driver.restart(grace=0.1)

    assert driver.state.volume(vid) == before
    channel = Channel(path=str(driver.socket_path))  # a fresh client after the restart
    try:
        ctl = csi.ControllerStub(channel)
        listed = await ctl.list_volumes(csi.ListVolumesRequest())
        assert [e.volume.volume_id for e in listed.entries if e.volume] == [vid]
        assert listed.entries[0].status is not None
        assert listed.entries[0].status.published_node_ids == [NODE]
        snaps = await ctl.list_snapshots(csi.ListSnapshotsRequest())
        assert [e.snapshot.snapshot_id for e in snaps.entries if e.snapshot] == [
            snap.snapshot.snapshot_id
        ]
        # Idempotent repeats see the persisted state: same volume, same publish, same snapshot.
        again = await ctl.create_volume(
            csi.CreateVolumeRequest(
                name="pvc-1",
                volume_capabilities=[mount()],
                capacity_range=csi.CapacityRange(1024**2),
            )
        )
        assert again.volume is not None
        assert again.volume.volume_id == vid
        restored = await ctl.create_volume(
            csi.CreateVolumeRequest(
                name="restored",
                volume_capabilities=[mount()],
                volume_content_source=csi.VolumeContentSource(
                    snapshot=csi.VolumeContentSourceSnapshotSource(snap.snapshot.snapshot_id)
                ),
            )
        )
        assert restored.volume is not None
        restored_path = driver.backend.storage.volume_path(restored.volume.volume_id)
        assert (restored_path / "data.txt").read_text() == "kept"
        assert (target / "data.txt").read_text() == "kept"
    finally:
        channel.close()


async def test_a_new_driver_on_the_same_data_dir(
    start: Start, driver_config: DriverConfig, controller: csi.ControllerStub
) -> None:
    first = await start()
    volume = await create(controller)
    await first.stop(grace=0.1)
    assert not first.socket_path.exists()
    second = await start()
    assert second.state.volume(volume.volume_id) is not None


async def test_an_old_channel_reconnects_after_a_restart(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    await create(controller, "pvc-1")
    await driver.restart(grace=0.1)
    for attempt in range(2):  # grpclib fails once on the dead connection, then reconnects
        try:
            await create(controller, "pvc-2")
            break
        except (GRPCError, StreamTerminatedError, ConnectionError):
            assert attempt == 0
    assert {v.name for v in driver.state.volumes.values()} == {"pvc-1", "pvc-2"}


async def test_orphaned_content_is_removed_at_start(start: Start, data_dir: pathlib.Path) -> None:
    driver = await start()
    await driver.stop(grace=0.1)
    orphan = data_dir / "volumes" / "left-by-a-crash"
    orphan.mkdir()
    await driver.start()
    assert not orphan.exists()
