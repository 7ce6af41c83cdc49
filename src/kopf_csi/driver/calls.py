"""What happens around every RPC: injected faults, the log line, DriverError → gRPC status.

`CallWrapper` is the interceptor `kopf_csi.csi.serving` runs each call through. It logs one line
per call at info (`rpc_handled` with method, code, duration, and the message of a failure);
requests are never logged, so their secrets cannot be either.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from kopf_csi.csi import serving
from kopf_csi.csi.codes import Code
from kopf_csi.driver.errors import DriverError
from kopf_csi.driver.faults import Faults

__all__ = ["CallWrapper"]

logger = structlog.get_logger("kopf_csi.driver")


class CallWrapper:
    """The interceptor of one running driver."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self._stopping = asyncio.Event()

    def release_hangs(self) -> None:
        """End hanging calls now (UNAVAILABLE) rather than at their deadline: we are stopping,
        or the test that injected them is over (`Driver.release_hangs`)."""
        self._stopping.set()

    async def __call__(
        self, call: serving.CallInfo, proceed: Callable[[], Awaitable[None]]
    ) -> None:
        started = time.monotonic()
        code, message = Code.OK, ""
        try:
            await self._inject(call)
            await proceed()
        except DriverError as exc:
            code, message = exc.code, exc.message
            serving.fail(exc.code, exc.message)
        except BaseException as exc:
            timed_out = call.timeout is not None and time.monotonic() - started >= call.timeout
            code = serving.code_of(exc, timed_out=timed_out)
            message = getattr(exc, "message", None) or ""
            if code is Code.UNKNOWN:
                logger.exception("rpc_crashed", method=call.method)
            raise
        finally:
            extra: dict[str, Any] = {"message": message} if message else {}
            duration = round(time.monotonic() - started, 6)
            logger.info(
                "rpc_handled", method=call.method, code=code.name, duration=duration, **extra
            )

    async def _inject(self, call: serving.CallInfo) -> None:
        plan = self.faults.plan(call.method)
        if plan.latency:
            await asyncio.sleep(plan.latency)
        if plan.hang:
            # Until the deadline: grpclib cancels the handler then. Without a deadline, until
            # the driver stops (or the hangs are released), so that a stop never waits for one.
            await self._stopping.wait()
            raise DriverError(Code.UNAVAILABLE, "an injected hang was released (a stop)")
        if plan.code is not None:
            raise DriverError(plan.code, plan.message)
