"""The Node service over a real socket: stage, publish (as symlinks), stats, expansion.

We test these aspects:
- the full lifecycle: ControllerPublish, NodeStage, NodePublish (the target shows the volume's
  files), NodeUnpublish (the target is gone), NodeUnstage, ControllerUnpublish; each repeated;
- FAILED_PRECONDITION: staging before ControllerPublish, publishing unstaged, a block volume as
  mount, a second target of a SINGLE_NODE_SINGLE_WRITER volume, a target someone else owns;
- ALREADY_EXISTS: restaging or republishing the same path with other arguments;
- NOT_FOUND for unknown volumes, INVALID_ARGUMENT for missing fields;
- without staging, publish needs no staging path; block volumes publish as a file;
- NodeGetVolumeStats: usage and condition; NOT_FOUND for a path the volume is not at;
- NodeExpandVolume after ControllerExpandVolume; OUT_OF_RANGE beyond the volume's size.
"""

from __future__ import annotations

import pathlib

from driver_helpers import NODE, Start, block, create, mount, raises

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver import Driver, Features

MiB = 1024**2


def stage(
    volume_id: str, path: pathlib.Path, cap: csi.VolumeCapability | None = None
) -> csi.NodeStageVolumeRequest:
    return csi.NodeStageVolumeRequest(
        volume_id=volume_id, staging_target_path=str(path), volume_capability=cap or mount()
    )


def publish(
    volume_id: str,
    target: pathlib.Path,
    staging: pathlib.Path | None,
    cap: csi.VolumeCapability | None = None,
    *,
    readonly: bool = False,
) -> csi.NodePublishVolumeRequest:
    return csi.NodePublishVolumeRequest(
        volume_id=volume_id,
        target_path=str(target),
        staging_target_path=str(staging) if staging else "",
        volume_capability=cap or mount(),
        readonly=readonly,
    )


async def attach(
    controller: csi.ControllerStub, volume_id: str, cap: csi.VolumeCapability | None = None
) -> None:
    await controller.controller_publish_volume(
        csi.ControllerPublishVolumeRequest(
            volume_id=volume_id, node_id=NODE, volume_capability=cap or mount()
        )
    )


async def test_full_lifecycle(
    driver: Driver, controller: csi.ControllerStub, node: csi.NodeStub, tmp_path: pathlib.Path
) -> None:
    volume = await create(controller)
    vid = volume.volume_id
    staging, target = tmp_path / "staging", tmp_path / "pods" / "p1" / "mount"
    (driver.backend.storage.volume_path(vid) / "hello.txt").write_text("hello")

    for _ in range(2):
        await attach(controller, vid)
    for _ in range(2):
        await node.node_stage_volume(stage(vid, staging))
    assert staging.is_dir()
    for _ in range(2):
        await node.node_publish_volume(publish(vid, target, staging))
    assert (target / "hello.txt").read_text() == "hello"
    (target / "written.txt").write_text("by the workload")
    assert (driver.backend.storage.volume_path(vid) / "written.txt").exists()
    record = driver.state.volume(vid)
    assert record is not None
    assert record.is_in_use

    unpublish = csi.NodeUnpublishVolumeRequest(volume_id=vid, target_path=str(target))
    for _ in range(2):
        await node.node_unpublish_volume(unpublish)
    assert not target.exists()
    unstage = csi.NodeUnstageVolumeRequest(volume_id=vid, staging_target_path=str(staging))
    for _ in range(2):
        await node.node_unstage_volume(unstage)
    detach = csi.ControllerUnpublishVolumeRequest(volume_id=vid, node_id=NODE)
    await controller.controller_unpublish_volume(detach)
    record = driver.state.volume(vid)
    assert record is not None
    assert not record.is_in_use
    await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=vid))


async def test_stage_errors(
    driver: Driver, controller: csi.ControllerStub, node: csi.NodeStub, tmp_path: pathlib.Path
) -> None:
    volume = await create(controller)
    vid = volume.volume_id
    with raises(Code.FAILED_PRECONDITION, "ControllerPublishVolume"):
        await node.node_stage_volume(stage(vid, tmp_path / "s"))
    await attach(controller, vid)
    with raises(Code.FAILED_PRECONDITION, "mount volume"):
        await node.node_stage_volume(stage(vid, tmp_path / "s", block()))
    await node.node_stage_volume(stage(vid, tmp_path / "s"))
    with raises(Code.ALREADY_EXISTS):
        await node.node_stage_volume(stage(vid, tmp_path / "s", mount("SINGLE_NODE_READER_ONLY")))
    with raises(Code.FAILED_PRECONDITION, "already staged"):
        await node.node_stage_volume(stage(vid, tmp_path / "other"))
    with raises(Code.NOT_FOUND):
        await node.node_stage_volume(stage("nope", tmp_path / "s"))
    with raises(Code.INVALID_ARGUMENT):
        await node.node_stage_volume(
            csi.NodeStageVolumeRequest(volume_id=vid, volume_capability=mount())
        )
    with raises(Code.INVALID_ARGUMENT):
        await node.node_stage_volume(
            csi.NodeStageVolumeRequest(volume_id=vid, staging_target_path=str(tmp_path / "s"))
        )
    with raises(Code.NOT_FOUND):
        await node.node_unstage_volume(
            csi.NodeUnstageVolumeRequest(volume_id="nope", staging_target_path="/x")
        )
    await node.node_unstage_volume(
        csi.NodeUnstageVolumeRequest(volume_id=vid, staging_target_path="/not/staged")
    )


