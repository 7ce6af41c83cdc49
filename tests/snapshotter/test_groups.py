"""Group snapshots end to end: kopf with the real handler modules, the emulated API over HTTP,
the snapshot-controller stand-in with its group side, and the reference driver on its socket.

We test these aspects:
- a VolumeGroupSnapshot over two labelled claims: the stand-in makes the content; the group
  controller calls CreateVolumeGroupSnapshot named `groupsnapshot-<group uid>` with both volume
  handles, the class parameters minus the reserved keys and the secret the content's group
  deletion-secret annotations name; the being-created annotation is there before the status
  and gone after it; the status has the group handle, an RFC 3339 creationTime, readyToUse and
  the per-volume snapshot handles (`volumeSnapshotInfoList`);
- the stand-in makes the member VolumeSnapshots and contents from that list; the single
  snapshot controller fills in the members' status (GetSnapshot), and a claim is restored from
  a member through the normal restore path;
- deleting the group: DeleteVolumeGroupSnapshot once, with the member ids and the secret;
  never DeleteSnapshot for a member; every object goes, nothing is left on the driver;
- deletionPolicy Retain only releases the group content;
- failure codes through fault injection: a final one removes the annotation and reports Go's
  texts in `status.error` and a `GroupSnapshotCreationFailed` event, then the retry succeeds;
  a non-final one keeps the annotation; a failing delete says `GroupSnapshotDeleteError`;
- a not-ready group is polled with GetVolumeGroupSnapshot until it is ready; so is a
  pre-provisioned content, which, deleted while unbound, is deleted on the driver;
- a guarded status write that loses a race (409) is re-read and retried quietly: no
  event, no second CreateVolumeGroupSnapshot;
- a restart mid-operation: the operator stops while CreateVolumeGroupSnapshot hangs; the
  next operator finishes it with one group on the driver, and no second one;
- `--enable-volume-group-snapshots=false`, or a driver without GROUP_CONTROLLER_SERVICE: idle.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from kopf_csi import names
from kopf_csi.csi import Code, CSIClient
from kopf_csi.csi import messages as csi
from kopf_csi.driver import Driver, Features
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import Body, EmulatedCluster
from kopf_csi.testing.groupsnapshots import GroupSnapshotController, group_content_name
from kopf_csi.testing.operator import OperatorThread, running_operator
from kopf_csi.testing.spies import Calls, SecretsSeen

from ..conftest import DRIVER_NAME, field_managers
from ..provisioner.conftest import drain, events_for, settled, wait_for_event, wait_for_gone
from .conftest import FAST, NAMESPACE, make_claim, make_secret, source_claim, until, wait_for_bound

pytestmark = pytest.mark.usefixtures("kcm")

GROUP_SECRET_PARAMETERS = {
    names.PARAM_GROUP_SNAPSHOTTER_SECRET_NAME: "${volumegroupsnapshot.name}-creds",
    names.PARAM_GROUP_SNAPSHOTTER_SECRET_NAMESPACE: "${volumegroupsnapshot.namespace}",
    "tier": "gold",
}
GROUP_MODULES = (
    "kopf_csi_handlers.lifecycle",
    "kopf_csi_handlers.caches",
    "kopf_csi_handlers.provisioner",
    "kopf_csi_handlers.snapshotter",
    "kopf_csi_handlers.groupsnapshotter",
)


@pytest.fixture
def handler_modules() -> tuple[str, ...]:
    return GROUP_MODULES


@pytest.fixture
async def groupsnapshots(cluster: EmulatedCluster) -> AsyncIterator[GroupSnapshotController]:
    async with GroupSnapshotController(cluster) as controller:
        yield controller
    await settled(cluster)


def make_group_class(
    cluster: EmulatedCluster,
    name: str = "groupclass",
    *,
    policy: str = "Delete",
    parameters: Mapping[str, str] | None = None,
) -> Body:
    body: dict[str, Any] = {
        "apiVersion": "groupsnapshot.storage.k8s.io/v1",
        "kind": "VolumeGroupSnapshotClass",
        "metadata": {"name": name},
        "driver": DRIVER_NAME,
        "deletionPolicy": policy,
        "parameters": dict(parameters or {}),
    }
    return cluster.create("volumegroupsnapshotclasses", body)


def make_group(cluster: EmulatedCluster, name: str = "group", cls: str = "groupclass") -> Body:
    body = {
        "apiVersion": "groupsnapshot.storage.k8s.io/v1",
        "kind": "VolumeGroupSnapshot",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "source": {"selector": {"matchLabels": {"app": "db"}}},
            "volumeGroupSnapshotClassName": cls,
        },
    }
    return cluster.create("volumegroupsnapshots", body)


def group_content(cluster: EmulatedCluster, group: Body) -> Body | None:
    return cluster.get("volumegroupsnapshotcontents", None, group_content_name(group))


async def labelled_claims(cluster: EmulatedCluster, operator: OperatorThread) -> list[str]:
    """Two bound claims labelled `app=db` (and one unlabelled, left out); their volume ids."""
    handles = []
    for name in ("db-a", "db-b"):
        pv = await source_claim(cluster, operator, name, size="2Mi" if name == "db-b" else "1Mi")
        cluster.patch(
            "persistentvolumeclaims", NAMESPACE, name, {"metadata": {"labels": {"app": "db"}}}
        )
        handles.append(pv["spec"]["csi"]["volumeHandle"])
    await source_claim(cluster, operator, "other")
    return handles


def _annotated(body: Body) -> bool:
    return names.ANN_GROUP_SNAPSHOT_BEING_CREATED in (body["metadata"].get("annotations") or {})


async def ready_group_content(cluster: EmulatedCluster, group: Body, timeout: float = 10) -> Body:
    def ready() -> Body | None:
        found = group_content(cluster, group)
        if not found or not (found.get("status") or {}).get("readyToUse"):
            return None
        return None if _annotated(found) else found

    found: Body = await until(ready, timeout=timeout)
    return found


def members(cluster: EmulatedCluster, group: str = "group") -> list[Body]:
    return [
        s
        for s in cluster.objects("volumesnapshots", namespace=NAMESPACE)
        if (s["metadata"].get("labels") or {}).get(names.LABEL_GROUP_SNAPSHOT_NAME) == group
    ]


async def test_group_is_created_restored_from_and_deleted(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    groupsnapshots: GroupSnapshotController,
    driver: Driver,
    calls: Calls,
    secrets_seen: SecretsSeen,
) -> None:
    handles = await labelled_claims(cluster, operator)
    make_secret(cluster, "group-creds", {"token": "g-s3cr3t"})
    make_group_class(cluster, parameters=GROUP_SECRET_PARAMETERS)
    with cluster.subscribe("volumegroupsnapshotcontents") as feed:
        group = make_group(cluster)
        found = await ready_group_content(cluster, group)
        history = [change.object for change in await drain(feed)]

    uid = group["metadata"]["uid"]
    status = found["status"]
    [record] = driver.state.groups.values()
    assert record.name == f"groupsnapshot-{uid}"
    assert sorted(record.source_volume_ids) == sorted(handles)
    assert record.parameters == {"tier": "gold"}
    assert ("CreateVolumeGroupSnapshot", {"token": "g-s3cr3t"}) in secrets_seen
    assert status["volumeGroupSnapshotHandle"] == record.group_snapshot_id
    assert ("csi-snapshotter", "status") in field_managers(found)  # as the Go sidecar
    assert status["readyToUse"] is True
    assert isinstance(status["creationTime"], str)
    assert status["creationTime"].endswith("Z")
    infos = status["volumeSnapshotInfoList"]
    assert sorted(i["volumeHandle"] for i in infos) == sorted(handles)
    assert {i["snapshotHandle"] for i in infos} == set(record.snapshot_ids)
    assert all(i["readyToUse"] is True for i in infos)
    assert sorted(i["restoreSize"] for i in infos) == [1024**2, 2 * 1024**2]
    assert found["metadata"]["finalizers"] == [names.FINALIZER_GROUP_SNAPSHOT_CONTENT_BOUND]
    marked = [c for c in history if _annotated(c)]
    assert marked
    assert not marked[0].get("status")
    assert calls.count("CreateVolumeGroupSnapshot") == 1

    # The members: made by the stand-in, made ready by the single snapshot controller.
    await until(lambda: len(members(cluster)) == 2)
    await until(lambda: all((m.get("status") or {}).get("readyToUse") for m in members(cluster)))
    await until(lambda: (cluster.get("volumegroupsnapshots", NAMESPACE, "group") or {}).get(
        "status", {}).get("readyToUse"))  # fmt: skip
    member = next(
        m
        for m in members(cluster)
        if (c := cluster.get("volumesnapshotcontents", None, m["spec"]["source"][
            "volumeSnapshotContentName"])) and c["status"]["restoreSize"] == 2 * 1024**2
    )  # fmt: skip
    member_content = cluster.get(
        "volumesnapshotcontents", None, member["spec"]["source"]["volumeSnapshotContentName"]
    )
    assert member_content is not None
    assert member_content["status"]["volumeGroupSnapshotHandle"] == record.group_snapshot_id
    # The members' contents are the snapshot-controller's alone: nothing written, no event.
    for m in members(cluster):
        c = cluster.get("volumesnapshotcontents", None, m["spec"]["source"][
            "volumeSnapshotContentName"])  # fmt: skip
        assert c is not None
        assert c["metadata"]["annotations"][names.ANN_GROUP_SNAPSHOT_HANDLE] == (
            record.group_snapshot_id
        )
        assert field_managers(c) == {
            ("snapshot-controller", None), ("snapshot-controller", "status")
        }  # fmt: skip
        assert events_for(cluster, c) == []
    restored = make_claim(
        cluster,
        "restored",
        size="2Mi",
        data_source={
            "apiGroup": "snapshot.storage.k8s.io",
            "kind": "VolumeSnapshot",
            "name": member["metadata"]["name"],
        },
    )
    restored_pv = await wait_for_bound(cluster, restored)
    volume = driver.state.volume(restored_pv["spec"]["csi"]["volumeHandle"])
    assert volume is not None
    assert volume.source is not None
    assert volume.source.id == member_content["status"]["snapshotHandle"]
    assert calls.count("CreateSnapshot") == 0

    # Delete the group: once through the group, never a member alone.
    cluster.delete("volumegroupsnapshots", NAMESPACE, "group")
    await wait_for_gone(cluster, "volumegroupsnapshotcontents", found["metadata"]["name"])
    await wait_for_gone(cluster, "volumegroupsnapshots", "group", namespace=NAMESPACE)
    await until(lambda: not members(cluster))
    await until(lambda: not cluster.objects("volumesnapshotcontents"))
    assert driver.state.groups == {}
    assert driver.state.snapshots == {}
    assert calls.count("DeleteVolumeGroupSnapshot") == 1
    assert calls.count("DeleteSnapshot") == 0
    assert ("DeleteVolumeGroupSnapshot", {"token": "g-s3cr3t"}) in secrets_seen
    assert not cluster.dropped  # nothing written that a real API server would drop


async def test_retain_only_releases_the_group_content(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    groupsnapshots: GroupSnapshotController,
    driver: Driver,
    calls: Calls,
) -> None:
    await labelled_claims(cluster, operator)
    make_group_class(cluster, policy="Retain")
    group = make_group(cluster)
    found = await ready_group_content(cluster, group)
    name = found["metadata"]["name"]
    cluster.delete("volumegroupsnapshots", NAMESPACE, "group")
    await wait_for_gone(cluster, "volumegroupsnapshots", "group", namespace=NAMESPACE)
    kept = group_content(cluster, group)
    assert kept is not None
    assert names.ANN_GROUP_SNAPSHOT_BEING_DELETED in kept["metadata"]["annotations"]
    cluster.delete("volumegroupsnapshotcontents", None, name)  # the admin lets it go
    await wait_for_gone(cluster, "volumegroupsnapshotcontents", name)
    assert list(driver.state.groups) == [found["status"]["volumeGroupSnapshotHandle"]]
    assert calls.count("DeleteVolumeGroupSnapshot") == 0


def _take_error(handles: list[str], code: str) -> str:
    error = f"rpc error: code = {code} desc = injected fault"
    return f'failed to take group snapshot of the volumes [{" ".join(handles)}]: "{error}"'


async def test_a_final_error_is_reported_then_retried(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    groupsnapshots: GroupSnapshotController,
    driver: Driver,
    calls: Calls,
) -> None:
    await labelled_claims(cluster, operator)
    make_group_class(cluster)
    driver.faults.fail("CreateVolumeGroupSnapshot", Code.INVALID_ARGUMENT, times=2)
    with cluster.subscribe("volumegroupsnapshotcontents") as feed:
        group = make_group(cluster)
        await until(lambda: group_content(cluster, group) is not None)
        failed = group_content(cluster, group)
        assert failed is not None
        handles = failed["spec"]["source"]["volumeHandles"]
        first = await wait_for_event(
            cluster,
            failed,
            names.REASON_GROUP_SNAPSHOT_CREATION_FAILED,
            message="Failed to create group snapshot: " + _take_error(handles, "InvalidArgument"),
        )
        found = await ready_group_content(cluster, group)
        history = [change.object for change in await drain(feed)]
    assert first["type"] == "Warning"
    assert first["source"]["component"] == f"csi-snapshotter {driver.config.name}"
    errors = [c for c in history if (c.get("status") or {}).get("error")]
    assert errors
    assert not _annotated(errors[0])
    assert errors[0]["status"]["readyToUse"] is False
    assert "error" not in found["status"]
    assert calls.count("CreateVolumeGroupSnapshot") == 3
    assert len(driver.state.groups) == 1


async def test_a_non_final_error_keeps_the_annotation(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    groupsnapshots: GroupSnapshotController,
    driver: Driver,
) -> None:
    await labelled_claims(cluster, operator)
    make_group_class(cluster)
    driver.faults.fail("CreateVolumeGroupSnapshot", Code.UNAVAILABLE, times=1)
    with cluster.subscribe("volumegroupsnapshotcontents") as feed:
        group = make_group(cluster)
        found = await ready_group_content(cluster, group)
        history = [change.object for change in await drain(feed)]
    errors = [c for c in history if (c.get("status") or {}).get("error")]
    assert errors
    assert all(_annotated(c) for c in errors)
    handles = found["spec"]["source"]["volumeHandles"]
    assert errors[0]["status"]["error"]["message"] == (
        "Failed to create group snapshot: " + _take_error(handles, "Unavailable")
    )


async def test_a_failing_delete_is_reported_and_retried(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    groupsnapshots: GroupSnapshotController,
    driver: Driver,
    calls: Calls,
) -> None:
    await labelled_claims(cluster, operator)
    make_group_class(cluster)
    group = make_group(cluster)
    found = await ready_group_content(cluster, group)
    driver.faults.fail("DeleteVolumeGroupSnapshot", Code.INTERNAL, times=2)
    cluster.delete("volumegroupsnapshots", NAMESPACE, "group")
    await wait_for_event(
        cluster,
        found,
        names.REASON_GROUP_SNAPSHOT_DELETE_ERROR,
        message=names.MESSAGE_GROUP_SNAPSHOT_DELETE_FAILED,
    )
    await wait_for_gone(cluster, "volumegroupsnapshotcontents", found["metadata"]["name"])
    assert driver.state.groups == {}
    assert calls.count("DeleteVolumeGroupSnapshot") == 3


@pytest.mark.parametrize("driver_options", [{"snapshot_ready_after": 1.5}], indirect=True)
async def test_a_group_that_is_not_ready_is_polled_with_get(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    groupsnapshots: GroupSnapshotController,
    calls: Calls,
) -> None:
    await labelled_claims(cluster, operator)
    make_group_class(cluster)
    group = make_group(cluster)

    def not_ready() -> bool:
        found = group_content(cluster, group)
        return bool(found and (found.get("status") or {}).get("readyToUse") is False)

    await until(not_ready)
    found = await ready_group_content(cluster, group)
    assert calls.count("CreateVolumeGroupSnapshot") == 1
    assert calls.count("GetVolumeGroupSnapshot") >= 1
    assert all(i["readyToUse"] for i in found["status"]["volumeSnapshotInfoList"])


async def test_a_restart_mid_create_makes_one_group(
    cluster: EmulatedCluster,
    groupsnapshots: GroupSnapshotController,
    driver: Driver,
    calls: Calls,
    settings: Settings,
) -> None:
    async with running_operator(settings=settings, modules=GROUP_MODULES) as first:
        await labelled_claims(cluster, first)
        make_group_class(cluster)
        driver.faults.hang("CreateVolumeGroupSnapshot", times=1)
        group = make_group(cluster)
        await until(lambda: calls.count("CreateVolumeGroupSnapshot") == 1)
        content = group_content(cluster, group)
        assert content is not None
        assert _annotated(content)  # saved before the call that is now hanging
    # The operator died mid-call; the driver finishes nothing for a hung call.
    async with running_operator(settings=settings, modules=GROUP_MODULES):
        found = await ready_group_content(cluster, group)
    assert len(driver.state.groups) == 1
    assert found["status"]["volumeGroupSnapshotHandle"] in driver.state.groups


@pytest.mark.parametrize(
    "snapshotter_options",
    [dataclasses.replace(FAST, enable_volume_group_snapshots=False)],
    indirect=True,
)
async def test_switched_off_the_controller_stays_idle(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    groupsnapshots: GroupSnapshotController,
    calls: Calls,
) -> None:
    await labelled_claims(cluster, operator)
    make_group_class(cluster)
    group = make_group(cluster)
    await until(lambda: group_content(cluster, group) is not None)
    assert operator.memo.group_snapshotter is None
    assert calls.count("CreateVolumeGroupSnapshot") == 0


@pytest.mark.parametrize(
    "driver_options", [{"features": Features(group_snapshots=False)}], indirect=True
)
async def test_a_driver_without_the_service_leaves_it_idle(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    await until(lambda: hasattr(operator.memo, "group_snapshotter"))
    assert operator.memo.group_snapshotter is None
    assert calls.count("GroupControllerGetCapabilities") == 0


async def test_a_lost_status_write_is_retried_quietly(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    groupsnapshots: GroupSnapshotController,
    driver: Driver,
    calls: Calls,
) -> None:
    """Someone wrote the content between our read and our guarded status write: re-read and
    write again at once; no Warning event, and no second CreateVolumeGroupSnapshot."""
    await labelled_claims(cluster, operator)
    make_group_class(cluster)
    # The operator's first write of the content's status is the one that loses its race:
    # someone writes the content just before it (the stand-in that creates the content writes
    # through the Python API, which faults skip).
    cluster.faults.lose_race("volumegroupsnapshotcontents", subresource="status")
    group = make_group(cluster)
    found = await ready_group_content(cluster, group)
    assert len(cluster.faults) == 0  # the injected conflict was met
    assert calls.count("CreateVolumeGroupSnapshot") == 1
    assert [e for e in events_for(cluster, found) if e["type"] == "Warning"] == []
    assert "error" not in found["status"]


async def test_a_preprovisioned_group_is_polled_and_deleted(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    calls: Calls,
    socket_path: pathlib.Path,
) -> None:
    """A VolumeGroupSnapshotContent for a group that already exists on the driver: its status
    comes from GetVolumeGroupSnapshot with its snapshot handles; deleted while unbound, under
    deletionPolicy Delete, it is deleted on the driver through the group."""
    handles = await labelled_claims(cluster, operator)
    async with CSIClient(str(socket_path)) as client:
        request = csi.CreateVolumeGroupSnapshotRequest(name="imported", source_volume_ids=handles)
        existing = (await client.create_volume_group_snapshot(request)).group_snapshot
    assert existing is not None
    ids = [s.snapshot_id for s in existing.snapshots]
    cluster.create(
        "volumegroupsnapshotcontents",
        {"apiVersion": "groupsnapshot.storage.k8s.io/v1", "kind": "VolumeGroupSnapshotContent",
         "metadata": {"name": "imported",
                      "finalizers": [names.FINALIZER_GROUP_SNAPSHOT_CONTENT_BOUND]},
         "spec": {"driver": driver.config.name, "deletionPolicy": "Delete",
                  "source": {"groupSnapshotHandles": {
                      "volumeGroupSnapshotHandle": existing.group_snapshot_id,
                      "volumeSnapshotHandles": ids}},
                  "volumeGroupSnapshotRef": {"name": "g", "namespace": NAMESPACE}}},
    )  # fmt: skip

    def ready() -> Body | None:
        found = cluster.get("volumegroupsnapshotcontents", None, "imported")
        return found if found and (found.get("status") or {}).get("readyToUse") else None

    found = await until(ready)
    assert found["status"]["volumeGroupSnapshotHandle"] == existing.group_snapshot_id
    assert {i["snapshotHandle"] for i in found["status"]["volumeSnapshotInfoList"]} == set(ids)
    assert calls.count("GetVolumeGroupSnapshot") >= 1
    assert calls.count("CreateVolumeGroupSnapshot") == 1  # ours, above

    cluster.delete("volumegroupsnapshotcontents", None, "imported")
    await wait_for_gone(cluster, "volumegroupsnapshotcontents", "imported")
    assert driver.state.groups == {}
    assert calls.count("DeleteVolumeGroupSnapshot") == 1
