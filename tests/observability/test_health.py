"""Liveness and readiness over HTTP: the driver's Probe, registered checks, leader election.

We test these aspects:
- `/healthz` is green while the driver answers, red while Probe hangs, fails or says not
  ready, or the driver is gone; green again once it is back (the client reconnects);
- a failing or raising entry of `memo.health_checks` turns `/healthz` red;
- `/healthz/leader-election` answers as csi-lib-utils' does: 200 `ok`, 500 while the
  `leader-election` check fails;
- `/readyz` is red until the driver is connected and the caches primed, and names the step of
  start-up it waits for; with `--no-csi` it is green once the caches are primed, and `/healthz`
  says the driver is off;
- `--http-endpoint` values are parsed as Go's `host:port`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
import kopf
import pytest

from kopf_csi.csi.codes import Code
from kopf_csi.driver import Driver
from kopf_csi.endpoints import LEADER_ELECTION_CHECK, Endpoints, parse_endpoint, readiness
from kopf_csi.metrics import Metrics
from kopf_csi.settings import CSISettings, Settings
from kopf_csi.testing.operator import OperatorThread

from .conftest import get


async def _status(operator: OperatorThread, path: str = "/healthz") -> int:
    return (await get(operator, path))[0]


async def _until_status(operator: OperatorThread, expected: int, path: str = "/healthz") -> str:
    for _ in range(100):
        status, _, body = await get(operator, path)
        if status == expected:
            return body
    raise AssertionError(f"{path} never answered {expected}")


@contextlib.asynccontextmanager
async def _serving(memo: kopf.Memo) -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP endpoint of its own on `memo` (no operator behind it: a start-up stage), and a
    session whose relative paths go to it."""
    server = Endpoints(
        endpoint="127.0.0.1:0", metrics_path="/metrics", metrics=Metrics(), memo=memo
    )
    await server.start()
    try:
        async with aiohttp.ClientSession(base_url=server.url) as session:
            yield session
    finally:
        await server.stop()


async def test_healthy_operator_answers_every_probe(operator: OperatorThread) -> None:
    status, _, body = await get(operator, "/healthz")
    assert status == 200
    assert "[+]driver ok" in body.splitlines()
    assert body.splitlines()[-1] == "healthz check passed"
    assert await get(operator, "/readyz") == (200, "text/plain; charset=utf-8", "ok")
    assert await get(operator, "/healthz/leader-election") == (
        200, "text/plain; charset=utf-8", "ok",
    )  # fmt: skip


async def test_a_hanging_probe_fails_liveness_until_it_answers(
    operator: OperatorThread, driver: Driver
) -> None:
    rule = driver.faults.hang("Probe")
    status, _, body = await get(operator, "/healthz")
    assert status == 500
    assert any(line.startswith("[-]driver failed:") for line in body.splitlines())
    assert "timed out" in body
    assert body.splitlines()[-1] == "healthz check failed"
    driver.faults.remove(rule)
    await _until_status(operator, 200)


@pytest.mark.parametrize("code", [Code.INTERNAL, Code.FAILED_PRECONDITION])
async def test_a_failing_probe_fails_liveness(
    operator: OperatorThread, driver: Driver, code: Code
) -> None:
    driver.faults.fail("Probe", code)
    status, _, body = await get(operator, "/healthz")
    assert status == 500
    assert "injected fault" in body


async def test_a_driver_not_ready_fails_liveness(operator: OperatorThread, driver: Driver) -> None:
    driver.faults.set_ready(False)
    status, _, body = await get(operator, "/healthz")
    assert status == 500
    assert "ready=false" in body


async def test_liveness_follows_the_driver_going_and_coming_back(
    operator: OperatorThread, driver: Driver
) -> None:
    await driver.stop(grace=0.1)
    status, _, body = await get(operator, "/healthz")
    assert status == 500
    assert "UNAVAILABLE" in body or "Unavailable" in body
    await driver.start()
    await _until_status(operator, 200)
    # Readiness is about start-up: a lost driver makes the pod unhealthy, not unready.
    assert await _status(operator, "/readyz") == 200


async def test_a_failing_health_check_fails_liveness(operator: OperatorThread) -> None:
    checks = operator.memo.health_checks
    checks["quota"] = lambda: (False, "quota controller stuck")
    status, _, body = await get(operator, "/healthz")
    assert status == 500
    assert "[-]quota failed: quota controller stuck" in body.splitlines()
    assert "[+]driver ok" in body.splitlines()
    assert await _status(operator, "/healthz/leader-election") == 200  # not its business

    async def broken() -> tuple[bool, str]:
        raise RuntimeError("boom")

    checks["quota"] = broken
    status, _, body = await get(operator, "/healthz")
    assert status == 500
    assert "[-]quota failed: RuntimeError: boom" in body.splitlines()
    del checks["quota"]
    assert await _status(operator) == 200


