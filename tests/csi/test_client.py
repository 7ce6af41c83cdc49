"""CSIClient against scripted drivers over a real unix socket.

We test these aspects:
- waiting for the driver: not ready, then ready; a missing socket; a bounded wait that ends in
  DriverNotReadyError; a socket path that stays absent ends it early, one that refuses does
  not; a final Probe error raised at once;
- capabilities are read once and cached;
- every failure is a CSIError with the method and the code: gRPC statuses, a missing socket;
- an expired call is CSITimeoutError whether our timer or the driver's fired first;
- the client keeps working after the driver restarts;
- secrets never reach logs, reprs or error texts, even when the driver echoes them;
- the observer (metrics hook) sees every call with its code;
- the connection remembers at most `CLOSED_STREAMS_REMEMBERED` closed streams, not h2's 65,536.
"""

from __future__ import annotations

import asyncio
import pathlib
import socket
from typing import Any

import pytest
import structlog
from h2.connection import H2Connection

from kopf_csi.csi import (
    STRIPPED,
    Code,
    CSIClient,
    CSIError,
    CSITimeoutError,
    DriverNotReadyError,
)
from kopf_csi.csi import client as csi_client
from kopf_csi.csi import messages as csi
from kopf_csi.csi.serving import Serving, fail, serve

SECRET = "hunter2-very-secret"


class ScriptedIdentity(csi.IdentityBase):
    def __init__(self) -> None:
        self.ready: list[bool | None] = []
        self.probe_error: Code | None = None
        self.calls: dict[str, int] = {}

    async def probe(self, message: csi.ProbeRequest) -> csi.ProbeResponse:
        self.calls["Probe"] = self.calls.get("Probe", 0) + 1
        if self.probe_error is not None:
            fail(self.probe_error, "probe says no")
        ready = self.ready.pop(0) if self.ready else True
        return csi.ProbeResponse(ready=ready)

    async def get_plugin_info(self, message: csi.GetPluginInfoRequest) -> csi.GetPluginInfoResponse:
        self.calls["GetPluginInfo"] = self.calls.get("GetPluginInfo", 0) + 1
        return csi.GetPluginInfoResponse(name="scripted.csi.test", vendor_version="1.2.3")

    async def get_plugin_capabilities(
        self, message: csi.GetPluginCapabilitiesRequest
    ) -> csi.GetPluginCapabilitiesResponse:
        service = csi.PluginCapabilityService
        return csi.GetPluginCapabilitiesResponse(
            capabilities=[
                csi.PluginCapability(
                    service=service(type=csi.PluginCapabilityServiceType.CONTROLLER_SERVICE)
                ),
                csi.PluginCapability(
                    volume_expansion=csi.PluginCapabilityVolumeExpansion(
                        type=csi.PluginCapabilityVolumeExpansionType.ONLINE
                    )
                ),
            ]
        )


class ScriptedController(csi.ControllerBase):
    def __init__(self) -> None:
        self.delay = 0.0
        self.error: tuple[Code, str] | None = None
        self.capability_calls = 0

    async def controller_get_capabilities(
        self, message: csi.ControllerGetCapabilitiesRequest
    ) -> csi.ControllerGetCapabilitiesResponse:
        self.capability_calls += 1
        rpc = csi.ControllerServiceCapabilityRpc
        kinds = csi.ControllerServiceCapabilityRpcType
        return csi.ControllerGetCapabilitiesResponse(
            capabilities=[
                csi.ControllerServiceCapability(rpc=rpc(type=kinds.CREATE_DELETE_VOLUME)),
                csi.ControllerServiceCapability(rpc=rpc(type=kinds.PUBLISH_UNPUBLISH_VOLUME)),
            ]
        )

    async def create_volume(self, message: csi.CreateVolumeRequest) -> csi.CreateVolumeResponse:
        await asyncio.sleep(self.delay)
        if self.error is not None:
            fail(*self.error)
        return csi.CreateVolumeResponse(
            volume=csi.Volume(volume_id=f"id-{message.name}", capacity_bytes=1024)
        )


