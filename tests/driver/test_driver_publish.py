"""ControllerPublishVolume and ControllerUnpublishVolume over a real socket.

We test these aspects:
- publishing returns a static publish context and is idempotent;
- NOT_FOUND for an unknown volume or node; any node with `known_nodes=None`;
- FAILED_PRECONDITION for a single-node volume published elsewhere; MULTI_NODE is fine;
- ALREADY_EXISTS for a re-publish with another readonly flag or capability;
- RESOURCE_EXHAUSTED at the maximum of volumes per node;
- INVALID_ARGUMENT for readonly without PUBLISH_READONLY and for missing fields;
- unpublishing what is not published (or does not exist) is OK; an empty node id detaches all.
"""

from __future__ import annotations

from driver_helpers import NODE, Start, block, create, mount, raises

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver import Driver, Features, Limits


def publish(
    volume_id: str,
    node_id: str = NODE,
    cap: csi.VolumeCapability | None = None,
    *,
    readonly: bool = False,
) -> csi.ControllerPublishVolumeRequest:
    return csi.ControllerPublishVolumeRequest(
        volume_id=volume_id,
        node_id=node_id,
        volume_capability=cap or mount(),
        readonly=readonly,
    )


def unpublish(volume_id: str, node_id: str = NODE) -> csi.ControllerUnpublishVolumeRequest:
    return csi.ControllerUnpublishVolumeRequest(volume_id=volume_id, node_id=node_id)


async def test_publish_is_idempotent(driver: Driver, controller: csi.ControllerStub) -> None:
    volume = await create(controller)
    first = await controller.controller_publish_volume(publish(volume.volume_id))
    second = await controller.controller_publish_volume(publish(volume.volume_id))
    assert first.publish_context == second.publish_context
    assert "devicePath" in first.publish_context
    record = driver.state.volume(volume.volume_id)
    assert record is not None
    assert list(record.attachments) == [NODE]


async def test_publish_unknown_volume_or_node(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    volume = await create(controller)
    with raises(Code.NOT_FOUND, "volume"):
        await controller.controller_publish_volume(publish("nope"))
    with raises(Code.NOT_FOUND, "node"):
        await controller.controller_publish_volume(publish(volume.volume_id, "node-9"))


async def test_publish_to_any_node_when_nodes_are_not_restricted(
    start: Start, controller: csi.ControllerStub
) -> None:
    await start(known_nodes=None)
    volume = await create(controller)
    await controller.controller_publish_volume(publish(volume.volume_id, "anywhere"))


async def test_single_node_volume_published_elsewhere(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    volume = await create(controller)
    await controller.controller_publish_volume(publish(volume.volume_id, "node-2"))
    with raises(Code.FAILED_PRECONDITION, "node-2"):
        await controller.controller_publish_volume(publish(volume.volume_id, NODE))


async def test_multi_node_volume_published_to_many(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    rwx = mount("MULTI_NODE_MULTI_WRITER")
    volume = await create(controller, caps=[rwx])
    for node_id in (NODE, "node-2", "node-3"):
        await controller.controller_publish_volume(publish(volume.volume_id, node_id, rwx))
    record = driver.state.volume(volume.volume_id)
    assert record is not None
    assert sorted(record.attachments) == [NODE, "node-2", "node-3"]


async def test_incompatible_republish_already_exists(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    volume = await create(controller)
    await controller.controller_publish_volume(publish(volume.volume_id))
    with raises(Code.ALREADY_EXISTS):
        await controller.controller_publish_volume(publish(volume.volume_id, readonly=True))
    with raises(Code.ALREADY_EXISTS):
        await controller.controller_publish_volume(
            publish(volume.volume_id, cap=mount("SINGLE_NODE_READER_ONLY"))
        )


async def test_max_volumes_per_node(start: Start, controller: csi.ControllerStub) -> None:
    await start(limits=Limits(max_volumes_per_node=2))
    volumes = [(await create(controller, f"pvc-{i}")).volume_id for i in range(4)]
    await controller.controller_publish_volume(publish(volumes[0]))
    await controller.controller_publish_volume(publish(volumes[1]))
    await controller.controller_publish_volume(publish(volumes[1]))  # takes no second slot
    with raises(Code.RESOURCE_EXHAUSTED):
        await controller.controller_publish_volume(publish(volumes[2]))
    await controller.controller_publish_volume(publish(volumes[2], "node-2"))  # room there
    await controller.controller_unpublish_volume(unpublish(volumes[0]))
    await controller.controller_publish_volume(publish(volumes[3]))  # a slot is free again


async def test_invalid_publish_arguments(start: Start, controller: csi.ControllerStub) -> None:
    await start(features=Features(attach=True, publish_readonly=False))
    volume = await create(controller)
    with raises(Code.INVALID_ARGUMENT, "readonly"):
        await controller.controller_publish_volume(publish(volume.volume_id, readonly=True))
    with raises(Code.INVALID_ARGUMENT, "block"):
        await controller.controller_publish_volume(publish(volume.volume_id, cap=block()))
    with raises(Code.INVALID_ARGUMENT, "node_id"):
        await controller.controller_publish_volume(publish(volume.volume_id, ""))
    with raises(Code.INVALID_ARGUMENT, "volume_capability"):
        await controller.controller_publish_volume(
            csi.ControllerPublishVolumeRequest(volume_id=volume.volume_id, node_id=NODE)
        )


async def test_unpublish_is_idempotent(driver: Driver, controller: csi.ControllerStub) -> None:
    volume = await create(controller)
    await controller.controller_unpublish_volume(unpublish(volume.volume_id))  # never published
    await controller.controller_unpublish_volume(unpublish("nope"))  # unknown volume
    await controller.controller_unpublish_volume(unpublish(volume.volume_id, "node-9"))
    await controller.controller_publish_volume(publish(volume.volume_id))
    await controller.controller_unpublish_volume(unpublish(volume.volume_id))
    await controller.controller_unpublish_volume(unpublish(volume.volume_id))
    record = driver.state.volume(volume.volume_id)
    assert record is not None
    assert not record.attachments


async def test_unpublish_without_node_detaches_everywhere(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    rwx = mount("MULTI_NODE_MULTI_WRITER")
    volume = await create(controller, caps=[rwx])
    await controller.controller_publish_volume(publish(volume.volume_id, NODE, rwx))
    await controller.controller_publish_volume(publish(volume.volume_id, "node-2", rwx))
    await controller.controller_unpublish_volume(unpublish(volume.volume_id, ""))
    record = driver.state.volume(volume.volume_id)
    assert record is not None
    assert not record.attachments