async def test_the_leader_election_watchdog_fails_both_paths(operator: OperatorThread) -> None:
    state = {"ok": False}
    operator.memo.health_checks[LEADER_ELECTION_CHECK] = lambda: (
        state["ok"],
        "" if state["ok"] else "lease not renewed for 35s",
    )
    status, _, body = await get(operator, "/healthz/leader-election")
    assert (status, body) == (500, "internal server error: failed: lease not renewed for 35s\n")
    assert await _status(operator) == 500
    state["ok"] = True
    assert await get(operator, "/healthz/leader-election") == (
        200, "text/plain; charset=utf-8", "ok",
    )  # fmt: skip
    assert await _status(operator) == 200


async def test_not_ready_before_the_driver_is_connected() -> None:
    """Before `lifecycle.connect` finished: alive (start-up has its own deadline), not ready."""
    async with _serving(kopf.Memo()) as session:
        async with session.get("/readyz") as response:
            assert response.status == 500
            assert "connecting" in await response.text()
        async with session.get("/healthz") as response:
            assert response.status == 200
            assert "[+]driver connecting" in await response.text()
        async with session.get("/debug/objects/pvc/default/data") as response:
            assert (await response.json())["starting"] == CONNECTING  # serves nothing yet
        async with session.get("/nowhere") as response:
            assert response.status == 404


CONNECTING = "not ready: connecting to the CSI driver"
LOGGING_IN = "not ready: logging in to Kubernetes (the CSI driver answered)"
PRIMING = "not ready: priming the caches from the Kubernetes API"
NO_CSI = "ok: no CSI driver (--no-csi)"
LOGGING_IN_WITHOUT_CSI = "not ready: logging in to Kubernetes (--no-csi)"
WITHOUT_CSI = Settings(csi=CSISettings(disabled=True))


@pytest.mark.parametrize(
    ("stage", "answer"),
    [
        ({}, (False, CONNECTING)),
        ({"csi": object()}, (False, LOGGING_IN)),
        ({"csi": object(), "api": object()}, (False, PRIMING)),
        ({"csi": object(), "api": object(), "driver": object()}, (True, "ok")),
        # --no-csi: no driver ever; ready once the caches are primed.
        ({"settings": WITHOUT_CSI, "csi": None}, (False, LOGGING_IN_WITHOUT_CSI)),
        ({"csi": None, "api": object()}, (False, PRIMING)),
        ({"csi": None, "api": object(), "without_driver": True}, (True, NO_CSI)),
    ],
)  # fmt: skip
def test_readiness_names_the_step_of_start_up(
    stage: dict[str, object], answer: tuple[bool, str]
) -> None:
    assert readiness(kopf.Memo(stage)) == answer


async def test_without_a_driver_the_operator_is_ready_and_alive() -> None:
    """`--no-csi` (provisioners of handler modules only): ready, and no driver to probe."""
    async with _serving(kopf.Memo(csi=None, without_driver=True)) as session:
        async with session.get("/readyz") as response:
            assert response.status == 200
            assert await response.text() == "ok: no CSI driver (--no-csi)\n"
        async with session.get("/healthz") as response:
            assert response.status == 200
            assert "[+]driver off (--no-csi)" in await response.text()


async def test_without_a_driver_the_operator_logs_in_with_the_driver_off() -> None:
    """`--no-csi` before the login: not ready, saying so, and no driver to wait for."""
    async with _serving(kopf.Memo(settings=WITHOUT_CSI, csi=None)) as session:
        async with session.get("/readyz") as response:
            assert response.status == 500
            assert await response.text() == f"{LOGGING_IN_WITHOUT_CSI}\n"
        async with session.get("/healthz") as response:
            assert response.status == 200
            assert "[+]driver off (--no-csi)" in await response.text()


@pytest.mark.parametrize(
    ("endpoint", "parsed"),
    [
        (":8080", (None, 8080)),
        ("0.0.0.0:9808", ("0.0.0.0", 9808)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:8080", ("::1", 8080)),
        ("localhost:80", ("localhost", 80)),
    ],
)
def test_endpoints_are_parsed_as_go_host_port(endpoint: str, parsed: tuple) -> None:
    assert parse_endpoint(endpoint) == parsed


@pytest.mark.parametrize("endpoint", ["8080", "host:", "host:http", ":70000", ""])
def test_bad_endpoints_are_refused_with_the_value(endpoint: str) -> None:
    with pytest.raises(ValueError, match="is not \\[host\\]:port"):
        parse_endpoint(endpoint)


async def test_a_taken_port_is_an_error_not_a_silent_start() -> None:
    first = Endpoints(
        endpoint="127.0.0.1:0", metrics_path="/m", metrics=Metrics(), memo=kopf.Memo()
    )
    await first.start()
    try:
        assert first.address is not None
        second = Endpoints(
            endpoint=f"127.0.0.1:{first.address[1]}", metrics_path="/m", metrics=Metrics(),
            memo=kopf.Memo(),
        )  # fmt: skip
        with pytest.raises(OSError, match="in use"):
            await second.start()
    finally:
        await first.stop()
