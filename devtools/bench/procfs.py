"""What Linux says about a process: CPU time, memory and threads from /proc/<pid>/.

CPU is `utime + stime` from `/proc/<pid>/stat` (every thread, the exited ones included; in
clock ticks, usually 10 ms). Memory is `VmRSS` (now) and `VmHWM` (the peak resident set since
the process started) from `/proc/<pid>/status`, which also parts the RSS into anonymous memory
and file pages (`RssAnon`, `RssFile`). Client sockets are matched to processes through
`/proc/net/tcp` and `/proc/<pid>/fd`, to tell whose HTTP requests the emulated API serves.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Iterable

__all__ = ["MiB", "Sample", "cpu_seconds", "sample", "socket_owners", "status"]

MiB = 1024 * 1024
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True)
class Sample:
    cpu: float
    """Seconds of CPU (user + system) since the process started."""
    rss: int
    """Resident set now, bytes."""
    hwm: int
    """Peak resident set so far, bytes."""
    threads: int


def cpu_seconds(pid: int) -> float:
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15


def status(pid: int) -> dict[str, str]:
    """`/proc/<pid>/status`, key by key (`VmRSS` → `123 kB`)."""
    fields: dict[str, str] = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def sample(pid: int) -> Sample:
    fields = status(pid)
    return Sample(
        cpu=cpu_seconds(pid),
        rss=_kib(fields.get("VmRSS", "0 kB")),
        hwm=_kib(fields.get("VmHWM", "0 kB")),
        threads=int(fields.get("Threads", "0")),
    )


def _kib(value: str) -> int:
    return int(value.split()[0]) * 1024


def socket_owners(
    sockets: Iterable[tuple[int, int]], pids: dict[str, int]
) -> dict[tuple[int, int], str]:
    """Which of `pids` (label -> pid) holds each TCP client socket `(local_port, remote_port)`.

    One read of the TCP tables and one pass over each process's descriptors for the whole
    batch: identifying a burst of new connections one at a time cost the emulated API about
    2 ms each, which delayed the requests it was serving. "unknown" for a socket no process in
    `pids` holds (or one gone already).
    """
    wanted = set(sockets)
    inodes = _socket_inodes(wanted)
    owners = dict.fromkeys(wanted, "unknown")
    links = {f"socket:[{inode}]": key for key, inode in inodes.items()}
    for label, pid in pids.items():
        if not links:
            break
        try:
            entries = list(pathlib.Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for entry in entries:
            try:
                key = links.pop(os.readlink(entry), None)
            except OSError:
                continue
            if key is not None:
                owners[key] = label
    return owners


def _socket_inodes(wanted: set[tuple[int, int]]) -> dict[tuple[int, int], str]:
    found: dict[tuple[int, int], str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = pathlib.Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            key = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16))
            if key in wanted:
                found[key] = inode
        if len(found) == len(wanted):
            break
    return found
