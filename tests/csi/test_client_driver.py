"""CSIClient against the reference driver, over its real unix socket.

We test these aspects:
- every RPC of the client answered by the reference driver: identity, capabilities (read once
  and cached), the volume lifecycle, paging through ListVolumes, capacity, expansion,
  modification, volume conditions, snapshots, restoring from a snapshot and cloning;
- idempotency: every mutating RPC sent twice gives the same answer and changes nothing more;
- each documented error code is a CSIError with the RPC's method and that code;
- limits: capacity and attachments per node run out (RESOURCE_EXHAUSTED), sizes (OUT_OF_RANGE);
- fault injection seen through the client: errors for N calls or a fraction of calls, latency,
  a hang that ends in CSITimeoutError, a driver-side DEADLINE_EXCEEDED, the faults file;
- persistence: volumes, snapshots and attachments survive a restart, and the same client works;
- secrets: required secrets are checked, and their values never reach logs, reprs or errors;
- the observer (metrics hook) sees every call with its method and code.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import structlog

from kopf_csi.csi import STRIPPED, Code, CSIClient, CSIError, CSITimeoutError, DriverNotReadyError
from kopf_csi.csi import messages as csi
from kopf_csi.driver import Driver, FaultRule, Limits, SecretsPolicy
from tests.conftest import Start

MiB = 1024**2
NODE = "node-1"
NAME = "hostpath.csi.kopf.dev"
TOPOLOGY_KEY = "topology.hostpath.csi.kopf.dev/node"
SECRET = "hunter2-very-secret"
WRONG = "swordfish-also-secret"

Calls = list[tuple[str, Code]]
Call = Callable[[CSIClient, str], Awaitable[Any]]


# -- fixtures, request builders, assertions -------------------------------------------------------


@pytest.fixture
def calls() -> Calls:
    """(RPC name, code) of every call the `client` made, as its observer saw them."""
    return []


@pytest.fixture
async def client(socket_path: pathlib.Path, calls: Calls) -> AsyncIterator[CSIClient]:
    def observe(method: str, code: Code, seconds: float) -> None:
        calls.append((method.rsplit("/", 1)[-1], code))

    async with CSIClient(f"unix://{socket_path}", timeout=2.0, observers=[observe]) as client:
        yield client


@contextlib.contextmanager
def raises(rpc: str, code: Code, cls: type[CSIError] = CSIError) -> Iterator[Any]:
    """Expect exactly `cls` from the RPC inside, for that RPC's full method and with `code`."""
    with pytest.raises(cls) as err:
        yield err
    assert type(err.value) is cls
    service = "Identity" if rpc == "Probe" else "Controller"
    assert (err.value.method, err.value.code) == (f"/csi.v1.{service}/{rpc}", code), err.value


def mount(mode: str = "SINGLE_NODE_WRITER") -> csi.VolumeCapability:
    access_mode = csi.VolumeCapabilityAccessMode(
        csi.VolumeCapabilityAccessModeMode.from_string(mode)
    )
    return csi.VolumeCapability(mount=csi.VolumeCapabilityMountVolume(), access_mode=access_mode)


def create_request(
    name: str = "pvc-1", *, size: int = MiB, limit: int = 0, **fields: Any
) -> csi.CreateVolumeRequest:
    fields.setdefault("volume_capabilities", [mount()])
    capacity = csi.CapacityRange(required_bytes=size, limit_bytes=limit)
    return csi.CreateVolumeRequest(name=name, capacity_range=capacity, **fields)


def publish_request(
    volume_id: str, node_id: str = NODE, *, readonly: bool = False
) -> csi.ControllerPublishVolumeRequest:
    return csi.ControllerPublishVolumeRequest(
        volume_id=volume_id, node_id=node_id, volume_capability=mount(), readonly=readonly
    )


def unpublish_request(volume_id: str) -> csi.ControllerUnpublishVolumeRequest:
    return csi.ControllerUnpublishVolumeRequest(volume_id=volume_id, node_id=NODE)


