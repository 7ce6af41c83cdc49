"""The API client's connections (its pool, `httppool`): opened ahead of a burst, and kept
between bursts.

Every new connection to a real API server is a TLS handshake; a burst of 100 claims opened
about 100 at once, and each request then waited 50-300 ms for its own (docs/benchmarks.md).

We test these aspects:
- `warm(n)` opens n connections at once; n requests at once afterwards open none;
- an idle connection is kept for `KEEPALIVE` seconds (aiohttp's default is 15 s);
- `warm` never opens more than the pool's limit;
- the pool hands out its newest idle connection, so that the connections a past peak opened
  idle out under a steady flow of requests (round robin kept them all: RSS grew under churn);
- every TLS read asks for one record's plaintext at most, on asyncio's loop and uvloop's (256
  KiB asked per read fragmented the C heap under churn), and a list far larger still arrives
  whole;
- on uvloop, every TLS connection asks the kernel for a small receive buffer (uvloop reads up
  to 256 KiB at once, and each connection kept its largest read);
- with a proxy in the environment every request goes through it (aiohttp's session, no pool
  of our own), unless `NO_PROXY` exempts the API server.
"""

from __future__ import annotations

import asyncio
import pathlib
import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kopf_csi import httppool, kube, loops
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.latency import Latency, LatencyModel


@pytest.fixture
async def api(kubeconfig: pathlib.Path) -> AsyncIterator[kube.KubeClient]:
    client = await kube.KubeClient.connect(kubeconfig)
    yield client
    await client.close()


def _pool(api: kube.KubeClient) -> httppool.Pool:
    assert api._pool is not None  # no proxy: the plain requests have a pool of their own
    return api._pool


