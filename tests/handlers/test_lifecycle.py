"""The lifecycle handlers, end to end: kopf, the emulated API, the reference driver.

We test these aspects:
- at start-up the operator logs in with our kubeconfig, waits for the driver and caches what
  the driver says about itself;
- the liveness endpoint includes the driver's Probe, and fails while the driver is down;
- an operator started before its driver waits for it, and one whose driver never comes fails
  with a clear error.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import socket
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import pytest

from kopf_csi.driver import Driver, DriverConfig, running_driver
from kopf_csi.settings import CSISettings, Settings
from kopf_csi.testing.operator import OperatorThread, running_operator

from ..conftest import DRIVER_NAME


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int, dict[str, object]]:
    """GET, waiting for the endpoint to listen: kopf starts it beside, not before, readiness."""
    deadline = time.monotonic() + 10
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, {}
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


async def test_startup_connects_to_the_driver_and_caches_its_info(
    operator: OperatorThread,
) -> None:
    info = operator.memo.driver
    assert info.name == DRIVER_NAME
    assert "CONTROLLER_SERVICE" in info.plugin_capabilities
    assert "CREATE_DELETE_VOLUME" in info.controller_capabilities
    assert "PUBLISH_UNPUBLISH_VOLUME" in info.controller_capabilities
    assert operator.memo.settings.csi.timeout == 5.0


@pytest.fixture
async def live_operator(
    settings: Settings, driver: Driver
) -> AsyncIterator[tuple[OperatorThread, str]]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/healthz"
    operator = OperatorThread(
        settings=settings, modules=("kopf_csi_handlers.lifecycle",), liveness_endpoint=url
    )
    await operator.start()
    try:
        yield operator, url
    finally:
        await operator.stop()


async def test_liveness_reports_a_ready_driver(
    live_operator: tuple[OperatorThread, str],
) -> None:
    _, url = live_operator
    status, body = await asyncio.to_thread(_get, url)
    assert status == 200
    assert body["driver"] == "ready"


async def test_liveness_reports_a_driver_that_is_not_ready(
    live_operator: tuple[OperatorThread, str], driver: Driver
) -> None:
    _, url = live_operator
    driver.faults.set_ready(False)
    status, body = await asyncio.to_thread(_get, url)
    assert status == 200
    assert body["driver"] == "not-ready"


async def test_liveness_fails_while_the_driver_is_down(
    live_operator: tuple[OperatorThread, str], driver: Driver
) -> None:
    # kopf caches probe results for 10 s, so this is the first probe of this operator.
    _, url = live_operator
    await driver.stop(grace=0.1)
    status, _ = await asyncio.to_thread(_get, url)
    assert status == 500


async def test_operator_waits_for_a_driver_that_starts_late(
    settings: Settings, driver_config: DriverConfig, socket_path: pathlib.Path
) -> None:
    operator = OperatorThread(settings=settings, modules=("kopf_csi_handlers.lifecycle",))
    starting = asyncio.create_task(operator.start())
    await asyncio.sleep(1.5)
    assert not starting.done()
    async with running_driver(driver_config, socket_path=socket_path, grace=0.1):
        await asyncio.wait_for(starting, 15)
        try:
            assert operator.memo.driver.name == DRIVER_NAME
        finally:
            await operator.stop()


async def test_operator_without_a_driver_fails_clearly(
    settings: Settings, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    lonely = Settings(
        csi=CSISettings(address=str(tmp_path / "none.sock"), timeout=1.0, connect_timeout=1.0),
        kube=settings.kube,
    )
    with pytest.raises(RuntimeError) as err:
        async with running_operator(settings=lonely, modules=("kopf_csi_handlers.lifecycle",)):
            pass
    assert "the operator failed to start" in str(err.value)
    failures = [r.getMessage() for r in caplog.records if r.name == "kopf.activities.startup"]
    assert any("cannot start without the CSI driver" in m for m in failures)
    assert any("was not ready within 1s" in m for m in failures)
