"""The start-up heap, frozen: the garbage collector's full passes skip it.

CPython's cyclic collector now and then runs a full pass over every tracked object (when the
objects that survived the younger passes reach a quarter of those the last full pass kept).
The operator's heap is mostly what start-up made: the imported modules (kopf,
kubernetes-asyncio, aiohttp, grpclib, betterproto2), their classes and functions, the handler
registry. A full pass over it took 0.28-0.33 s on the benchmark's loaded 2-core machine, in the
middle of a burst of claims, and the event loop (every controller) waited through it: the PVs
stopped coming for that long (docs/benchmarks.md, "Burst latency"). Objects alive once start-up
is done are moved to the collector's permanent generation (`gc.freeze()`, after one full
collection, so no garbage is frozen): a full pass then scans only what was made since.
Frozen objects are still freed by reference counting; a cycle among them is kept until
`thaw()` (at stop), when they go back to the oldest generation.

The C heap is given back to the kernel every `TRIM_INTERVAL` seconds (`Trimmer`, glibc only):
glibc's `free` returns memory only from the top of an arena, so after a peak the pages of
freed blocks below live ones stay in the RSS (under churn, 10-25 MiB free inside the arenas
and the RSS at its high-water mark); `malloc_trim(0)` gives those pages back
(docs/benchmarks.md, "RSS over 10 minutes"; docs/decisions.md, "Memory").

Blocks of `MMAP_THRESHOLD` bytes or more are mapped on their own, always (`fix_mmap_threshold`,
glibc only): glibc raises that threshold, by default, to the size of every mapped block freed
(up to 32 MiB), so after the first TLS connection closes, every new connection's 256 KiB
buffer (uvloop's, malloc'd and mostly never written) is carved out of the heap among live
blocks, its pages resident, instead of mapped and left untouched: the RSS grew with each
connection the API pool added under churn (docs/benchmarks.md, "RSS at 20/s: the TLS reads").

A heap its process froze already (an application that embeds the operator, the testing kit's
test process) is that process's: the operator neither collects it again nor thaws it at stop.
The full collection is of the whole process: in a test process of 200,000-250,000 objects it
held the operator's loop 0.2-1 s at every start, long enough on a loaded machine for a Lease's
1 s renew deadline to pass.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

__all__ = [
    "MMAP_THRESHOLD", "TRIM_INTERVAL", "Trimmer", "fix_mmap_threshold", "freeze_startup", "thaw",
    "trim",
]  # fmt: skip

_log = structlog.get_logger(__name__)

TRIM_INTERVAL = 60.0
"""Seconds between two `trim`s while the operator runs."""


_OURS = False
"""Whether the frozen heap is this module's (`freeze_startup` froze it): `thaw` undoes only that."""


def freeze_startup() -> int:
    """Collect once, then freeze what is alive, unless the heap is frozen already (by the
    process: left alone); the number of objects frozen in all."""
    global _OURS
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()
        _OURS = True
    return gc.get_freeze_count()


async def thaw() -> None:
    """Unfreeze (at stop) what `freeze_startup` froze: the objects are the collector's again
    (a stopper: async)."""
    global _OURS
    if _OURS:
        gc.unfreeze()
        _OURS = False


def _glibc_function(name: str, argtypes: list[Any]) -> Callable[..., int] | None:
    """A function of glibc's malloc (`malloc_trim`, `mallopt`), or None where the C library
    has none (musl, macOS, ...: then what uses it does nothing)."""
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        function: Any = getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


_MALLOC_TRIM = _glibc_function("malloc_trim", [ctypes.c_size_t])
# glibc's alone: musl has mallopt as a stub and no malloc_trim, and no such thresholds
_MALLOPT = _glibc_function("mallopt", [ctypes.c_int, ctypes.c_int]) if _MALLOC_TRIM else None

MMAP_THRESHOLD = 128 * 1024
"""Bytes from which a block is mapped on its own (glibc's own starting value, kept fixed)."""
_M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)


def _user_set_threshold(environ: Mapping[str, str]) -> bool:
    """Whether the user set glibc's mmap threshold through its environment variables."""
    tunables = environ.get("GLIBC_TUNABLES") or ""
    return bool(environ.get("MALLOC_MMAP_THRESHOLD_")) or "glibc.malloc.mmap_threshold" in tunables


def fix_mmap_threshold(environ: Mapping[str, str] | None = None) -> bool:
    """Map every block of `MMAP_THRESHOLD` bytes or more on its own, for good (glibc's dynamic
    threshold off): whether it was set. Left alone where the C library is not glibc, and where
    the user set the threshold through glibc's environment variables (theirs wins)."""
    environ = os.environ if environ is None else environ
    if _MALLOPT is None or _user_set_threshold(environ):
        return False
    return _MALLOPT(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1


def trim() -> bool:
    """Give the free pages of every glibc arena back to the kernel (`malloc_trim(0)`): whether
    there was anything to give back; False where the C library is not glibc."""
    return _MALLOC_TRIM is not None and _MALLOC_TRIM(0) == 1


class Trimmer:
    """`trim` every `interval` seconds on the running loop, from `start` until `stop`."""

    def __init__(self, interval: float = TRIM_INTERVAL, *, function: Callable[[], bool] = trim):
        self.interval = interval
        self.trims = 0
        self._function = function
        self._handle: asyncio.TimerHandle | None = None

    @property
    def available(self) -> bool:
        return self._function is not trim or _MALLOC_TRIM is not None

    def start(self) -> None:
        """Start (on the running loop); nothing where there is no `malloc_trim`."""
        if self.available and self._handle is None:
            self._schedule(asyncio.get_running_loop())

    async def stop(self) -> None:
        """Stop trimming (a stopper: async)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handle = loop.call_later(self.interval, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        started = time.perf_counter()
        released = self._function()
        self.trims += 1
        _log.debug(
            "heap_trimmed", released=released, seconds=round(time.perf_counter() - started, 4)
        )
        self._schedule(loop)
