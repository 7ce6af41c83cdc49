"""Data sources: clone from a PVC, restore from a VolumeSnapshot, or leave it to a populator.

We test these aspects:
- `dataSource` wins over `dataSourceRef`; a cross-namespace `dataSourceRef` is final;
- the kind: PVC -> clone, VolumeSnapshot (right API group) -> restore, others -> populator;
- every check of `getPVCSource` and `getSnapshotSource`, each with the Go sidecar's message,
  wrapped as "error getting handle for DataSource ..." and leaving the claim unchanged;
- a deleting snapshot is still usable if our protection finalizer is on it (no leak);
- the volume-mode-conversion guard and its annotation;
- the resulting VolumeContentSource carries the source volume's handle or the snapshot's.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kopf_csi.csi import messages as csi
from kopf_csi.provisioning import sources
from kopf_csi.provisioning.errors import IgnoredError, ProvisioningError
from kopf_csi.provisioning.sources import DataSourceRef, SourceKind
from kopf_csi.provisioning.states import ProvisioningState

from .factories import DRIVER, make_claim, make_class, make_volume

SC = make_class()
CLONE_REF = DataSourceRef("PersistentVolumeClaim", "src", "", "default")
SNAP_REF = DataSourceRef("VolumeSnapshot", "snap", "snapshot.storage.k8s.io", "default")
PREFIX_CLONE = "error getting handle for DataSource Type PersistentVolumeClaim by Name src: "
PREFIX_SNAP = "error getting handle for DataSource Type VolumeSnapshot by Name snap: "


def with_changes(obj: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A deep copy with `a.b.c`-style paths set (None deletes)."""
    result = copy.deepcopy(obj)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        target = result
        for part in parents:
            target = target.setdefault(part, {})
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return result


CLAIM = make_claim(spec={"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}})
SOURCE = make_claim(
    name="src", uid="src-uid", spec={"volumeName": "pv-src"}, status={"phase": "Bound"}
)
SOURCE_PV = make_volume(
    name="pv-src",
    csi={"driver": DRIVER, "volumeHandle": "vol-src"},
    claim_ref={"name": "src", "namespace": "default", "uid": "src-uid"},
)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({}, None, id="no source -> none"),
        pytest.param(
            {
                "dataSource": {
                    "kind": "VolumeSnapshot",
                    "name": "s",
                    "apiGroup": "snapshot.storage.k8s.io",
                }
            },
            DataSourceRef("VolumeSnapshot", "s", "snapshot.storage.k8s.io", "default"),
            id="dataSource -> normalised, claim's namespace",
        ),
        pytest.param(
            {
                "dataSource": {"kind": "PersistentVolumeClaim", "name": "a"},
                "dataSourceRef": {"kind": "X", "name": "b"},
            },
            DataSourceRef("PersistentVolumeClaim", "a", "", "default"),
            id="both -> dataSource wins",
        ),
        pytest.param(
            {"dataSourceRef": {"kind": "Populated", "name": "p", "apiGroup": "example.com"}},
            DataSourceRef("Populated", "p", "example.com", "default"),
            id="only dataSourceRef -> used",
        ),
    ],
)
def test_data_source(spec: dict[str, Any], expected: DataSourceRef | None) -> None:
    assert sources.data_source(make_claim(spec=spec)) == expected


def test_cross_namespace_data_source_is_final() -> None:
    claim = make_claim(
        spec={"dataSourceRef": {"kind": "VolumeSnapshot", "name": "s", "namespace": "other"}}
    )
    with pytest.raises(ProvisioningError) as info:
        sources.data_source(claim)
    assert info.value.final
    assert str(info.value) == (
        "dataSourceRef namespace specified but the CrossNamespaceVolumeDataSource feature is "
        "disabled"
    )


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        pytest.param(CLONE_REF, SourceKind.CLONE, id="PVC -> clone"),
        pytest.param(
            DataSourceRef("PersistentVolumeClaim", "x", "weird", "ns"),
            SourceKind.CLONE,
            id="PVC any group -> clone",
        ),
        pytest.param(SNAP_REF, SourceKind.SNAPSHOT, id="VolumeSnapshot -> restore"),
    ],
)
def test_source_kind(ref: DataSourceRef, expected: SourceKind) -> None:
    assert sources.source_kind(ref, claim=CLAIM) is expected


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        pytest.param(
            DataSourceRef("PersistentVolumeClaim", "", "", "ns"),
            "the PVC source not found for PVC data",
            id="no name -> not found",
        ),
        pytest.param(
            DataSourceRef("VolumeSnapshot", "s", "", "ns"),
            "the PVC source does not belong to the right APIGroup. Expected "
            "snapshot.storage.k8s.io, Got ",
            id="snapshot in core group -> wrong group",
        ),
    ],
)
def test_source_kind_errors(ref: DataSourceRef, message: str) -> None:
    with pytest.raises(ProvisioningError) as info:
        sources.source_kind(ref, claim=CLAIM)
    assert (str(info.value), info.value.final) == (message, True)


