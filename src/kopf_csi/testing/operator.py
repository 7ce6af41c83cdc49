"""Run kopf with our handler modules in a thread of its own: for tests, the sandbox, benchmarks.

kopf cancels every task created while it runs, so it cannot share the caller's event loop;
it gets a thread and a loop of its own (stack-notes). Each run gets a fresh registry, so the
handler modules are (re)imported into it and runs do not leak handlers into each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import kopf
from kopf._cogs.structs.references import Insights  # private, but kopf is pinned exactly

from kopf_csi import events, loops, modules, runtime
from kopf_csi.modules import DEFAULT_MODULES  # the canonical list; re-exported for tests
from kopf_csi.settings import Settings

__all__ = ["DEFAULT_MODULES", "OperatorThread", "StartupError", "running_operator"]

LOGIN_MODULE = "kopf_csi_handlers.lifecycle"
"""The default module with kopf's login handler: an operator without it cannot log in."""


class StartupError(RuntimeError):
    """A handler module's start-up handler failed: the message names the module, the handler
    and the exception (chained as the cause, with its traceback)."""


class OperatorThread:
    """kopf.operator() in a daemon thread; `start()` waits until it is ready.

    Or in the calling thread (`run_here()`), which another thread waits for
    (`wait_started()`) and stops (`request_stop()`).
    """

    def __init__(
        self,
        *,
        settings: Settings,
        modules: Sequence[str] = DEFAULT_MODULES,
        liveness_endpoint: str | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 30.0,
        event_loop: str = "auto",
    ) -> None:
        self.settings = settings
        self.event_loop = event_loop  # `loops.CHOICES`: the same loop as `kopf-csi run`'s
        self.modules = tuple(modules)
        self.liveness_endpoint = liveness_endpoint
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.registry = kopf.OperatorRegistry()
        # `stop_operator`: how the operator stops itself (`runtime.request_stop`, a lost Lease).
        self.memo = runtime.OperatorMemo(
            settings=settings, registry=self.registry, stop_operator=self.request_stop
        )
        self._loaded = False
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._finished = threading.Event()  # `_run` is over (the thread may be the caller's)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._insights = Insights()
        self.error: BaseException | None = None
        self.stop_reason: str | None = None  # why the operator stopped itself, if it did
        self._stop_asked = False  # the caller's stop(): an end during the start is no failure

    def load(self) -> None:
        """Import the handler modules into this run's registry; ``start()`` does it if not yet.

        Raises ``modules.ModuleLoadError`` for a module that is not there, and whatever a
        module raises on import: a caller that loads first fails before anything starts.
        """
        if not self._loaded:
            modules.load(self.modules, registry=self.registry)
            self._loaded = True

    def _run(self) -> None:
        _quiet_signal_warning()
        loop = self._loop = loops.new_event_loop(self.event_loop)
        loop.set_exception_handler(_without_kopf_scan_leftovers)
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(
                kopf.operator(
                    registry=self.registry,
                    insights=self._insights,
                    memo=self.memo,
                    clusterwide=True,
                    standalone=True,
                    ready_flag=self._ready,
                    stop_flag=self._stop,
                    liveness_endpoint=self.liveness_endpoint,
                )
            )
        except BaseException as exc:  # reported to the test through .error
            self.error = exc
        finally:
            self._ready.set()  # never leave start() waiting on a crashed operator
            # kopf waits for a threading.Event stop flag in an executor thread of its own; an
            # operator that ended by itself leaves that thread waiting, and the interpreter
            # would hang at exit joining it.
            self._stop.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self._finished.set()

    def run_here(self) -> None:
        """Run the operator in the calling thread until it stops, as `kopf-csi run` runs it
        on the main thread. The benchmark's operator process does so, to measure what is
        deployed: a thread's allocations come from a glibc arena of its own (no difference
        in RSS was measured: docs/benchmarks.md, "Fifth session"). Another thread waits with
        `wait_started()` and stops it with `request_stop()`; a start that fails is for that
        thread to stop (kopf would retry a failed start-up handler every minute)."""
        self.load()
        self._thread = threading.current_thread()
        self._run()

    async def wait_started(self) -> None:
        """For a `run_here()` operator, from another thread's loop: wait until it is ready,
        as `start()` does (TimeoutError, StartupError, RuntimeError if it is not)."""
        await self._wait_until_started()

    async def start(self) -> None:
        """Start the thread and wait for kopf's readiness without blocking the caller's loop.

        The emulated API and the driver usually run in the caller's loop: blocking it here
        would deadlock kopf's start-up against them. A start that fails (a module's start-up
        handler raised: `StartupError`; or a timeout) stops the thread before it raises: kopf
        would retry the handler every minute, and the interpreter would wait for it at exit.
        """
        self.load()
        self._thread = threading.Thread(target=self._run, name="kopf-operator", daemon=True)
        self._thread.start()
        try:
            await self._wait_until_started()
        except BaseException:
            with contextlib.suppress(Exception):  # the start's own error says more
                await self._stop_work()
                await self.stop()
            raise

    async def _wait_until_started(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not self._ready.is_set():
            self._raise_if_startup_failed()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the operator was not ready within {self.start_timeout}s{self._waiting()}"
                )
            await asyncio.sleep(0.01)
        self._raise_if_stopped()
        # kopf is ready before it has scanned the API's resources. Waiting for the scan means
        # the watches are starting when we return, and that a quick stop() does not leave the
        # scan hanging (kopf then waits 5 s for it as a "hung task").
        while not self._insights.ready_resources.is_set() and self.alive:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the operator did not scan the API in {self.start_timeout}s")
            await asyncio.sleep(0.01)
        self._raise_if_stopped()  # kopf gave up during the scan (it could not log in)

    def _raise_if_startup_failed(self) -> None:
        """The first start-up handler that failed, unless it asked for a retry
        (`kopf.TemporaryError`): kopf would retry the others every minute, in vain."""
        failures = runtime.startup_failures(self.memo).values()
        failed = next((failure for failure in failures if not failure.retry_asked), None)
        if failed is not None:
            raise StartupError(f"the operator failed to start: {failed}") from failed.error

    def _waiting(self) -> str:
        """What the start-up still waits for: the handlers that asked for a retry."""
        failures = runtime.startup_failures(self.memo).values()
        return "".join(f"; {failure}" for failure in failures)

    def _raise_if_stopped(self) -> None:
        """A start-up that ended the operator fails the start, not the test's later waits."""
        if self.error is None and (self._thread is None or self.alive or self._stop_asked):
            return
        why = repr(self.error) if self.error else self.stop_reason or "it stopped by itself"
        if LOGIN_MODULE not in self.modules:
            why += f"; {LOGIN_MODULE} (kopf's login) is not loaded: add yours to DEFAULT_MODULES"
        raise RuntimeError(f"the operator failed to start: {why}") from self.error

    async def _stop_work(self) -> None:
        """Stop what the start-up handlers that ran have started (queues, informers: the
        memo's stoppers), as `lifecycle.disconnect` does on a stop. kopf runs no cleanup
        handler when it stops during its start-up, and would wait 5 s for those tasks."""
        if self._loop is None or not self.alive or self._loop.is_closed():
            return
        done = asyncio.run_coroutine_threadsafe(runtime.stop_work(self.memo), self._loop)
        await asyncio.wait_for(asyncio.wrap_future(done), self.stop_timeout)

    async def flush_events(self, timeout: float = 10.0) -> None:
        """Wait until every event the operator has queued so far is posted (events go out in
        the background): a test that asserts an event is absent asks this first."""
        assert self._loop is not None, "the operator is not running"
        done = asyncio.run_coroutine_threadsafe(events.flush_all(timeout=timeout), self._loop)
        await asyncio.wrap_future(done)

    def request_stop(self, reason: str) -> None:
        """Stop from inside, as a signal would (thread-safe: it only sets kopf's stop flag)."""
        self.stop_reason = reason
        self._stop.set()

    async def stop(self) -> None:
        self._stop_asked = True
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, self.stop_timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"the operator did not stop within {self.stop_timeout}s")

    @property
    def alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._finished.is_set()


