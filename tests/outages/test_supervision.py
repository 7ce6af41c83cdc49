"""A background loop that dies takes the operator down instead of leaving its work undone.

We test these aspects:
- `runtime.supervise`: a loop that raises is logged with its traceback, `/healthz`'s checks
  fail naming it, and the operator is asked to stop (exit code 1 under `kopf-csi run`); its
  exception is retrieved (no "never retrieved" line); a loop that is cancelled or returns is
  no failure;
- through the running operator: the cache resync loop meeting a bug stops the operator, with
  the reason, rather than running on without it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import types
from typing import Any

import pytest
import structlog

from kopf_csi import runtime
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread

from ..conftest import until


def _memo() -> Any:
    reasons: list[str] = []
    return types.SimpleNamespace(stop_operator=reasons.append, reasons=reasons)


async def test_a_loop_that_dies_fails_health_and_stops_the_operator() -> None:
    memo = _memo()

    async def loop() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("a bug")

    with structlog.testing.capture_logs() as logs:
        task = runtime.supervise(memo, loop(), name="resync")
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)  # the done callback
    assert memo.reasons == ["the background task resync died: RuntimeError('a bug')"]
    ok, detail = memo.health_checks["task resync"]()
    assert not ok
    assert "resync died" in detail
    [died] = [entry for entry in logs if entry["event"] == "background_task_died"]
    assert died["log_level"] == "critical"
    assert died["task"] == "resync"


async def test_a_cancelled_or_finished_loop_is_no_failure() -> None:
    memo = _memo()
    finished = runtime.supervise(memo, asyncio.sleep(0), name="once")
    cancelled = runtime.supervise(memo, asyncio.sleep(10), name="forever")
    await finished
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    await asyncio.sleep(0)
    assert memo.reasons == []
    assert not getattr(memo, "health_checks", None)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(settings, kube=dataclasses.replace(settings.kube, cache_resync=0.2))


async def test_the_operator_stops_when_its_resync_loop_dies(
    cluster: EmulatedCluster, operator: OperatorThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kopf_csi.caches import Cache

    def broken(self: Cache, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug in the cache")

    monkeypatch.setattr(Cache, "mark", broken)
    await until(lambda: operator.stop_reason is not None, timeout=15)
    assert operator.stop_reason == (
        "the background task cache-resync died: RuntimeError('a bug in the cache')"
    )
