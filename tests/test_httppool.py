"""The plain API requests' HTTP/1.1 pool (`httppool`), against a server on a real socket.

The emulator's tests (tests/test_connections.py, tests/outages, tests/test_kube*.py) hold the
pool to the API server's behaviour over TLS; here, what an API server rarely does on purpose.

We test these aspects:
- a request is written as HTTP/1.1 with its Host (the port too), headers and Content-Length;
- answers by Content-Length and chunked are read whole, and the connection is kept for the next
  request; one whose answer says `Connection: close` is not;
- a connection the server closed while idle is not used again: the next request opens another;
- an idempotent request whose connection ended before its answer is sent once more, on a new
  connection; a PATCH is not, and a second failure is the caller's;
- an answer cut short or not HTTP, and a refused connect, are `OSError`s (`ConnectionError`),
  also on the socket the pool makes itself to ask for a small receive buffer;
- a cancelled request's connection is closed, never reused (its answer may still come);
- at most `limit` connections are in use at once; the rest wait, and all are answered;
- an idle connection is closed after `keepalive` seconds, by the pool's own timer;
- a header value with a line break, or a target with a space, is refused before anything is
  sent;
- `close()` fails the requests in flight and refuses new ones;
- observers learn each request's wait for a connection, tracers its steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable

import pytest

from kopf_csi import httppool

from .conftest import until

Respond = Callable[[bytes, bytes], "bytes | None"]


def _ok(body: bytes = b'{"kind":"Status"}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


class Server:
    """Answers each request with `respond(head, body)`'s bytes (None: closes instead)."""

    def __init__(self) -> None:
        self.respond: Respond = lambda head, body: _ok()
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.closed = 0
        self.delay = 0.0
        self.holding = False  # no answer until `stop`
        self._held = asyncio.Event()
        self.port = 0
        self.writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    def close_connections(self) -> None:
        """Close every open connection from the server's side."""
        for writer in list(self.writers):
            writer.close()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._held.set()
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 1)

    async def _client_left(self, reader: asyncio.StreamReader) -> bool:
        """Hold the answer until `stop`; True if the client closed its end meanwhile."""
        read = asyncio.ensure_future(reader.read(1))
        held = asyncio.ensure_future(self._held.wait())
        done, pending = await asyncio.wait({read, held}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return read in done and not read.exception() and read.result() == b""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.add(writer)
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                self.heads.append(head)
                self.bodies.append(body)
                if self.delay:
                    await asyncio.sleep(self.delay)
                if self.holding and await self._client_left(reader):
                    return
                answer = self.respond(head, body)
                if answer is None:
                    return
                writer.write(answer)
                await writer.drain()
        finally:
            self.writers.discard(writer)
            self.open -= 1
            self.closed += 1
            writer.close()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    server = Server()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def pool(server: Server) -> AsyncIterator[httppool.Pool]:
    pool = httppool.Pool("127.0.0.1", server.port, limit=10, keepalive=60.0)
    yield pool
    await pool.close()


async def test_a_request_is_written_as_http_1_1(server: Server, pool: httppool.Pool) -> None:
    headers = {"Accept": "application/json", "User-Agent": "csi-provisioner/v6"}
    answer = await pool.request("PATCH", "/api/v1/x?fieldManager=m", headers, b'{"a":1}')
    assert answer == httppool.Answer(200, b'{"kind":"Status"}')
    lines = server.heads[0].decode().split("\r\n")
    assert lines[0] == "PATCH /api/v1/x?fieldManager=m HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.port}" in lines
    assert "Accept: application/json" in lines
    assert "User-Agent: csi-provisioner/v6" in lines
    assert "Content-Length: 7" in lines
    assert server.bodies == [b'{"a":1}']
    await pool.request("GET", "/version", {})
    assert not any(line.startswith(b"Content-Length") for line in server.heads[1].split(b"\r\n"))


async def test_answers_are_read_whole_and_the_connection_kept(
    server: Server, pool: httppool.Pool
) -> None:
    chunked = (
        b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    big = b"x" * 300_000
    answers = iter([_ok(b"first"), chunked, _ok(big)])
    server.respond = lambda head, body: next(answers)
    assert await pool.request("GET", "/a", {}) == (200, b"first")
    assert await pool.request("GET", "/b", {}) == (404, b"abcde")
    assert await pool.request("GET", "/c", {}) == (200, big)
    assert pool.opened == server.connections == 1
    assert pool.idle == 1


async def test_an_answer_saying_close_closes_the_connection(
    server: Server, pool: httppool.Pool
) -> None:
    server.respond = lambda head, body: _ok(b"bye", b"Connection: close\r\n")
    assert await pool.request("GET", "/a", {}) == (200, b"bye")
    assert pool.idle == 0
    assert await pool.request("GET", "/b", {}) == (200, b"bye")
    assert pool.opened == 2


async def test_a_connection_the_server_closed_while_idle_is_not_reused(
    server: Server, pool: httppool.Pool
) -> None:
    answers = iter([_ok(b"one"), None])  # answers the first, closes on the second
    server.respond = lambda head, body: next(answers, _ok(b"again"))
    assert await pool.request("GET", "/a", {}) == (200, b"one")
    with pytest.raises(httppool.ServerDisconnectedError):
        await pool.request("PATCH", "/b", {}, b"{}")  # the server closed instead of answering
    assert await pool.request("GET", "/c", {}) == (200, b"again")
    assert pool.opened == 2

    server.close_connections()
    await until(lambda: pool.idle == 0)  # the pool saw it go
    assert await pool.request("GET", "/d", {}) == (200, b"again")
    assert pool.opened == 3


async def test_an_idempotent_request_is_sent_once_more_when_its_connection_ends(
    server: Server, pool: httppool.Pool
) -> None:
    answers = iter([_ok(b"one"), None, _ok(b"two"), None, None, None])
    server.respond = lambda head, body: next(answers)
    assert await pool.request("GET", "/a", {}) == (200, b"one")
    assert await pool.request("GET", "/b", {}) == (200, b"two")  # closed, then again: answered
    assert [head.split(b" ")[1] for head in server.heads] == [b"/a", b"/b", b"/b"]
    assert pool.opened == 2
    with pytest.raises(httppool.ServerDisconnectedError):
        await pool.request("PATCH", "/c", {}, b"{}")  # it may have been applied: not again
    with pytest.raises(httppool.ServerDisconnectedError):
        await pool.request("DELETE", "/d", {})  # closed twice: the caller's to handle
    assert [head.split(b" ")[1] for head in server.heads[3:]] == [b"/c", b"/d", b"/d"]


async def test_cut_or_malformed_answers_and_refused_connects_are_os_errors(
    server: Server, pool: httppool.Pool
) -> None:
    server.respond = lambda head, body: b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this"
    with pytest.raises(httppool.ServerDisconnectedError) as cut:
        await asyncio.wait_for(_request_then_close(server, pool), 5)
    assert isinstance(cut.value, ConnectionError)
    server.respond = lambda head, body: b"SSH-2.0-OpenSSH_9.6\r\n\r\n"
    with pytest.raises(httppool.ProtocolError) as malformed:
        await pool.request("GET", "/b", {})  # twice: a GET is sent once more
    assert "not HTTP/1.1" in str(malformed.value)
    assert isinstance(malformed.value, ConnectionError)
    await server.stop()
    with pytest.raises(OSError):  # noqa: PT011 (the loop's own: refused)
        await pool.request("GET", "/c", {})


async def _request_then_close(server: Server, pool: httppool.Pool) -> httppool.Answer:
    request = asyncio.ensure_future(pool.request("PATCH", "/a", {}, b"{}"))
    await until(lambda: server.heads)
    await asyncio.sleep(0.05)  # the partial answer is in
    server.close_connections()
    return await request


async def test_a_cancelled_request_never_leaves_its_connection_for_reuse(
    server: Server, pool: httppool.Pool
) -> None:
    server.holding = True  # the answer would come after the cancellation
    request = asyncio.ensure_future(pool.request("GET", "/slow", {}))
    await until(lambda: server.heads)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    await until(lambda: server.closed == 1)  # the pool closed it: the server saw the end
    assert pool.idle == 0
    server.holding = False
    assert await pool.request("GET", "/next", {}) == (200, b'{"kind":"Status"}')
    assert pool.opened == 2


async def test_at_most_limit_connections_are_in_use(server: Server) -> None:
    server.delay = 0.05
    pool = httppool.Pool("127.0.0.1", server.port, limit=3)
    try:
        answers = await asyncio.gather(*(pool.request("GET", f"/{i}", {}) for i in range(12)))
    finally:
        await pool.close()
    assert [answer.status for answer in answers] == [200] * 12
    assert server.most_open == pool.opened == 3


async def test_idle_connections_close_after_keepalive(server: Server) -> None:
    pool = httppool.Pool("127.0.0.1", server.port, keepalive=0.2)
    try:
        await asyncio.gather(*(pool.request("GET", f"/{i}", {}) for i in range(3)))
        assert pool.idle >= 1
        await until(lambda: server.closed == server.connections, timeout=5)
        assert pool.idle == 0
        assert pool.busy == 0
    finally:
        await pool.close()


async def test_a_header_with_a_line_break_is_refused(server: Server, pool: httppool.Pool) -> None:
    with pytest.raises(ValueError, match="Authorization header's value has a line break"):
        await pool.request("GET", "/a", {"Authorization": "Bearer x\r\nX-Evil: 1"})
    for target in ("/a b", "/a\r\nX-Evil: 1"):
        with pytest.raises(ValueError, match="has a space or a line break"):
            await pool.request("GET", target, {})
    assert server.heads == []
    assert pool.opened == 0


async def test_closing_fails_requests_in_flight_and_refuses_new_ones(server: Server) -> None:
    server.holding = True
    pool = httppool.Pool("127.0.0.1", server.port)
    request = asyncio.ensure_future(pool.request("GET", "/slow", {}))
    await until(lambda: server.heads)
    await pool.close()
    with pytest.raises(httppool.ServerDisconnectedError):
        await asyncio.wait_for(request, 2)
    with pytest.raises(httppool.ServerDisconnectedError, match="pool is closed"):
        await pool.request("GET", "/after", {})


async def test_observers_and_tracers_see_each_request(server: Server, pool: httppool.Pool) -> None:
    waits: list[float] = []
    traces: list[httppool.Trace] = []
    pool.observe(waits.append)
    await pool.request("GET", "/first", {})
    pool.trace(traces.append)
    await pool.request("PUT", "/second?x=1", {}, b"{}")
    server.respond = lambda head, body: None
    with pytest.raises(httppool.ServerDisconnectedError):
        await pool.request("GET", "/third", {})
    assert len(waits) == 3
    assert all(wait >= 0 for wait in waits)
    assert [(trace.method, trace.target) for trace in traces] == [
        ("PUT", "/second?x=1"),
        ("GET", "/third"),
    ]
    assert traces[0].opened == 0  # the first request's connection, idle
    assert all(t.started <= t.started + t.waited <= t.ended for t in traces)


async def test_a_receive_buffer_is_asked_before_connecting_and_a_refusal_is_an_os_error(
    server: Server,
) -> None:
    """The socket made by the pool itself (`receive_buffer`: uvloop's TLS connections)."""
    pool = httppool.Pool("127.0.0.1", server.port, receive_buffer=64 * 1024)
    try:
        assert await pool.request("GET", "/a", {}) == (200, b'{"kind":"Status"}')
        (connection,) = pool._idle
        assert connection.transport is not None
        sock = connection.transport.get_extra_info("socket")
        size = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        assert 64 * 1024 <= size <= 2 * 64 * 1024  # Linux doubles what is asked, and keeps it
        await server.stop()
        server.close_connections()
        await until(lambda: pool.idle == 0)
        with pytest.raises(ConnectionRefusedError):
            await pool.request("GET", "/b", {})
    finally:
        await pool.close()