def expand_request(volume_id: str, size: int, limit: int = 0) -> csi.ControllerExpandVolumeRequest:
    capacity = csi.CapacityRange(required_bytes=size, limit_bytes=limit)
    return csi.ControllerExpandVolumeRequest(volume_id=volume_id, capacity_range=capacity)


def modify_request(volume_id: str, **parameters: str) -> csi.ControllerModifyVolumeRequest:
    return csi.ControllerModifyVolumeRequest(volume_id=volume_id, mutable_parameters=parameters)


def from_snapshot(snapshot_id: str) -> csi.VolumeContentSource:
    source = csi.VolumeContentSourceSnapshotSource(snapshot_id=snapshot_id)
    return csi.VolumeContentSource(snapshot=source)


def from_volume(volume_id: str) -> csi.VolumeContentSource:
    return csi.VolumeContentSource(volume=csi.VolumeContentSourceVolumeSource(volume_id=volume_id))


async def create(client: CSIClient, name: str = "pvc-1", **kwargs: Any) -> csi.Volume:
    volume = (await client.create_volume(create_request(name, **kwargs))).volume
    assert volume is not None
    return volume


async def snapshot(client: CSIClient, volume_id: str, name: str = "snap-1") -> csi.Snapshot:
    request = csi.CreateSnapshotRequest(name=name, source_volume_id=volume_id)
    snap = (await client.create_snapshot(request)).snapshot
    assert snap is not None
    return snap


async def status(client: CSIClient, volume_id: str) -> csi.ControllerGetVolumeResponseVolumeStatus:
    request = csi.ControllerGetVolumeRequest(volume_id=volume_id)
    found = (await client.controller_get_volume(request)).status
    assert found is not None
    return found


async def condition(client: CSIClient, volume_id: str) -> csi.VolumeCondition:
    found = (await status(client, volume_id)).volume_condition
    assert found is not None
    return found


async def available(client: CSIClient) -> int:
    return (await client.get_capacity(csi.GetCapacityRequest())).available_capacity


def write_faults(path: pathlib.Path, data: object) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)  # atomically, as the faults module asks


# -- every RPC ------------------------------------------------------------------------------------


async def test_probe_and_plugin_info_describe_the_reference_driver(
    driver: Driver, client: CSIClient
) -> None:
    await client.wait_ready(wait=1)
    assert (await client.probe()).ready is True
    info = await client.get_plugin_info()
    assert (info.name, info.vendor_version) == (NAME, driver.config.vendor_version)
    assert "implementation" in info.manifest


async def test_capabilities_are_read_once_and_cached(
    driver: Driver, client: CSIClient, calls: Calls
) -> None:
    info = await client.driver_info()
    assert await client.driver_info() is info
    assert info.name == NAME
    assert info.plugin_capabilities == {
        "CONTROLLER_SERVICE", "VOLUME_ACCESSIBILITY_CONSTRAINTS", "GROUP_CONTROLLER_SERVICE",
    }  # fmt: skip
    assert info.volume_expansion == {"ONLINE"}
    assert info.controller_capabilities >= {
        "CREATE_DELETE_VOLUME", "PUBLISH_UNPUBLISH_VOLUME", "LIST_VOLUMES", "GET_CAPACITY",
        "CREATE_DELETE_SNAPSHOT", "LIST_SNAPSHOTS", "GET_SNAPSHOT", "CLONE_VOLUME",
        "EXPAND_VOLUME", "MODIFY_VOLUME", "GET_VOLUME", "VOLUME_CONDITION",
        "LIST_VOLUMES_PUBLISHED_NODES",
    }  # fmt: skip
    assert info.group_controller_capabilities == {"CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT"}
    assert info.has_group_controller("CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT")
    node = await client.node_capabilities()
    assert await client.node_capabilities() is node
    assert node >= {"STAGE_UNSTAGE_VOLUME", "EXPAND_VOLUME", "GET_VOLUME_STATS"}
    assert [name for name, _ in calls] == [
        "GetPluginInfo", "GetPluginCapabilities", "ControllerGetCapabilities",
        "GroupControllerGetCapabilities", "NodeGetCapabilities",
    ]  # fmt: skip
    await client.driver_info(refresh=True)
    await client.node_capabilities(refresh=True)
    assert len(calls) == 10


