"""Snapshots end to end: created, polled, restored from, deleted and retained.

We test these aspects:
- a VolumeSnapshot of a bound claim becomes a VolumeSnapshotContent (the stand-in) that the
  snapshotter makes real: CreateSnapshot named `snapshot-<VolumeSnapshot uid>`, from the
  volume, with the class parameters minus the reserved keys and the secret the content's
  deletion-secret annotations name; the being-created annotation is there during the call and
  gone after it; the status has the handle, the creation time (ns), readyToUse, restoreSize;
- the chain: the snapshot is restored into a new claim by the provisioner, then both are
  deleted: DeleteSnapshot with the same secret, the content's finalizer removed, nothing left
  on the driver;
- deletionPolicy Retain: the content is only released, the snapshot stays on the driver;
- a snapshot that becomes ready later is polled (dynamic: CreateSnapshot again) until ready;
- `--snapshot-name-prefix`/`--snapshot-name-uuid-length` and `--extra-create-metadata`;
- a content of another driver is left alone.
"""

from __future__ import annotations

import pytest

from kopf_csi import names
from kopf_csi.driver import Driver
from kopf_csi.settings import SnapshotterOptions
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.snapshots import SnapshotController
from kopf_csi.testing.spies import Calls

from ..conftest import field_managers
from ..provisioner.conftest import wait_for_gone
from .conftest import (
    NAMESPACE,
    content,
    make_claim,
    make_class,
    make_secret,
    make_snapshot,
    ready_content,
    snapshot,
    source_claim,
    until,
    wait_for_bound,
)

SECRET_PARAMETERS = {
    names.PARAM_SNAPSHOTTER_SECRET_NAME: "${volumesnapshot.name}-creds",
    names.PARAM_SNAPSHOTTER_SECRET_NAMESPACE: "${volumesnapshot.namespace}",
    "tier": "gold",
}


async def test_snapshot_is_created_restored_and_deleted(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    snapshots: SnapshotController,
    driver: Driver,
    calls: Calls,
    secrets_seen: list[tuple[str, dict[str, str]]],
    kcm: object,
) -> None:
    source_pv = await source_claim(cluster, operator, size="2Mi")
    make_secret(cluster, "snap-creds", {"token": "s3cr3t"})
    make_class(cluster, parameters=SECRET_PARAMETERS)
    with cluster.subscribe("volumesnapshotcontents") as feed:
        snap = make_snapshot(cluster)
        found = await ready_content(cluster, snap)
        history = [change.object for change in await feed.batch()]
        while feed.pending:
            history += [change.object for change in await feed.batch()]

    uid = snap["metadata"]["uid"]
    status = found["status"]
    handle = status["snapshotHandle"]
    record = driver.state.snapshots[handle]
    assert record.name == f"snapshot-{uid}"
    assert record.source_volume_id == source_pv["spec"]["csi"]["volumeHandle"]
    assert record.parameters == {"tier": "gold"}
    assert ("CreateSnapshot", {"token": "s3cr3t"}) in secrets_seen
    assert status["readyToUse"] is True
    assert status["restoreSize"] == 2 * 1024**2
    assert ("csi-snapshotter", "status") in field_managers(found)
    assert isinstance(status["creationTime"], int)
    assert status["creationTime"] // 10**9 == int(record.created_at)
    assert "error" not in status
    # The annotation was saved before the call, and removed after the status was written.
    being_created = names.ANN_SNAPSHOT_BEING_CREATED
    marked = [c for c in history if being_created in (c["metadata"].get("annotations") or {})]
    assert marked
    assert not marked[0].get("status")
    assert being_created not in (found["metadata"].get("annotations") or {})
    assert found["metadata"]["finalizers"] == [names.FINALIZER_SNAPSHOT_CONTENT_BOUND]
    assert calls.count("CreateSnapshot") == 1

    # The VolumeSnapshot is ready (the stand-in copies the status): restore it.
    await until(lambda: (snapshot(cluster) or {}).get("status", {}).get("readyToUse"))
    restored = make_claim(
        cluster,
        "restored",
        size="2Mi",
        data_source={
            "apiGroup": "snapshot.storage.k8s.io",
            "kind": "VolumeSnapshot",
            "name": "snap",
        },
    )
    restored_pv = await wait_for_bound(cluster, restored)
    volume = driver.state.volume(restored_pv["spec"]["csi"]["volumeHandle"])
    assert volume is not None
    assert volume.source is not None
    assert volume.source.id == handle

    # Delete both: the snapshot on the driver, the content, the snapshot, the restored volume.
    cluster.delete("volumesnapshots", NAMESPACE, "snap")
    cluster.delete("persistentvolumeclaims", NAMESPACE, "restored")
    await wait_for_gone(cluster, "volumesnapshotcontents", found["metadata"]["name"])
    await wait_for_gone(cluster, "volumesnapshots", "snap", namespace=NAMESPACE)
    await wait_for_gone(cluster, "persistentvolumes", restored_pv["metadata"]["name"])
    assert driver.state.snapshots == {}
    assert ("DeleteSnapshot", {"token": "s3cr3t"}) in secrets_seen
    assert calls.count("DeleteSnapshot") == 1


