"""The kit's operator fails its start, saying why, when kopf ends during it: a test then fails
at its `operator` fixture with the cause, not later in a wait for something that never comes.
And it runs on the calling thread when asked (`run_here`), as the benchmark runs it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from kopf_csi.driver import Driver
from kopf_csi.settings import Settings
from kopf_csi.testing.operator import OperatorThread, running_operator


async def test_modules_without_the_login_fail_the_start_and_say_what_to_add(
    settings: Settings, driver: Driver
) -> None:
    """The README's mistake to make: `handler_modules` with the user's module only."""
    with pytest.raises(RuntimeError) as info:
        async with running_operator(settings=settings, modules=("tests.kit.own_resource",)):
            pass
    message = str(info.value)
    assert "LoginError" in message
    assert "kopf_csi_handlers.lifecycle (kopf's login) is not loaded" in message
    assert "DEFAULT_MODULES" in message


async def test_run_here_runs_kopf_on_the_calling_thread_until_asked_to_stop(
    settings: Settings, driver: Driver
) -> None:
    """The benchmark runs the operator on its main thread, as `kopf-csi run` does: another
    thread waits for it, and stops it; nothing is left running."""
    operator = OperatorThread(settings=settings)
    where: list[int] = []

    def run() -> None:
        where.append(threading.get_ident())
        operator.run_here()

    thread = threading.Thread(target=run, name="caller")
    thread.start()
    try:
        await asyncio.wait_for(operator.wait_started(), 30)
        assert operator.alive
        loop = operator._loop
        assert loop is not None
        assert loop.is_running()
        on_loop = asyncio.run_coroutine_threadsafe(_thread_id(), loop)
        assert await asyncio.wrap_future(on_loop) == where[0]  # kopf's loop: the caller's thread
    finally:
        operator.request_stop("the test is done")
        await asyncio.to_thread(thread.join, 30)
    assert not thread.is_alive()
    assert not operator.alive
    assert operator.error is None
    assert operator.stop_reason == "the test is done"


async def _thread_id() -> int:
    return threading.get_ident()


async def test_run_here_whose_start_fails_says_why_and_stops_when_asked(
    settings: Settings, driver: Driver
) -> None:
    """The waiting thread learns why the start failed (as `start()` raises), and its stop ends
    the calling thread's run: nothing left retrying every minute."""
    operator = OperatorThread(settings=settings, modules=("tests.kit.own_resource",))
    thread = threading.Thread(target=operator.run_here, name="caller")
    thread.start()
    try:
        with pytest.raises(RuntimeError) as info:
            await asyncio.wait_for(operator.wait_started(), 30)
        assert "LoginError" in str(info.value)
    finally:
        operator.request_stop("the start failed")
        await asyncio.to_thread(thread.join, 30)
    assert not thread.is_alive()
    assert not operator.alive