async def test_a_volume_is_created_published_unpublished_and_deleted(
    driver: Driver, client: CSIClient
) -> None:
    volume = await create(client, size=3 * MiB, parameters={"kind": "fast"})
    assert (volume.capacity_bytes, volume.volume_context) == (3 * MiB, {"kind": "fast"})
    assert [dict(t.segments) for t in volume.accessible_topology] == [{TOPOLOGY_KEY: NODE}]

    published = await client.controller_publish_volume(publish_request(volume.volume_id))
    assert published.publish_context["devicePath"].endswith(volume.volume_id)
    assert (await status(client, volume.volume_id)).published_node_ids == [NODE]
    await client.controller_unpublish_volume(unpublish_request(volume.volume_id))
    assert (await status(client, volume.volume_id)).published_node_ids == []

    await client.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
    with raises("ControllerGetVolume", Code.NOT_FOUND):
        await status(client, volume.volume_id)


async def test_listing_pages_through_many_volumes_with_their_published_nodes(
    driver: Driver, client: CSIClient, calls: Calls
) -> None:
    ids = [(await create(client, f"pvc-{i}")).volume_id for i in range(7)]
    await client.controller_publish_volume(publish_request(ids[2], "node-2"))

    first = await client.list_volumes(csi.ListVolumesRequest(max_entries=3))
    assert [e.volume.volume_id for e in first.entries if e.volume] == ids[:3]
    assert first.next_token

    calls.clear()
    entries = [entry async for entry in client.iter_volumes(max_entries=3)]
    assert calls == [("ListVolumes", Code.OK)] * 3
    assert [e.volume.volume_id for e in entries if e.volume] == ids
    nodes = [e.status.published_node_ids for e in entries if e.status]
    assert nodes == [["node-2"] if i == 2 else [] for i in range(7)]

    calls.clear()
    assert len([entry async for entry in client.iter_volumes()]) == 7
    assert calls == [("ListVolumes", Code.OK)]


async def test_capacity_shrinks_as_volumes_are_created_or_grow_and_returns_when_deleted(
    start: Start, client: CSIClient
) -> None:
    await start(limits=Limits(total_capacity=10 * MiB, max_volume_size=4 * MiB))
    capacity = await client.get_capacity(csi.GetCapacityRequest())
    assert (capacity.available_capacity, capacity.maximum_volume_size) == (10 * MiB, 4 * MiB)
    volume = await create(client, size=3 * MiB)
    assert await available(client) == 7 * MiB
    await client.controller_expand_volume(expand_request(volume.volume_id, 4 * MiB))
    assert await available(client) == 6 * MiB
    await client.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
    assert await available(client) == 10 * MiB


async def test_expansion_grows_a_volume_and_modification_sets_mutable_parameters(
    driver: Driver, client: CSIClient
) -> None:
    volume = await create(client, mutable_parameters={"iops": "100"})
    expanded = await client.controller_expand_volume(expand_request(volume.volume_id, 2 * MiB))
    assert (expanded.capacity_bytes, expanded.node_expansion_required) == (2 * MiB, True)
    smaller = await client.controller_expand_volume(expand_request(volume.volume_id, MiB))
    assert smaller.capacity_bytes == 2 * MiB  # never shrinks
    request = csi.ControllerGetVolumeRequest(volume_id=volume.volume_id)
    got = (await client.controller_get_volume(request)).volume
    assert got is not None
    assert got.capacity_bytes == 2 * MiB

    await client.controller_modify_volume(modify_request(volume.volume_id, throughput="50"))
    stored = driver.state.volume(volume.volume_id)
    assert stored is not None
    assert stored.mutable_parameters == {"iops": "100", "throughput": "50"}


