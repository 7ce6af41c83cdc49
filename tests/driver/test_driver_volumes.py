"""Controller volume RPCs over a real socket: create, delete, validate, list, get, capacity,
expand, modify.

We test these aspects:
- CreateVolume: sizes, block vs mount on disk, parameters as context, topology; idempotent for
  a compatible repeat, ALREADY_EXISTS for an incompatible one; INVALID_ARGUMENT for a missing
  name or capabilities; OUT_OF_RANGE; RESOURCE_EXHAUSTED for capacity and for topology;
- DeleteVolume: removes content; a missing volume is OK; FAILED_PRECONDITION while published;
- ValidateVolumeCapabilities: confirmed, unconfirmed with a message, NOT_FOUND;
- ListVolumes: paging through everything, ABORTED for a bad token, status fields;
- ControllerGetVolume: condition normal, abnormal when injected or when the content vanished;
- GetCapacity: the pool shrinks as volumes are made; per node with topology;
- ControllerExpandVolume: grows, idempotent, OUT_OF_RANGE, node expansion for mount only;
- ControllerModifyVolume: known keys merge, unknown keys INVALID_ARGUMENT, NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import shutil

import pytest
from driver_helpers import NODE, Start, block, create, create_request, mount, raises, topology

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver import Driver, Features, Limits

MiB = 1024**2


async def test_create_mount_volume(driver: Driver, controller: csi.ControllerStub) -> None:
    volume = await create(controller, parameters={"kind": "fast"})
    assert volume.capacity_bytes == MiB
    assert volume.volume_context == {"kind": "fast"}
    assert [t.segments for t in volume.accessible_topology] == [topology(NODE).segments]
    assert driver.backend.storage.volume_path(volume.volume_id).is_dir()
    assert driver.state.volume(volume.volume_id) is not None


async def test_create_block_volume_is_a_sparse_file(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    volume = await create(controller, caps=[block()], size=8 * MiB)
    path = driver.backend.storage.volume_path(volume.volume_id)
    assert path.is_file()
    assert path.stat().st_size == 8 * MiB


async def test_create_without_range_gets_the_default_size(
    start: Start, controller: csi.ControllerStub
) -> None:
    await start(limits=Limits(default_volume_size=5 * MiB))
    request = csi.CreateVolumeRequest(name="pvc-1", volume_capabilities=[mount()])
    response = await controller.create_volume(request)
    assert response.volume is not None
    assert response.volume.capacity_bytes == 5 * MiB


async def test_create_is_idempotent(driver: Driver, controller: csi.ControllerStub) -> None:
    first = await create(controller, parameters={"a": "b"})
    second = await create(controller, parameters={"a": "b"})
    assert first.volume_id == second.volume_id
    assert len(driver.state.volumes) == 1


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"size": 2 * MiB}, id="bigger"),
        pytest.param({"caps": [block()]}, id="block"),
        pytest.param({"parameters": {"a": "c"}}, id="parameters"),
        pytest.param(
            {
                "volume_content_source": csi.VolumeContentSource(
                    volume=csi.VolumeContentSourceVolumeSource("x")
                )
            },
            id="source",
        ),
        pytest.param(
            {"accessibility_requirements": csi.TopologyRequirement(requisite=[topology("node-2")])},
            id="topology",
        ),
    ],
)
async def test_create_incompatible_repeat_already_exists(
    driver: Driver, controller: csi.ControllerStub, change: dict[str, object]
) -> None:
    await create(controller, parameters={"a": "b"})
    fields: dict[str, object] = {"parameters": {"a": "b"}, **change}
    with raises(Code.ALREADY_EXISTS):
        await create(controller, **fields)  # type: ignore[arg-type]


async def test_create_invalid_arguments(driver: Driver, controller: csi.ControllerStub) -> None:
    with raises(Code.INVALID_ARGUMENT, "name"):
        await create(controller, name="")
    with raises(Code.INVALID_ARGUMENT, "volume_capabilities"):
        await create(controller, caps=[])
    with raises(Code.INVALID_ARGUMENT, "access_mode"):
        await create(
            controller, caps=[csi.VolumeCapability(mount=csi.VolumeCapabilityMountVolume())]
        )
    no_type = csi.VolumeCapability(
        access_mode=csi.VolumeCapabilityAccessMode(
            csi.VolumeCapabilityAccessModeMode.SINGLE_NODE_WRITER
        )
    )
    with raises(Code.INVALID_ARGUMENT, "access_type"):
        await create(controller, caps=[no_type])
    with raises(Code.INVALID_ARGUMENT, "both block and mount"):
        await create(controller, caps=[mount(), block()])
    with raises(Code.INVALID_ARGUMENT):
        await create(controller, caps=[mount("UNKNOWN")])
    with raises(Code.INVALID_ARGUMENT, "mutable parameters"):
        await create(controller, mutable_parameters={"colour": "red"})
    assert driver.state.volumes == {}


async def test_create_out_of_range(start: Start, controller: csi.ControllerStub) -> None:
    await start(limits=Limits(max_volume_size=10 * MiB))
    with raises(Code.OUT_OF_RANGE):
        await create(controller, size=2 * MiB, limit=MiB)
    with raises(Code.OUT_OF_RANGE):
        await create(controller, size=11 * MiB)


async def test_create_beyond_capacity_is_resource_exhausted(
    start: Start, controller: csi.ControllerStub
) -> None:
    await start(limits=Limits(total_capacity=3 * MiB))
    await create(controller, "a", size=2 * MiB)
    with raises(Code.RESOURCE_EXHAUSTED):
        await create(controller, "b", size=2 * MiB)
    await create(controller, "c", size=MiB)


async def test_create_in_requested_topology(driver: Driver, controller: csi.ControllerStub) -> None:
    requirements = csi.TopologyRequirement(
        requisite=[topology("node-3"), topology("node-2")], preferred=[topology("node-2")]
    )
    volume = await create(controller, accessibility_requirements=requirements)
    assert [t.segments for t in volume.accessible_topology] == [topology("node-2").segments]
    elsewhere = csi.TopologyRequirement(requisite=[topology("node-9")])
    with raises(Code.RESOURCE_EXHAUSTED):
        await create(controller, "pvc-2", accessibility_requirements=elsewhere)


async def test_create_without_topology_has_none(
    start: Start, controller: csi.ControllerStub
) -> None:
    await start(features=Features(topology=False))
    volume = await create(controller)
    assert volume.accessible_topology == []


async def test_delete_volume(driver: Driver, controller: csi.ControllerStub) -> None:
    volume = await create(controller)
    path = driver.backend.storage.volume_path(volume.volume_id)
    await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
    assert not path.exists()
    assert driver.state.volumes == {}
    await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
    with raises(Code.INVALID_ARGUMENT):
        await controller.delete_volume(csi.DeleteVolumeRequest())


async def test_delete_published_volume_fails_precondition(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    volume = await create(controller)
    publish = csi.ControllerPublishVolumeRequest(
        volume_id=volume.volume_id, node_id=NODE, volume_capability=mount()
    )
    await controller.controller_publish_volume(publish)
    with raises(Code.FAILED_PRECONDITION):
        await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))
    unpublish = csi.ControllerUnpublishVolumeRequest(volume_id=volume.volume_id, node_id=NODE)
    await controller.controller_unpublish_volume(unpublish)
    await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=volume.volume_id))


async def test_validate_volume_capabilities(driver: Driver, controller: csi.ControllerStub) -> None:
    volume = await create(controller, parameters={"a": "b"})
    request = csi.ValidateVolumeCapabilitiesRequest(
        volume_id=volume.volume_id, volume_capabilities=[mount("MULTI_NODE_MULTI_WRITER")]
    )
    response = await controller.validate_volume_capabilities(request)
    assert response.confirmed is not None
    assert len(response.confirmed.volume_capabilities) == 1

    for unconfirmed in [
        csi.ValidateVolumeCapabilitiesRequest(
            volume_id=volume.volume_id, volume_capabilities=[block()]
        ),
        csi.ValidateVolumeCapabilitiesRequest(
            volume_id=volume.volume_id, volume_capabilities=[mount()], parameters={"a": "c"}
        ),
        csi.ValidateVolumeCapabilitiesRequest(
            volume_id=volume.volume_id, volume_capabilities=[mount()], volume_context={"x": "y"}
        ),
        csi.ValidateVolumeCapabilitiesRequest(
            volume_id=volume.volume_id, volume_capabilities=[mount()], mutable_parameters={"x": "y"}
        ),
    ]:
        response = await controller.validate_volume_capabilities(unconfirmed)
        assert response.confirmed is None
        assert response.message

    with raises(Code.NOT_FOUND):
        await controller.validate_volume_capabilities(
            csi.ValidateVolumeCapabilitiesRequest(volume_id="nope", volume_capabilities=[mount()])
        )
    with raises(Code.INVALID_ARGUMENT):
        await controller.validate_volume_capabilities(
            csi.ValidateVolumeCapabilitiesRequest(volume_id=volume.volume_id)
        )


async def test_list_volumes_pages_through_everything(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    created = [(await create(controller, f"pvc-{i}")).volume_id for i in range(5)]
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await controller.list_volumes(
            csi.ListVolumesRequest(max_entries=2, starting_token=token)
        )
        assert len(page.entries) <= 2
        seen += [e.volume.volume_id for e in page.entries if e.volume is not None]
        pages += 1
        token = page.next_token
        if not token:
            break
    assert seen == created
    assert pages == 3
    everything = await controller.list_volumes(csi.ListVolumesRequest())
    assert len(everything.entries) == 5
    assert everything.next_token == ""
    with raises(Code.ABORTED):
        await controller.list_volumes(csi.ListVolumesRequest(starting_token="bogus"))


async def test_list_volumes_statuses(driver: Driver, controller: csi.ControllerStub) -> None:
    volume = await create(controller)
    await controller.controller_publish_volume(
        csi.ControllerPublishVolumeRequest(
            volume_id=volume.volume_id, node_id="node-2", volume_capability=mount()
        )
    )
    driver.faults.mark_abnormal(volume.volume_id, "bad sectors")
    response = await controller.list_volumes(csi.ListVolumesRequest())
    status = response.entries[0].status
    assert status is not None
    assert status.published_node_ids == ["node-2"]
    assert status.volume_condition is not None
    assert status.volume_condition.abnormal
    assert status.volume_condition.message == "bad sectors"


async def test_controller_get_volume_and_its_condition(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    volume = await create(controller)
    request = csi.ControllerGetVolumeRequest(volume_id=volume.volume_id)
    response = await controller.controller_get_volume(request)
    assert response.volume is not None
    assert response.volume.volume_id == volume.volume_id
    assert response.status is not None
    assert response.status.volume_condition is not None
    assert not response.status.volume_condition.abnormal

    driver.faults.mark_abnormal(volume.volume_id, "disk on fire")
    response = await controller.controller_get_volume(request)
    assert response.status is not None
    assert response.status.volume_condition is not None
    assert response.status.volume_condition.abnormal
    driver.faults.mark_normal(volume.volume_id)

    shutil.rmtree(driver.backend.storage.volume_path(volume.volume_id))
    response = await controller.controller_get_volume(request)
    assert response.status is not None
    assert response.status.volume_condition is not None
    assert "missing" in response.status.volume_condition.message

    with raises(Code.NOT_FOUND):
        await controller.controller_get_volume(csi.ControllerGetVolumeRequest(volume_id="nope"))


async def test_get_capacity_shrinks_per_node(start: Start, controller: csi.ControllerStub) -> None:
    await start(limits=Limits(total_capacity=10 * MiB, max_volume_size=4 * MiB))
    response = await controller.get_capacity(csi.GetCapacityRequest())
    assert response.available_capacity == 10 * MiB
    assert response.maximum_volume_size == 4 * MiB
    await create(controller, size=3 * MiB)
    assert (await controller.get_capacity(csi.GetCapacityRequest())).available_capacity == 7 * MiB
    other = await controller.get_capacity(
        csi.GetCapacityRequest(accessible_topology=topology("node-2"))
    )
    assert other.available_capacity == 10 * MiB
    unknown = await controller.get_capacity(
        csi.GetCapacityRequest(accessible_topology=topology("node-9"))
    )
    assert unknown.available_capacity == 0
    rwop_off = await controller.get_capacity(
        csi.GetCapacityRequest(volume_capabilities=[mount("UNKNOWN")])
    )
    assert rwop_off.available_capacity == 0


async def test_get_capacity_without_a_total_is_the_free_disk(
    start: Start, controller: csi.ControllerStub
) -> None:
    await start(features=Features(topology=False))
    response = await controller.get_capacity(csi.GetCapacityRequest())
    assert response.available_capacity > 0
    assert response.maximum_volume_size is None
    with raises(Code.INVALID_ARGUMENT):
        await controller.get_capacity(csi.GetCapacityRequest(accessible_topology=topology(NODE)))


async def test_controller_expand_volume(start: Start, controller: csi.ControllerStub) -> None:
    driver = await start(limits=Limits(total_capacity=10 * MiB, max_volume_size=8 * MiB))
    volume = await create(controller, size=MiB)

    def expand(size: int, limit: int = 0) -> csi.ControllerExpandVolumeRequest:
        return csi.ControllerExpandVolumeRequest(
            volume_id=volume.volume_id,
            capacity_range=csi.CapacityRange(required_bytes=size, limit_bytes=limit),
        )

    response = await controller.controller_expand_volume(expand(2 * MiB))
    assert (response.capacity_bytes, response.node_expansion_required) == (2 * MiB, True)
    response = await controller.controller_expand_volume(expand(2 * MiB))  # idempotent
    assert response.capacity_bytes == 2 * MiB
    response = await controller.controller_expand_volume(expand(MiB))  # never shrinks
    assert response.capacity_bytes == 2 * MiB
    assert driver.state.volume(volume.volume_id).size == 2 * MiB  # type: ignore[union-attr]

    with raises(Code.OUT_OF_RANGE):
        await controller.controller_expand_volume(expand(9 * MiB))  # over the maximum
    with raises(Code.OUT_OF_RANGE):
        await controller.controller_expand_volume(expand(4 * MiB, limit=3 * MiB))
    await create(controller, "other", size=6 * MiB)
    with raises(Code.OUT_OF_RANGE):
        await controller.controller_expand_volume(expand(5 * MiB))  # over the pool
    with raises(Code.NOT_FOUND):
        await controller.controller_expand_volume(
            csi.ControllerExpandVolumeRequest(volume_id="nope", capacity_range=csi.CapacityRange(1))
        )
    with raises(Code.INVALID_ARGUMENT):
        await controller.controller_expand_volume(
            csi.ControllerExpandVolumeRequest(volume_id=volume.volume_id)
        )
    with raises(Code.INVALID_ARGUMENT):
        await controller.controller_expand_volume(
            csi.ControllerExpandVolumeRequest(
                volume_id=volume.volume_id,
                capacity_range=csi.CapacityRange(3 * MiB),
                volume_capability=block(),
            )
        )


async def test_controller_expand_block_volume(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    volume = await create(controller, caps=[block()], size=MiB)
    request = csi.ControllerExpandVolumeRequest(
        volume_id=volume.volume_id, capacity_range=csi.CapacityRange(required_bytes=3 * MiB)
    )
    response = await controller.controller_expand_volume(request)
    assert (response.capacity_bytes, response.node_expansion_required) == (3 * MiB, False)
    assert driver.backend.storage.volume_path(volume.volume_id).stat().st_size == 3 * MiB


async def test_controller_modify_volume(driver: Driver, controller: csi.ControllerStub) -> None:
    volume = await create(controller, mutable_parameters={"iops": "100"})
    request = csi.ControllerModifyVolumeRequest(
        volume_id=volume.volume_id, mutable_parameters={"throughput": "50"}
    )
    await controller.controller_modify_volume(request)
    await controller.controller_modify_volume(request)  # idempotent
    record = driver.state.volume(volume.volume_id)
    assert record is not None
    assert record.mutable_parameters == {"iops": "100", "throughput": "50"}
    with raises(Code.INVALID_ARGUMENT, "colour"):
        await controller.controller_modify_volume(
            csi.ControllerModifyVolumeRequest(
                volume_id=volume.volume_id, mutable_parameters={"colour": "red"}
            )
        )
    with raises(Code.NOT_FOUND):
        await controller.controller_modify_volume(
            csi.ControllerModifyVolumeRequest(volume_id="nope", mutable_parameters={"iops": "1"})
        )


async def test_create_then_get_requests_are_the_same_volume(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    response = await controller.create_volume(create_request("pvc-x", size=MiB))
    assert response.volume is not None
    listed = await controller.list_volumes(csi.ListVolumesRequest())
    assert [e.volume.volume_id for e in listed.entries if e.volume] == [response.volume.volume_id]


async def test_ids_from_requests_never_become_paths(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    volume = await create(controller)
    for bad in ["..", "../..", ".", "a/../../b"]:
        await controller.delete_volume(csi.DeleteVolumeRequest(volume_id=bad))
        await controller.delete_snapshot(csi.DeleteSnapshotRequest(snapshot_id=bad))
        with raises(Code.NOT_FOUND):
            await controller.controller_get_volume(csi.ControllerGetVolumeRequest(volume_id=bad))
    assert driver.backend.storage.root.is_dir()
    assert driver.backend.storage.volume_path(volume.volume_id).is_dir()


async def test_concurrent_creates_of_one_name_make_one_volume(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    volumes = await asyncio.gather(*(create(controller) for _ in range(5)))
    assert len({v.volume_id for v in volumes}) == 1
    assert len(driver.state.volumes) == 1
