"""The event loop's lag probe (`kopf_csi.looplag`), on a real event loop.

We test these aspects:
- a loop held up by a blocking call shows as a lag at least as long as the hold-up;
- the probe goes on after an observer fails;
- `stop` stops it, and `start` twice makes one probe, not two.
"""

from __future__ import annotations

import asyncio
import time

from kopf_csi.looplag import LagProbe

INTERVAL = 0.01


async def test_a_blocked_loop_shows_as_lag() -> None:
    seen: list[float] = []
    probe = LagProbe(seen.append, interval=INTERVAL)
    probe.start()
    await asyncio.sleep(INTERVAL * 3)
    time.sleep(0.2)  # noqa: ASYNC251 (the point: the loop's one thread is busy, timers wait)
    await asyncio.sleep(INTERVAL * 3)
    probe.stop()
    assert max(seen) >= 0.2 - INTERVAL
    assert all(lag >= 0 for lag in seen)


async def test_it_goes_on_after_a_failing_observer_and_stops_when_told() -> None:
    calls: list[float] = []
    thrice = asyncio.Event()
    failures: list[object] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: failures.append(context.get("exception")))

    def observe(lag: float) -> None:
        calls.append(lag)
        if len(calls) == 3:
            thrice.set()
        if len(calls) == 1:
            raise RuntimeError("an observer's bug")

    probe = LagProbe(observe, interval=INTERVAL)
    probe.start()
    probe.start()  # no second timer
    await asyncio.wait_for(thrice.wait(), timeout=10)
    assert [type(exc) for exc in failures] == [RuntimeError]
    probe.stop()
    assert not probe.running
    stopped_at = len(calls)
    await asyncio.sleep(INTERVAL * 5)
    assert len(calls) == stopped_at
