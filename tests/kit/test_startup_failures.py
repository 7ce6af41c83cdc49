"""A module whose start-up handler fails: the kit fails at once, naming it, and stops kopf.

kopf retries a failed start-up handler every 60 s and starts no watch meanwhile: the kit's
`operator` fixture used to wait its 30 s and say only "not ready", then leave kopf's thread
retrying, and pytest never exited. Now the first failure is the start's error (the module, the
handler, the exception), the thread is stopped, and a handler that asks for a retry
(`kopf.TemporaryError`) is waited for as kopf waits. Under `kopf-csi run`, `/readyz` names the
failing handler until it succeeds (`runtime.watch_startup`, `endpoints.readiness`).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
import textwrap
from typing import Any

import kopf
import pytest

from kopf_csi import endpoints, modules, runtime
from kopf_csi.driver import Driver
from kopf_csi.settings import Settings
from kopf_csi.testing.operator import DEFAULT_MODULES, OperatorThread, StartupError

BROKEN = "tests.kit.broken_startup"


@pytest.mark.parametrize("defaults", [DEFAULT_MODULES, ()], ids=["with-defaults", "alone"])
async def test_a_failing_startup_handler_fails_the_start_and_stops_kopf(
    settings: Settings, driver: Driver, defaults: tuple[str, ...]
) -> None:
    operator = OperatorThread(settings=settings, modules=(*defaults, BROKEN))
    with pytest.raises(StartupError) as info:  # not the TimeoutError of a 30 s wait
        await operator.start()
    assert str(info.value) == (
        f"the operator failed to start: the start-up handler 'register' of module {BROKEN} failed: "
        "AttributeError: 'nonexistent_thing'"
    )
    assert isinstance(info.value.__cause__, AttributeError)  # its traceback, in the report
    assert not operator.alive  # stopped: nothing is left retrying


async def test_a_handler_asking_for_a_retry_is_waited_for(
    settings: Settings, driver: Driver
) -> None:
    retried = (*DEFAULT_MODULES, "tests.kit.retried_startup")
    operator = OperatorThread(settings=settings, modules=retried)
    await operator.start()
    try:
        assert runtime.startup_failures(operator.memo) == {}
    finally:
        await operator.stop()


def test_readyz_names_a_failing_startup_handler_until_it_succeeds() -> None:
    memo = runtime.OperatorMemo(driver=object())  # otherwise ready
    registry = kopf.OperatorRegistry()
    modules.load([BROKEN], registry=registry)
    handler = next(h for h in registry._activities._handlers if str(h.id) == "register")
    with pytest.raises(AttributeError):
        asyncio.run(handler.fn(memo=memo))
    ready, text = endpoints.readiness(memo)
    assert not ready
    assert text == (
        f"not ready: the start-up handler 'register' of module {BROKEN} failed: "
        "AttributeError: 'nonexistent_thing' (kopf retries it)"
    )
    memo.nonexistent_thing = []  # the cause goes away: kopf's next retry succeeds
    asyncio.run(handler.fn(memo=memo))
    assert endpoints.readiness(memo) == (True, "ok")


def test_a_plain_def_startup_handler_stays_plain_and_is_watched() -> None:
    calls: list[Any] = []

    def plain(memo: Any, **_: Any) -> None:
        calls.append(memo)
        raise ValueError("broken")

    watched = runtime.watch_startup(plain, module="mine", handler="plain")
    assert not asyncio.iscoroutinefunction(watched)
    memo = runtime.OperatorMemo()
    with pytest.raises(ValueError, match="broken"):
        watched(memo=memo)
    assert str(runtime.startup_failures(memo)["plain"]) == (
        "the start-up handler 'plain' of module mine failed: ValueError: broken"
    )


async def test_pytest_exits_with_the_modules_error(tmp_path: pathlib.Path) -> None:
    """The issue's session: one kit test over a broken module. It fails with the module's own
    error and pytest exits (it used to hang at exit, on kopf's thread retrying)."""
    (tmp_path / "broken.py").write_text(
        textwrap.dedent("""
            import kopf

            @kopf.on.startup()
            async def register(memo, **_):
                memo.nonexistent_thing.append(1)
        """)
    )
    (tmp_path / "test_broken.py").write_text(
        textwrap.dedent("""
            import pytest
            from kopf_csi.testing.operator import DEFAULT_MODULES

            @pytest.fixture
            def handler_modules():
                return DEFAULT_MODULES + ("broken",)

            async def test_it(cluster, kcm, driver, operator):
                pass
        """)
    )
    env = {**os.environ, "PYTHONPATH": ""}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_broken.py",
        f"--basetemp={tmp_path / 'bt'}", "-o", "asyncio_default_fixture_loop_scope=function",
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(process.communicate(), 120)
    text = output.decode()
    assert process.returncode == 1, text
    expected = "StartupError: the operator failed to start: the start-up handler 'register'"
    assert f"{expected} of module broken failed" in text, text
    assert "nonexistent_thing" in text
