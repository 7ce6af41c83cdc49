"""The benchmark process's own garbage collector, kept from stopping the emulated API server.

The benchmark process serves the emulated API, runs the KCM stand-in and the client, and its
heap grows with a long churn (every claim's task from the start, the emulator's objects and
events). Python's full collections walk all of it: in a 10-minute churn at 20 claims a second,
one every 6 s, growing from 0.1 to 0.5 s, the whole emulated control plane stopped meanwhile.
A real API server's garbage collector (Go's) runs beside its requests and pauses for well
under a millisecond; the operator's requests piling up behind those stops opened connections
a real server would not have made it open (docs/benchmarks.md, "Sixth session").

`FrozenHeap` collects and then freezes the process's heap every `every` seconds (`gc.freeze`:
what is alive then is never walked again), so that a full collection walks only what the last
seconds made, and times every collection of the process by generation. Cyclic garbage among
frozen objects is never freed; the benchmark's own RSS is not measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from typing import Any

__all__ = ["FrozenHeap"]


class FrozenHeap:
    def __init__(self, *, every: float = 10.0) -> None:
        self.every = every
        self.pauses: list[list[float]] = [[], [], []]  # seconds, by generation
        self._started = 0.0
        self._task: asyncio.Task[None] | None = None

    def _timed(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses[info["generation"]].append(time.perf_counter() - self._started)

    async def _freeze(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            gc.collect()
            gc.freeze()

    def start(self) -> None:
        """On the benchmark's loop: time the collections, freeze every `every` seconds (none
        with `every` 0: the collections are timed only)."""
        gc.callbacks.append(self._timed)
        if self.every > 0:
            self._task = asyncio.get_running_loop().create_task(self._freeze())

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._timed)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def summary(self) -> dict[str, Any]:
        """Per generation: how many collections, the longest and all their time."""
        return {
            "every_s": self.every,
            "by_generation": [
                {
                    "count": len(pauses),
                    "max_ms": round(max(pauses, default=0.0) * 1000, 1),
                    "total_s": round(sum(pauses), 3),
                }
                for pauses in self.pauses
            ],
        }
