"""The driver's records in memory, each written through to its own JSON file.

Layout under the data directory::

    state/volumes/<volume_id>.json      one Volume record (attachments and node state inside)
    state/snapshots/<snapshot_id>.json  one Snapshot record
    state/groups/<group_snapshot_id>.json  one GroupSnapshot record (its members are snapshots)

One file per record keeps every write O(1) however many volumes exist, and each file is replaced
atomically (write a temporary file, fsync, rename), so a crash leaves either the old record or
the new one, never half of one. Records are loaded once at start; this process is the only
writer. The content of volumes and snapshots is `storage`'s business, not this module's.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any

import structlog

from kopf_csi.driver import records
from kopf_csi.driver.records import GroupSnapshot, Snapshot, Volume
from kopf_csi.driver.storage import plain_name

__all__ = ["State", "write_json_atomically"]

logger = structlog.get_logger("kopf_csi.driver")


class State:
    """Volumes, snapshots and group snapshots by id and by name; every change is on disk
    before it returns."""

    def __init__(self, root: pathlib.Path, *, durable: bool = True) -> None:
        self.root = root
        self.durable = durable
        self._volumes: dict[str, Volume] = {}
        self._snapshots: dict[str, Snapshot] = {}
        self._volume_names: dict[str, str] = {}
        self._snapshot_names: dict[str, str] = {}
        self._groups: dict[str, GroupSnapshot] = {}
        self._group_names: dict[str, str] = {}
        self._volumes_dir = root / "state" / "volumes"
        self._snapshots_dir = root / "state" / "snapshots"
        self._groups_dir = root / "state" / "groups"

    @classmethod
    def load(cls, root: pathlib.Path, *, durable: bool = True) -> State:
        """Read every record under `root` (creating the layout if it is new)."""
        state = cls(root, durable=durable)
        for directory in (state._volumes_dir, state._snapshots_dir, state._groups_dir):
            directory.mkdir(parents=True, exist_ok=True)
            _remove_leftover_temporaries(directory)
        for raw in _read_records(state._volumes_dir):
            state._index_volume(records.volume_from_dict(raw))
        for raw in _read_records(state._snapshots_dir):
            state._index_snapshot(records.snapshot_from_dict(raw))
        for raw in _read_records(state._groups_dir):
            state._index_group(records.group_snapshot_from_dict(raw))
        return state

    # Reading.

    @property
    def volumes(self) -> Mapping[str, Volume]:
        return self._volumes

    @property
    def snapshots(self) -> Mapping[str, Snapshot]:
        return self._snapshots

    def volume(self, volume_id: str) -> Volume | None:
        return self._volumes.get(volume_id)

    def volume_named(self, name: str) -> Volume | None:
        volume_id = self._volume_names.get(name)
        return None if volume_id is None else self._volumes[volume_id]

    def snapshot(self, snapshot_id: str) -> Snapshot | None:
        return self._snapshots.get(snapshot_id)

    def snapshot_named(self, name: str) -> Snapshot | None:
        snapshot_id = self._snapshot_names.get(name)
        return None if snapshot_id is None else self._snapshots[snapshot_id]

    @property
    def groups(self) -> Mapping[str, GroupSnapshot]:
        return self._groups

    def group(self, group_snapshot_id: str) -> GroupSnapshot | None:
        return self._groups.get(group_snapshot_id)

    def group_named(self, name: str) -> GroupSnapshot | None:
        group_id = self._group_names.get(name)
        return None if group_id is None else self._groups[group_id]

    def sorted_volumes(self) -> list[Volume]:
        """In creation order: a stable order for paging."""
        return sorted(self._volumes.values(), key=lambda v: (v.created_at, v.volume_id))

    def sorted_snapshots(self) -> list[Snapshot]:
        return sorted(self._snapshots.values(), key=lambda s: (s.created_at, s.snapshot_id))

    # Writing: disk first, then memory, so that memory never claims what the disk lacks.

    def save_volume(self, volume: Volume) -> None:
        path = self._volumes_dir / f"{plain_name(volume.volume_id)}.json"
        write_json_atomically(path, records.to_dict(volume), durable=self.durable)
        self._index_volume(volume)

    def remove_volume(self, volume_id: str) -> None:
        _unlink(self._volumes_dir / f"{plain_name(volume_id)}.json")
        volume = self._volumes.pop(volume_id, None)
        if volume is not None:
            self._volume_names.pop(volume.name, None)

    def save_snapshot(self, snapshot: Snapshot) -> None:
        path = self._snapshots_dir / f"{plain_name(snapshot.snapshot_id)}.json"
        write_json_atomically(path, records.to_dict(snapshot), durable=self.durable)
        self._index_snapshot(snapshot)

    def remove_snapshot(self, snapshot_id: str) -> None:
        _unlink(self._snapshots_dir / f"{plain_name(snapshot_id)}.json")
        snapshot = self._snapshots.pop(snapshot_id, None)
        if snapshot is not None:
            self._snapshot_names.pop(snapshot.name, None)

    def save_group(self, group: GroupSnapshot) -> None:
        path = self._groups_dir / f"{plain_name(group.group_snapshot_id)}.json"
        write_json_atomically(path, records.to_dict(group), durable=self.durable)
        self._index_group(group)

    def remove_group(self, group_snapshot_id: str) -> None:
        _unlink(self._groups_dir / f"{plain_name(group_snapshot_id)}.json")
        group = self._groups.pop(group_snapshot_id, None)
        if group is not None:
            self._group_names.pop(group.name, None)

    def _index_group(self, group: GroupSnapshot) -> None:
        self._groups[group.group_snapshot_id] = group
        self._group_names[group.name] = group.group_snapshot_id

    def _index_volume(self, volume: Volume) -> None:
        self._volumes[volume.volume_id] = volume
        self._volume_names[volume.name] = volume.volume_id

    def _index_snapshot(self, snapshot: Snapshot) -> None:
        self._snapshots[snapshot.snapshot_id] = snapshot
        self._snapshot_names[snapshot.name] = snapshot.snapshot_id


def write_json_atomically(path: pathlib.Path, data: Any, *, durable: bool = True) -> None:
    """Replace `path` with `data` as JSON: readers see the old file or the new one, nothing else."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with temporary.open("w", encoding="utf-8") as file:
        json.dump(data, file, sort_keys=True, separators=(",", ":"))
        if durable:
            file.flush()
            os.fsync(file.fileno())
    os.replace(temporary, path)
    if durable:
        _fsync_directory(path.parent)


def _fsync_directory(directory: pathlib.Path) -> None:
    # The rename itself lives in the directory: without this, a power cut may undo it.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_records(directory: pathlib.Path) -> Iterator[dict[str, Any]]:
    for path in sorted(directory.glob("*.json")):
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            # Atomic writes make a torn record impossible; a hand-edited one is not fatal.
            logger.warning("state_record_unreadable", path=str(path), error=str(exc))
            continue
        yield raw


def _remove_leftover_temporaries(directory: pathlib.Path) -> None:
    for path in directory.glob(".*.tmp"):
        _unlink(path)


def _unlink(path: pathlib.Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
