"""The driver's snapshot options the csi-snapshotter's tests lean on.

We test these aspects:
- `snapshot_ready_after`: a new snapshot is not ready (CreateSnapshot, ListSnapshots,
  GetSnapshot agree) until that many seconds have passed, then it is;
- `list_snapshots`/`get_snapshot` off: unadvertised and UNIMPLEMENTED, the rest still works.
"""

from __future__ import annotations

import asyncio

from driver_helpers import Start, create, raises

from kopf_csi.csi._generated.csi import v1 as csi
from kopf_csi.csi.codes import Code
from kopf_csi.driver import Features


async def test_a_snapshot_becomes_ready_after_the_configured_delay(
    start: Start, controller: csi.ControllerStub
) -> None:
    await start(snapshot_ready_after=0.3)
    volume = await create(controller)
    answer = await controller.create_snapshot(
        csi.CreateSnapshotRequest(name="s", source_volume_id=volume.volume_id)
    )
    assert answer.snapshot is not None
    assert not answer.snapshot.ready_to_use
    snapshot_id = answer.snapshot.snapshot_id
    listed = await controller.list_snapshots(csi.ListSnapshotsRequest(snapshot_id=snapshot_id))
    assert [e.snapshot.ready_to_use for e in listed.entries if e.snapshot] == [False]
    got = await controller.get_snapshot(csi.GetSnapshotRequest(snapshot_id=snapshot_id))
    assert got.snapshot is not None
    assert not got.snapshot.ready_to_use

    await asyncio.sleep(0.35)
    again = await controller.create_snapshot(
        csi.CreateSnapshotRequest(name="s", source_volume_id=volume.volume_id)
    )
    assert again.snapshot is not None
    assert again.snapshot.ready_to_use
    got = await controller.get_snapshot(csi.GetSnapshotRequest(snapshot_id=snapshot_id))
    assert got.snapshot is not None
    assert got.snapshot.ready_to_use


async def test_list_and_get_snapshot_can_be_switched_off(
    start: Start, controller: csi.ControllerStub
) -> None:
    await start(features=Features(list_snapshots=False, get_snapshot=False))
    capabilities = await controller.controller_get_capabilities(
        csi.ControllerGetCapabilitiesRequest()
    )
    advertised = {c.rpc.type.name for c in capabilities.capabilities if c.rpc is not None}
    assert "CREATE_DELETE_SNAPSHOT" in advertised
    assert not advertised & {"LIST_SNAPSHOTS", "GET_SNAPSHOT"}
    volume = await create(controller)
    answer = await controller.create_snapshot(
        csi.CreateSnapshotRequest(name="s", source_volume_id=volume.volume_id)
    )
    assert answer.snapshot is not None
    assert answer.snapshot.ready_to_use
    with raises(Code.UNIMPLEMENTED):
        await controller.list_snapshots(csi.ListSnapshotsRequest())
    with raises(Code.UNIMPLEMENTED):
        await controller.get_snapshot(csi.GetSnapshotRequest(snapshot_id="s"))
