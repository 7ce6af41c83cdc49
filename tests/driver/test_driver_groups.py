"""The GroupController service over a real socket: group snapshots.

We test these aspects:
- GroupControllerGetCapabilities, and GROUP_CONTROLLER_SERVICE in the plugin capabilities,
  follow the `group_snapshots` (and `snapshots`) switch; switched off, every RPC is UNIMPLEMENTED;
- CreateVolumeGroupSnapshot cuts one member snapshot per volume (a copy of its content), is
  ready, is idempotent by name (in any order of the volumes), ALREADY_EXISTS for other volumes
  or parameters, NOT_FOUND for a missing volume, FAILED_PRECONDITION for volumes on two nodes,
  INVALID_ARGUMENT for a missing name, no volumes, an empty or repeated volume id;
- a member is a snapshot like any other (GetSnapshot, ListSnapshots, restore) that carries its
  group's id, and DeleteSnapshot refuses it (FAILED_PRECONDITION);
- GetVolumeGroupSnapshot and DeleteVolumeGroupSnapshot: INVALID_ARGUMENT without an id, then
  NOT_FOUND (Get) or OK (Delete) for a missing group, then INVALID_ARGUMENT for a mismatched
  `snapshot_ids`; Delete removes the members and their content, and is idempotent;
- the secrets policy applies to the three RPCs (`group-snapshotter`);
- everything survives a restart, and members left without their group by a crash are removed;
- the csi-sanity (csi-test v5.4) GroupController specs, as it calls them.
"""

from __future__ import annotations

import pathlib

import pytest
from driver_helpers import Start, create, raises, topology

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver import Driver, Features, SecretsPolicy
from kopf_csi.driver import secrets as driver_secrets
from kopf_csi.driver.groups import member_name

MiB = 1024**2


async def group_of(
    groups: csi.GroupControllerStub, name: str, *volume_ids: str, **fields: object
) -> csi.VolumeGroupSnapshot:
    response = await groups.create_volume_group_snapshot(
        csi.CreateVolumeGroupSnapshotRequest(
            name=name,
            source_volume_ids=list(volume_ids),
            **fields,  # type: ignore[arg-type]
        )
    )
    assert response.group_snapshot is not None
    return response.group_snapshot


async def two_volumes(driver: Driver, controller: csi.ControllerStub) -> tuple[str, str]:
    a = await create(controller, "pvc-a", size=MiB)
    b = await create(controller, "pvc-b", size=2 * MiB)
    (driver.backend.storage.volume_path(a.volume_id) / "a.txt").write_text("A")
    (driver.backend.storage.volume_path(b.volume_id) / "b.txt").write_text("B")
    return a.volume_id, b.volume_id


async def test_capabilities_follow_the_switch(
    start: Start, identity: csi.IdentityStub, groups: csi.GroupControllerStub
) -> None:
    await start()
    plugin = await identity.get_plugin_capabilities(csi.GetPluginCapabilitiesRequest())
    services = {c.service.type.name for c in plugin.capabilities if c.service}
    assert "GROUP_CONTROLLER_SERVICE" in services
    response = await groups.group_controller_get_capabilities(
        csi.GroupControllerGetCapabilitiesRequest()
    )
    assert [c.rpc.type.name for c in response.capabilities if c.rpc] == [
        "CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT"
    ]


@pytest.mark.parametrize(
    "features", [Features(group_snapshots=False), Features(snapshots=False)], ids=["off", "nosnap"]
)
async def test_switched_off(
    start: Start, identity: csi.IdentityStub, groups: csi.GroupControllerStub, features: Features
) -> None:
    await start(features=features)
    plugin = await identity.get_plugin_capabilities(csi.GetPluginCapabilitiesRequest())
    services = {c.service.type.name for c in plugin.capabilities if c.service}
    assert "GROUP_CONTROLLER_SERVICE" not in services
    response = await groups.group_controller_get_capabilities(
        csi.GroupControllerGetCapabilitiesRequest()
    )
    assert response.capabilities == []
    with raises(Code.UNIMPLEMENTED, "CreateVolumeGroupSnapshot is not enabled"):
        await group_of(groups, "g", "v")
    with raises(Code.UNIMPLEMENTED):
        await groups.get_volume_group_snapshot(
            csi.GetVolumeGroupSnapshotRequest(group_snapshot_id="g")
        )
    with raises(Code.UNIMPLEMENTED):
        await groups.delete_volume_group_snapshot(
            csi.DeleteVolumeGroupSnapshotRequest(group_snapshot_id="g")
        )