async def test_warmed_connections_serve_a_burst(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    cluster.latency = Latency(LatencyModel(read=0.2))  # the burst's requests overlap
    assert await api.warm(5) == 5
    assert _pool(api).opened == 5
    await asyncio.gather(*(api.get(kube.CONFIGMAPS, f"cm-{i}", "default") for i in range(5)))
    assert _pool(api).opened == 5  # none more: the burst found them open


async def test_idle_connections_are_kept_a_minute(api: kube.KubeClient) -> None:
    assert _pool(api).keepalive == kube.KEEPALIVE == 60.0
    connector = api._api.rest_client.pool_manager.connector  # the watches'
    assert connector._keepalive_timeout == kube.KEEPALIVE


def _idle(api: kube.KubeClient) -> list[tuple[Any, float]]:
    return [(connection, connection.released) for connection in _pool(api)._idle]


async def test_the_newest_idle_connection_is_reused(api: kube.KubeClient) -> None:
    assert await api.warm(5) == 5
    warmed = {id(connection): released for connection, released in _idle(api)}
    assert len(warmed) == 5
    for i in range(8):  # one at a time: each finds all five idle
        await api.get(kube.CONFIGMAPS, f"cm-{i}", "default")
    assert _pool(api).opened == 5
    reused = [conn for conn, released in _idle(api) if released != warmed[id(conn)]]
    assert len(reused) == 1  # round robin would have used all five


async def test_connections_beyond_the_recent_need_idle_out(api: kube.KubeClient) -> None:
    _pool(api).keepalive = 0.5  # KEEPALIVE, shortened
    assert await api.warm(5) == 5
    loop = asyncio.get_running_loop()
    until = loop.time() + 2.0
    while loop.time() < until:  # a steady flow of one request at a time
        await api.get(kube.CONFIGMAPS, "cm", "default")
        await asyncio.sleep(0.02)
    assert len(_idle(api)) == 1


async def test_warming_stays_within_the_pool(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    limit = _pool(api).limit
    assert limit == api._api.rest_client.pool_manager.connector.limit  # kubernetes-asyncio's
    assert await api.warm(limit + 50) == limit
    assert _pool(api).opened <= limit


def _big_configmaps(cluster: EmulatedCluster, count: int, blob: str) -> None:
    """`count` ConfigMaps `big-<i>` in `default`, each holding `blob`."""
    for i in range(count):
        body = {"metadata": {"name": f"big-{i}", "namespace": "default"}, "data": {"b": blob}}
        cluster.create("configmaps", body)


async def test_tls_reads_hold_a_small_buffer_and_lose_nothing(tmp_path: pathlib.Path) -> None:
    """asyncio's 256 KiB read buffer per TLS connection was a quarter of a burst's peak RSS;
    a list far larger than one read still arrives whole."""
    blob = "x" * 50_000
    async with EmulatedCluster(tls=True) as cluster:
        _big_configmaps(cluster, 40, blob)  # about 2 MB in one page: 30 reads of 64 KiB
        async with await kube.KubeClient.connect(
            cluster.write_kubeconfig(tmp_path / "kubeconfig")
        ) as api:
            items = await api.list(kube.CONFIGMAPS, "default")
            assert sorted(item["metadata"]["name"] for item in items) == sorted(
                f"big-{i}" for i in range(40)
            )
            assert all(item["data"]["b"] == blob for item in items)
            # The pooled connection's TLS layer (asyncio's, private) and its read buffer.
            pooled = _pool(api)._idle
            assert pooled
            buffers = [len(conn.transport._ssl_protocol._ssl_buffer) for conn in pooled]
            assert all(0 < size <= kube.TLS_READ_SIZE for size in buffers)


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_tls_reads_ask_for_one_record_at_most(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, loop_name: str
) -> None:
    """uvloop read every TLS connection 256 KiB at a time (a 256 KiB allocation per read,
    shrunk to what came): the operator's RSS grew under churn with its live memory flat."""
    asked: list[int] = []
    read = ssl.SSLObject.read

    def spied(self: ssl.SSLObject, len: int = 1024, buffer: Any = None) -> Any:
        if isinstance(self, kube._RecordReads):  # the client's connections, not the server's
            asked.append(len)
        return read(self, len, buffer)

    monkeypatch.setattr(ssl.SSLObject, "read", spied)
    blob = "x" * 50_000

    async def listed() -> list[dict[str, Any]]:
        async with EmulatedCluster(tls=True) as cluster:
            _big_configmaps(cluster, 20, blob)  # about 1 MB in one page: over 60 records
            async with await kube.KubeClient.connect(
                cluster.write_kubeconfig(tmp_path / "kubeconfig")
            ) as api:
                return await api.list(kube.CONFIGMAPS, "default")

    loop = loops.new_event_loop(loop_name)
    try:
        items = loop.run_until_complete(listed())
    finally:
        loop.close()
    assert sorted(item["metadata"]["name"] for item in items) == sorted(
        f"big-{i}" for i in range(20)
    )
    assert all(item["data"]["b"] == blob for item in items)
    assert len(asked) > 60  # a read per record at least
    assert max(asked) <= kube.TLS_RECORD_SIZE


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_tls_connections_on_uvloop_ask_for_a_small_receive_buffer(
    tmp_path: pathlib.Path, loop_name: str
) -> None:
    """uvloop reads whatever the socket holds, up to 256 KiB at once, and each connection kept
    its largest read twice (its read buffer, OpenSSL's incoming buffer): the RSS under churn
    rose all the time. On uvloop the kernel's receive buffer is asked small, before the connect
    (fixed: the kernel no longer grows it); asyncio's reads are capped already (`TLS_READ_SIZE`).
    A list far larger than the buffer still arrives whole."""
    blob = "x" * 50_000

    async def listed() -> tuple[list[dict[str, Any]], list[int], Any]:
        async with EmulatedCluster(tls=True) as cluster:
            _big_configmaps(cluster, 20, blob)  # about 1 MB in one page
            async with await kube.KubeClient.connect(
                cluster.write_kubeconfig(tmp_path / "kubeconfig")
            ) as api:
                items = await api.list(kube.CONFIGMAPS, "default")
                pooled = _pool(api)._idle
                sizes = [
                    conn.transport.get_extra_info("socket").getsockopt(
                        socket.SOL_SOCKET, socket.SO_RCVBUF
                    )
                    for conn in pooled
                ]
                connector = api._api.rest_client.pool_manager.connector  # the watches'
                return items, sizes, (connector._socket_factory, _pool(api)._receive_buffer)

    loop = loops.new_event_loop(loop_name)
    try:
        items, sizes, factory = loop.run_until_complete(listed())
    finally:
        loop.close()
    assert sorted(item["metadata"]["name"] for item in items) == sorted(
        f"big-{i}" for i in range(20)
    )
    assert all(item["data"]["b"] == blob for item in items)
    assert sizes  # the connection that listed is pooled
    watches, requests = factory
    if loop_name == "uvloop":
        assert watches is not None
        assert requests == kube.TLS_RECEIVE_BUFFER
        # Linux doubles what is asked (its bookkeeping), and keeps it: no autotuning after 1 MB
        assert all(kube.TLS_RECEIVE_BUFFER <= size <= 2 * kube.TLS_RECEIVE_BUFFER for size in sizes)
    else:
        assert watches is None  # the kernel's own, autotuned
        assert requests is None


_PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


async def _answering_proxy(seen: list[bytes]) -> asyncio.Server:
    """A proxy that answers every request itself (a ConfigMap `via-proxy`), and records each
    request line."""
    body = b'{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"via-proxy"}}'
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                seen.append(head.split(b"\r\n", 1)[0])
                writer.write(answer % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


@pytest.mark.parametrize("exempt", [False, True])
async def test_requests_go_through_the_environments_proxy(
    kubeconfig: pathlib.Path, monkeypatch: pytest.MonkeyPatch, exempt: bool
) -> None:
    seen: list[bytes] = []
    proxy = await _answering_proxy(seen)
    for name in _PROXIES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.sockets[0].getsockname()[1]}")
    if exempt:
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    async with proxy, await kube.KubeClient.connect(kubeconfig) as api:
        got = await api.get(kube.CONFIGMAPS, "x", "default")
        pooled = api._pool
    if exempt:
        assert pooled is not None  # straight to the server, on the pool of our own
        assert got is None  # the emulated server's answer: no such ConfigMap
        assert seen == []
    else:
        assert pooled is None  # aiohttp's session: it speaks to proxies
        assert got is not None
        assert got["metadata"]["name"] == "via-proxy"
        assert len(seen) == 1
        assert seen[0].startswith(b"GET http://")  # the absolute form a proxy is sent
        assert seen[0].endswith(b"/api/v1/namespaces/default/configmaps/x HTTP/1.1")