class Driver:
    """A scripted driver that can be stopped and started again on the same socket."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self.identity = ScriptedIdentity()
        self.controller = ScriptedController()
        self.serving: Serving | None = None

    async def start(self) -> None:
        self.serving = await serve([self.identity, self.controller], path=self.path)

    async def stop(self) -> None:
        if self.serving is not None:
            await self.serving.stop(grace=0.1)
            self.serving = None


@pytest.fixture
def socket_path(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "csi.sock"


@pytest.fixture
async def driver(socket_path: pathlib.Path) -> Any:
    driver = Driver(socket_path)
    await driver.start()
    yield driver
    await driver.stop()


@pytest.fixture
async def client(socket_path: pathlib.Path) -> Any:
    client = CSIClient(f"unix://{socket_path}", timeout=2.0)
    yield client
    await client.close()


async def test_ready_driver_is_ready_at_once(driver: Driver, client: CSIClient) -> None:
    await client.wait_ready(wait=1)
    assert driver.identity.calls["Probe"] == 1


async def test_not_ready_is_probed_again_until_ready(driver: Driver, client: CSIClient) -> None:
    driver.identity.ready = [False, False, None]  # a missing `ready` counts as ready
    with structlog.testing.capture_logs() as logs:
        await client.wait_ready(wait=5, interval=0.01)
    assert driver.identity.calls["Probe"] == 3
    assert [e["event"] for e in logs if e["log_level"] == "info"] == ["waiting_for_driver"]


async def test_waits_for_a_socket_that_appears_later(
    socket_path: pathlib.Path, client: CSIClient
) -> None:
    driver = Driver(socket_path)
    waiting = asyncio.create_task(client.wait_ready(wait=5, interval=0.05))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await driver.start()
    try:
        await asyncio.wait_for(waiting, 3)
    finally:
        await driver.stop()


async def test_bounded_wait_ends_in_a_clear_error(client: CSIClient) -> None:
    with structlog.testing.capture_logs() as logs, pytest.raises(DriverNotReadyError) as err:
        await client.wait_ready(wait=0.3, interval=0.05)
    assert err.value.code is Code.UNAVAILABLE
    assert "was not ready within 0.3s" in str(err.value)
    assert str(client.path) in str(err.value)
    assert any(e["event"] == "waiting_for_driver" for e in logs)


async def test_a_socket_that_never_appears_ends_the_wait_early(client: CSIClient) -> None:
    """A whole connect timeout (30 s) to say that a path does not exist helps nobody: after the
    grace, the same error, naming the grace and the cause."""
    with pytest.raises(DriverNotReadyError) as err:
        await asyncio.wait_for(client.wait_ready(wait=30, interval=0.05, missing_grace=0.2), 20)
    assert f"the CSI driver at {client.path} was not ready within 0.2s: " in str(err.value)
    assert "No such file or directory" in str(err.value)


async def test_a_socket_that_refuses_gets_the_whole_wait(
    socket_path: pathlib.Path, client: CSIClient
) -> None:
    """A socket bound but not listening (a driver starting): waited for, as the Go sidecars do,
    for the whole wait and not only the grace for a missing one."""
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(socket_path))
        with pytest.raises(DriverNotReadyError) as err:
            await client.wait_ready(wait=0.5, interval=0.05, missing_grace=0.01)
    assert "was not ready within 0.5s" in str(err.value)
    assert "No such file or directory" not in str(err.value)


async def test_a_final_probe_error_is_raised_at_once(driver: Driver, client: CSIClient) -> None:
    driver.identity.probe_error = Code.FAILED_PRECONDITION
    with pytest.raises(CSIError) as err:
        await client.wait_ready(wait=5, interval=0.01)
    assert err.value.code is Code.FAILED_PRECONDITION
    assert driver.identity.calls["Probe"] == 1


async def test_driver_info_is_read_once_and_cached(driver: Driver, client: CSIClient) -> None:
    info = await client.driver_info()
    again = await client.driver_info()
    assert again is info
    assert info.name == "scripted.csi.test"
    assert info.vendor_version == "1.2.3"
    assert info.plugin_capabilities == {"CONTROLLER_SERVICE"}
    assert info.volume_expansion == {"ONLINE"}
    assert info.controller_capabilities == {"CREATE_DELETE_VOLUME", "PUBLISH_UNPUBLISH_VOLUME"}
    assert info.has_controller("PUBLISH_UNPUBLISH_VOLUME")
    assert driver.controller.capability_calls == 1
    assert driver.identity.calls["GetPluginInfo"] == 1
    await client.driver_info(refresh=True)
    assert driver.controller.capability_calls == 2


@pytest.mark.parametrize("code", [c for c in Code if c not in {Code.OK, Code.DEADLINE_EXCEEDED}])
async def test_every_grpc_status_is_a_csi_error(
    driver: Driver, client: CSIClient, code: Code
) -> None:
    driver.controller.error = (code, "the driver says no")
    with pytest.raises(CSIError) as err:
        await client.create_volume(csi.CreateVolumeRequest(name="pvc-1"))
    assert type(err.value) is CSIError
    assert err.value.code is code
    assert err.value.method == "/csi.v1.Controller/CreateVolume"
    assert err.value.message == "the driver says no"


async def test_missing_socket_is_unavailable(client: CSIClient) -> None:
    with pytest.raises(CSIError) as err:
        await client.create_volume(csi.CreateVolumeRequest(name="pvc-1"))
    assert err.value.code is Code.UNAVAILABLE
    assert err.value.method == "/csi.v1.Controller/CreateVolume"


async def test_client_timer_expiry_is_a_timeout_error(driver: Driver, client: CSIClient) -> None:
    driver.controller.delay = 5
    with pytest.raises(CSITimeoutError) as err:
        await client.create_volume(csi.CreateVolumeRequest(name="pvc-1"), timeout=0.2)
    assert err.value.code is Code.DEADLINE_EXCEEDED
    assert isinstance(err.value, CSIError)


async def test_driver_deadline_status_is_the_same_timeout_error(
    driver: Driver, client: CSIClient
) -> None:
    driver.controller.error = (Code.DEADLINE_EXCEEDED, "backend too slow")
    with pytest.raises(CSITimeoutError) as err:
        await client.create_volume(csi.CreateVolumeRequest(name="pvc-1"))
    assert err.value.code is Code.DEADLINE_EXCEEDED
    assert "backend too slow" in err.value.message


async def test_client_keeps_working_after_a_driver_restart(
    driver: Driver, client: CSIClient
) -> None:
    first = await client.create_volume(csi.CreateVolumeRequest(name="pvc-1"))
    await driver.stop()
    with pytest.raises(CSIError) as err:
        await client.create_volume(csi.CreateVolumeRequest(name="pvc-2"))
    assert err.value.code is Code.UNAVAILABLE
    await driver.start()
    second = await client.create_volume(csi.CreateVolumeRequest(name="pvc-2"))
    assert first.volume is not None
    assert second.volume is not None
    assert second.volume.volume_id == "id-pvc-2"


async def test_secrets_are_stripped_from_logs_reprs_and_errors(
    driver: Driver, client: CSIClient
) -> None:
    driver.controller.error = (Code.INVALID_ARGUMENT, f"bad password {SECRET} for user admin")
    request = csi.CreateVolumeRequest(name="pvc-1", secrets={"password": SECRET})
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(CSIError) as err:
            await client.create_volume(request)
        driver.controller.error = None
        await client.create_volume(request)
    assert SECRET not in repr(request)
    assert SECRET not in str(request)
    assert SECRET not in str(err.value)
    assert SECRET not in repr(err.value)
    assert STRIPPED in err.value.message
    assert "for user admin" in err.value.message
    assert {e["event"] for e in logs} >= {"csi_request", "csi_error", "csi_response"}
    assert SECRET not in repr(logs)
    requests = [e for e in logs if e["event"] == "csi_request"]
    assert requests[0]["request"]["secrets"] == STRIPPED
    assert requests[0]["request"]["name"] == "pvc-1"


async def test_observers_see_every_call_with_its_code(driver: Driver, socket_path: Any) -> None:
    seen: list[tuple[str, Code, float]] = []
    async with CSIClient(str(socket_path), observers=[lambda *a: seen.append(a)]) as client:
        await client.create_volume(csi.CreateVolumeRequest(name="pvc-1"))
        driver.controller.error = (Code.ABORTED, "busy")
        with pytest.raises(CSIError):
            await client.create_volume(csi.CreateVolumeRequest(name="pvc-1"))
    assert [(m, c) for m, c, _ in seen] == [
        ("/csi.v1.Controller/CreateVolume", Code.OK),
        ("/csi.v1.Controller/CreateVolume", Code.ABORTED),
    ]
    assert all(seconds >= 0 for _, _, seconds in seen)


def test_go_names_of_codes() -> None:
    assert Code.DEADLINE_EXCEEDED.title == "DeadlineExceeded"
    assert Code.CANCELLED.title == "Canceled"
    assert Code.OK.title == "Ok"


async def test_closed_streams_remembered_are_capped(
    driver: Driver, socket_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One stream per call on a connection that lives as long as the operator: h2 would keep
    every closed one, up to 65,536 (7.5 MiB); the client caps them."""
    monkeypatch.setattr(H2Connection, "MAX_CLOSED_STREAMS", H2Connection.MAX_CLOSED_STREAMS)
    monkeypatch.setattr(csi_client, "CLOSED_STREAMS_REMEMBERED", 8)
    async with CSIClient(f"unix://{socket_path}", timeout=2.0) as client:
        for _ in range(30):
            await client.probe()
        h2 = client._channel._protocol.processor.connection._connection  # type: ignore[union-attr]
        assert h2.highest_outbound_stream_id >= 2 * 30 - 1  # one stream per call
        assert len(h2._closed_streams) == 8