async def test_create_get_restore_delete(
    driver: Driver, controller: csi.ControllerStub, groups: csi.GroupControllerStub
) -> None:
    a, b = await two_volumes(driver, controller)
    group = await group_of(groups, "group-1", a, b, parameters={"p": "1"})
    assert group.ready_to_use
    assert group.creation_time is not None
    assert [s.source_volume_id for s in group.snapshots] == [a, b]
    assert [s.size_bytes for s in group.snapshots] == [MiB, 2 * MiB]
    assert all(s.group_snapshot_id == group.group_snapshot_id for s in group.snapshots)
    assert all(s.ready_to_use for s in group.snapshots)
    member_a, member_b = (s.snapshot_id for s in group.snapshots)
    storage = driver.backend.storage
    assert (storage.snapshot_path(member_a) / "a.txt").read_text() == "A"
    assert (storage.snapshot_path(member_b) / "b.txt").read_text() == "B"

    # Idempotent by name, whatever the order of the volumes.
    again = await group_of(groups, "group-1", b, a, parameters={"p": "1"})
    assert again.group_snapshot_id == group.group_snapshot_id
    assert [s.snapshot_id for s in again.snapshots] == [member_a, member_b]

    got = await groups.get_volume_group_snapshot(
        csi.GetVolumeGroupSnapshotRequest(
            group_snapshot_id=group.group_snapshot_id, snapshot_ids=[member_b, member_a]
        )
    )
    assert got.group_snapshot == group

    # A member is a snapshot like any other: found, listed, restored; not deleted alone.
    single = await controller.get_snapshot(csi.GetSnapshotRequest(snapshot_id=member_a))
    assert single.snapshot is not None
    assert single.snapshot.group_snapshot_id == group.group_snapshot_id
    listed = await controller.list_snapshots(csi.ListSnapshotsRequest(source_volume_id=b))
    assert [e.snapshot.snapshot_id for e in listed.entries if e.snapshot] == [member_b]
    source = csi.VolumeContentSource(snapshot=csi.VolumeContentSourceSnapshotSource(member_b))
    restored = await create(controller, "pvc-r", size=2 * MiB, volume_content_source=source)
    assert (storage.volume_path(restored.volume_id) / "b.txt").read_text() == "B"
    with raises(Code.FAILED_PRECONDITION, "delete the group snapshot instead"):
        await controller.delete_snapshot(csi.DeleteSnapshotRequest(snapshot_id=member_a))

    await groups.delete_volume_group_snapshot(
        csi.DeleteVolumeGroupSnapshotRequest(
            group_snapshot_id=group.group_snapshot_id, snapshot_ids=[member_a, member_b]
        )
    )
    assert driver.state.groups == {}
    assert driver.state.snapshot(member_a) is None
    assert not storage.snapshot_path(member_a).exists()
    assert not storage.snapshot_path(member_b).exists()
    # The restored volume is independent of its source.
    assert (storage.volume_path(restored.volume_id) / "b.txt").read_text() == "B"
    await groups.delete_volume_group_snapshot(
        csi.DeleteVolumeGroupSnapshotRequest(
            group_snapshot_id=group.group_snapshot_id, snapshot_ids=[member_a, member_b]
        )
    )
    with raises(Code.NOT_FOUND, "does not exist"):
        await groups.get_volume_group_snapshot(
            csi.GetVolumeGroupSnapshotRequest(
                group_snapshot_id=group.group_snapshot_id, snapshot_ids=[member_a, member_b]
            )
        )


