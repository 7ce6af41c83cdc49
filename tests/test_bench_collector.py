"""`devtools.bench.collector.FrozenHeap`: the benchmark process's heap, frozen as it runs.

Its full collections stopped the emulated API for up to half a second in a 10-minute churn;
frozen every few seconds, a full collection walks only what the last seconds made.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from devtools.bench.collector import FrozenHeap

from .conftest import until


@pytest.fixture
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


async def test_the_heap_is_collected_then_frozen_and_every_pass_timed(thawed: None) -> None:
    kept = [[] for _ in range(20_000)]  # alive across the freeze (tracked: lists)
    heap = FrozenHeap(every=0.05)
    heap.start()
    try:
        # two passes due in 0.1 s; a busy machine is slower
        await until(lambda: len(heap.pauses[2]) >= 2, timeout=30)
        assert gc.get_freeze_count() >= len(kept)
        gc.collect()
    finally:
        await heap.stop()
    summary = heap.summary()
    full = summary["by_generation"][2]
    assert full["count"] >= 3  # one before each freeze, and ours
    assert full["max_ms"] > 0
    assert full["total_s"] > 0
    assert heap._timed not in gc.callbacks  # stopped: the process's collections untimed again


async def test_with_every_zero_it_only_times(thawed: None) -> None:
    heap = FrozenHeap(every=0)
    heap.start()
    try:
        await asyncio.sleep(0.05)
        gc.collect()
    finally:
        await heap.stop()
    assert gc.get_freeze_count() == 0
    assert heap.summary()["by_generation"][2]["count"] >= 1