async def test_volume_condition_turns_abnormal_when_the_driver_says_so(
    driver: Driver, client: CSIClient
) -> None:
    volume = await create(client)
    assert (await condition(client, volume.volume_id)).abnormal is False
    driver.faults.mark_abnormal(volume.volume_id, "disk on fire")
    abnormal = await condition(client, volume.volume_id)
    assert (abnormal.abnormal, abnormal.message) == (True, "disk on fire")
    [entry] = [e async for e in client.iter_volumes()]
    assert entry.status is not None
    assert entry.status.volume_condition == abnormal


async def test_snapshots_are_taken_listed_restored_cloned_and_deleted(
    driver: Driver, client: CSIClient
) -> None:
    volume = await create(client, size=2 * MiB)
    data = driver.backend.storage.volume_path(volume.volume_id) / "data.txt"
    data.write_text("hello")
    snap = await snapshot(client, volume.volume_id)
    assert (snap.source_volume_id, snap.size_bytes) == (volume.volume_id, 2 * MiB)
    assert snap.ready_to_use
    data.write_text("changed after the snapshot")

    other = await snapshot(client, (await create(client, "pvc-2")).volume_id, "snap-2")
    every = await client.list_snapshots(csi.ListSnapshotsRequest())
    assert [e.snapshot for e in every.entries] == [snap, other]
    request = csi.ListSnapshotsRequest(source_volume_id=volume.volume_id)
    assert [e.snapshot for e in (await client.list_snapshots(request)).entries] == [snap]
    request = csi.ListSnapshotsRequest(snapshot_id=other.snapshot_id)
    assert [e.snapshot for e in (await client.list_snapshots(request)).entries] == [other]
    get = csi.GetSnapshotRequest(snapshot_id=snap.snapshot_id)
    assert (await client.get_snapshot(get)).snapshot == snap

    source = from_snapshot(snap.snapshot_id)
    restored = await create(client, "restored", size=2 * MiB, volume_content_source=source)
    assert restored.content_source == source
    content = driver.backend.storage.volume_path(restored.volume_id)
    assert (content / "data.txt").read_text() == "hello"
    source = from_volume(volume.volume_id)
    clone = await create(client, "clone", size=2 * MiB, volume_content_source=source)
    assert clone.content_source == source
    content = driver.backend.storage.volume_path(clone.volume_id)
    assert (content / "data.txt").read_text() == "changed after the snapshot"

    await client.delete_snapshot(csi.DeleteSnapshotRequest(snapshot_id=snap.snapshot_id))
    with raises("GetSnapshot", Code.NOT_FOUND):
        await client.get_snapshot(get)
    every = await client.list_snapshots(csi.ListSnapshotsRequest())
    assert [e.snapshot for e in every.entries] == [other]


# -- idempotency ----------------------------------------------------------------------------------


async def _published(client: CSIClient, volume_id: str) -> str:
    await client.controller_publish_volume(publish_request(volume_id))
    return volume_id


async def _snapshotted(client: CSIClient, volume_id: str) -> str:
    return (await snapshot(client, volume_id)).snapshot_id


IDEMPOTENT: list[tuple[str, Call | None, Call]] = [
    ("CreateVolume", None, lambda c, v: c.create_volume(create_request("pvc-1"))),
    ("DeleteVolume", None, lambda c, v: c.delete_volume(csi.DeleteVolumeRequest(volume_id=v))),
    ("ControllerPublishVolume", None,
     lambda c, v: c.controller_publish_volume(publish_request(v))),
    ("ControllerUnpublishVolume", _published,
     lambda c, v: c.controller_unpublish_volume(unpublish_request(v))),
    ("ControllerExpandVolume", None,
     lambda c, v: c.controller_expand_volume(expand_request(v, 2 * MiB))),
    ("ControllerModifyVolume", None,
     lambda c, v: c.controller_modify_volume(modify_request(v, iops="5"))),
    ("CreateSnapshot", None,
     lambda c, v: c.create_snapshot(csi.CreateSnapshotRequest(name="s", source_volume_id=v))),
    ("DeleteSnapshot", _snapshotted,
     lambda c, v: c.delete_snapshot(csi.DeleteSnapshotRequest(snapshot_id=v))),
]  # fmt: skip


