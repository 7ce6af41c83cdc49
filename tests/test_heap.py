"""The start-up heap is frozen while the operator runs (`kopf_csi.heap`), and thawed at stop.

A full pass of the garbage collector over the start-up heap stopped the operator's loop for
0.28-0.33 s in the middle of a 200-claim burst (docs/benchmarks.md, "Burst latency").

We test these aspects:
- once every start-up handler has run, the objects alive then are frozen (none before);
- a full collection then leaves them alone: it scans far fewer objects than are frozen;
- at stop they are the collector's again;
- a heap its process froze already (the kit's test process, an embedding application) is
  left as it is: nothing more frozen at the start, nothing thawed at the stop.
"""

from __future__ import annotations

import gc

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