def test_other_kinds_are_for_populators() -> None:
    with pytest.raises(IgnoredError) as info:
        sources.source_kind(DataSourceRef("Bucket", "b", "example.com", "ns"), claim=CLAIM)
    assert info.value.reason == (
        "data source (Bucket) is not handled by the provisioner, assuming an external populator "
        "will provision it"
    )
    assert info.value.event_message == "Assuming an external populator will provision the volume"


def clone(
    claim: dict[str, Any] = CLAIM,
    source: dict[str, Any] = SOURCE,
    volume: dict[str, Any] | None = SOURCE_PV,
) -> csi.VolumeContentSource:
    return sources.clone_source(
        claim, ref=CLONE_REF, storage_class=SC, source_claim=source, source_volume=volume
    )


def test_clone_source() -> None:
    assert clone() == csi.VolumeContentSource(
        volume=csi.VolumeContentSourceVolumeSource(volume_id="vol-src")
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param(
            {"source": with_changes(SOURCE, {"status": {"phase": "Pending"}})},
            "the PVC DataSource src must have a status of Bound.  Got "
            "{Pending [] map[] [] map[] map[] <nil> <nil>}",
            id="source pending -> must be Bound",
        ),
        pytest.param(
            {"source": with_changes(SOURCE, {"metadata.deletionTimestamp": "t"})},
            "the PVC DataSource src is currently being deleted",
            id="source deleting -> refused",
        ),
        pytest.param(
            {"source": with_changes(SOURCE, {"spec.storageClassName": None})},
            "the source PVC (src) storageclass cannot be empty",
            id="source without class -> refused",
        ),
        pytest.param(
            {"claim": with_changes(CLAIM, {"spec.storageClassName": None})},
            "the requested PVC (data) storageclass cannot be empty",
            id="claim without class -> refused",
        ),
        pytest.param(
            {"source": with_changes(SOURCE, {"spec.resources.requests.storage": "2Gi"})},
            "error, new PVC request must be greater than or equal in size to the specified PVC "
            "data source, requested 1073741824 but source is 2147483648",
            id="source bigger -> refused",
        ),
        pytest.param(
            {"source": with_changes(SOURCE, {"spec.volumeName": None})},
            "volume name is empty in source PVC src",
            id="source unbound -> no volume name",
        ),
        pytest.param(
            {"volume": None},
            "claim in dataSource not bound or invalid",
            id="source PV unreadable -> invalid",
        ),
        pytest.param(
            {"volume": with_changes(SOURCE_PV, {"spec.csi": None})},
            "claim in dataSource not bound or invalid",
            id="source PV not CSI -> invalid",
        ),
        pytest.param(
            {"volume": with_changes(SOURCE_PV, {"spec.csi.driver": "other"})},
            "claim in dataSource not bound or invalid",
            id="source PV other driver -> invalid",
        ),
        pytest.param(
            {"volume": with_changes(SOURCE_PV, {"spec.claimRef": None})},
            "claim in dataSource not bound or invalid",
            id="source PV without claimRef -> invalid",
        ),
        pytest.param(
            {"volume": with_changes(SOURCE_PV, {"spec.claimRef.uid": "x"})},
            "claim in dataSource not bound or invalid",
            id="source PV bound elsewhere -> invalid",
        ),
        pytest.param(
            {"volume": with_changes(SOURCE_PV, {"status.phase": "Released"})},
            "claim in dataSource not bound or invalid",
            id="source PV released -> invalid",
        ),
        pytest.param(
            {"volume": with_changes(SOURCE_PV, {"spec.volumeMode": "Block"})},
            "the source PVC and destination PVCs must have the same volume mode for cloning.  "
            "Source is Block, but new PVC requested Filesystem",
            id="block source, fs claim -> mismatch",
        ),
        pytest.param(
            {"claim": with_changes(CLAIM, {"spec.volumeMode": "Block"})},
            "the source PVC and destination PVCs must have the same volume mode for cloning.  "
            "Source is Filesystem, but new PVC requested Block",
            id="fs source, block claim -> mismatch",
        ),
    ],
)
def test_clone_source_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ProvisioningError) as info:
        clone(**kwargs)
    assert (str(info.value), info.value.state) == (
        PREFIX_CLONE + message,
        ProvisioningState.NO_CHANGE,
    )