@pytest.mark.parametrize(("prepare", "send"), [pytest.param(*i[1:], id=i[0]) for i in IDEMPOTENT])
async def test_a_mutating_rpc_sent_twice_answers_the_same_and_changes_nothing_more(
    driver: Driver, client: CSIClient, prepare: Call | None, send: Call
) -> None:
    volume = await create(client, "pvc-1")
    target = volume.volume_id if prepare is None else await prepare(client, volume.volume_id)
    first = await send(client, target)
    records = (dict(driver.state.volumes), dict(driver.state.snapshots))
    assert await send(client, target) == first
    assert (dict(driver.state.volumes), dict(driver.state.snapshots)) == records
    assert len(driver.state.volumes) + len(driver.state.snapshots) <= 2


# -- error codes ----------------------------------------------------------------------------------


async def _delete_published(client: CSIClient, volume_id: str) -> Any:
    await client.controller_publish_volume(publish_request(volume_id))
    return await client.delete_volume(csi.DeleteVolumeRequest(volume_id=volume_id))


async def _publish_to_a_second_node(client: CSIClient, volume_id: str) -> Any:
    await client.controller_publish_volume(publish_request(volume_id))  # SINGLE_NODE_WRITER
    return await client.controller_publish_volume(publish_request(volume_id, "node-2"))


async def _republish_readonly(client: CSIClient, volume_id: str) -> Any:
    await client.controller_publish_volume(publish_request(volume_id))
    return await client.controller_publish_volume(publish_request(volume_id, readonly=True))


async def _snapshot_name_of_another_volume(client: CSIClient, volume_id: str) -> Any:
    await snapshot(client, volume_id)
    return await snapshot(client, (await create(client, "pvc-2")).volume_id)


