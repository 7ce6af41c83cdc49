"""Failures end to end: Go's texts in `status.error` and in events, final versus non-final codes.

We test these aspects:
- a final CreateSnapshot error (INVALID_ARGUMENT): the being-created annotation is removed,
  `status.error` and a `SnapshotCreationFailed` event carry Go's text; the next failure says
  `SnapshotContentCheckandUpdateFailed`; the retry succeeds and the error is cleared;
- a non-final one (UNAVAILABLE): the annotation stays while the error is reported;
- an unknown reserved class parameter, and a missing secret: clear errors, no CreateSnapshot;
- a failing DeleteSnapshot: `SnapshotDeleteError`, retried until the content is gone;
- a pre-provisioned handle the driver does not know: the check's error text.
"""

from __future__ import annotations

import pytest

from kopf_csi import names
from kopf_csi.csi import Code
from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import Body, EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.snapshots import SnapshotController
from kopf_csi.testing.spies import Calls

from ..provisioner.conftest import wait_for_event, wait_for_gone
from .conftest import (
    NAMESPACE,
    content,
    make_class,
    make_snapshot,
    ready_content,
    source_claim,
    until,
)

pytestmark = pytest.mark.usefixtures("kcm")


def _take_error(volume: str, code: str) -> str:
    error = f"rpc error: code = {code} desc = injected fault"
    return f'failed to take snapshot of the volume {volume}: "{error}"'


def _annotated(body: Body) -> bool:
    return names.ANN_SNAPSHOT_BEING_CREATED in (body["metadata"].get("annotations") or {})


async def test_a_final_error_is_reported_then_retried(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    snapshots: SnapshotController,
    driver: Driver,
    calls: Calls,
) -> None:
    pv = await source_claim(cluster, operator)
    volume = pv["spec"]["csi"]["volumeHandle"]
    make_class(cluster)
    driver.faults.fail("CreateSnapshot", Code.INVALID_ARGUMENT, times=2)
    with cluster.subscribe("volumesnapshotcontents") as feed:
        snap = make_snapshot(cluster)
        await until(lambda: content(cluster, snap) is not None)
        failed = content(cluster, snap)
        assert failed is not None
        first = await wait_for_event(
            cluster,
            failed,
            names.REASON_SNAPSHOT_CREATION_FAILED,
            message=f"Failed to create snapshot: {_take_error(volume, 'InvalidArgument')}",
        )
        await wait_for_event(
            cluster,
            failed,
            names.REASON_SNAPSHOT_CHECK_FAILED,
            message="Failed to check and update snapshot content: "
            + _take_error(volume, "InvalidArgument"),
        )
        found = await ready_content(cluster, snap)
        history = []
        while feed.pending:
            history += [change.object for change in await feed.batch()]

    assert first["type"] == "Warning"
    assert first["source"]["component"] == f"csi-snapshotter {driver.config.name}"
    errors = [c for c in history if (c.get("status") or {}).get("error")]
    assert errors
    assert not _annotated(errors[0])
    assert errors[0]["status"]["readyToUse"] is False
    assert set(errors[0]["status"]["error"]) == {"time", "message"}
    assert "error" not in found["status"]
    assert calls.count("CreateSnapshot") == 3


async def test_a_non_final_error_keeps_the_annotation(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    snapshots: SnapshotController,
    driver: Driver,
) -> None:
    pv = await source_claim(cluster, operator)
    make_class(cluster)
    driver.faults.fail("CreateSnapshot", Code.UNAVAILABLE, times=1)
    with cluster.subscribe("volumesnapshotcontents") as feed:
        snap = make_snapshot(cluster)
        found = await ready_content(cluster, snap)
        history = []
        while feed.pending:
            history += [change.object for change in await feed.batch()]
    errors = [c for c in history if (c.get("status") or {}).get("error")]
    assert errors
    assert all(_annotated(c) for c in errors)
    message = errors[0]["status"]["error"]["message"]
    assert message == "Failed to create snapshot: " + _take_error(
        pv["spec"]["csi"]["volumeHandle"], "Unavailable"
    )
    assert not _annotated(found)


async def test_an_unknown_reserved_parameter_is_refused(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    snapshots: SnapshotController,
    calls: Calls,
) -> None:
    await source_claim(cluster, operator)
    make_class(cluster, parameters={"csi.storage.k8s.io/foo": "x"})
    snap = make_snapshot(cluster)
    await until(lambda: content(cluster, snap) is not None)
    found = content(cluster, snap)
    assert found is not None
    await wait_for_event(
        cluster,
        found,
        names.REASON_SNAPSHOT_CREATION_FAILED,
        message="Failed to create snapshot: failed to remove CSI Parameters of prefixed keys:"
        ' found unknown parameter key "csi.storage.k8s.io/foo" with reserved namespace'
        " csi.storage.k8s.io/",
    )
    assert calls.count("CreateSnapshot") == 0


async def test_a_missing_secret_is_reported(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    snapshots: SnapshotController,
    calls: Calls,
) -> None:
    await source_claim(cluster, operator)
    make_class(
        cluster,
        parameters={
            names.PARAM_SNAPSHOTTER_SECRET_NAME: "nope",
            names.PARAM_SNAPSHOTTER_SECRET_NAMESPACE: NAMESPACE,
        },
    )
    snap = make_snapshot(cluster)
    await until(lambda: content(cluster, snap) is not None)
    found = content(cluster, snap)
    assert found is not None
    name = found["metadata"]["name"]
    await wait_for_event(
        cluster,
        found,
        names.REASON_SNAPSHOT_CREATION_FAILED,
        message="Failed to create snapshot: failed to get input parameters to create snapshot"
        f' for content {name}: "cannot get credentials for snapshot content \\"{name}\\""',
    )
    assert calls.count("CreateSnapshot") == 0


async def test_a_failing_delete_is_retried(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    snapshots: SnapshotController,
    driver: Driver,
    calls: Calls,
) -> None:
    await source_claim(cluster, operator)
    make_class(cluster)
    snap = make_snapshot(cluster)
    found = await ready_content(cluster, snap)
    driver.faults.fail("DeleteSnapshot", Code.INTERNAL, times=2)
    cluster.delete("volumesnapshots", NAMESPACE, "snap")
    event = await wait_for_event(
        cluster, found, names.REASON_SNAPSHOT_DELETE_ERROR, message="Failed to delete snapshot"
    )
    await wait_for_gone(cluster, "volumesnapshotcontents", found["metadata"]["name"])
    await wait_for_gone(cluster, "volumesnapshots", "snap", namespace=NAMESPACE)
    assert driver.state.snapshots == {}
    assert calls.count("DeleteSnapshot") == 3
    assert event["type"] == "Warning"


async def test_an_unknown_pre_provisioned_handle_is_reported(
    cluster: EmulatedCluster, operator: OperatorThread
) -> None:
    body = cluster.create(
        "volumesnapshotcontents",
        {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
         "metadata": {"name": "imported"},
         "spec": {"driver": operator.memo.driver.name, "deletionPolicy": "Retain",
                  "source": {"snapshotHandle": "no-such-snapshot"},
                  "volumeSnapshotRef": {"name": "s", "namespace": NAMESPACE}}},
    )  # fmt: skip
    await wait_for_event(
        cluster,
        body,
        names.REASON_SNAPSHOT_CHECK_FAILED,
        message="Failed to check and update snapshot content: failed to list snapshot for"
        ' content imported: "can not find snapshot for snapshotID no-such-snapshot"',
    )
    found = content(cluster, "imported")
    assert found is not None
    assert found["status"]["readyToUse"] is False