@contextlib.asynccontextmanager
async def running_operator(**kwargs: Any) -> AsyncIterator[OperatorThread]:
    operator = OperatorThread(**kwargs)
    await operator.start()
    try:
        yield operator
    finally:
        await operator.stop()


_KOPF_SCAN_COROUTINES = ("_read_old_api", "_read_new_apis")


def _without_kopf_scan_leftovers(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """kopf's scan of the API (`scanning.scan_resources`) awaits two coroutines through
    `as_completed` and leaves the second one's error unretrieved when the first one raises:
    a `LoginError` for an operator that cannot log in, which `start()` reports already. The
    kit's check for lost task exceptions would blame whichever test the task is collected in."""
    task, error = context.get("future"), context.get("exception")
    coro = getattr(task, "get_coro", lambda: None)()
    name = getattr(coro, "__qualname__", "")
    if isinstance(error, kopf.LoginError) and name in _KOPF_SCAN_COROUTINES:
        return
    loop.default_exception_handler(context)


class _NoSignalWarning(logging.Filter):
    """kopf warns that a thread cannot take OS signals: expected here, and noise in the
    sandbox's output (the caller handles Ctrl-C and stops the thread)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("OS signals are ignored")


def _quiet_signal_warning() -> None:
    logger = logging.getLogger("kopf._core.reactor.running")
    if not any(isinstance(f, _NoSignalWarning) for f in logger.filters):
        logger.addFilter(_NoSignalWarning())
