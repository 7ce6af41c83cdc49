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
"""

from __future__ import annotations

import gc

__all__ = ["freeze_startup", "thaw"]


def freeze_startup() -> int:
    """Collect once, then freeze what is alive; the number of objects frozen in all."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


async def thaw() -> None:
    """Unfreeze (at stop): the objects are the collector's again (a stopper: async)."""
    gc.unfreeze()
