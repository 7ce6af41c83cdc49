"""Whether the API server answers: one warning when it goes away, one when it is back.

A control-plane restart takes the API server away for seconds to a minute: a draining server
answers some requests and refuses or drops others, then refuses connects, then a new one
serves (`/work/shared/reference/real-apiserver.md`). Every request of the operator fails in
that time, in every role; logging each failure, with its traceback, wrote 700 warning lines
for a 22 s outage on a real control plane. Here the requests' outcomes are folded into one
state instead:

- the first request that gets no answer (`kube.UnavailableError`) marks the server
  unreachable, with one warning (`api_unreachable`);
- while it is, failures are counted, not logged, and a probe asks `/version` every
  `PROBE_INTERVAL`, so that its return is seen without waiting for a retry's backoff;
- it is back when a request is answered and none has failed for `SETTLE` seconds (a draining
  server answers some requests between its refusals: not back yet), with one warning
  (`api_reachable`: how long it was away, how many requests failed meanwhile), and the
  listeners are told (`on_back`): the work queues retry at once what failed during the
  outage, the watches reconnect (`handlers/lifecycle.py` wires them).

The decision (`Reachability.failed`, `answered`) is pure bookkeeping on a clock; the probe is
the one task, and it survives anything its probe raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

__all__ = ["PROBE_INTERVAL", "SETTLE", "Reachability"]

log = structlog.get_logger("kopf_csi.reachability")

PROBE_INTERVAL = 0.5
"""Seconds between two probes of an unreachable server: its return is seen within this."""
SETTLE = 1.0
"""Seconds without a failed request before an answered one says the server is back."""
QUIET_AGAIN = 60.0
"""An outage that begins within this many seconds of the last one's end is the same trouble
going on (a server that refuses every few seconds, one resource answering 503): it is
counted, and logged at debug level, not as another pair of warnings."""

_PROBING = contextvars.ContextVar("kopf_csi_probing", default=False)
"""Set in the probe's task: its own failures are not counted as requests that failed."""

Listener = Callable[[float], object]
"""Told the outage's start (`time.monotonic()`) when the server is back."""


class Reachability:
    """The API server's reachability as this process's requests see it (one per client pool)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.down_since: float | None = None
        """When the current outage began (`clock`); None while the server answers."""
        self.failed_requests = 0
        """Requests that got no answer in the current outage."""
        self.outages = 0
        self.unreachable_seconds = 0.0
        """Seconds the server was unreachable, over every outage that ended."""
        self._last_failure = 0.0
        self._back_at: float | None = None
        self._quiet = False  # the current outage is logged at debug level (`QUIET_AGAIN`)
        self._listeners: list[Listener] = []
        self._probe: Callable[[], Awaitable[Any]] | None = None
        self._probing: asyncio.Task[None] | None = None
        self._back = asyncio.Event()  # set while reachable (created here: no loop needed)
        self._back.set()

    @property
    def reachable(self) -> bool:
        return self.down_since is None

    def on_back(self, listener: Listener) -> None:
        """Call `listener(down_since)` each time the server is back after an outage."""
        self._listeners.append(listener)

    def probe_with(self, probe: Callable[[], Awaitable[Any]]) -> None:
        """While unreachable, call `probe()` (a cheap request) every `PROBE_INTERVAL`."""
        self._probe = probe

    async def wait_back(self, timeout: float | None = None) -> bool:
        """Until the server is reachable (at once if it is), at most `timeout` seconds:
        whether it is. A retry's backoff waits on this, so it ends when the server is back."""
        if self.down_since is None:
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._back.wait()
        return self.down_since is None

    # --- the requests' outcomes --------------------------------------------------------------

    def failed(self, error: BaseException | str) -> None:
        """A request got no answer (or a 503/504): the server is away, or still away."""
        now = self.clock()
        self._last_failure = now
        if self.down_since is not None:
            self.failed_requests += not _PROBING.get()
            return
        self.down_since = now
        self.failed_requests = 1
        self.outages += 1
        self._back.clear()
        self._quiet = self._back_at is not None and now - self._back_at < QUIET_AGAIN
        _log(
            "debug" if self._quiet else "warning",
            "api_unreachable",
            first_failure=str(error),  # not `error`: `logs.quiet_outages` would drop it
            hint="the API server does not answer: work waits and is retried when it is back",
        )
        self._start_probing()

    def answered(self) -> None:
        """A request was answered (any status but the unavailable ones)."""
        if self.down_since is None:
            return
        now = self.clock()
        if now - self._last_failure < SETTLE:
            return  # a draining server answers some: back only once the failures stop
        down_since, self.down_since = self.down_since, None
        self.unreachable_seconds += now - down_since
        self._back_at = now
        self._back.set()
        _log(
            "debug" if self._quiet else "warning",
            "api_reachable",
            unreachable_for=round(now - down_since, 1),
            failed_requests=self.failed_requests,
        )
        for listener in list(self._listeners):
            try:
                listener(down_since)
            except Exception:
                log.exception("api_reachable_listener_failed")

    # --- the probe ---------------------------------------------------------------------------

    def _start_probing(self) -> None:
        if self._probe is None or (self._probing is not None and not self._probing.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a test's direct call): the requests' own retries will tell
        self._probing = loop.create_task(self._probe_until_back(), name="api-reachability-probe")

    async def _probe_until_back(self) -> None:
        probe = self._probe
        assert probe is not None
        _PROBING.set(True)  # this task's context only
        while self.down_since is not None:
            await asyncio.sleep(PROBE_INTERVAL)
            try:
                await probe()  # its outcome reaches `failed`/`answered` through the client
            except Exception as exc:
                log.debug("api_probe_failed", error=str(exc))

    async def close(self) -> None:
        if self._probing is not None:
            self._probing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probing


def _log(level: str, event: str, **fields: Any) -> None:
    """Log in a context of its own: the request that noticed belongs to some object, and its
    bound keys (`kind`, `name`, ...) would wrongly tie the outage to that object."""
    contextvars.Context().run(getattr(log, level), event, **fields)
