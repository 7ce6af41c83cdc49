"""CSIClient's GroupController RPCs against the reference driver, over its real unix socket.

We test these aspects:
- the group capabilities are read with the driver's info, and not asked of a driver without the
  GROUP_CONTROLLER_SERVICE (then they are empty);
- CreateVolumeGroupSnapshot, GetVolumeGroupSnapshot and DeleteVolumeGroupSnapshot round-trip,
  twice each with the same answer (idempotency), and a member restores a volume;
- the driver's codes come back as CSIError with the method (NOT_FOUND, INVALID_ARGUMENT);
- a hang ends at the call's timeout in CSITimeoutError;
- secret values never reach the debug lines, reprs or error texts.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import AsyncIterator

import pytest
import structlog

from kopf_csi.csi import STRIPPED, Code, CSIClient, CSIError, CSITimeoutError
from kopf_csi.csi import messages as csi
from kopf_csi.driver import Driver, DriverConfig, Features, SecretsPolicy

MiB = 1024**2
SECRET = "group-hunter2-secret"


@pytest.fixture
async def client(socket_path: pathlib.Path) -> AsyncIterator[CSIClient]:
    async with CSIClient(str(socket_path), timeout=5.0) as client:
        yield client


def volume_request(name: str) -> csi.CreateVolumeRequest:
    return csi.CreateVolumeRequest(
        name=name,
        capacity_range=csi.CapacityRange(required_bytes=MiB),
        volume_capabilities=[
            csi.VolumeCapability(
                mount=csi.VolumeCapabilityMountVolume(),
                access_mode=csi.VolumeCapabilityAccessMode(
                    csi.VolumeCapabilityAccessModeMode.SINGLE_NODE_WRITER
                ),
            )
        ],
    )


async def volumes(client: CSIClient, *names: str) -> list[str]:
    ids = []
    for name in names:
        volume = (await client.create_volume(volume_request(name))).volume
        assert volume is not None
        ids.append(volume.volume_id)
    return ids


async def test_capabilities_follow_the_service(
    driver_config: DriverConfig, socket_path: pathlib.Path, client: CSIClient
) -> None:
    off = dataclasses.replace(driver_config, features=Features(group_snapshots=False))
    driver = Driver(off, socket_path=socket_path)
    await driver.start()
    try:
        info = await client.driver_info()
        assert info.group_controller_capabilities == frozenset()
        assert not info.has_group_controller("CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT")
    finally:
        await driver.stop(grace=0.1)


async def test_a_failing_group_capabilities_call_leaves_only_the_groups_out(
    driver: Driver, client: CSIClient
) -> None:
    """The other roles need the driver's info: one broken group answer must not stop them."""
    driver.faults.fail("GroupControllerGetCapabilities", Code.UNIMPLEMENTED, times=1)
    with structlog.testing.capture_logs() as logs:
        info = await client.driver_info()
    assert "CREATE_DELETE_VOLUME" in info.controller_capabilities
    assert "GROUP_CONTROLLER_SERVICE" in info.plugin_capabilities
    assert not info.group_controller_capabilities
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "group_capabilities_unavailable"
    ]


async def test_group_snapshots_round_trip(driver: Driver, client: CSIClient) -> None:
    info = await client.driver_info()
    assert info.has_group_controller("CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT")
    a, b = await volumes(client, "pvc-a", "pvc-b")
    request = csi.CreateVolumeGroupSnapshotRequest(name="g", source_volume_ids=[a, b])
    created = (await client.create_volume_group_snapshot(request)).group_snapshot
    assert created is not None
    again = (await client.create_volume_group_snapshot(request)).group_snapshot
    assert again == created
    ids = [s.snapshot_id for s in created.snapshots]
    get = csi.GetVolumeGroupSnapshotRequest(
        group_snapshot_id=created.group_snapshot_id, snapshot_ids=ids
    )
    assert (await client.get_volume_group_snapshot(get)).group_snapshot == created

    source = csi.VolumeContentSource(snapshot=csi.VolumeContentSourceSnapshotSource(ids[0]))
    restore = dataclasses.replace(volume_request("pvc-r"), volume_content_source=source)
    restored = (await client.create_volume(restore)).volume
    assert restored is not None
    assert restored.content_source == source

    delete = csi.DeleteVolumeGroupSnapshotRequest(
        group_snapshot_id=created.group_snapshot_id, snapshot_ids=ids
    )
    await client.delete_volume_group_snapshot(delete)
    await client.delete_volume_group_snapshot(delete)
    with pytest.raises(CSIError) as err:
        await client.get_volume_group_snapshot(get)
    assert (err.value.code, err.value.method) == (
        Code.NOT_FOUND,
        "/csi.v1.GroupController/GetVolumeGroupSnapshot",
    )
    with pytest.raises(CSIError) as err:
        await client.create_volume_group_snapshot(csi.CreateVolumeGroupSnapshotRequest(name="x"))
    assert err.value.code is Code.INVALID_ARGUMENT


async def test_a_hang_times_out(driver: Driver, socket_path: pathlib.Path) -> None:
    driver.faults.hang("CreateVolumeGroupSnapshot", times=1)
    async with CSIClient(str(socket_path), timeout=0.2) as client:
        [a] = await volumes(client, "pvc-a")
        request = csi.CreateVolumeGroupSnapshotRequest(name="g", source_volume_ids=[a])
        with pytest.raises(CSITimeoutError) as err:
            await client.create_volume_group_snapshot(request)
        assert err.value.method == "/csi.v1.GroupController/CreateVolumeGroupSnapshot"
        created = (await client.create_volume_group_snapshot(request)).group_snapshot
        assert created is not None


async def test_secrets_never_leak(
    driver_config: DriverConfig, socket_path: pathlib.Path, client: CSIClient
) -> None:
    policy = SecretsPolicy(
        required_for=frozenset({"CreateVolumeGroupSnapshot"}), expected={"password": SECRET}
    )
    driver = Driver(dataclasses.replace(driver_config, secrets=policy), socket_path=socket_path)
    await driver.start()
    try:
        [a] = await volumes(client, "pvc-a")
        good = csi.CreateVolumeGroupSnapshotRequest(
            name="g", source_volume_ids=[a], secrets={"password": SECRET}
        )
        # A driver that echoes the secret (outside the captured logs: the driver logs it).
        driver.faults.fail(
            "CreateVolumeGroupSnapshot", Code.INTERNAL, times=1, message=f"no {SECRET}"
        )
        with pytest.raises(CSIError) as err:
            await client.create_volume_group_snapshot(good)
        assert err.value.message == f"no {STRIPPED}"
        with structlog.testing.capture_logs() as logs:
            await client.create_volume_group_snapshot(good)
        requests = [e for e in logs if e["event"] == "csi_request"]
        assert requests
        assert {e["request"]["secrets"] for e in requests} == {STRIPPED}
        texts = [repr(logs), repr(good), str(err.value), repr(err.value)]
        assert [t for t in texts if SECRET in t] == []
    finally:
        await driver.stop(grace=0.1)
