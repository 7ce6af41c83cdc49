"""The kopf glue of leader election (`kopf_csi.runtime`).

We test these aspects:
- `wait_for_driver`: a standby replica waits past the timeout; without leader election, or
  once leadership is lost, the timeout holds;
- `request_stop`: the runner's `memo.stop_operator(reason)` if there is one, else SIGTERM to
  our own process (on which kopf stops gracefully);
- `stop_work`: the stoppers run once, last registered first, despite failures;
- `startup_handler_ids`: the start-up handlers of the registry in the memo.
"""

from __future__ import annotations

import asyncio
import signal
import types
from typing import Any

import kopf
import pytest

from kopf_csi import runtime


def standby(*, leader: bool = False, lost: str | None = None) -> types.SimpleNamespace:
    return types.SimpleNamespace(is_leader=leader, lost=lost)


async def test_a_standby_waits_for_the_driver_past_the_timeout() -> None:
    memo = types.SimpleNamespace(leadership=standby())
    waiting = asyncio.create_task(runtime.wait_for_driver(memo, timeout=0.05))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    memo.leadership.is_leader = True
    memo.driver = object()
    await asyncio.wait_for(waiting, 1)


@pytest.mark.parametrize(
    "leadership",
    [None, standby(lost="lease lost")],
    ids=["no-leader-election", "leadership-lost"],
)
async def test_otherwise_the_timeout_holds(leadership: Any) -> None:
    memo = types.SimpleNamespace(leadership=leadership)
    with pytest.raises(kopf.PermanentError, match=r"not connected within 0\.05s"):
        await asyncio.wait_for(runtime.wait_for_driver(memo, timeout=0.05), 2)


def test_request_stop_uses_the_runners_stopper(monkeypatch: pytest.MonkeyPatch) -> None:
    reasons: list[str] = []
    monkeypatch.setattr(runtime.os, "kill", lambda *_: pytest.fail("no signal expected"))
    runtime.request_stop(types.SimpleNamespace(stop_operator=reasons.append), "lost it")
    assert reasons == ["lost it"]


def test_request_stop_signals_our_own_process(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(runtime.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    runtime.request_stop(types.SimpleNamespace(), "lost it")
    assert sent == [(runtime.os.getpid(), signal.SIGTERM)]


async def test_stop_work_runs_each_stopper_once_last_first() -> None:
    order: list[str] = []

    def stopper(name: str, *, fail: bool = False) -> Any:
        async def stop() -> None:
            order.append(name)
            if fail:
                raise RuntimeError("boom")

        return stop

    memo = types.SimpleNamespace(
        stoppers=[stopper("leases"), stopper("claims", fail=True), stopper("attach")]
    )
    await runtime.stop_work(memo)
    await runtime.stop_work(memo)  # as `lifecycle.disconnect` will, later: nothing left
    assert order == ["attach", "claims", "leases"]
    assert memo.stoppers == []


def test_startup_handler_ids_come_from_the_memos_registry() -> None:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(id="provisioner.start", registry=registry)
    async def start(**_: Any) -> None: ...

    @kopf.on.cleanup(id="provisioner.stop", registry=registry)
    async def stop(**_: Any) -> None: ...

    memo = types.SimpleNamespace(registry=registry)
    assert runtime.startup_handler_ids(memo) == frozenset({"provisioner.start"})
