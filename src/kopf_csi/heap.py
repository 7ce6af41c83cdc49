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

A heap its process froze already (an application that embeds the operator, the testing kit's
test process) is that process's: the operator neither collects it again nor thaws it at stop.
The full collection is of the whole process: in a test process of 200,000-250,000 objects it
held the operator's loop 0.2-1 s at every start, long enough on a loaded machine for a Lease's
1 s renew deadline to pass.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_startup", "thaw"]


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
