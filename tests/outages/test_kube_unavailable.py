"""The API server away, as `kube` reports it: one error type, one warning each way.

We test these aspects:
- every way a request can get no answer (a refused connect, a reset or closed connection, a
  broken pipe, a TLS failure, a timeout, a cut payload or one that is not HTTP) reaches the
  caller as `kube.UnavailableError`, never as aiohttp's or the pool's own exception;
- against the emulated server restarted (draining, then gone, then back), every failed request
  is an `UnavailableError`: the 503 `apiserver is shutting down` with its real body, the resets
  and the refused connects alike; a watch open at the restart ends;
- with etcd stopped, a write fails with etcd's text (500) and a read with the server's timeout
  (504), both `UnavailableError`; back in time, a request waits and succeeds;
- the outage is logged once when it starts and once when it ends, with its duration and the
  number of requests that failed meanwhile, however many requests failed.
"""

from __future__ import annotations

import asyncio
import pathlib
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import structlog

from kopf_csi import httppool, kube
from kopf_csi.testing.emulator import EmulatedCluster

from ..conftest import until


@pytest.fixture
async def api(kubeconfig: pathlib.Path) -> AsyncIterator[kube.KubeClient]:
    async with await kube.KubeClient.connect(kubeconfig) as client:
        yield client


def _connection_key() -> Any:
    return aiohttp.client_reqrep.ConnectionKey("127.0.0.1", 1, False, True, None, None, None)


