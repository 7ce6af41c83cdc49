"""Pre-provisioned contents, a restart in the middle of CreateSnapshot, and a driver without
snapshots, end to end.

We test these aspects:
- a content with `source.snapshotHandle` gets its status from GetSnapshot (GET_SNAPSHOT),
  else ListSnapshots (LIST_SNAPSHOTS, with the class's list secret), else it is assumed ready;
  deleted while unbound, its snapshot is deleted on the driver and it is released;
- the operator dies while CreateSnapshot hangs, and the VolumeSnapshot is deleted meanwhile:
  the content keeps its being-created annotation and is not released; the next operator asks
  again (the driver had cut the snapshot), then deletes it: nothing leaks;
- a driver without CREATE_DELETE_SNAPSHOT: the snapshotter stays off, contents are untouched.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from kopf_csi import names
from kopf_csi.driver import Driver, Features
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.snapshots import SnapshotController
from kopf_csi.testing.spies import Calls

from ..provisioner.conftest import assert_stays, wait_for_gone
from .conftest import (
    NAMESPACE,
    content,
    driver_snapshot,
    make_class,
    make_secret,
    make_snapshot,
    source_claim,
    until,
)


def _imported(name: str, handle: str, driver: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": name, "finalizers": [names.FINALIZER_SNAPSHOT_CONTENT_BOUND]},
        "spec": {
            "driver": driver,
            "deletionPolicy": "Delete",
            "source": {"snapshotHandle": handle},
            "volumeSnapshotRef": {"name": "s", "namespace": NAMESPACE},
            **spec,
        },
    }


@pytest.mark.parametrize(
    ("driver_options", "expected"),
    [
        pytest.param({}, "GetSnapshot", id="get-snapshot"),
        pytest.param(
            {"features": Features(get_snapshot=False)}, "ListSnapshots", id="list-snapshots"
        ),
        pytest.param(
            {"features": Features(get_snapshot=False, list_snapshots=False)}, None, id="neither"
        ),
    ],
    indirect=["driver_options"],
)
async def test_a_pre_provisioned_content_is_checked_and_deleted(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    socket_path: pathlib.Path,
    calls: Calls,
    secrets_seen: list[tuple[str, dict[str, str]]],
    expected: str | None,
    kcm: object,
) -> None:
    pv = await source_claim(cluster, operator)
    handle = await driver_snapshot(socket_path, pv["spec"]["csi"]["volumeHandle"], "imported")
    make_secret(cluster, "imported-list", {"list": "yes"})
    make_class(
        cluster,
        parameters={
            names.PARAM_SNAPSHOTTER_LIST_SECRET_NAME: "${volumesnapshotcontent.name}-list",
            names.PARAM_SNAPSHOTTER_LIST_SECRET_NAMESPACE: NAMESPACE,
        },
    )
    name = "imported"
    body = _imported(name, handle, operator.memo.driver.name, volumeSnapshotClassName="snapclass")
    cluster.create("volumesnapshotcontents", body)
    await until(lambda: (content(cluster, name) or {}).get("status", {}).get("readyToUse"))
    status = (content(cluster, name) or {})["status"]
    assert status["snapshotHandle"] == handle
    assert isinstance(status["creationTime"], int)
    status_calls = {"GetSnapshot", "ListSnapshots"} & set(calls.methods)
    assert status_calls == ({expected} if expected else set())
    if expected:
        assert (expected, {"list": "yes"}) in secrets_seen
        assert status["restoreSize"] == 1024**2
    assert calls.count("CreateSnapshot") == 1  # the test's own, above

    cluster.delete("volumesnapshotcontents", None, name)  # unbound: deleted on the driver
    await wait_for_gone(cluster, "volumesnapshotcontents", name)
    assert driver.state.snapshots == {}


async def test_a_restart_during_create_snapshot_leaks_nothing(
    cluster: EmulatedCluster,
    driver: Driver,
    socket_path: pathlib.Path,
    settings: Settings,
    handler_modules: tuple[str, ...],
    snapshots: SnapshotController,
    kcm: object,
) -> None:
    first = OperatorThread(settings=settings, modules=handler_modules)
    await first.start()
    try:
        pv = await source_claim(cluster, first)
        make_class(cluster)
        driver.faults.hang("CreateSnapshot")  # the call is on its way when the operator dies
        snap = make_snapshot(cluster)

        def annotated() -> bool:
            found = content(cluster, snap)
            annotations = (found or {}).get("metadata", {}).get("annotations") or {}
            return names.ANN_SNAPSHOT_BEING_CREATED in annotations

        await until(annotated)
    finally:
        await first.stop()

    # What the interrupted call did on the driver: it cut the snapshot after all.
    driver.faults.clear()
    uid = snap["metadata"]["uid"]
    handle = await driver_snapshot(
        socket_path, pv["spec"]["csi"]["volumeHandle"], f"snapshot-{uid}"
    )
    cluster.delete("volumesnapshots", NAMESPACE, "snap")
    name = f"snapcontent-{uid}"

    def held() -> bool:
        found = content(cluster, name)
        return bool(found and found["metadata"].get("deletionTimestamp") and annotated())

    await until(held)
    await assert_stays(held, duration=0.3, what="the content stays while being created")

    second = OperatorThread(settings=settings, modules=handler_modules)
    await second.start()
    try:
        await wait_for_gone(cluster, "volumesnapshotcontents", name, timeout=10)
        await wait_for_gone(cluster, "volumesnapshots", "snap", namespace=NAMESPACE)
        assert handle not in driver.state.snapshots
        assert driver.state.snapshots == {}
    finally:
        await second.stop()


@pytest.mark.parametrize("driver_options", [{"features": Features(snapshots=False)}], indirect=True)
async def test_without_snapshot_support_the_snapshotter_stays_off(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    assert operator.memo.snapshotter is None
    body = _imported("imported", "h-1", operator.memo.driver.name)
    cluster.create("volumesnapshotcontents", body)
    await assert_stays(lambda: "status" not in (content(cluster, "imported") or {}), duration=0.3)
    assert not {"GetSnapshot", "ListSnapshots", "CreateSnapshot"} & set(calls.methods)
