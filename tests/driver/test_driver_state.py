"""Records, their JSON files, and the content on disk, without a server.

We test these aspects:
- a record survives a save and a reload, field by field, attachments and node state included;
- removal deletes the file; names index the records;
- writes are atomic: no temporary file is left, leftovers of a crash are cleaned at load,
  an unreadable record is skipped with a warning;
- storage: directories and sparse files, copies, symlinked targets, orphans removed.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import structlog

from kopf_csi.driver.records import (
    Attachment,
    Capability,
    Mount,
    NodeVolume,
    Snapshot,
    Source,
    Volume,
)
from kopf_csi.driver.state import State
from kopf_csi.driver.storage import Storage

CAP = Capability(block=False, access_mode="SINGLE_NODE_WRITER", fs_type="ext4", mount_flags=("ro",))


def full_volume() -> Volume:
    return Volume(
        volume_id="v1",
        name="pvc-1",
        size=1024,
        block=False,
        created_at=1.5,
        parameters={"a": "b"},
        mutable_parameters={"iops": "100"},
        context={"a": "b"},
        node="n1",
        source=Source(kind="snapshot", id="s0"),
        attachments={"n1": Attachment(readonly=True, capability=CAP)},
        nodes={
            "n1": NodeVolume(
                staged={"/stage": Mount(capability=CAP)},
                published={"/target": Mount(capability=CAP, readonly=True, staging_path="/stage")},
                expanded_size=1024,
            )
        },
    )


def test_records_survive_a_reload(tmp_path: pathlib.Path) -> None:
    state = State.load(tmp_path)
    volume = full_volume()
    snapshot = Snapshot(
        snapshot_id="s1",
        name="snap-1",
        source_volume_id="v1",
        size=1024,
        block=False,
        created_at=2.0,
    )
    state.save_volume(volume)
    state.save_snapshot(snapshot)

    reloaded = State.load(tmp_path)
    assert reloaded.volume("v1") == volume
    assert reloaded.volume_named("pvc-1") == volume
    assert reloaded.snapshot("s1") == snapshot
    assert reloaded.snapshot_named("snap-1") == snapshot
    assert list(tmp_path.rglob("*.tmp")) == []


def test_removal_deletes_the_file(tmp_path: pathlib.Path) -> None:
    state = State.load(tmp_path, durable=True)
    state.save_volume(full_volume())
    state.remove_volume("v1")
    state.remove_volume("v1")  # idempotent
    assert state.volume_named("pvc-1") is None
    assert State.load(tmp_path).volumes == {}


def test_leftovers_and_unreadable_records(tmp_path: pathlib.Path) -> None:
    State.load(tmp_path)
    volumes = tmp_path / "state" / "volumes"
    (volumes / ".v9.json.123.tmp").write_text("{half")
    (volumes / "broken.json").write_text("{not json")
    with structlog.testing.capture_logs() as logs:
        state = State.load(tmp_path)
    assert state.volumes == {}
    assert not (volumes / ".v9.json.123.tmp").exists()
    assert [e["event"] for e in logs] == ["state_record_unreadable"]


def test_record_files_are_json(tmp_path: pathlib.Path) -> None:
    state = State.load(tmp_path)
    state.save_volume(full_volume())
    raw = json.loads((tmp_path / "state" / "volumes" / "v1.json").read_text())
    assert raw["schema"] == 1
    assert raw["attachments"]["n1"]["readonly"] is True


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x"])
def test_ids_that_cannot_name_a_file(tmp_path: pathlib.Path, name: str) -> None:
    with pytest.raises(ValueError, match="cannot name a file"):
        Storage(tmp_path).volume_path(name)


def test_storage_content(tmp_path: pathlib.Path) -> None:
    storage = Storage(tmp_path)
    storage.prepare()
    storage.create_volume("dir", block=False, size=100)
    storage.create_volume("file", block=True, size=4096)
    assert storage.volume_path("dir").is_dir()
    assert storage.volume_path("file").stat().st_size == 4096
    (storage.volume_path("dir") / "hello.txt").write_text("hello")

    storage.snapshot_volume("dir", "snap", block=False)
    storage.copy_volume(storage.snapshot_path("snap"), "restored", block=False, size=100)
    assert (storage.volume_path("restored") / "hello.txt").read_text() == "hello"
    storage.copy_volume(storage.volume_path("file"), "clone", block=True, size=8192)
    assert storage.volume_path("clone").stat().st_size == 8192
    assert storage.usage("dir").bytes_used == 5

    target = tmp_path / "pods" / "target"
    assert storage.link(target, "dir")
    assert storage.link(target, "dir")  # idempotent
    assert (target / "hello.txt").read_text() == "hello"
    assert storage.is_linked(target, "dir")
    assert not storage.link(target, "restored")  # someone else's target
    storage.unlink(target)
    assert not target.exists()
    storage.unlink(target)  # idempotent
    not_ours = tmp_path / "not-ours.txt"
    not_ours.write_text("keep me")
    storage.unlink(not_ours)
    assert not_ours.exists()

    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "x").write_text("x")
    assert not storage.link(occupied, "dir")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert storage.link(empty, "dir")  # a pre-created empty target is ours

    removed = storage.remove_orphans(volume_ids={"dir", "file"}, snapshot_ids=set())
    assert sorted(pathlib.Path(p).name for p in removed) == ["clone", "restored", "snap"]
    assert sorted(p.name for p in storage.volumes_dir.iterdir()) == ["dir", "file"]
