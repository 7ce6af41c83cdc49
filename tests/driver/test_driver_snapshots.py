"""Snapshots, restores and clones over a real socket.

We test these aspects:
- CreateSnapshot copies the content, is ready at once, is idempotent by name, ALREADY_EXISTS for
  the same name from another volume, NOT_FOUND for a missing source, INVALID_ARGUMENT without
  a name or source;
- DeleteSnapshot is idempotent; GetSnapshot finds or is NOT_FOUND;
- ListSnapshots pages, filters by snapshot id and by source volume, ABORTED for a bad token;
- a volume restored from a snapshot or cloned from a volume has the content; NOT_FOUND for a
  missing source; OUT_OF_RANGE when smaller than the source; INVALID_ARGUMENT for another access
  type or a switched-off feature;
- snapshots outlive their source volume.
"""

from __future__ import annotations

from driver_helpers import Start, block, create, raises

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver import Driver, Features

MiB = 1024**2


async def snapshot(controller: csi.ControllerStub, name: str, volume_id: str) -> csi.Snapshot:
    response = await controller.create_snapshot(
        csi.CreateSnapshotRequest(name=name, source_volume_id=volume_id)
    )
    assert response.snapshot is not None
    return response.snapshot


def from_snapshot(snapshot_id: str) -> csi.VolumeContentSource:
    return csi.VolumeContentSource(snapshot=csi.VolumeContentSourceSnapshotSource(snapshot_id))


def from_volume(volume_id: str) -> csi.VolumeContentSource:
    return csi.VolumeContentSource(volume=csi.VolumeContentSourceVolumeSource(volume_id))


async def test_create_snapshot(driver: Driver, controller: csi.ControllerStub) -> None:
    volume = await create(controller, size=2 * MiB)
    (driver.backend.storage.volume_path(volume.volume_id) / "data.txt").write_text("v1")
    snap = await snapshot(controller, "snap-1", volume.volume_id)
    assert snap.ready_to_use
    assert snap.size_bytes == 2 * MiB
    assert snap.source_volume_id == volume.volume_id
    assert snap.creation_time is not None
    content = driver.backend.storage.snapshot_path(snap.snapshot_id) / "data.txt"
    assert content.read_text() == "v1"

    again = await snapshot(controller, "snap-1", volume.volume_id)
    assert again.snapshot_id == snap.snapshot_id
    other = await create(controller, "pvc-2")
    with raises(Code.ALREADY_EXISTS):
        await snapshot(controller, "snap-1", other.volume_id)
    with raises(Code.NOT_FOUND):
        await snapshot(controller, "snap-2", "nope")
    with raises(Code.INVALID_ARGUMENT):
        await snapshot(controller, "", volume.volume_id)
    with raises(Code.INVALID_ARGUMENT):
        await snapshot(controller, "snap-3", "")


async def test_delete_and_get_snapshot(driver: Driver, controller: csi.ControllerStub) -> None:
    volume = await create(controller)
    snap = await snapshot(controller, "snap-1", volume.volume_id)
    got = await controller.get_snapshot(csi.GetSnapshotRequest(snapshot_id=snap.snapshot_id))
    assert got.snapshot is not None
    assert got.snapshot.snapshot_id == snap.snapshot_id
    request = csi.DeleteSnapshotRequest(snapshot_id=snap.snapshot_id)
    await controller.delete_snapshot(request)
    await controller.delete_snapshot(request)
    assert not driver.backend.storage.snapshot_path(snap.snapshot_id).exists()
    with raises(Code.NOT_FOUND):
        await controller.get_snapshot(csi.GetSnapshotRequest(snapshot_id=snap.snapshot_id))
    with raises(Code.INVALID_ARGUMENT):
        await controller.delete_snapshot(csi.DeleteSnapshotRequest())


