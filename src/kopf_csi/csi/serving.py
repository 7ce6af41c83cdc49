"""Serving CSI services over a unix socket: the only place the reference driver touches grpclib.

- `serve(servicers, path=..., interceptor=...)` starts a grpclib `Server` on a unix socket;
  `Serving.stop()` stops it gracefully and removes the socket file.
- `fail(code, message)` ends an RPC with a gRPC status (raised from a servicer method).
- `code_of(exc)` says which status an exception ends an RPC with (for logging).
- An `Interceptor` wraps every call: it gets the method and its deadline, and a `proceed()`
  that runs the servicer method. It may delay, fail or never call `proceed()`.

grpclib does not unlink a socket file, neither before binding nor after closing: we do both.
Nor does `Server.close()` close the open connections: it closes the listener and cancels the
running handlers, but a client's open connection goes on being served, by a server that was
stopped. We close those connections ourselves, so that a stopped driver is really gone and a
client reconnects to its restarted successor. The server enforces the client's deadline itself,
cancelling the handler when it passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import stat
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn

from grpclib.const import Status
from grpclib.events import RecvRequest, listen
from grpclib.exceptions import GRPCError
from grpclib.protocol import H2Protocol
from grpclib.server import Server

from kopf_csi.csi.codes import Code

__all__ = ["CallInfo", "Interceptor", "Serving", "code_of", "fail", "serve"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CallInfo:
    """One incoming RPC, as an interceptor sees it."""

    service: str
    """`csi.v1.Controller`."""
    method: str
    """`CreateVolume`."""
    timeout: float | None
    """Seconds left until the client's deadline when the call arrived; None: no deadline."""


Interceptor = Callable[[CallInfo, Callable[[], Awaitable[None]]], Awaitable[None]]


def fail(code: Code, message: str) -> NoReturn:
    """End the current RPC with this status."""
    raise GRPCError(Status(code.value), message)


def code_of(exc: BaseException, *, timed_out: bool = False) -> Code:
    """The status an exception ends an RPC with; `timed_out` tells a deadline from a cancel."""
    if isinstance(exc, GRPCError):
        return Code(exc.status.value)
    if isinstance(exc, asyncio.CancelledError | asyncio.TimeoutError):
        return Code.DEADLINE_EXCEEDED if timed_out else Code.CANCELLED
    return Code.UNKNOWN  # what grpclib answers for any other exception


class _Server(Server):
    """A grpclib server that can close its clients' connections (3.12's `close_clients()`)."""

    def __init__(self, handlers: Sequence[Any]) -> None:
        super().__init__(list(handlers))
        self._protocols: weakref.WeakSet[H2Protocol] = weakref.WeakSet()

    # grpclib's private factory (pinned 0.4.9): the only place its connections can be seen.
    def _protocol_factory(self) -> H2Protocol:
        protocol = super()._protocol_factory()
        self._protocols.add(protocol)
        return protocol

    def close_connections(self) -> None:
        for protocol in list(self._protocols):
            connection = getattr(protocol, "connection", None)
            if connection is not None:
                connection.close()


class Serving:
    """A started server; `stop()` it exactly once."""

    def __init__(self, server: _Server, path: pathlib.Path) -> None:
        self.path = path
        self._server = server
        self._stopping = False
        self._inflight: set[asyncio.Task[Any]] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    async def stop(self, *, grace: float = 5.0) -> None:
        """Refuse new calls, let running ones finish for up to `grace` seconds, then close."""
        self._stopping = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout=grace)
        self._server.close()  # stops listening and cancels whatever still runs
        self._server.close_connections()
        await self._server.wait_closed()
        _unlink_socket(self.path)

    async def _run(
        self,
        call: CallInfo,
        proceed: Callable[[], Awaitable[None]],
        interceptor: Interceptor | None,
    ) -> None:
        if self._stopping:
            fail(Code.UNAVAILABLE, "the server is shutting down")
        task = asyncio.current_task()
        assert task is not None
        self._inflight.add(task)
        self._idle.clear()
        try:
            if interceptor is None:
                await proceed()
            else:
                await interceptor(call, proceed)
        finally:
            self._inflight.discard(task)
            if not self._inflight:
                self._idle.set()


async def serve(
    servicers: Sequence[Any],
    *,
    path: str | os.PathLike[str],
    interceptor: Interceptor | None = None,
) -> Serving:
    """Start serving generated `*Base` servicers on a unix socket at `path`."""
    socket_path = pathlib.Path(path)
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    _unlink_socket(socket_path)
    server = _Server(servicers)
    serving = Serving(server, socket_path)

    async def on_request(event: RecvRequest) -> None:
        _, service, method = event.method_name.split("/", 2)
        timeout = None if event.deadline is None else event.deadline.time_remaining()
        call = CallInfo(service=service, method=method, timeout=timeout)
        handler = event.method_func

        async def intercepted(stream: Any) -> None:
            await serving._run(call, lambda: handler(stream), interceptor)

        event.method_func = intercepted

    listen(server, RecvRequest, on_request)
    await server.start(path=str(socket_path))
    return serving


def _unlink_socket(path: pathlib.Path) -> None:
    """Remove a (stale) socket file; refuse to remove anything that is not a socket."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(f"{path} exists and is not a socket")
    path.unlink(missing_ok=True)