ERRORS: list[tuple[str, Code, str, Call]] = [
    ("same_name_other_size", Code.ALREADY_EXISTS, "CreateVolume",
     lambda c, v: c.create_volume(create_request("pvc-1", size=2 * MiB))),
    ("same_snapshot_name_other_volume", Code.ALREADY_EXISTS, "CreateSnapshot",
     _snapshot_name_of_another_volume),
    ("republish_other_readonly", Code.ALREADY_EXISTS, "ControllerPublishVolume",
     _republish_readonly),
    ("publish_unknown_volume", Code.NOT_FOUND, "ControllerPublishVolume",
     lambda c, v: c.controller_publish_volume(publish_request("no-such-volume"))),
    ("snapshot_unknown_volume", Code.NOT_FOUND, "CreateSnapshot",
     lambda c, v: c.create_snapshot(csi.CreateSnapshotRequest(name="s", source_volume_id="no"))),
    ("expand_unknown_volume", Code.NOT_FOUND, "ControllerExpandVolume",
     lambda c, v: c.controller_expand_volume(expand_request("no-such-volume", 2 * MiB))),
    ("restore_unknown_snapshot", Code.NOT_FOUND, "CreateVolume",
     lambda c, v: c.create_volume(create_request("r", volume_content_source=from_snapshot("no")))),
    ("create_required_over_limit", Code.OUT_OF_RANGE, "CreateVolume",
     lambda c, v: c.create_volume(create_request("big", size=2 * MiB, limit=MiB))),
    ("expand_required_over_limit", Code.OUT_OF_RANGE, "ControllerExpandVolume",
     lambda c, v: c.controller_expand_volume(expand_request(v, 4 * MiB, limit=3 * MiB))),
    ("create_without_name", Code.INVALID_ARGUMENT, "CreateVolume",
     lambda c, v: c.create_volume(create_request(""))),
    ("create_without_capabilities", Code.INVALID_ARGUMENT, "CreateVolume",
     lambda c, v: c.create_volume(create_request("pvc-2", volume_capabilities=[]))),
    ("create_unknown_mutable_parameter", Code.INVALID_ARGUMENT, "CreateVolume",
     lambda c, v: c.create_volume(create_request("pvc-2", mutable_parameters={"colour": "red"}))),
    ("modify_unknown_mutable_parameter", Code.INVALID_ARGUMENT, "ControllerModifyVolume",
     lambda c, v: c.controller_modify_volume(modify_request(v, colour="red"))),
    ("list_negative_max_entries", Code.INVALID_ARGUMENT, "ListVolumes",
     lambda c, v: c.list_volumes(csi.ListVolumesRequest(max_entries=-1))),
    ("delete_published_volume", Code.FAILED_PRECONDITION, "DeleteVolume", _delete_published),
    ("single_node_volume_on_second_node", Code.FAILED_PRECONDITION, "ControllerPublishVolume",
     _publish_to_a_second_node),
    ("list_volumes_bad_token", Code.ABORTED, "ListVolumes",
     lambda c, v: c.list_volumes(csi.ListVolumesRequest(starting_token="not-a-token"))),
    ("list_snapshots_bad_token", Code.ABORTED, "ListSnapshots",
     lambda c, v: c.list_snapshots(csi.ListSnapshotsRequest(starting_token="99"))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("code", "rpc", "failing"), [pytest.param(*e[1:], id=e[0]) for e in ERRORS]
)
async def test_a_documented_error_is_a_csi_error_with_its_method_and_code(
    driver: Driver, client: CSIClient, code: Code, rpc: str, failing: Call
) -> None:
    volume = await create(client, "pvc-1")
    with raises(rpc, code) as err:
        await failing(client, volume.volume_id)
    assert err.value.message


async def test_capacity_running_out_is_resource_exhausted_and_oversizes_out_of_range(
    start: Start, client: CSIClient
) -> None:
    await start(limits=Limits(total_capacity=3 * MiB, max_volume_size=2 * MiB))
    volume = await create(client, size=2 * MiB)
    with raises("CreateVolume", Code.RESOURCE_EXHAUSTED):
        await create(client, "pvc-2", size=2 * MiB)
    with raises("CreateVolume", Code.OUT_OF_RANGE):
        await create(client, "pvc-3", size=3 * MiB)
    with raises("ControllerExpandVolume", Code.OUT_OF_RANGE):
        await client.controller_expand_volume(expand_request(volume.volume_id, 3 * MiB))
    await create(client, "pvc-2", size=MiB)  # what is left still fits


async def test_attachments_per_node_running_out_is_resource_exhausted(
    start: Start, client: CSIClient
) -> None:
    await start(limits=Limits(max_volumes_per_node=1))
    first, second = await create(client, "pvc-1"), await create(client, "pvc-2")
    await client.controller_publish_volume(publish_request(first.volume_id))
    with raises("ControllerPublishVolume", Code.RESOURCE_EXHAUSTED):
        await client.controller_publish_volume(publish_request(second.volume_id))
    await client.controller_publish_volume(publish_request(second.volume_id, "node-2"))


# -- fault injection ------------------------------------------------------------------------------


async def test_an_injected_error_fails_the_next_calls_then_they_succeed(
    driver: Driver, client: CSIClient, calls: Calls
) -> None:
    driver.faults.fail("CreateVolume", Code.UNAVAILABLE, times=2, message="backend busy")
    for _ in range(2):
        with raises("CreateVolume", Code.UNAVAILABLE) as err:
            await create(client)
        assert err.value.message == "backend busy"
    await create(client)
    assert calls == [("CreateVolume", Code.UNAVAILABLE)] * 2 + [("CreateVolume", Code.OK)]
    assert len(driver.state.volumes) == 1


async def test_an_injected_error_for_a_fraction_of_calls(start: Start, client: CSIClient) -> None:
    driver = await start(faults_seed=42)
    driver.faults.add(FaultRule(method="Probe", code=Code.ABORTED, fraction=0.5))
    codes = []
    for _ in range(40):
        try:
            await client.probe()
        except CSIError as exc:
            codes.append(exc.code)
    assert set(codes) == {Code.ABORTED}
    assert 8 <= len(codes) <= 32


async def test_injected_latency_delays_only_its_method(driver: Driver, client: CSIClient) -> None:
    volume = await create(client)
    driver.faults.delay("ControllerGetVolume", seconds=0.2)
    started = time.monotonic()
    await status(client, volume.volume_id)
    assert time.monotonic() - started >= 0.2
    started = time.monotonic()
    await client.probe()
    assert time.monotonic() - started < 0.2


async def test_a_hang_ends_in_a_timeout_error_at_the_clients_timeout(
    driver: Driver, socket_path: pathlib.Path
) -> None:
    driver.faults.hang("CreateVolume", times=1)
    async with CSIClient(str(socket_path), timeout=0.3) as client:
        started = time.monotonic()
        with raises("CreateVolume", Code.DEADLINE_EXCEEDED, CSITimeoutError) as err:
            await create(client)
        assert 0.25 <= time.monotonic() - started < 1.5
        assert "timed out after 0.3s" in err.value.message
        await create(client)  # the hang is spent, and had created nothing
    assert len(driver.state.volumes) == 1


async def test_a_driver_side_deadline_exceeded_is_the_same_timeout_error(
    driver: Driver, client: CSIClient
) -> None:
    driver.faults.fail("ListVolumes", Code.DEADLINE_EXCEEDED, times=1, message="backend too slow")
    started = time.monotonic()
    with raises("ListVolumes", Code.DEADLINE_EXCEEDED, CSITimeoutError) as err:
        await client.list_volumes(csi.ListVolumesRequest())
    assert time.monotonic() - started < 1.0  # the driver's answer, not our 2 s timer
    assert "backend too slow" in err.value.message


async def test_the_faults_file_changes_take_effect_while_running(
    start: Start, client: CSIClient, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "faults.json"
    await start(faults_file=path)
    volume = await create(client)

    rule = {"method": "Create*", "code": "RESOURCE_EXHAUSTED", "message": "pool drained"}
    write_faults(path, {"rules": [rule]})
    with raises("CreateVolume", Code.RESOURCE_EXHAUSTED) as err:
        await create(client, "pvc-2")
    assert err.value.message == "pool drained"

    write_faults(path, {"ready": False, "abnormal": {volume.volume_id: "disk on fire"}})
    await create(client, "pvc-2")
    assert (await client.probe()).ready is False
    with pytest.raises(DriverNotReadyError):
        await client.wait_ready(wait=0.2, interval=0.05)
    assert (await condition(client, volume.volume_id)).message == "disk on fire"

    path.unlink()
    await client.wait_ready(wait=1)
    assert (await condition(client, volume.volume_id)).abnormal is False


# -- persistence ----------------------------------------------------------------------------------


async def test_volumes_snapshots_and_attachments_survive_a_restart_with_the_same_client(
    driver: Driver, client: CSIClient, calls: Calls
) -> None:
    volume = await create(client)
    await client.controller_publish_volume(publish_request(volume.volume_id))
    await client.controller_expand_volume(expand_request(volume.volume_id, 2 * MiB))
    snap = await snapshot(client, volume.volume_id)
    info = await client.driver_info()

    await driver.restart(grace=0.1)
    calls.clear()

    [entry] = [e async for e in client.iter_volumes()]
    assert entry.volume is not None
    assert (entry.volume.volume_id, entry.volume.capacity_bytes) == (volume.volume_id, 2 * MiB)
    assert (await status(client, volume.volume_id)).published_node_ids == [NODE]
    get = csi.GetSnapshotRequest(snapshot_id=snap.snapshot_id)
    assert (await client.get_snapshot(get)).snapshot == snap
    assert (await create(client, size=2 * MiB)).volume_id == volume.volume_id  # not a new one
    await client.controller_publish_volume(publish_request(volume.volume_id))  # already is
    with raises("DeleteVolume", Code.FAILED_PRECONDITION):
        await client.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
    source = from_snapshot(snap.snapshot_id)
    restored = await create(client, "restored", size=2 * MiB, volume_content_source=source)
    assert restored.content_source == source
    assert await client.driver_info() is info
    assert [code for _, code in calls if code is not Code.OK] == [Code.FAILED_PRECONDITION]


async def test_a_stopped_driver_is_unavailable_and_the_client_works_once_it_is_back(
    driver: Driver, client: CSIClient
) -> None:
    await create(client)
    await driver.stop(grace=0.1)
    with raises("Probe", Code.UNAVAILABLE):
        await client.probe()
    await driver.start()
    await client.wait_ready(wait=2, interval=0.05)
    assert len([e async for e in client.iter_volumes()]) == 1


# -- secrets --------------------------------------------------------------------------------------

SECRETS = SecretsPolicy(
    required_for=frozenset({"CreateVolume", "DeleteVolume", "CreateSnapshot"}),
    expected={"password": SECRET},
)


async def test_required_secrets_missing_or_wrong_are_unauthenticated(
    start: Start, client: CSIClient
) -> None:
    await start(secrets=SECRETS)
    for secrets in [{}, {"password": WRONG}, {"user": SECRET}]:
        with raises("CreateVolume", Code.UNAUTHENTICATED):
            await create(client, secrets=secrets)
    volume = await create(client, secrets={"password": SECRET})
    with raises("DeleteVolume", Code.UNAUTHENTICATED):
        await client.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
    request = csi.DeleteVolumeRequest(volume_id=volume.volume_id, secrets={"password": SECRET})
    await client.delete_volume(request)


async def test_secret_values_never_reach_logs_reprs_or_errors(
    start: Start, client: CSIClient
) -> None:
    driver = await start(secrets=SECRETS)
    good = create_request(secrets={"password": SECRET})
    bad = create_request(secrets={"password": WRONG})
    errors: list[CSIError] = []
    with structlog.testing.capture_logs() as logs:
        volume = (await client.create_volume(good)).volume
        assert volume is not None
        snap = csi.CreateSnapshotRequest(
            name="s", source_volume_id=volume.volume_id, secrets={"password": SECRET}
        )
        await client.create_snapshot(snap)
        with raises("CreateVolume", Code.UNAUTHENTICATED) as err:
            await client.create_volume(bad)
        errors.append(err.value)
    # A driver that echoes the secret in its message (outside the logs: the driver logs it).
    driver.faults.fail("CreateVolume", Code.INTERNAL, times=1, message=f"bad password {SECRET}!")
    with raises("CreateVolume", Code.INTERNAL) as err:
        await client.create_volume(good)
    errors.append(err.value)
    assert err.value.message == f"bad password {STRIPPED}!"

    events = {e["event"] for e in logs}
    assert events >= {"csi_request", "csi_response", "csi_error", "rpc_handled"}  # both sides
    assert {e["request"]["secrets"] for e in logs if e["event"] == "csi_request"} == {STRIPPED}
    texts = [repr(logs), repr(good), str(good), repr(bad), repr(snap)]
    texts += [text for e in errors for text in (str(e), repr(e), e.message)]
    assert [text for text in texts if SECRET in text or WRONG in text] == []


# -- the observer ---------------------------------------------------------------------------------


async def test_the_observer_sees_each_call_with_its_method_and_code(
    driver: Driver, socket_path: pathlib.Path
) -> None:
    seen: list[tuple[str, Code, float]] = []
    driver.faults.hang("DeleteVolume", times=1)
    observers = [lambda *args: seen.append(args)]
    async with CSIClient(str(socket_path), timeout=0.2, observers=observers) as client:
        await client.probe()
        volume = await create(client)
        with pytest.raises(CSIError):
            await client.create_volume(create_request(""))
        with pytest.raises(CSITimeoutError):
            await client.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
    assert [(method, code) for method, code, _ in seen] == [
        ("/csi.v1.Identity/Probe", Code.OK),
        ("/csi.v1.Controller/CreateVolume", Code.OK),
        ("/csi.v1.Controller/CreateVolume", Code.INVALID_ARGUMENT),
        ("/csi.v1.Controller/DeleteVolume", Code.DEADLINE_EXCEEDED),
    ]
    assert all(seconds >= 0 for _, _, seconds in seen)
    assert seen[-1][2] >= 0.15