async def test_list_snapshots_pages_and_filters(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    first = await create(controller, "pvc-1")
    second = await create(controller, "pvc-2")
    snaps = [await snapshot(controller, f"a-{i}", first.volume_id) for i in range(3)]
    other = await snapshot(controller, "b-0", second.volume_id)

    seen: list[str] = []
    token = ""
    while True:
        page = await controller.list_snapshots(
            csi.ListSnapshotsRequest(max_entries=3, starting_token=token)
        )
        seen += [e.snapshot.snapshot_id for e in page.entries if e.snapshot]
        token = page.next_token
        if not token:
            break
    assert seen == [s.snapshot_id for s in [*snaps, other]]

    by_source = await controller.list_snapshots(
        csi.ListSnapshotsRequest(source_volume_id=second.volume_id)
    )
    assert [e.snapshot.snapshot_id for e in by_source.entries if e.snapshot] == [other.snapshot_id]
    by_id = await controller.list_snapshots(
        csi.ListSnapshotsRequest(snapshot_id=snaps[1].snapshot_id)
    )
    assert [e.snapshot.snapshot_id for e in by_id.entries if e.snapshot] == [snaps[1].snapshot_id]
    missing = await controller.list_snapshots(csi.ListSnapshotsRequest(snapshot_id="nope"))
    assert missing.entries == []
    with raises(Code.ABORTED):
        await controller.list_snapshots(csi.ListSnapshotsRequest(starting_token="99"))


async def test_restore_from_snapshot(driver: Driver, controller: csi.ControllerStub) -> None:
    volume = await create(controller, size=2 * MiB)
    (driver.backend.storage.volume_path(volume.volume_id) / "data.txt").write_text("v1")
    snap = await snapshot(controller, "snap-1", volume.volume_id)
    (driver.backend.storage.volume_path(volume.volume_id) / "data.txt").write_text("v2")

    restored = await create(
        controller, "restored", size=2 * MiB, volume_content_source=from_snapshot(snap.snapshot_id)
    )
    assert restored.content_source is not None
    assert restored.content_source.snapshot is not None
    content = driver.backend.storage.volume_path(restored.volume_id) / "data.txt"
    assert content.read_text() == "v1"

    with raises(Code.NOT_FOUND):
        await create(controller, "r2", volume_content_source=from_snapshot("nope"))
    with raises(Code.OUT_OF_RANGE):
        await create(
            controller,
            "r3",
            size=MiB,
            limit=MiB,
            volume_content_source=from_snapshot(snap.snapshot_id),
        )
    with raises(Code.INVALID_ARGUMENT, "access type"):
        await create(
            controller, "r4", caps=[block()], volume_content_source=from_snapshot(snap.snapshot_id)
        )
    grown = await create(
        controller, "r5", size=MiB, volume_content_source=from_snapshot(snap.snapshot_id)
    )
    assert grown.capacity_bytes == 2 * MiB  # never smaller than its source


async def test_clone_a_volume(driver: Driver, controller: csi.ControllerStub) -> None:
    volume = await create(controller, caps=[block()], size=MiB)
    driver.backend.storage.volume_path(volume.volume_id).write_bytes(b"x" * 100)
    clone = await create(
        controller,
        "clone",
        caps=[block()],
        size=2 * MiB,
        volume_content_source=from_volume(volume.volume_id),
    )
    path = driver.backend.storage.volume_path(clone.volume_id)
    assert path.read_bytes()[:100] == b"x" * 100
    assert path.stat().st_size == 2 * MiB
    with raises(Code.NOT_FOUND):
        await create(controller, "c2", volume_content_source=from_volume("nope"))


async def test_switched_off_sources(start: Start, controller: csi.ControllerStub) -> None:
    await start(features=Features(clone=False, snapshots=False))
    volume = await create(controller)
    with raises(Code.INVALID_ARGUMENT, "cloning"):
        await create(controller, "c", volume_content_source=from_volume(volume.volume_id))
    with raises(Code.INVALID_ARGUMENT, "snapshots"):
        await create(controller, "s", volume_content_source=from_snapshot("x"))


async def test_snapshots_outlive_their_volume(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    volume = await create(controller)
    snap = await snapshot(controller, "snap-1", volume.volume_id)
    await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
    listed = await controller.list_snapshots(csi.ListSnapshotsRequest())
    assert [e.snapshot.snapshot_id for e in listed.entries if e.snapshot] == [snap.snapshot_id]
    await create(controller, "restored", volume_content_source=from_snapshot(snap.snapshot_id))
