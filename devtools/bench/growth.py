"""What grew in the operator process between two looks: the benchmark's memory probe.

`python -m devtools.bench.operator` answers ``growth`` with one `Growth.look()`: live memory
by allocation traceback compared with the previous look (tracemalloc, when the operator runs
with ``--tracemalloc FRAMES``), the garbage collector's objects by type against the previous
look, the operator loop's tasks, and glibc's heap (`mallinfo2`: bytes in use and bytes free
inside its arenas, which tells live objects from fragmentation). Churn mode asks for one every
`--memory-every` seconds (`devtools.bench.churn`) and reports the series.

A debugging instrument, not a production path: it runs in the benchmark's operator process
only, between the operator's own work (a full collection and a walk of every object: 0.1 to
0.5 s of CPU each look, counted in the run's CPU).
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import ctypes.util
import gc
import os
import sys
import tempfile
import threading
import time
import tracemalloc
import types
from collections.abc import Callable
from typing import Any

from devtools.bench import procfs

__all__ = ["Growth", "heap_figures"]

TOP = 15
BIG = 512
"""Blocks over this many bytes bypass pymalloc for glibc's malloc: the heap `mallinfo2` sees."""
CONTAINER_MIN = 256
"""Containers of at least this many items are followed from look to look."""
_ATOMS = (str, bytes, int, float, type(None))
_CONTAINERS = (dict, list, set, frozenset, collections.deque, bytearray)


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _libc() -> Any:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


_LIBC = _libc()


_PYMALLOC_LINES = {
    "# arenas allocated current": "py_arenas",
    "# arenas reclaimed": "py_arenas_freed",
    "# bytes in allocated blocks": "py_block_bytes",
}