def test_clone_with_matching_block_modes() -> None:
    claim = with_changes(CLAIM, {"spec.volumeMode": "Block"})
    volume = with_changes(SOURCE_PV, {"spec.volumeMode": "Block"})
    assert clone(claim=claim, volume=volume).volume is not None


def test_source_claim_unavailable() -> None:
    error = sources.source_claim_unavailable(
        CLONE_REF, claim=CLAIM, error=sources.claim_not_found("src")
    )
    assert (
        str(error)
        == PREFIX_CLONE
        + 'error getting PVC src (namespace "default") from api server: persistentvolumeclaim '
        '"src" not found'  # the lister's text, singular: Go reads claims from its informer
    )
    assert error.state is ProvisioningState.NO_CHANGE


RESTORE = make_claim(
    spec={
        "dataSource": {
            "kind": "VolumeSnapshot",
            "name": "snap",
            "apiGroup": "snapshot.storage.k8s.io",
        },
        "volumeMode": "Filesystem",
    }
)
SNAPSHOT = {
    "metadata": {"name": "snap", "namespace": "default", "uid": "snap-uid"},
    "status": {
        "boundVolumeSnapshotContentName": "content",
        "readyToUse": True,
        "restoreSize": "1Gi",
    },
}
CONTENT = {
    "metadata": {"name": "content"},
    "spec": {
        "driver": DRIVER,
        "volumeSnapshotRef": {"name": "snap", "namespace": "default", "uid": "snap-uid"},
        "sourceVolumeMode": "Filesystem",
    },
    "status": {"snapshotHandle": "snap-handle"},
}
ALLOW = "snapshot.storage.kubernetes.io/allow-volume-mode-change"
DENIED = (
    "requested volume default/data modifies the mode of the source volume but does not have"
    " permission to do so. "
)


def restore(
    claim: dict[str, Any] = RESTORE,
    snapshot: dict[str, Any] = SNAPSHOT,
    content: dict[str, Any] | None = CONTENT,
    prevent: bool = True,
) -> csi.VolumeContentSource:
    return sources.snapshot_source(
        claim,
        ref=SNAP_REF,
        storage_class=SC,
        snapshot=snapshot,
        content=content,
        prevent_volume_mode_conversion=prevent,
    )


