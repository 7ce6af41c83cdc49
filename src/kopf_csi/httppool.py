"""HTTP/1.1 requests to one server over a pool of kept-alive connections.

`kube` sends the API requests that are answered at once (everything but watches) here rather
than through aiohttp's `ClientSession`, whose Python work per request (its request and response
objects, header merging, cookie and proxy handling, a parser per answer) cost about 60 µs of CPU
a request more than the request itself: a tenth of the operator's CPU under churn
(`devtools.httpcost`; docs/benchmarks.md, "Eighth session"). What is left is what a request
needs: its bytes written in one piece, the answer parsed by httptools (llhttp, as uvicorn's),
and a pool as Go's `http.Transport` keeps one:

- at most `limit` connections in use at once, a request past it waits for one to be released;
- the most recently released idle connection is taken first, and one idle for `keepalive`
  seconds is closed, so that what a past peak opened goes away under a steady flow;
- a connection is kept only when its answer allows it (`Connection: close` does not), and
  never after a failure or a cancellation, whose answer may still be on its way;
- an idempotent request (`REPLAYABLE`) whose connection ended before its answer is sent once
  more, on a new connection, as aiohttp's session did (a kept-alive connection the server
  closed as the request went out, Go's `http.Transport` replays too); a POST or PATCH is not.

Every failure to get an answer is an `OSError` (`ConnectionError` for a connection that ends
or talks nonsense; the loop's own for a refused connect, a TLS failure), which `kube` reports as
the API server being unavailable. Only this module imports httptools.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import httptools

__all__ = ["REPLAYABLE", "Answer", "Pool", "ProtocolError", "ServerDisconnectedError", "Trace"]

REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
"""The methods sent once more when their connection ends before the answer (aiohttp's set)."""


class Answer(NamedTuple):
    status: int
    body: bytes


class Trace(NamedTuple):
    """One request's steps (`Pool.trace`), in seconds on `time.perf_counter`'s clock."""

    method: str
    target: str
    started: float
    waited: float
    """For its connection: a slot under the limit, and a new connection when no idle one."""
    opened: float
    """Of `waited`, opening a new connection (TCP, TLS); 0 for an idle one."""
    ended: float


class ServerDisconnectedError(ConnectionError):
    """The connection ended (or the pool was closed) before the whole answer came."""


class ProtocolError(ConnectionError):
    """What the server sent is not an HTTP/1.1 answer."""


class _Connection(asyncio.Protocol):
    """One connection, one request at a time; its answer's body is read whole."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: asyncio.Future[Answer] | None = None
        self.chunks: list[bytes] = []
        self.lost = False
        self.reusable = False
        self.released = 0.0  # the loop's time when it last went idle

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(ProtocolError(f"the server's answer is not HTTP/1.1: {exc}"))
            self.close()

    def on_body(self, body: bytes) -> None:  # httptools' callbacks
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        answer, self.answer = self.answer, None
        body = b"".join(self.chunks)
        self.chunks = []
        if answer is None or answer.done():  # nothing asked (or given up): not to be trusted
            self.close()
            return
        self.reusable = self.parser.should_keep_alive()
        answer.set_result(Answer(self.parser.get_status_code(), body))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        error = ServerDisconnectedError("the server closed the connection before it answered")
        error.__cause__ = exc
        self._fail(error)
        self.pool._forget(self)

    def _fail(self, error: Exception) -> None:
        answer, self.answer = self.answer, None
        if answer is not None and not answer.done():
            answer.set_exception(error)

    @property
    def usable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    async def exchange(self, request: bytes) -> Answer:
        if not self.usable:  # ended while it was handed over: no answer would ever come
            raise ServerDisconnectedError("the server closed the connection before the request")
        assert self.transport is not None
        self.reusable = False
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.answer = answer
        self.transport.write(request)
        return await answer

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()


class Pool:
    """Connections to `host`:`port` (over TLS with `tls`), and the requests sent on them.

    `receive_buffer`: the kernel's receive buffer (`SO_RCVBUF`) asked for each new connection,
    before it connects; `observe`: told how long each request waited for its connection.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        limit: int = 100,
        keepalive: float = 15.0,
        receive_buffer: int | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.limit = limit
        self.keepalive = keepalive
        self.opened = 0
        """Connections opened so far."""
        self._tls = tls
        self._server_hostname = (server_hostname or host) if tls is not None else None
        self._receive_buffer = receive_buffer
        self._authority = f"[{host}]" if ":" in host else host
        default = 443 if tls is not None else 80
        self._host_line = f"Host: {self._authority}" + (f":{port}" if port != default else "")
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []  # the oldest first
        self._open: set[_Connection] = set()
        self._expiry: asyncio.TimerHandle | None = None
        self._observers: list[Callable[[float], None]] = []
        self._tracers: list[Callable[[Trace], None]] = []
        self._closed = False

    def __repr__(self) -> str:
        return f"<Pool {self._authority}:{self.port} {len(self._open)} open, {self.idle} idle>"

    @property
    def idle(self) -> int:
        """Connections open and idle."""
        return len(self._idle)

    @property
    def busy(self) -> int:
        """Connections open and in use (or being opened)."""
        return len(self._open) - len(self._idle)

    def observe(self, observer: Callable[[float], None]) -> None:
        """Tell `observer` how many seconds each request waited for its connection (a slot
        under the limit, and a new connection when no idle one was left)."""
        self._observers.append(observer)

    def trace(self, tracer: Callable[[Trace], None]) -> None:
        """Tell `tracer` each request's steps (`Trace`), once it ends, answered or not; for
        benchmarks: it costs each request a few µs more than `observe`."""
        self._tracers.append(tracer)

    async def request(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None = None
    ) -> Answer:
        """Send `method` `target` (the path and query, encoded) with `headers` and `body`, and
        read its whole answer. A target with a space or a line break, or a header value with a
        line break, is a ValueError, not sent."""
        if not target.isprintable() or " " in target:
            raise ValueError(f"the request target {target!r} has a space or a line break")
        lines = [f"{method} {target} HTTP/1.1", self._host_line]
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                raise ValueError(f"the {name} header's value has a line break")
            lines.append(f"{name}: {value}")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if body:
            request += body
        if self._tracers:
            return await self._traced(method, target, request)
        started = time.perf_counter() if self._observers else 0.0
        async with self._slots:
            connection = self._take() or await self._connect()
            if self._observers:
                self._waited(time.perf_counter() - started)
            return await self._answer(method, connection, request)

    async def _traced(self, method: str, target: str, request: bytes) -> Answer:
        started = time.perf_counter()
        got = opened = 0.0
        try:
            async with self._slots:
                connection = self._take()
                if connection is None:
                    opening = time.perf_counter()
                    connection = await self._connect()
                    opened = time.perf_counter() - opening
                got = time.perf_counter()
                self._waited(got - started)
                return await self._answer(method, connection, request)
        finally:
            ended = time.perf_counter()
            trace = Trace(method, target, started, (got or ended) - started, opened, ended)
            for tracer in self._tracers:
                tracer(trace)

    def _waited(self, seconds: float) -> None:
        for observer in self._observers:
            observer(seconds)

    async def _answer(self, method: str, connection: _Connection, request: bytes) -> Answer:
        try:
            return await self._exchange(connection, request)
        except ConnectionError:  # the connection ended (or talked nonsense) before the answer
            if method not in REPLAYABLE:
                raise
        return await self._exchange(await self._connect(), request)  # once more, on a new one

    async def _exchange(self, connection: _Connection, request: bytes) -> Answer:
        try:
            answer = await connection.exchange(request)
        except BaseException:
            connection.close()  # its answer may still come: never reused
            raise
        if connection.reusable and connection.usable and not self._closed:
            self._release(connection)
        else:
            connection.close()
        return answer

    async def close(self) -> None:
        """Close every connection; requests on them fail, and later ones are refused."""
        self._closed = True
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        for connection in list(self._open):
            connection.close()
        self._idle.clear()
        await asyncio.sleep(0)  # the transports' closing callbacks

    def _take(self) -> _Connection | None:
        """The newest idle connection, after closing the ones idle too long."""
        self._expire()
        idle = self._idle
        while idle:
            connection = idle.pop()
            if connection.usable:
                return connection
        return None

    def _release(self, connection: _Connection) -> None:
        loop = asyncio.get_running_loop()
        connection.released = loop.time()
        self._idle.append(connection)
        if self._expiry is None:
            self._expiry = loop.call_at(self._idle[0].released + self.keepalive, self._expired)

    def _expired(self) -> None:
        self._expiry = None
        self._expire()
        if self._idle and not self._closed:
            when = self._idle[0].released + self.keepalive
            self._expiry = asyncio.get_running_loop().call_at(when, self._expired)

    def _expire(self) -> None:
        idle = self._idle
        if not idle:
            return
        oldest = asyncio.get_running_loop().time() - self.keepalive
        while idle and idle[0].released <= oldest:
            idle.pop(0).close()

    def _forget(self, connection: _Connection) -> None:
        self._open.discard(connection)
        if connection in self._idle:
            self._idle.remove(connection)

    async def _connect(self) -> _Connection:
        if self._closed:
            raise ServerDisconnectedError("the connection pool is closed")
        loop = asyncio.get_running_loop()
        options: dict[str, Any] = {}
        if self._tls is not None:
            options = {"ssl": self._tls, "server_hostname": self._server_hostname}
        if self._receive_buffer is not None:
            options["sock"] = await self._socket(self._receive_buffer)
        else:
            options.update(host=self.host, port=self.port)
        _, connection = await loop.create_connection(lambda: _Connection(self), **options)
        self.opened += 1
        if self._closed:  # closed while this one was being opened
            connection.close()
            raise ServerDisconnectedError("the connection pool is closed")
        self._open.add(connection)
        return connection

    async def _socket(self, size: int) -> socket.socket:
        """A socket connected to the server, its receive buffer asked for (`size`) before it
        connects (TCP agrees the window's scale then); each address in turn, the last error
        raised."""
        loop = asyncio.get_running_loop()
        addresses = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        error: OSError = OSError(f"no address for {self.host}")
        for family, kind, proto, _, address in addresses:
            sock = socket.socket(family, kind, proto)
            try:
                with contextlib.suppress(OSError):  # refused: the kernel's own size
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
                sock.setblocking(False)
                await loop.sock_connect(sock, address)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            except BaseException:
                sock.close()
                raise
            return sock
        raise error