async def test_create_errors(
    driver: Driver, controller: csi.ControllerStub, groups: csi.GroupControllerStub
) -> None:
    a, b = await two_volumes(driver, controller)
    with raises(Code.INVALID_ARGUMENT, "name is required"):
        await group_of(groups, "", a)
    with raises(Code.INVALID_ARGUMENT, "source_volume_ids are required"):
        await group_of(groups, "g")
    with raises(Code.INVALID_ARGUMENT, "must not contain empty ids"):
        await group_of(groups, "g", a, "")
    with raises(Code.INVALID_ARGUMENT, "must not repeat a volume"):
        await group_of(groups, "g", a, a)
    with raises(Code.NOT_FOUND, "volume nope does not exist"):
        await group_of(groups, "g", a, "nope")
    assert driver.state.groups == {}
    assert driver.state.snapshots == {}

    await group_of(groups, "g", a, b)
    with raises(Code.ALREADY_EXISTS, "exists for other volumes"):
        await group_of(groups, "g", a)
    with raises(Code.ALREADY_EXISTS, "exists with other parameters"):
        await group_of(groups, "g", a, b, parameters={"x": "y"})

    elsewhere = await create(
        controller,
        "pvc-c",
        accessibility_requirements=csi.TopologyRequirement(requisite=[topology("node-2")]),
    )
    with raises(Code.FAILED_PRECONDITION, "cannot be snapshotted together"):
        await group_of(groups, "g2", a, elsewhere.volume_id)


async def test_get_and_delete_precedence(
    driver: Driver, controller: csi.ControllerStub, groups: csi.GroupControllerStub
) -> None:
    a, b = await two_volumes(driver, controller)
    group = await group_of(groups, "g", a, b)
    gid = group.group_snapshot_id
    members = [s.snapshot_id for s in group.snapshots]

    for ids in ([], members[:1], [*members, "extra"], [members[0], members[0]]):
        with raises(Code.INVALID_ARGUMENT, "snapshot_ids do not match the 2 snapshots"):
            await groups.get_volume_group_snapshot(
                csi.GetVolumeGroupSnapshotRequest(group_snapshot_id=gid, snapshot_ids=ids)
            )
        with raises(Code.INVALID_ARGUMENT, "snapshot_ids do not match"):
            await groups.delete_volume_group_snapshot(
                csi.DeleteVolumeGroupSnapshotRequest(group_snapshot_id=gid, snapshot_ids=ids)
            )
    assert driver.state.group(gid) is not None  # a mismatched delete destroys nothing
    with raises(Code.INVALID_ARGUMENT, "group_snapshot_id is required"):
        await groups.get_volume_group_snapshot(
            csi.GetVolumeGroupSnapshotRequest(snapshot_ids=members)
        )
    with raises(Code.INVALID_ARGUMENT, "group_snapshot_id is required"):
        await groups.delete_volume_group_snapshot(
            csi.DeleteVolumeGroupSnapshotRequest(snapshot_ids=members)
        )


async def test_secrets_policy(
    start: Start, controller: csi.ControllerStub, groups: csi.GroupControllerStub
) -> None:
    required = driver_secrets.parse_operations("group-snapshotter")
    assert required == {
        "CreateVolumeGroupSnapshot",
        "DeleteVolumeGroupSnapshot",
        "GetVolumeGroupSnapshot",
    }
    await start(secrets=SecretsPolicy(required_for=required, expected={"k": "v"}))
    volume = await create(controller, "pvc-a")
    with raises(Code.UNAUTHENTICATED, "CreateVolumeGroupSnapshot requires secrets"):
        await group_of(groups, "g", volume.volume_id)
    group = await group_of(groups, "g", volume.volume_id, secrets={"k": "v"})
    with raises(Code.UNAUTHENTICATED, "GetVolumeGroupSnapshot carries invalid secrets"):
        await groups.get_volume_group_snapshot(
            csi.GetVolumeGroupSnapshotRequest(
                group_snapshot_id=group.group_snapshot_id, secrets={"k": "wrong"}
            )
        )
    with raises(Code.UNAUTHENTICATED, "DeleteVolumeGroupSnapshot requires secrets"):
        await groups.delete_volume_group_snapshot(
            csi.DeleteVolumeGroupSnapshotRequest(group_snapshot_id=group.group_snapshot_id)
        )


