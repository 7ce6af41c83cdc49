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
import sys
import time
import tracemalloc
from typing import Any

__all__ = ["Growth", "heap_figures"]

TOP = 15


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


def heap_figures() -> dict[str, int]:
    """glibc's main figures (KiB) and pymalloc's allocated blocks; empty parts where absent."""
    figures: dict[str, int] = {"py_blocks": sys.getallocatedblocks()}
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

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop
        self._snapshot: tracemalloc.Snapshot | None = None
        self._types: collections.Counter[str] | None = None
        self._started = time.perf_counter()

    def look(self) -> dict[str, Any]:
        gc.collect()
        types = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
        answer: dict[str, Any] = {
            "at": round(time.perf_counter() - self._started, 1),
            "objects": sum(types.values()),
            "tasks": self._tasks(),
            **heap_figures(),
        }
        if self._types is not None:
            diff = types.copy()
            diff.subtract(self._types)
            answer["types"] = [(name, n) for name, n in diff.most_common(TOP) if n > 0]
        self._types = types
        if tracemalloc.is_tracing():
            answer.update(self._traced())
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
        return answer