async def test_publish_errors(
    driver: Driver, controller: csi.ControllerStub, node: csi.NodeStub, tmp_path: pathlib.Path
) -> None:
    volume = await create(controller)
    vid = volume.volume_id
    staging = tmp_path / "s"
    await attach(controller, vid)
    with raises(Code.FAILED_PRECONDITION, "not staged"):
        await node.node_publish_volume(publish(vid, tmp_path / "t1", staging))
    with raises(Code.FAILED_PRECONDITION, "staging_target_path"):
        await node.node_publish_volume(publish(vid, tmp_path / "t1", None))
    await node.node_stage_volume(stage(vid, staging))
    await node.node_publish_volume(publish(vid, tmp_path / "t1", staging))
    with raises(Code.ALREADY_EXISTS):
        await node.node_publish_volume(publish(vid, tmp_path / "t1", staging, readonly=True))
    # An RWO volume is published once per pod on a node (Kubernetes does that).
    await node.node_publish_volume(publish(vid, tmp_path / "t2", staging))
    with raises(Code.FAILED_PRECONDITION, "another capability"):
        await node.node_publish_volume(
            publish(vid, tmp_path / "t3", staging, mount("MULTI_NODE_MULTI_WRITER"))
        )
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "file").write_text("not ours")
    with raises(Code.FAILED_PRECONDITION, "in use"):
        await node.node_publish_volume(publish(vid, occupied, staging))
    with raises(Code.NOT_FOUND):
        await node.node_publish_volume(publish("nope", tmp_path / "t4", staging))
    with raises(Code.NOT_FOUND):
        await node.node_unpublish_volume(
            csi.NodeUnpublishVolumeRequest(volume_id="nope", target_path="/x")
        )
    with raises(Code.INVALID_ARGUMENT):
        await node.node_unpublish_volume(csi.NodeUnpublishVolumeRequest(volume_id=vid))
    with raises(Code.INVALID_ARGUMENT, "absolute"):
        await node.node_publish_volume(publish(vid, pathlib.Path("relative/t"), staging))
    with raises(Code.INVALID_ARGUMENT, "absolute"):
        await node.node_stage_volume(stage(vid, pathlib.Path("relative/s")))


async def test_single_writer_pod_gets_one_target(
    driver: Driver, controller: csi.ControllerStub, node: csi.NodeStub, tmp_path: pathlib.Path
) -> None:
    rwop = mount("SINGLE_NODE_SINGLE_WRITER")
    volume = await create(controller, caps=[rwop])
    await attach(controller, volume.volume_id, rwop)
    await node.node_stage_volume(stage(volume.volume_id, tmp_path / "s", rwop))
    await node.node_publish_volume(publish(volume.volume_id, tmp_path / "t1", tmp_path / "s", rwop))
    with raises(Code.FAILED_PRECONDITION):
        await node.node_publish_volume(
            publish(volume.volume_id, tmp_path / "t2", tmp_path / "s", rwop)
        )


async def test_block_volume_without_staging_or_attach(
    start: Start, controller: csi.ControllerStub, node: csi.NodeStub, tmp_path: pathlib.Path
) -> None:
    driver = await start(features=Features(attach=False, node_stage=False))
    volume = await create(controller, caps=[block()], size=MiB)
    target = tmp_path / "dev" / "block"
    await node.node_publish_volume(publish(volume.volume_id, target, None, block()))
    assert target.is_symlink()
    assert target.resolve() == driver.backend.storage.volume_path(volume.volume_id)
    assert target.stat().st_size == MiB
    await node.node_unpublish_volume(
        csi.NodeUnpublishVolumeRequest(volume_id=volume.volume_id, target_path=str(target))
    )
    assert not target.exists()