async def test_survives_a_restart_and_drops_orphaned_members(
    driver: Driver,
    controller: csi.ControllerStub,
    groups: csi.GroupControllerStub,
    data_dir: pathlib.Path,
) -> None:
    a, b = await two_volumes(driver, controller)
    group = await group_of(groups, "g", a, b)
    doomed = await group_of(groups, "doomed", a)
    # A crash between the members and the group record: the group record never made it.
    (data_dir / "state" / "groups" / f"{doomed.group_snapshot_id}.json").unlink()
    [orphan] = [s.snapshot_id for s in doomed.snapshots]

    await driver.restart(grace=0.1)
    assert set(driver.state.groups) == {group.group_snapshot_id}
    assert driver.state.snapshot(orphan) is None
    assert not driver.backend.storage.snapshot_path(orphan).exists()
    members = [s.snapshot_id for s in group.snapshots]
    got = await groups.get_volume_group_snapshot(
        csi.GetVolumeGroupSnapshotRequest(
            group_snapshot_id=group.group_snapshot_id, snapshot_ids=members
        )
    )
    assert got.group_snapshot == group
    again = await group_of(groups, "g", a, b)
    assert again.group_snapshot_id == group.group_snapshot_id
    assert driver.state.snapshot_named(member_name("g", a)) is not None


# csi-sanity v5.4, pkg/sanity/groupcontroller.go, as it calls them (no volumes, no ids).


async def test_sanity_create_without_name(driver: Driver, groups: csi.GroupControllerStub) -> None:
    with raises(Code.INVALID_ARGUMENT):
        await groups.create_volume_group_snapshot(csi.CreateVolumeGroupSnapshotRequest())


async def test_sanity_get(driver: Driver, groups: csi.GroupControllerStub) -> None:
    with raises(Code.INVALID_ARGUMENT):
        await groups.get_volume_group_snapshot(csi.GetVolumeGroupSnapshotRequest())
    with raises(Code.NOT_FOUND):
        await groups.get_volume_group_snapshot(
            csi.GetVolumeGroupSnapshotRequest(group_snapshot_id="fake-volume-id")
        )


async def test_sanity_delete(driver: Driver, groups: csi.GroupControllerStub) -> None:
    with raises(Code.INVALID_ARGUMENT):
        await groups.delete_volume_group_snapshot(csi.DeleteVolumeGroupSnapshotRequest())
    await groups.delete_volume_group_snapshot(
        csi.DeleteVolumeGroupSnapshotRequest(group_snapshot_id="fake-volume-id")
    )


async def test_a_failure_mid_create_leaves_no_member_data_behind(
    driver: Driver,
    controller: csi.ControllerStub,
    groups: csi.GroupControllerStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = await two_volumes(driver, controller)
    storage = driver.backend.storage
    cut = storage.snapshot_volume

    def second_fails(volume_id: str, snapshot_id: str, *, block: bool) -> None:
        if volume_id == b:
            raise OSError("disk full")
        cut(volume_id, snapshot_id, block=block)

    monkeypatch.setattr(storage, "snapshot_volume", second_fails)
    before = set(storage.snapshots_dir.iterdir()) if storage.snapshots_dir.exists() else set()
    with raises(Code.UNKNOWN):  # an unexpected error: grpclib's "Internal Server Error"
        await group_of(groups, "group-1", a, b)
    after = set(storage.snapshots_dir.iterdir()) if storage.snapshots_dir.exists() else set()
    assert after == before  # the first member's copy went with the failure
    assert not driver.state.snapshots
    assert not driver.state.groups