EXPECTED_RESTORE = csi.VolumeContentSource(
    snapshot=csi.VolumeContentSourceSnapshotSource(snapshot_id="snap-handle")
)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({}, id="ready snapshot -> its handle"),
        pytest.param(
            {
                "snapshot": with_changes(
                    SNAPSHOT,
                    {
                        "metadata.deletionTimestamp": "t",
                        "metadata.finalizers": [
                            "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection"
                        ],
                    },
                )
            },
            id="deleting but protected by us -> still restored",
        ),
        pytest.param(
            {"snapshot": with_changes(SNAPSHOT, {"status.restoreSize": None})},
            id="no restore size -> no size check",
        ),
        pytest.param(
            {"claim": with_changes(RESTORE, {"spec.resources.requests.storage": "2Gi"})},
            id="claim bigger than snapshot -> fine",
        ),
        pytest.param(
            {"claim": with_changes(RESTORE, {"spec.volumeMode": "Block"}), "prevent": False},
            id="mode change, guard off -> allowed",
        ),
        pytest.param(
            {
                "claim": with_changes(RESTORE, {"spec.volumeMode": "Block"}),
                "content": with_changes(CONTENT, {"metadata.annotations": {ALLOW: "true"}}),
            },
            id="mode change allowed by annotation -> restored",
        ),
        pytest.param(
            {
                "content": with_changes(CONTENT, {"spec.sourceVolumeMode": None}),
                "claim": with_changes(RESTORE, {"spec.volumeMode": "Block"}),
            },
            id="content without source mode -> no guard",
        ),
    ],
)
def test_snapshot_source(kwargs: dict[str, Any]) -> None:
    assert restore(**kwargs) == EXPECTED_RESTORE


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param(
            {"snapshot": with_changes(SNAPSHOT, {"metadata.deletionTimestamp": "t"})},
            "snapshot snap is being deleted",
            id="deleting unprotected -> refused",
        ),
        pytest.param(
            {"snapshot": with_changes(SNAPSHOT, {"status": None})},
            "snapshot snap not bound",
            id="no status -> not bound",
        ),
        pytest.param(
            {"snapshot": with_changes(SNAPSHOT, {"status.boundVolumeSnapshotContentName": None})},
            "snapshot snap not bound",
            id="no content name -> not bound",
        ),
        pytest.param(
            {"content": None}, "snapshot snap not bound", id="content unreadable -> not bound"
        ),
        pytest.param(
            {"content": with_changes(CONTENT, {"spec.volumeSnapshotRef.uid": "other"})},
            "snapshot snap not bound",
            id="content for another snapshot -> not bound",
        ),
        pytest.param(
            {"content": with_changes(CONTENT, {"spec.driver": "other"})},
            "snapshot snap not bound",
            id="content of another driver -> not bound",
        ),
        pytest.param(
            {"snapshot": with_changes(SNAPSHOT, {"status.readyToUse": False})},
            "snapshot snap is not Ready",
            id="not ready -> refused",
        ),
        pytest.param(
            {"snapshot": with_changes(SNAPSHOT, {"status.readyToUse": None})},
            "snapshot snap is not Ready",
            id="readiness unknown -> refused",
        ),
        pytest.param(
            {"content": with_changes(CONTENT, {"status": None})},
            "snapshot handle snap is not available",
            id="no handle -> refused",
        ),
        pytest.param(
            {"snapshot": with_changes(SNAPSHOT, {"status.restoreSize": "2Gi"})},
            "requested volume size 1073741824 is less than the size 2147483648 for the source "
            "snapshot snap",
            id="claim smaller than snapshot -> refused",
        ),
        pytest.param(
            {"claim": with_changes(RESTORE, {"spec.resources": {}})},
            "error getting capacity for PVC data when creating snapshot snap",
            id="claim without size -> refused",
        ),
        pytest.param(
            {"claim": with_changes(RESTORE, {"spec.volumeMode": "Block"})},
            f"{DENIED}{ALLOW} annotation is not present on snapshotcontent content",
            id="mode change without annotation -> refused",
        ),
        pytest.param(
            {
                "claim": with_changes(RESTORE, {"spec.volumeMode": "Block"}),
                "content": with_changes(CONTENT, {"metadata.annotations": {ALLOW: "yes"}}),
            },
            f"{DENIED}failed to convert {ALLOW} annotation value to boolean with error: "
            'strconv.ParseBool: parsing "yes": invalid syntax',
            id="mode change with bad annotation -> refused",
        ),
        pytest.param(
            {
                "claim": with_changes(RESTORE, {"spec.volumeMode": "Block"}),
                "content": with_changes(CONTENT, {"metadata.annotations": {ALLOW: "false"}}),
            },
            "requested volume default/data modifies the mode of the source volume but does not "
            f"have permission to do so. {ALLOW} is set to false on snapshotcontent content",
            id="mode change forbidden -> refused",
        ),
    ],
)
def test_snapshot_source_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ProvisioningError) as info:
        restore(**kwargs)
    assert (str(info.value), info.value.state) == (
        PREFIX_SNAP + message,
        ProvisioningState.NO_CHANGE,
    )


def test_snapshot_unavailable() -> None:
    error = sources.snapshot_unavailable(
        SNAP_REF, error='volumesnapshots.snapshot.storage.k8s.io "snap" not found'
    )
    assert (
        str(error)
        == PREFIX_SNAP
        + "error getting snapshot snap from api server: volumesnapshots.snapshot.storage.k8s.io "
        '"snap" not found'
    )


def test_snapshot_content_name() -> None:
    assert sources.snapshot_content_name(SNAPSHOT) == "content"
    assert sources.snapshot_content_name({"metadata": {}}) is None