def pymalloc_figures() -> dict[str, int]:
    """pymalloc's arenas (1 MiB each; one is given back only once all its blocks are free) and
    the bytes its live blocks take, from `sys._debugmallocstats()` (written to the C stderr:
    read back through a temporary file); empty where it says nothing of them. For the few
    milliseconds of the capture, what another thread writes to stderr (a log line of the
    operator's) lands in the file and is lost: a debugging instrument, looks only."""
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        try:
            os.dup2(captured.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        text = captured.read().decode("utf-8", "replace")
    figures: dict[str, int] = {}
    for line in text.splitlines():
        label, _, value = line.partition("=")
        key = _PYMALLOC_LINES.get(label.strip())
        if key is not None and value.strip():
            figures[key] = int(value.strip().replace(",", ""))
    return figures


def rss_parts() -> dict[str, int]:
    """The RSS's parts (KiB): anonymous memory (the heaps, mapped blocks, stacks) apart from
    file pages (the code of the interpreter and its libraries, counted as they are first run);
    empty where `/proc` does not say."""
    try:
        fields = procfs.status(os.getpid())
        return {
            "rss_anon_kib": int(fields["RssAnon"].split()[0]),  # "52876 kB"
            "rss_file_kib": int(fields["RssFile"].split()[0]),
        }
    except (OSError, KeyError):
        return {}


def heap_figures() -> dict[str, int]:
    """glibc's main figures (KiB) and pymalloc's allocated blocks; empty parts where absent."""
    figures: dict[str, int] = {
        "py_blocks": sys.getallocatedblocks(), **pymalloc_figures(), **rss_parts(),
    }  # fmt: skip
    mallinfo2 = getattr(_LIBC, "mallinfo2", None)
    if mallinfo2 is not None:
        mallinfo2.restype = _MallInfo2
        info = mallinfo2()
        figures.update(
            malloc_arena_kib=info.arena // 1024,  # sbrk'd heap of the main arena (+ others)
            malloc_mmap_kib=info.hblkhd // 1024,  # big blocks mmap'd on their own
            malloc_used_kib=info.uordblks // 1024,
            malloc_free_kib=info.fordblks // 1024,  # free inside the arenas: fragmentation
        )
    return figures


class Growth:
    """Compares each look with the previous one (the first look is the baseline)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None,
        extra: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self._loop = loop
        self._extra = extra
        self._snapshot: tracemalloc.Snapshot | None = None
        self._types: collections.Counter[str] | None = None
        self._big: dict[Any, tuple[int, int]] | None = None
        self._containers: dict[int, tuple[int, str]] | None = None
        self._started = time.perf_counter()

    def look(self, *, walk: bool = False) -> dict[str, Any]:
        """One look; with `walk`, the containers too (`_grown_containers`)."""
        gc.collect()
        types = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
        answer: dict[str, Any] = {
            "at": round(time.perf_counter() - self._started, 1),
            "objects": sum(types.values()),
            "tasks": self._tasks(),
            "threads": _threads(),
            **heap_figures(),
        }
        if self._extra is not None:
            answer.update(self._extra())
        if self._types is not None:
            diff = types.copy()
            diff.subtract(self._types)
            answer["types"] = [(name, n) for name, n in diff.most_common(TOP) if n > 0]
        self._types = types
        if tracemalloc.is_tracing():
            answer.update(self._traced())
        if walk:
            answer.update(self._grown_containers())
        return answer

    def _tasks(self) -> int | None:
        if self._loop is None:
            return None
        return len(asyncio.all_tasks(self._loop))

    def _traced(self) -> dict[str, Any]:
        snapshot = tracemalloc.take_snapshot().filter_traces(
            (tracemalloc.Filter(False, tracemalloc.__file__),)
        )
        answer: dict[str, Any] = {
            "traced_kib": sum(stat.size for stat in snapshot.statistics("filename")) // 1024
        }
        if self._snapshot is not None:
            stats = snapshot.compare_to(self._snapshot, "traceback")
            answer["grown"] = [
                {
                    "kib": stat.size_diff // 1024,
                    "blocks": stat.count_diff,
                    "where": [f"{frame.filename}:{frame.lineno}" for frame in stat.traceback],
                }
                for stat in sorted(stats, key=lambda s: s.size_diff, reverse=True)[:TOP]
                if stat.size_diff > 0
            ]
        self._snapshot = snapshot
        answer.update(self._grown_big(snapshot))
        return answer

    def _grown_big(self, snapshot: tracemalloc.Snapshot) -> dict[str, Any]:
        """Traced blocks over `BIG` bytes (glibc's, not pymalloc's) by traceback, against the
        previous look: buffers and containers' own tables that object counts do not show."""
        big: dict[Any, tuple[int, int]] = {}
        for trace in snapshot.traces:
            if trace.size > BIG:
                size, count = big.get(trace.traceback, (0, 0))
                big[trace.traceback] = (size + trace.size, count + 1)
        answer: dict[str, Any] = {"big_kib": sum(size for size, _ in big.values()) // 1024}
        if self._big is not None:
            previous = self._big
            diffs = []
            for traceback in set(big) | set(previous):
                size, count = big.get(traceback, (0, 0))
                old_size, old_count = previous.get(traceback, (0, 0))
                if size != old_size:
                    diffs.append((size - old_size, count - old_count, traceback))
            diffs.sort(key=lambda d: d[0], reverse=True)
            answer["big_grown"] = [
                {"kib": round(size / 1024, 1), "blocks": count,
                 "where": [f"{frame.filename}:{frame.lineno}" for frame in traceback]}
                for size, count, traceback in diffs[:TOP]
                if size > 0
            ]  # fmt: skip
        self._big = big
        return answer

    def _grown_containers(self) -> dict[str, Any]:
        """Containers of at least `CONTAINER_MIN` items reachable from the modules or from the
        collector's objects (the frozen start-up heap included, and dicts of atoms the
        collector does not track), and those that grew since the previous walk. Its set of
        the ids seen and its stack take several MiB for a moment: glibc keeps them in the RSS
        until the operator's next trim (a look without the walk does not)."""
        found: dict[int, tuple[int, int, str]] = {}  # id -> (len, bytes, where)
        seen: set[int] = set()
        stack: list[tuple[Any, str]] = [(sys.modules, "sys.modules")]
        stack += [(o, type(o).__qualname__) for o in gc.get_objects()]
        mine = (self, self._types, self._big, self._containers, self._snapshot, seen, stack)
        own = {id(o) for o in mine}
        while stack:
            obj, where = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if id(obj) in own:  # the walk's and the looks' own state
                continue
            if isinstance(obj, _CONTAINERS):
                size = len(obj)
                if size >= CONTAINER_MIN:
                    found[id(obj)] = (size, sys.getsizeof(obj), f"{type(obj).__qualname__} {where}")
            if isinstance(obj, dict):
                children = [
                    (value, f"{where}[{key!r:.40}]"[-160:] if isinstance(key, str) else where)
                    for key, value in list(obj.items())  # one C call: the operator's thread
                    if not isinstance(value, _ATOMS)  # may change the dict between bytecodes
                ]
            elif isinstance(obj, _ATOMS):
                continue
            else:
                label = (
                    f"module {obj.__name__}"
                    if isinstance(obj, types.ModuleType)
                    else type(obj).__qualname__
                )
                children = [
                    (child, label)
                    for child in gc.get_referents(obj)
                    if not isinstance(child, _ATOMS)
                ]
            stack += [(child, label) for child, label in children if id(child) not in seen]
        largest = sorted(found.items(), key=lambda item: item[1][1], reverse=True)
        answer: dict[str, Any] = {
            "containers": [
                {"len": size, "kib": nbytes // 1024, "what": where}
                for _, (size, nbytes, where) in largest[:TOP]
            ]
        }
        if self._containers is not None:
            previous = self._containers
            grown = sorted(
                (
                    (size - previous.get(key, (0, ""))[0], size, where)
                    for key, (size, _, where) in found.items()
                    if size > previous.get(key, (0, ""))[0]
                ),
                reverse=True,
            )
            answer["containers_grown"] = [
                {"by": by, "len": size, "what": where} for by, size, where in grown[:TOP]
            ]
        self._containers = {key: (size, where) for key, (size, _, where) in found.items()}
        return answer


def _threads() -> dict[str, Any]:
    """The process's threads (each may have a glibc arena of its own), Python's by name."""
    try:
        native = len(os.listdir("/proc/self/task"))
    except OSError:
        native = None
    names = collections.Counter(
        thread.name.split("(")[0].rstrip("_0123456789") for thread in threading.enumerate()
    )
    return {"native": native, "python": dict(names)}