FAILURES = {  # as aiohttp raises them: the watches' session
    "broken pipe": lambda: aiohttp.ClientOSError(32, "Broken pipe"),
    "reset": lambda: aiohttp.ClientOSError(104, "Connection reset by peer"),
    "disconnected": lambda: aiohttp.ServerDisconnectedError(),
    "refused": lambda: aiohttp.ClientConnectorError(
        _connection_key(), ConnectionRefusedError(111, "Connection refused")
    ),
    "tls": lambda: aiohttp.ClientConnectorCertificateError(
        _connection_key(), ssl.SSLCertVerificationError("certificate verify failed")
    ),
    "timeout": lambda: TimeoutError(),
    "payload": lambda: aiohttp.ClientPayloadError("Response payload is not completed"),
    "os": lambda: ConnectionResetError(104, "Connection reset by peer"),
}
POOL_FAILURES = {  # as the plain requests' pool (`httppool`) and the loop raise them
    "broken pipe": lambda: BrokenPipeError(32, "Broken pipe"),
    "reset": lambda: ConnectionResetError(104, "Connection reset by peer"),
    "disconnected": lambda: httppool.ServerDisconnectedError("closed before it answered"),
    "refused": lambda: ConnectionRefusedError(111, "Connection refused"),
    "tls": lambda: ssl.SSLCertVerificationError("certificate verify failed"),
    "timeout": lambda: TimeoutError(),
    "payload": lambda: httppool.ProtocolError("the server's answer is not HTTP/1.1"),
    "os": lambda: OSError(113, "No route to host"),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
async def test_no_answer_is_one_error_type(
    api: kube.KubeClient, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    async def send(*args: Any, **kwargs: Any) -> Any:
        raise FAILURES[failure]()

    async def request(*args: Any, **kwargs: Any) -> Any:
        raise POOL_FAILURES[failure]()

    monkeypatch.setattr(api, "_send", send)
    assert api._pool is not None
    monkeypatch.setattr(api._pool, "request", request)
    with pytest.raises(kube.UnavailableError) as raised:
        await api.get(kube.CONFIGMAPS, "x", "default")
    assert not isinstance(raised.value, aiohttp.ClientError | OSError)
    assert raised.value.status == 0
    assert "/api/v1/namespaces/default/configmaps/x" in str(raised.value)
    with pytest.raises(kube.UnavailableError):
        async for _ in api.watch(kube.CONFIGMAPS, resource_version="1"):
            pass


async def test_a_restart_fails_requests_with_unavailable_only(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    cluster.write_latency = 0.01
    errors: list[BaseException] = []
    done = 0

    async def client(index: int) -> None:
        nonlocal done
        for attempt in range(60):
            body = {"metadata": {"name": f"c{index}-{attempt}", "namespace": "default"}}
            try:
                await api.create(kube.CONFIGMAPS, body)
            except Exception as exc:
                errors.append(exc)
            done += 1
            await asyncio.sleep(0.02)

    events: list[str] = []

    async def watcher() -> None:
        async for event in api.watch(kube.CONFIGMAPS, resource_version=""):
            events.append(event["type"])

    with structlog.testing.capture_logs() as logs:
        watching = asyncio.create_task(watcher())
        clients = asyncio.gather(*(client(i) for i in range(10)))
        await asyncio.sleep(0.2)
        await cluster.restart_apiserver(drain=0.4, gone=0.4)
        async with asyncio.timeout(5):
            await watching  # the server ended it
        async with asyncio.timeout(30):
            await clients
        await until(lambda: api.reachability.reachable, timeout=5)

    assert errors
    assert cluster.control_plane.served_while_draining  # a draining server still serves some
    assert all(isinstance(error, kube.UnavailableError) for error in errors), errors
    statuses = {error.status for error in errors if isinstance(error, kube.KubeError)}
    assert statuses == {0, 503}, statuses
    shutting_down = next(e for e in errors if isinstance(e, kube.KubeError) and e.status == 503)
    assert shutting_down.message == "apiserver is shutting down"
    assert shutting_down.reason == "ServiceUnavailable"

    outages = [e for e in logs if e["event"].startswith("api_") and e["log_level"] != "debug"]
    assert [entry["event"] for entry in outages] == ["api_unreachable", "api_reachable"], outages
    assert all(entry["log_level"] == "warning" for entry in outages)
    back = outages[1]
    assert back["unreachable_for"] >= 0.4  # at least the time it was gone
    assert back["failed_requests"] >= len(errors)  # the probe's own are not counted
    assert back["failed_requests"] <= len(errors) + 10  # the clients' retries, not the probe's


async def test_etcd_away_fails_writes_and_reads_as_unavailable(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    stopping = asyncio.create_task(cluster.stop_etcd(1.0, timeout=0.2))
    await asyncio.sleep(0.05)
    with pytest.raises(kube.UnavailableError) as write:
        await api.create(kube.CONFIGMAPS, {"metadata": {"name": "a", "namespace": "default"}})
    assert (write.value.status, write.value.message) == (
        500,
        "Internal error occurred: etcdserver: request timed out",
    )
    with pytest.raises(kube.UnavailableError) as read:
        await api.get(kube.CONFIGMAPS, "a", "default")
    assert read.value.status == 504
    assert read.value.reason == "Timeout"
    assert (await api.version())["major"]  # served from the server's memory
    await stopping


async def test_etcd_back_in_time_serves_the_waiting_request(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    stopping = asyncio.create_task(cluster.stop_etcd(0.3, timeout=5))
    await asyncio.sleep(0.05)
    created = await api.create(kube.CONFIGMAPS, {"metadata": {"name": "a", "namespace": "default"}})
    assert created["metadata"]["name"] == "a"
    assert cluster.control_plane.hung == 1
    await stopping


@pytest.mark.parametrize(
    ("error", "dropped"),
    [
        ("(no answer) GET /api/v1/nodes: the API server did not answer: Server disconnected", True),
        (
            "cannot record in-flight claims: (503 ServiceUnavailable) apiserver is shutting down",
            True,
        ),
        ("(504 Timeout) Timeout: request did not complete within requested timeout", True),
        ("(500 InternalError) Internal error occurred: etcdserver: request timed out", True),
        ('(404 NotFound) persistentvolumeclaims "x" not found', False),
        ("(500 InternalError) something else", False),
    ],
)
def test_a_warning_about_the_outage_is_dropped_below_debug(error: str, dropped: bool) -> None:
    """The net under every warning line (`logs.quiet_outages`): an error that says the API
    server was away is not a warning of its own (the outage was told once)."""
    from kopf_csi import logs

    try:
        logs.quiet_outages(None, "warning", {"event": "x", "error": error})
    except structlog.DropEvent:
        assert dropped
    else:
        assert not dropped
    kept = logs.quiet_outages(None, "info", {"event": "x", "error": error})
    assert kept["error"] == error  # only warnings
