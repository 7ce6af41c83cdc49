"""The content of volumes and snapshots on disk, and the node's target paths.

Layout under the data directory::

    volumes/<volume_id>     a directory (mount volumes) or a sparse file (block volumes)
    snapshots/<snapshot_id> a copy of the source volume's directory or file

Nothing is mounted: a staged or published volume is a symlink at the target path that points at
the volume's directory or file. That is enough for a workload emulator to read and write
through the target path, and needs no privileges. Synchronous file-system calls only; callers
run the slow ones (copies, usage walks) in a thread. Which records exist is `state`'s business.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shutil

__all__ = ["Storage", "Usage", "plain_name"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Usage:
    """Bytes and inodes used under a path (the numbers NodeGetVolumeStats reports)."""

    bytes_used: int
    inodes_used: int


class Storage:
    """Volume and snapshot content under one data directory."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.volumes_dir = root / "volumes"
        self.snapshots_dir = root / "snapshots"

    def prepare(self) -> None:
        self.volumes_dir.mkdir(parents=True, exist_ok=True)
        self.snapshots_dir.mkdir(parents=True, exist_ok=True)

    def volume_path(self, volume_id: str) -> pathlib.Path:
        return self.volumes_dir / plain_name(volume_id)

    def snapshot_path(self, snapshot_id: str) -> pathlib.Path:
        return self.snapshots_dir / plain_name(snapshot_id)

    # Volumes and snapshots.

    def create_volume(self, volume_id: str, *, block: bool, size: int) -> None:
        """An empty directory, or a sparse file of `size` bytes; idempotent."""
        path = self.volume_path(volume_id)
        if block:
            with path.open("ab") as file:
                file.truncate(size)
        else:
            path.mkdir(exist_ok=True)

    def copy_volume(self, source: pathlib.Path, volume_id: str, *, block: bool, size: int) -> None:
        """A new volume with the content of a snapshot or another volume (slow: run in a thread)."""
        path = self.volume_path(volume_id)
        _remove(path)  # a half-copied leftover of an interrupted attempt
        if block:
            shutil.copyfile(source, path)
            self.resize_block(volume_id, size)
        else:
            shutil.copytree(source, path, symlinks=True)

    def snapshot_volume(self, volume_id: str, snapshot_id: str, *, block: bool) -> None:
        """Copy a volume's content into a new snapshot (slow: run in a thread)."""
        source = self.volume_path(volume_id)
        path = self.snapshot_path(snapshot_id)
        _remove(path)
        if block:
            shutil.copyfile(source, path)
        else:
            shutil.copytree(source, path, symlinks=True)

    def resize_block(self, volume_id: str, size: int) -> None:
        with self.volume_path(volume_id).open("r+b") as file:
            file.truncate(size)

    def remove_volume(self, volume_id: str) -> None:
        _remove(self.volume_path(volume_id))

    def remove_snapshot(self, snapshot_id: str) -> None:
        _remove(self.snapshot_path(snapshot_id))

    def has_volume(self, volume_id: str) -> bool:
        return self.volume_path(volume_id).exists()

    def remove_orphans(self, *, volume_ids: set[str], snapshot_ids: set[str]) -> list[str]:
        """Content without a record: left by a crash between the copy and the record write."""
        removed: list[str] = []
        for directory, known in (
            (self.volumes_dir, volume_ids),
            (self.snapshots_dir, snapshot_ids),
        ):
            for path in directory.iterdir():
                if path.name not in known:
                    _remove(path)
                    removed.append(str(path))
        return removed

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.root).free

    def usage(self, volume_id: str) -> Usage:
        """Apparent bytes and entries under a volume (slow for big trees: run in a thread)."""
        path = self.volume_path(volume_id)
        if path.is_file():
            return Usage(bytes_used=path.stat().st_blocks * 512, inodes_used=1)
        total, count = 0, 1
        for dirpath, dirnames, filenames in os.walk(path):
            for name in filenames:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(dirpath, name)).st_size
            count += len(filenames) + len(dirnames)
        return Usage(bytes_used=total, inodes_used=count)

    # Node paths: symlinks instead of mounts.

    def ensure_directory(self, path: pathlib.Path) -> None:
        """A staging directory: the CO should have made it; harmless if it did."""
        path.mkdir(parents=True, exist_ok=True)

    def link(self, target: pathlib.Path, volume_id: str) -> bool:
        """Make `target` a symlink to the volume; False if something else is in the way."""
        content = self.volume_path(volume_id)
        if target.is_symlink():
            return pathlib.Path(os.readlink(target)) == content
        if target.is_dir():
            # COs often pre-create the target directory; an empty one is ours to replace.
            if any(target.iterdir()):
                return False
            target.rmdir()
        elif target.exists():
            return False
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(content, target_is_directory=content.is_dir())
        return True

    def unlink(self, target: pathlib.Path) -> None:
        """Remove what `link` put at `target` (or an empty directory); nothing there is fine.

        Never a file or a non-empty directory: those are not ours, whatever the records say.
        """
        if target.is_symlink():
            target.unlink()
        elif target.is_dir():
            with contextlib.suppress(OSError):
                target.rmdir()

    def is_linked(self, target: pathlib.Path, volume_id: str) -> bool:
        return target.is_symlink() and pathlib.Path(os.readlink(target)) == self.volume_path(
            volume_id
        )


def plain_name(name: str) -> str:
    """A record id as a file name: ids come from requests, so refuse `..`, `/` and friends."""
    if not name or name in {".", ".."} or "/" in name or "\0" in name:
        raise ValueError(f"{name!r} cannot name a file")
    return name


def _remove(path: pathlib.Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