async def test_volume_stats(
    driver: Driver, controller: csi.ControllerStub, node: csi.NodeStub, tmp_path: pathlib.Path
) -> None:
    volume = await create(controller, size=MiB)
    vid = volume.volume_id
    await attach(controller, vid)
    await node.node_stage_volume(stage(vid, tmp_path / "s"))
    await node.node_publish_volume(publish(vid, tmp_path / "t", tmp_path / "s"))
    (tmp_path / "t" / "data").write_bytes(b"x" * 1000)

    stats = await node.node_get_volume_stats(
        csi.NodeGetVolumeStatsRequest(volume_id=vid, volume_path=str(tmp_path / "t"))
    )
    [usage] = stats.usage
    assert (usage.unit, usage.total, usage.used, usage.available) == (
        csi.VolumeUsageUnit.BYTES,
        MiB,
        1000,
        MiB - 1000,
    )
    assert stats.volume_condition is not None
    assert not stats.volume_condition.abnormal
    driver.faults.mark_abnormal(vid, "I/O errors")
    stats = await node.node_get_volume_stats(
        csi.NodeGetVolumeStatsRequest(volume_id=vid, volume_path=str(tmp_path / "s"))
    )
    assert stats.volume_condition is not None
    assert stats.volume_condition.message == "I/O errors"

    with raises(Code.NOT_FOUND):
        await node.node_get_volume_stats(
            csi.NodeGetVolumeStatsRequest(volume_id=vid, volume_path="/elsewhere")
        )
    with raises(Code.NOT_FOUND):
        await node.node_get_volume_stats(
            csi.NodeGetVolumeStatsRequest(volume_id="nope", volume_path="/x")
        )


async def test_node_expand_volume(
    driver: Driver, controller: csi.ControllerStub, node: csi.NodeStub, tmp_path: pathlib.Path
) -> None:
    volume = await create(controller, size=MiB)
    vid = volume.volume_id
    await attach(controller, vid)
    await node.node_stage_volume(stage(vid, tmp_path / "s"))
    await controller.controller_expand_volume(
        csi.ControllerExpandVolumeRequest(
            volume_id=vid, capacity_range=csi.CapacityRange(required_bytes=2 * MiB)
        )
    )

    def expand(size: int, path: pathlib.Path = tmp_path / "s") -> csi.NodeExpandVolumeRequest:
        return csi.NodeExpandVolumeRequest(
            volume_id=vid,
            volume_path=str(path),
            capacity_range=csi.CapacityRange(required_bytes=size),
        )

    response = await node.node_expand_volume(expand(2 * MiB))
    assert response.capacity_bytes == 2 * MiB
    await node.node_expand_volume(expand(2 * MiB))
    record = driver.state.volume(vid)
    assert record is not None
    assert record.on_node(NODE).expanded_size == 2 * MiB
    with raises(Code.OUT_OF_RANGE):
        await node.node_expand_volume(expand(3 * MiB))
    with raises(Code.NOT_FOUND):
        await node.node_expand_volume(expand(2 * MiB, tmp_path / "elsewhere"))
    with raises(Code.INVALID_ARGUMENT):
        await node.node_expand_volume(
            csi.NodeExpandVolumeRequest(
                volume_id=vid, volume_path=str(tmp_path / "s"), volume_capability=block()
            )
        )


async def test_argument_checks_come_before_existence(
    driver: Driver, controller: csi.ControllerStub, node: csi.NodeStub, tmp_path: pathlib.Path
) -> None:
    """Missing REQUIRED fields are INVALID_ARGUMENT whether the volume exists or not; a volume
    or path that does not exist is NOT_FOUND, even for a relative path (csi-sanity's specs)."""
    with raises(Code.INVALID_ARGUMENT, "volume_id is required"):
        await node.node_get_volume_stats(csi.NodeGetVolumeStatsRequest(volume_path="some/path"))
    with raises(Code.INVALID_ARGUMENT, "volume_path is required"):
        await node.node_get_volume_stats(csi.NodeGetVolumeStatsRequest(volume_id="nope"))
    with raises(Code.NOT_FOUND, "volume nope does not exist"):
        await node.node_get_volume_stats(
            csi.NodeGetVolumeStatsRequest(volume_id="nope", volume_path="some/path")
        )
    with raises(Code.NOT_FOUND, "volume nope does not exist"):
        await node.node_expand_volume(
            csi.NodeExpandVolumeRequest(volume_id="nope", volume_path="some/path")
        )
    with raises(Code.INVALID_ARGUMENT, "volume_path is required"):
        await node.node_expand_volume(csi.NodeExpandVolumeRequest(volume_id="nope"))

    volume = await create(controller, size=MiB)
    vid = volume.volume_id
    await attach(controller, vid)
    await node.node_stage_volume(stage(vid, tmp_path / "s"))
    await node.node_publish_volume(publish(vid, tmp_path / "t", tmp_path / "s"))
    with raises(Code.INVALID_ARGUMENT, "volume_path is required"):
        await node.node_expand_volume(csi.NodeExpandVolumeRequest(volume_id=vid))
    with raises(Code.NOT_FOUND, "is not staged or published at some/path"):
        await node.node_get_volume_stats(
            csi.NodeGetVolumeStatsRequest(volume_id=vid, volume_path="some/path")
        )
    with raises(Code.NOT_FOUND, "is not staged or published at some/path"):
        await node.node_expand_volume(
            csi.NodeExpandVolumeRequest(volume_id=vid, volume_path="some/path")
        )
    with raises(Code.INVALID_ARGUMENT, "volume_capabilities are required"):
        await controller.validate_volume_capabilities(
            csi.ValidateVolumeCapabilitiesRequest(volume_id="nope")
        )