async def test_a_lost_race_on_the_release_neither_warns_nor_deletes_twice(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    snapshots: SnapshotController,
    driver: Driver,
    calls: Calls,
    kcm: object,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await source_claim(cluster, operator)
    make_class(cluster)
    snap = make_snapshot(cluster)
    name = (await ready_content(cluster, snap))["metadata"]["name"]
    # Someone writes the content just before our finalizer patch after DeleteSnapshot.
    cluster.faults.lose_race("volumesnapshotcontents", name)

    cluster.delete("volumesnapshots", NAMESPACE, "snap")
    await wait_for_gone(cluster, "volumesnapshotcontents", name)
    assert not cluster.faults  # it was met
    assert calls.count("DeleteSnapshot") == 1
    assert not [e for e in cluster.objects("events") if e["type"] == "Warning"]
    out = capsys.readouterr().out  # the operator's log: not a word of it at warning level
    assert "content_not_released" not in out
    assert "content_release_raced" in out  # (at debug)


async def test_retain_only_releases_the_content(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    snapshots: SnapshotController,
    driver: Driver,
    calls: Calls,
    kcm: object,
) -> None:
    await source_claim(cluster, operator)
    make_class(cluster, policy="Retain")
    snap = make_snapshot(cluster)
    found = await ready_content(cluster, snap)
    name = found["metadata"]["name"]

    cluster.delete("volumesnapshots", NAMESPACE, "snap")
    await wait_for_gone(cluster, "volumesnapshots", "snap", namespace=NAMESPACE)
    kept = content(cluster, name)
    assert kept is not None
    assert names.ANN_SNAPSHOT_BEING_DELETED in kept["metadata"]["annotations"]
    assert kept["metadata"]["finalizers"] == [names.FINALIZER_SNAPSHOT_CONTENT_BOUND]

    cluster.delete("volumesnapshotcontents", None, name)  # the admin lets it go
    await wait_for_gone(cluster, "volumesnapshotcontents", name)
    assert list(driver.state.snapshots) == [found["status"]["snapshotHandle"]]
    assert calls.count("DeleteSnapshot") == 0


@pytest.mark.parametrize("driver_options", [{"snapshot_ready_after": 1.5}], indirect=True)
async def test_a_snapshot_that_is_not_ready_is_polled_until_it_is(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    snapshots: SnapshotController,
    calls: Calls,
    kcm: object,
) -> None:
    await source_claim(cluster, operator)
    make_class(cluster)
    snap = make_snapshot(cluster)

    def not_ready() -> bool:
        found = content(cluster, snap)
        return bool(found and (found.get("status") or {}).get("readyToUse") is False)

    await until(not_ready)
    found = await ready_content(cluster, snap)
    assert calls.count("CreateSnapshot") >= 2  # upstream polls a dynamic snapshot this way
    assert names.ANN_SNAPSHOT_BEING_CREATED not in (found["metadata"].get("annotations") or {})
    await until(lambda: (snapshot(cluster) or {}).get("status", {}).get("readyToUse"))


@pytest.mark.parametrize(
    "snapshotter_options",
    [
        SnapshotterOptions(
            timeout=1.0,
            retry_interval_start=0.05,
            retry_interval_max=0.5,
            snapshot_name_prefix="snap",
            snapshot_name_uuid_length=8,
            extra_create_metadata=True,
        )
    ],
    indirect=True,
)
async def test_name_options_and_extra_metadata(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    snapshots: SnapshotController,
    driver: Driver,
    kcm: object,
) -> None:
    await source_claim(cluster, operator)
    make_class(cluster, parameters={"tier": "gold"})
    snap = make_snapshot(cluster)
    found = await ready_content(cluster, snap)
    record = driver.state.snapshots[found["status"]["snapshotHandle"]]
    assert record.name == "snap-" + snap["metadata"]["uid"].replace("-", "")[:8]
    assert record.parameters == {
        "tier": "gold",
        names.PARAM_VOLUME_SNAPSHOT_NAME: "snap",
        names.PARAM_VOLUME_SNAPSHOT_NAMESPACE: NAMESPACE,
        names.PARAM_VOLUME_SNAPSHOT_CONTENT_NAME: found["metadata"]["name"],
    }


async def test_a_content_of_another_driver_is_left_alone(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    cluster.create(
        "volumesnapshotcontents",
        {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
         "metadata": {"name": "theirs"},
         "spec": {"driver": "other.csi.example.com", "deletionPolicy": "Delete",
                  "source": {"volumeHandle": "vol-1"},
                  "volumeSnapshotRef": {"name": "s", "namespace": NAMESPACE, "uid": "u-1"}}},
    )  # fmt: skip
    await until(lambda: "theirs" in operator.memo.snapshotter.contents)
    ours = cluster.create(
        "volumesnapshotcontents",
        {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
         "metadata": {"name": "ours"},
         "spec": {"driver": operator.memo.driver.name, "deletionPolicy": "Delete",
                  "source": {"snapshotHandle": "missing-handle"}}},
    )  # fmt: skip
    # Ours is looked at (and fails: no such snapshot); theirs never is.
    await until(lambda: (content(cluster, "ours") or {}).get("status", {}).get("error"))
    assert "status" not in (content(cluster, "theirs") or {})
    assert ours["metadata"]["name"] == "ours"
    assert calls.count("CreateSnapshot") == 0
