"""explain end to end for what follows a claim: a PV whose deletion waits for its attachment, an
infeasible expansion, a snapshot content stuck being created, and VolumeSnapshots, their
contents and VolumeGroupSnapshots that are well. The snapshot-controller stand-in (with its
group side) makes snapshots' contents; the driver's size limit is 4 MiB."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kopf_csi import names
from kopf_csi.csi import Code
from kopf_csi.driver import Driver, DriverConfig, Limits
from kopf_csi.testing.emulator import Body, EmulatedCluster
from kopf_csi.testing.groupsnapshots import GroupSnapshotController, group_content_name
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.snapshots import content_name

from ..conftest import DRIVER_NAME, until
from ..provisioner.conftest import (
    events_for,
    make_claim,
    make_pod,
    make_storage_class,
    settled,
    wait_for_bound,
)
from .conftest import in_flight, until_explained

MiB = 1024**2


@pytest.fixture
def driver_config(driver_config: DriverConfig) -> DriverConfig:
    return dataclasses.replace(driver_config, limits=Limits(max_volume_size=4 * MiB))


@pytest.fixture
async def snapshots(cluster: EmulatedCluster) -> AsyncIterator[GroupSnapshotController]:
    """The snapshot-controller stand-in, single snapshots and groups."""
    async with GroupSnapshotController(cluster) as controller:
        yield controller
    await settled(cluster)


def _has(lines: list[str], *parts: str) -> bool:
    return any(all(part in line for part in parts) for line in lines)


async def _bound(cluster: EmulatedCluster, operator: OperatorThread, name: str = "data") -> Body:
    """A bound claim of class `sc`; its PV."""
    if cluster.get("storageclasses", None, "sc") is None:
        await make_storage_class(cluster, operator)
    return await wait_for_bound(cluster, make_claim(cluster, name))


def _snapshot_class(cluster: EmulatedCluster) -> None:
    cluster.create(
        "volumesnapshotclasses",
        {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
         "metadata": {"name": "snapclass"}, "driver": DRIVER_NAME, "deletionPolicy": "Delete"},
    )  # fmt: skip


def _snapshot(cluster: EmulatedCluster, name: str = "snap", claim: str = "data") -> Body:
    return cluster.create(
        "volumesnapshots",
        {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
         "metadata": {"name": name, "namespace": "default"},
         "spec": {"source": {"persistentVolumeClaimName": claim},
                  "volumeSnapshotClassName": "snapclass"}},
    )  # fmt: skip


def _grow(cluster: EmulatedCluster, size: str) -> None:
    patch = {"spec": {"resources": {"requests": {"storage": size}}}}
    cluster.patch("persistentvolumeclaims", "default", "data", patch)


def _status(cluster: EmulatedCluster, plural: str, namespace: str | None, name: str) -> Body:
    return (cluster.get(plural, namespace, name) or {}).get("status") or {}


# -- a PV whose deletion waits for a VolumeAttachment ---------------------------------------


async def test_a_volume_whose_deletion_waits_for_its_attachment(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, driver: Driver, explain: Any
) -> None:
    """The claim and its pod are gone, the PV is Released under Delete; the VolumeAttachment
    stays because the driver fails ControllerUnpublishVolume, so the provisioner refuses to
    delete the volume (`VolumeFailedDelete`: still attached)."""
    volume = await _bound(cluster, operator)
    name = volume["metadata"]["name"]
    make_pod(cluster, "app", "data")
    va = await until(lambda: cluster.objects("volumeattachments"))
    va_name = va[0]["metadata"]["name"]
    await until(lambda: _status(cluster, "volumeattachments", None, va_name).get("attached"))
    driver.faults.fail("ControllerUnpublishVolume", Code.INTERNAL, message="the LUN is busy")
    cluster.delete("pods", "default", "app")
    cluster.delete("persistentvolumeclaims", "default", "data")
    found = await until_explained(explain, f"pv/{name}", "still-attached")
    assert found.text.first_line == (
        f"BLOCKED: persistentvolume/{name}: the deletion waits for VolumeAttachment {va_name}:"
        f" persistentvolume {name} is still attached to node node-1"
    )
    assert (
        found.text.evidence[0] == f"PersistentVolume {name}: phase Released, reclaim policy Delete"
    )
    assert f"VolumeAttachment {va_name}: node node-1, attached True, being deleted" in (
        found.text.evidence
    )
    # Why it stays: detaching fails, which explain reads from the attachment.
    await until(lambda: _status(cluster, "volumeattachments", None, va_name).get("detachError"))
    found = await until_explained(explain, f"pv/{name}", "still-attached")
    assert _has(
        found.text.evidence, f"VolumeAttachment {va_name}: detaching fails:", "the LUN is busy"
    )
    assert found.json["next"][0] == (
        f"explain va/{va_name}: detaching it fails; once it is detached and gone, the volume"
        " is deleted"
    )
    assert found.text.code == 1
    assert found.json["state"] == "blocked"

    driver.faults.clear()  # the driver detaches; the attachment goes, and so does the volume
    await until(lambda: cluster.get("persistentvolumes", None, name) is None, timeout=20)


# -- an infeasible expansion ----------------------------------------------------------------


async def test_an_infeasible_expansion(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, explain: Any
) -> None:
    """The driver's limit is 4 MiB: growing to 8 MiB is OUT_OF_RANGE, which the resizer takes
    as infeasible (ControllerResizeInfeasible)."""
    await _bound(cluster, operator)
    _grow(cluster, "8Mi")
    claim = cluster.get("persistentvolumeclaims", "default", "data")
    assert claim is not None
    await until(lambda: events_for(cluster, claim, names.REASON_VOLUME_RESIZE_FAILED))
    found = await until_explained(explain, "pvc/default/data", "expansion-infeasible")
    summary = found.json["summary"]
    assert summary.startswith(
        f"the expansion is infeasible ({names.RESIZE_CONTROLLER_INFEASIBLE}): "
    ), summary
    assert "code = OutOfRange" in summary
    assert found.text.first_line == f"BLOCKED: persistentvolumeclaim/default/data: {summary}"
    assert f"resize: {names.RESIZE_CONTROLLER_INFEASIBLE}" in found.text.evidence
    assert found.json["next"][0].startswith("lower spec.resources.requests.storage back")
    assert found.text.code == 1


# -- snapshots ------------------------------------------------------------------------------


async def test_a_snapshot_content_stuck_being_created(
    cluster: EmulatedCluster,
    kcm: Any,
    operator: OperatorThread,
    driver: Driver,
    snapshots: GroupSnapshotController,
    explain: Any,
    operator_url: str,
) -> None:
    """The driver holds CreateSnapshot (until the snapshotter's 60 s timeout): the content
    carries the being-created annotation and no status."""
    driver.faults.hang("CreateSnapshot", times=1)
    await _bound(cluster, operator)
    _snapshot_class(cluster)
    snap = _snapshot(cluster)
    content = content_name(snap)
    await until(
        lambda: names.ANN_SNAPSHOT_BEING_CREATED
        in ((cluster.get("volumesnapshotcontents", None, content) or {}).get("metadata", {})
            .get("annotations") or {})
    )  # fmt: skip
    found = await until_explained(explain, f"vsc/{content}", "content-creating")
    assert found.text.first_line == (
        f"BLOCKED: volumesnapshotcontent/{content}: the VolumeSnapshotContent {content} is stuck"
        " being created: the driver has not answered CreateSnapshot with a ready snapshot"
    )
    assert found.text.evidence == [f"VolumeSnapshotContent {content}: readyToUse None, handle None"]
    assert found.text.code == 1
    # The snapshot leads to its content and says the same.
    through = await until_explained(explain, "vs/default/snap", "content-creating")
    assert through.text.evidence == [
        f"VolumeSnapshot default/snap: readyToUse False, VolumeSnapshotContent {content}",
        f"VolumeSnapshotContent {content}: readyToUse None, handle None",
    ]
    assert through.json["summary"] == found.json["summary"]
    # The operator knows more: the call in flight, and for how long.
    held = await until_explained(explain, f"vsc/{content}", "in-flight", "--operator", operator_url)
    timeout = operator.settings.snapshotter.timeout
    pattern = in_flight("CreateSnapshot", timeout)
    assert pattern.fullmatch(held.json["summary"].removeprefix("waiting for the driver: "))
    assert any(pattern.fullmatch(line.removeprefix("operator: ")) for line in held.text.evidence)
    assert held.json["state"] == "progressing"
    # Asked about the snapshot, the operator is asked about its content too: the call is the
    # content's (the snapshotter works on contents).
    held = await until_explained(
        explain, "vs/default/snap", "in-flight", "--operator", operator_url
    )
    assert pattern.fullmatch(held.json["summary"].removeprefix("waiting for the driver: "))
    assert any(
        pattern.fullmatch(line.removeprefix(f"operator: for VolumeSnapshotContent {content}: "))
        for line in held.text.evidence
    ), held.text.evidence


async def test_a_snapshot_content_whose_creation_fails(
    cluster: EmulatedCluster,
    kcm: Any,
    operator: OperatorThread,
    driver: Driver,
    snapshots: GroupSnapshotController,
    explain: Any,
) -> None:
    driver.faults.fail("CreateSnapshot", Code.INTERNAL, message="the pool is frozen")
    await _bound(cluster, operator)
    _snapshot_class(cluster)
    snap = _snapshot(cluster)
    content = content_name(snap)
    found = await until_explained(explain, f"vsc/{content}", "content-error")
    assert found.text.first_line.startswith(
        f"BLOCKED: volumesnapshotcontent/{content}: the VolumeSnapshotContent {content} failed: "
    )
    assert "the pool is frozen" in found.json["summary"]
    assert found.text.code == 1


async def test_a_snapshot_and_its_content_are_well(
    cluster: EmulatedCluster,
    kcm: Any,
    operator: OperatorThread,
    snapshots: GroupSnapshotController,
    explain: Any,
) -> None:
    await _bound(cluster, operator)
    _snapshot_class(cluster)
    snap = _snapshot(cluster)
    content = content_name(snap)
    await until(lambda: _status(cluster, "volumesnapshots", "default", "snap").get("readyToUse"))
    found = await until_explained(explain, "vs/default/snap", "")
    assert found.text.first_line == (
        "OK: volumesnapshot/default/snap: the VolumeSnapshot is ready to use"
    )
    assert found.text.evidence == [
        f"VolumeSnapshot default/snap: readyToUse True, VolumeSnapshotContent {content}"
    ]
    assert found.text.code == 0
    assert found.json["next"] == []
    assert found.json["state"] == "healthy"
    found = await until_explained(explain, f"volumesnapshotcontents/{content}", "")
    assert found.text.first_line == (
        f"OK: volumesnapshotcontent/{content}: the VolumeSnapshotContent {content} is ready to use"
    )
    (fact,) = found.text.evidence
    assert fact.startswith(f"VolumeSnapshotContent {content}: readyToUse True, handle ")
    assert found.json["exit_code"] == 0


async def test_a_group_snapshot_is_well(
    cluster: EmulatedCluster,
    kcm: Any,
    operator: OperatorThread,
    snapshots: GroupSnapshotController,
    explain: Any,
) -> None:
    for name in ("db-a", "db-b"):
        await _bound(cluster, operator, name)
        cluster.patch(
            "persistentvolumeclaims", "default", name, {"metadata": {"labels": {"app": "db"}}}
        )
    cluster.create(
        "volumegroupsnapshotclasses",
        {"apiVersion": "groupsnapshot.storage.k8s.io/v1", "kind": "VolumeGroupSnapshotClass",
         "metadata": {"name": "groupclass"}, "driver": DRIVER_NAME, "deletionPolicy": "Delete"},
    )  # fmt: skip
    group = cluster.create(
        "volumegroupsnapshots",
        {"apiVersion": "groupsnapshot.storage.k8s.io/v1", "kind": "VolumeGroupSnapshot",
         "metadata": {"name": "group", "namespace": "default"},
         "spec": {"source": {"selector": {"matchLabels": {"app": "db"}}},
                  "volumeGroupSnapshotClassName": "groupclass"}},
    )  # fmt: skip
    await until(
        lambda: _status(cluster, "volumegroupsnapshots", "default", "group").get("readyToUse"),
        timeout=20,
    )
    found = await until_explained(explain, "vgs/default/group", "")
    assert found.text.first_line == (
        "OK: volumegroupsnapshot/default/group: the VolumeGroupSnapshot is ready to use"
    )
    assert found.text.evidence == [
        "VolumeGroupSnapshot default/group: readyToUse True,"
        f" VolumeGroupSnapshotContent {group_content_name(group)}"
    ]
    assert found.text.code == 0
    assert found.json["state"] == "healthy"


async def test_an_expansion_in_flight_then_left_to_the_node(
    cluster: EmulatedCluster,
    kcm: Any,
    operator: OperatorThread,
    driver: Driver,
    explain: Any,
    operator_url: str,
) -> None:
    """The driver holds ControllerExpandVolume once (until the resizer's timeout): explain says
    the expansion is under way, and with the operator which call and for how long; once the
    retry expands the volume, the file system is the node's to grow (no pod uses the claim)."""
    driver.faults.hang("ControllerExpandVolume", times=1)
    await _bound(cluster, operator)
    _grow(cluster, "2Mi")
    plain = await until_explained(explain, "pvc/default/data", "expanding")
    assert plain.json["summary"] == (
        "being expanded to 2Mi: the driver has not finished ControllerExpandVolume"
    )
    assert f"resize: {names.RESIZE_CONTROLLER_IN_PROGRESS}" in plain.text.evidence
    assert plain.text.code == 1
    held = await until_explained(
        explain, "pvc/default/data", "in-flight", "--operator", operator_url
    )
    timeout = operator.settings.resizer.timeout
    pattern = in_flight("ControllerExpandVolume", timeout)
    assert pattern.fullmatch(held.json["summary"].removeprefix("waiting for the driver: "))
    assert any(pattern.fullmatch(line.removeprefix("operator: ")) for line in held.text.evidence)
    assert held.text.first_line.startswith("WAITING: persistentvolumeclaim/default/data: ")

    node = await until_explained(explain, "pvc/default/data", "node-expansion")
    assert node.json["summary"] == (
        "the volume is expanded to 2Mi; the node must now grow its file system"
        " (kubelet does it for a pod that uses the claim)"
    )
    assert f"resize: {names.RESIZE_NODE_PENDING}" in node.text.evidence
    assert node.json["next"] == ["start a pod that uses the claim, or restart the one that does"]
    assert node.text.code == 1


async def test_an_expansion_the_driver_refuses(
    cluster: EmulatedCluster, kcm: Any, operator: OperatorThread, driver: Driver, explain: Any
) -> None:
    """A final error that is not infeasible (INTERNAL): the ControllerResizeError condition,
    retried with backoff."""
    driver.faults.fail("ControllerExpandVolume", Code.INTERNAL, message="the array is degraded")
    await _bound(cluster, operator)
    _grow(cluster, "2Mi")
    found = await until_explained(explain, "pvc/default/data", "expansion-failing")
    assert found.json["summary"].startswith(
        "expanding the volume to 2Mi fails: failed to expand pvc with rpc error: code = Internal"
    )
    assert "the array is degraded" in found.json["summary"]
    assert found.text.code == 1
    assert found.json["state"] == "blocked"
