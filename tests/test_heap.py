"""The start-up heap is frozen while the operator runs (`kopf_csi.heap`), and thawed at stop.

A full pass of the garbage collector over the start-up heap stopped the operator's loop for
0.28-0.33 s in the middle of a 200-claim burst (docs/benchmarks.md, "Burst latency").

We test these aspects:
- once every start-up handler has run, the objects alive then are frozen (none before);
- a full collection then leaves them alone: it scans far fewer objects than are frozen;
- at stop they are the collector's again;
- a heap its process froze already (the kit's test process, an embedding application) is
  left as it is: nothing more frozen at the start, nothing thawed at the stop;
- the C heap's free pages are given back every `TRIM_INTERVAL` while the operator runs
  (glibc's `malloc_trim`), and it is a no-op where there is no glibc;
- once the operator has started, a block of 256 KiB (uvloop's TLS buffer) is mapped on its
  own even after a larger mapped block was freed (glibc's dynamic threshold would carve it out
  of the heap); a user's own glibc malloc settings are left alone.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import subprocess
import sys

import pytest

from kopf_csi import heap
from kopf_csi.driver import Driver
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread


async def test_the_startup_heap_is_frozen_while_the_operator_runs(
    cluster: EmulatedCluster, driver: Driver, settings: Settings
) -> None:
    gc.unfreeze()  # whatever an earlier test left
    operator = OperatorThread(settings=settings)
    await operator.start()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # modules, classes, the handlers' registry, ...
        assert len(gc.get_objects()) < frozen  # a full pass does not scan them
    finally:
        await operator.stop()
    assert gc.get_freeze_count() == 0


async def test_a_heap_the_process_froze_is_left_as_it_is(
    cluster: EmulatedCluster, driver: Driver, settings: Settings
) -> None:
    gc.collect()
    gc.freeze()  # as the kit's test process has it, or an application that embeds the operator
    frozen = gc.get_freeze_count()
    operator = OperatorThread(settings=settings)
    await operator.start()
    try:
        assert gc.get_freeze_count() <= frozen  # nothing of the start frozen (some died)
    finally:
        await operator.stop()
    assert gc.get_freeze_count() > frozen // 2  # still the process's, not thawed


async def test_the_c_heap_is_trimmed_while_the_operator_runs(
    cluster: EmulatedCluster, driver: Driver, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixed: list[bool] = []
    monkeypatch.setattr(heap, "fix_mmap_threshold", lambda: fixed.append(True) or True)
    operator = OperatorThread(settings=settings)
    await operator.start()
    try:
        assert fixed == [True]  # large blocks mapped on their own from the start on
        trimmer = operator.memo.heap_trimmer
        assert isinstance(trimmer, heap.Trimmer)
        assert trimmer.interval == heap.TRIM_INTERVAL
        assert (trimmer._handle is not None) == trimmer.available  # started, where it can
    finally:
        await operator.stop()
    assert trimmer._handle is None  # stopped with the operator


async def test_the_trimmer_trims_every_interval_until_stopped() -> None:
    calls: list[float] = []
    third = asyncio.Event()
    loop = asyncio.get_running_loop()

    def trim() -> bool:
        calls.append(loop.time())
        if len(calls) == 3:
            third.set()
        return True

    trimmer = heap.Trimmer(0.05, function=trim)
    trimmer.start()
    await asyncio.wait_for(third.wait(), 5.0)
    await trimmer.stop()
    assert trimmer.trims == len(calls) == 3
    assert all(b - a >= 0.049 for a, b in itertools.pairwise(calls))  # an interval apart
    await asyncio.sleep(0.15)
    assert trimmer.trims == len(calls)  # nothing after the stop


@pytest.mark.skipif(heap._MALLOC_TRIM is None, reason="glibc's malloc_trim only")
def test_trimming_gives_freed_pages_back() -> None:
    blocks = [bytearray(b"\x01") * (64 * 1024) for _ in range(400)]  # 25 MiB, touched, each
    # below the mmap threshold: in the arena
    keep = blocks[-1]  # holds the arena's top: free() alone cannot shrink it
    del blocks[:-1]
    before = _rss()
    assert heap.trim() is True
    assert _rss() < before - 10 * 1024 * 1024
    del keep


def test_trimming_is_a_no_op_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_MALLOC_TRIM", None)
    assert heap.trim() is False
    assert heap.Trimmer().available is False


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


_MAPPED_AFTER_A_FREE = """
import ctypes, sys
from kopf_csi import heap

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
mallinfo2.restype = Info
if sys.argv[1] == "fixed":
    assert heap.fix_mmap_threshold({})
big = bytearray(4 << 20)  # mapped; once freed, glibc's dynamic threshold rises to its size
del big
before = mallinfo2().hblkhd
block = bytearray(256 << 10)
print(mallinfo2().hblkhd - before)
"""


@pytest.mark.skipif(heap._MALLOPT is None, reason="glibc's mallopt only")
@pytest.mark.parametrize(("mode", "mapped"), [("fixed", True), ("glibc's default", False)])
def test_large_blocks_stay_mapped_after_a_larger_one_is_freed(mode: str, mapped: bool) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")
    }
    probe = subprocess.run(
        [sys.executable, "-c", _MAPPED_AFTER_A_FREE, mode],
        capture_output=True, text=True, check=True, env=env, timeout=60,
    )  # fmt: skip
    grown = int(probe.stdout)
    assert (grown >= 256 << 10) is mapped, grown


def test_mmap_threshold_is_left_to_a_user_who_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(heap, "_MALLOPT", lambda param, value: calls.append((param, value)) or 1)
    assert heap.fix_mmap_threshold({"MALLOC_MMAP_THRESHOLD_": "65536"}) is False
    tunables = "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=65536"
    assert heap.fix_mmap_threshold({"GLIBC_TUNABLES": tunables}) is False
    assert calls == []
    # another tunable (of malloc or not) leaves the threshold ours to set
    assert heap.fix_mmap_threshold({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}) is True
    assert heap.fix_mmap_threshold({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}) is True
    calls.clear()
    assert heap.fix_mmap_threshold({}) is True
    assert calls == [(heap._M_MMAP_THRESHOLD, heap.MMAP_THRESHOLD)]
    monkeypatch.setattr(heap, "_MALLOPT", None)  # not glibc
    assert heap.fix_mmap_threshold({}) is False
