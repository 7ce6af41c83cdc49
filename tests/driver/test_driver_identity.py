"""Identity and the advertised capabilities, over a real socket.

We test these aspects:
- GetPluginInfo: name (default and configured) and vendor version;
- GetPluginCapabilities, ControllerGetCapabilities, NodeGetCapabilities follow the features;
- Probe answers ready, or not ready when the faults say so;
- NodeGetInfo: node id, max volumes per node, topology only with topology on;
- an RPC of a switched-off feature is UNIMPLEMENTED.
"""

from __future__ import annotations

from driver_helpers import NODE, Start, create, raises

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver import Driver, Features, Limits


def names(
    capabilities: list[csi.ControllerServiceCapability] | list[csi.NodeServiceCapability],
) -> set[str]:
    return {c.rpc.type.name for c in capabilities if c.rpc is not None}


async def test_plugin_info(driver: Driver, identity: csi.IdentityStub) -> None:
    info = await identity.get_plugin_info(csi.GetPluginInfoRequest())
    assert info.name == "hostpath.csi.kopf.dev"
    assert info.vendor_version


async def test_plugin_info_configured_name(start: Start, identity: csi.IdentityStub) -> None:
    await start(name="other.csi.example.com", vendor_version="9.9")
    info = await identity.get_plugin_info(csi.GetPluginInfoRequest())
    assert (info.name, info.vendor_version) == ("other.csi.example.com", "9.9")


async def test_plugin_capabilities_with_everything(
    driver: Driver, identity: csi.IdentityStub
) -> None:
    response = await identity.get_plugin_capabilities(csi.GetPluginCapabilitiesRequest())
    services = {c.service.type.name for c in response.capabilities if c.service}
    expansion = {c.volume_expansion.type.name for c in response.capabilities if c.volume_expansion}
    assert services == {
        "CONTROLLER_SERVICE",
        "VOLUME_ACCESSIBILITY_CONSTRAINTS",
        "GROUP_CONTROLLER_SERVICE",
    }
    assert expansion == {"ONLINE"}


async def test_plugin_capabilities_without_topology_and_expansion(
    start: Start, identity: csi.IdentityStub
) -> None:
    await start(features=Features(topology=False, expansion=False, group_snapshots=False))
    response = await identity.get_plugin_capabilities(csi.GetPluginCapabilitiesRequest())
    assert [c.service.type.name for c in response.capabilities if c.service] == [
        "CONTROLLER_SERVICE"
    ]
    assert not any(c.volume_expansion for c in response.capabilities)


async def test_probe_ready_and_not_ready(driver: Driver, identity: csi.IdentityStub) -> None:
    assert (await identity.probe(csi.ProbeRequest())).ready is True
    driver.faults.set_ready(False)
    assert (await identity.probe(csi.ProbeRequest())).ready is False


async def test_controller_capabilities_are_truthful(
    driver: Driver, controller: csi.ControllerStub
) -> None:
    response = await controller.controller_get_capabilities(csi.ControllerGetCapabilitiesRequest())
    assert names(response.capabilities) == {
        "CREATE_DELETE_VOLUME",
        "PUBLISH_UNPUBLISH_VOLUME",
        "LIST_VOLUMES",
        "GET_CAPACITY",
        "CREATE_DELETE_SNAPSHOT",
        "LIST_SNAPSHOTS",
        "CLONE_VOLUME",
        "PUBLISH_READONLY",
        "EXPAND_VOLUME",
        "LIST_VOLUMES_PUBLISHED_NODES",
        "VOLUME_CONDITION",
        "GET_VOLUME",
        "SINGLE_NODE_MULTI_WRITER",
        "MODIFY_VOLUME",
        "GET_SNAPSHOT",
    }


async def test_switched_off_features_are_unadvertised_and_unimplemented(
    start: Start, controller: csi.ControllerStub, node: csi.NodeStub
) -> None:
    await start(
        features=Features(
            attach=False,
            snapshots=False,
            list_volumes=False,
            get_volume=False,
            capacity=False,
            modify=False,
            expansion=False,
            node_stage=False,
            node_stats=False,
            volume_condition=False,
        )
    )
    response = await controller.controller_get_capabilities(csi.ControllerGetCapabilitiesRequest())
    assert names(response.capabilities) == {
        "CREATE_DELETE_VOLUME",
        "CLONE_VOLUME",
        "SINGLE_NODE_MULTI_WRITER",
    }
    node_caps = await node.node_get_capabilities(csi.NodeGetCapabilitiesRequest())
    assert names(node_caps.capabilities) == {"SINGLE_NODE_MULTI_WRITER"}
    volume = await create(controller)
    calls = [
        controller.controller_publish_volume(
            csi.ControllerPublishVolumeRequest(volume_id=volume.volume_id, node_id=NODE)
        ),
        controller.controller_unpublish_volume(
            csi.ControllerUnpublishVolumeRequest(volume_id=volume.volume_id)
        ),
        controller.list_volumes(csi.ListVolumesRequest()),
        controller.controller_get_volume(
            csi.ControllerGetVolumeRequest(volume_id=volume.volume_id)
        ),
        controller.get_capacity(csi.GetCapacityRequest()),
        controller.create_snapshot(
            csi.CreateSnapshotRequest(name="s", source_volume_id=volume.volume_id)
        ),
        controller.delete_snapshot(csi.DeleteSnapshotRequest(snapshot_id="s")),
        controller.list_snapshots(csi.ListSnapshotsRequest()),
        controller.get_snapshot(csi.GetSnapshotRequest(snapshot_id="s")),
        controller.controller_expand_volume(
            csi.ControllerExpandVolumeRequest(volume_id=volume.volume_id)
        ),
        controller.controller_modify_volume(
            csi.ControllerModifyVolumeRequest(volume_id=volume.volume_id)
        ),
        node.node_stage_volume(csi.NodeStageVolumeRequest(volume_id=volume.volume_id)),
        node.node_unstage_volume(csi.NodeUnstageVolumeRequest(volume_id=volume.volume_id)),
        node.node_get_volume_stats(csi.NodeGetVolumeStatsRequest(volume_id=volume.volume_id)),
        node.node_expand_volume(csi.NodeExpandVolumeRequest(volume_id=volume.volume_id)),
    ]
    for call in calls:
        with raises(Code.UNIMPLEMENTED):
            await call


async def test_node_info(start: Start, node: csi.NodeStub) -> None:
    await start(limits=Limits(max_volumes_per_node=7))
    info = await node.node_get_info(csi.NodeGetInfoRequest())
    assert info.node_id == NODE
    assert info.max_volumes_per_node == 7
    assert info.accessible_topology is not None
    assert info.accessible_topology.segments == {"topology.hostpath.csi.kopf.dev/node": NODE}


async def test_node_info_without_topology(start: Start, node: csi.NodeStub) -> None:
    await start(features=Features(topology=False))
    info = await node.node_get_info(csi.NodeGetInfoRequest())
    assert info.accessible_topology is None
    assert info.max_volumes_per_node == 0


async def test_node_capabilities(driver: Driver, node: csi.NodeStub) -> None:
    response = await node.node_get_capabilities(csi.NodeGetCapabilitiesRequest())
    assert names(response.capabilities) == {
        "STAGE_UNSTAGE_VOLUME",
        "GET_VOLUME_STATS",
        "EXPAND_VOLUME",
        "VOLUME_CONDITION",
        "SINGLE_NODE_MULTI_WRITER",
    }
