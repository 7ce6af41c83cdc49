"""Fault injection on a running driver, over a real socket.

We test these aspects:
- added latency delays the answer, per method;
- an error for the next N calls, then normal answers; for a fraction of calls (seeded);
- a hang lasts until the client's deadline, and the next call is served;
- a hang without a deadline ends when the driver stops, without waiting for the grace period,
  or when the hangs are released (a test's end), the driver serving on;
- rules changed at runtime through the faults file, and through the in-process object;
- every call is logged once with its method, code and duration.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import time

import pytest
import structlog
from driver_helpers import Start, create, raises
from grpclib.client import Channel
from grpclib.exceptions import GRPCError

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver import Driver, FaultRule


def write(path: pathlib.Path, data: object) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


async def test_latency(driver: Driver, identity: csi.IdentityStub) -> None:
    await identity.probe(csi.ProbeRequest())  # connect first: measure the call only
    driver.faults.delay("Probe", seconds=0.2)
    started = time.monotonic()
    await identity.probe(csi.ProbeRequest())
    assert time.monotonic() - started >= 0.2
    started = time.monotonic()
    await identity.get_plugin_info(csi.GetPluginInfoRequest())
    assert time.monotonic() - started < 0.2


async def test_errors_for_the_next_n_calls(driver: Driver, controller: csi.ControllerStub) -> None:
    driver.faults.fail("CreateVolume", Code.RESOURCE_EXHAUSTED, times=2, message="pool is full")
    for _ in range(2):
        with raises(Code.RESOURCE_EXHAUSTED, "pool is full"):
            await create(controller)
    await create(controller)
    assert len(driver.state.volumes) == 1


async def test_errors_for_a_fraction_of_calls(start: Start, identity: csi.IdentityStub) -> None:
    driver = await start(faults_seed=42)
    driver.faults.add(FaultRule(method="Probe", code=Code.UNAVAILABLE, fraction=0.5))
    codes = []
    for _ in range(40):
        try:
            await identity.probe(csi.ProbeRequest())
        except GRPCError as exc:
            codes.append(Code(exc.status.value))
    assert set(codes) == {Code.UNAVAILABLE}
    assert 8 <= len(codes) <= 32


async def test_hang_until_the_deadline(driver: Driver, controller: csi.ControllerStub) -> None:
    driver.faults.hang("CreateVolume", times=1)
    started = time.monotonic()
    with pytest.raises((GRPCError, asyncio.TimeoutError)) as err:
        await create(controller, call_timeout=0.3)
    assert 0.25 <= time.monotonic() - started < 2.0
    if isinstance(err.value, GRPCError):
        assert err.value.status.value == Code.DEADLINE_EXCEEDED
    await create(controller, call_timeout=1.0)  # the hang was spent; nothing was created before


async def test_hang_without_deadline_ends_at_stop(start: Start, socket_path: pathlib.Path) -> None:
    driver = await start()
    driver.faults.hang("Probe")
    channel = Channel(path=str(socket_path))
    try:
        call = asyncio.ensure_future(csi.IdentityStub(channel).probe(csi.ProbeRequest()))
        await asyncio.sleep(0.1)
        assert not call.done()
        started = time.monotonic()
        await driver.stop(grace=5.0)
        assert time.monotonic() - started < 1.0
        with pytest.raises(GRPCError) as err:
            await call
        assert err.value.status.value == Code.UNAVAILABLE
    finally:
        channel.close()


async def test_released_hangs_end_now_and_the_driver_serves_on(
    driver: Driver, controller: csi.ControllerStub, identity: csi.IdentityStub
) -> None:
    driver.faults.hang("CreateVolume")  # every call, for as long as the call's deadline
    call = asyncio.ensure_future(create(controller, call_timeout=60.0))
    await asyncio.sleep(0.1)
    assert not call.done()
    driver.release_hangs()
    with raises(Code.UNAVAILABLE):
        await asyncio.wait_for(call, 10)
    with raises(Code.UNAVAILABLE):  # a hang after the release ends at once too
        await asyncio.wait_for(create(controller, call_timeout=60.0), 10)
    assert (await identity.probe(csi.ProbeRequest())).ready in (None, True)


async def test_runtime_changes_through_the_file(
    start: Start, controller: csi.ControllerStub, identity: csi.IdentityStub, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "faults.json"
    write(path, {"rules": [{"method": "CreateVolume", "code": "UNAVAILABLE", "times": 1}]})
    await start(faults_file=path)
    with raises(Code.UNAVAILABLE):
        await create(controller)
    volume = await create(controller)

    write(
        path,
        {
            "rules": [{"method": "DeleteVolume", "code": 9}],
            "ready": False,
            "abnormal": {volume.volume_id: "from the file"},
        },
    )
    with raises(Code.FAILED_PRECONDITION):
        await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
    assert (await identity.probe(csi.ProbeRequest())).ready is False
    got = await controller.controller_get_volume(
        csi.ControllerGetVolumeRequest(volume_id=volume.volume_id)
    )
    assert got.status is not None
    assert got.status.volume_condition is not None
    assert got.status.volume_condition.message == "from the file"

    write(path, {"rules": []})
    await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
    assert (await identity.probe(csi.ProbeRequest())).ready is True


async def test_runtime_changes_in_process(driver: Driver, controller: csi.ControllerStub) -> None:
    rule = driver.faults.fail("*", Code.INTERNAL)
    with raises(Code.INTERNAL):
        await create(controller)
    driver.faults.remove(rule)
    await create(controller)


async def test_one_log_line_per_call(driver: Driver, controller: csi.ControllerStub) -> None:
    with structlog.testing.capture_logs() as logs:
        await create(controller)
        with raises(Code.NOT_FOUND):
            await controller.controller_get_volume(csi.ControllerGetVolumeRequest(volume_id="nope"))
    calls = [e for e in logs if e["event"] == "rpc_handled"]
    assert [(e["method"], e["code"]) for e in calls] == [
        ("CreateVolume", "OK"),
        ("ControllerGetVolume", "NOT_FOUND"),
    ]
    assert all(e["log_level"] == "info" and e["duration"] >= 0 for e in calls)
    assert "does not exist" in calls[1]["message"]
