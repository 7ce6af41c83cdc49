"""Volumes from a data source, end to end: a clone of a PVC, a restore of a VolumeSnapshot.

We test these aspects:
- a clone sends the source PV's volumeHandle as the content source; the driver copies it; the
  source PVC gets the cloning-protection finalizer and loses it once it is deleted;
- a source that is not Bound yet, or bigger than the clone: the Go message, then provisioned
  when the source is ready (nothing is created meanwhile);
- a restore sends the snapshot handle of the bound, ready VolumeSnapshotContent; the snapshot is
  protected by its finalizer while the volume is made, and released after; a release that
  loses a race (409) is read again and retried at once;
- a snapshot that is not ready: the Go message, then restored once it is;
- a data source of another kind is left to a populator, with the reference's Normal event;
- the source is protected before anything else can fail: a restore or a clone waiting for its
  missing provisioner secret keeps its source protected while it retries, as the Go
  provisioner does on a real server; a deleted restore releases its snapshot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kopf_csi import names
from kopf_csi.csi import CSIClient
from kopf_csi.csi import messages as csi
from kopf_csi.driver import Driver
from kopf_csi.driver.records import Source
from kopf_csi.driver.volumes import VolumeRequest
from kopf_csi.settings import Settings
from kopf_csi.testing.emulator import Body, EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from ..conftest import DRIVER_NAME
from .conftest import (
    NAMESPACE,
    RETRY_MAX,
    assert_stays,
    drain,
    events_for,
    make_claim,
    make_pod,
    make_storage_class,
    wait_for_bound,
    wait_for_event,
    wait_for_gone,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("kcm")

FAILED = names.REASON_PROVISIONING_FAILED
CLONE_OF_SOURCE = {"kind": "PersistentVolumeClaim", "name": "source"}
FROM_SNAPSHOT = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap"}


# --- Clones ------------------------------------------------------------------------------------


async def test_clone_sends_the_source_volume_and_protects_the_source(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    created: list[VolumeRequest],
) -> None:
    await make_storage_class(cluster, operator)
    source_pv = await wait_for_bound(cluster, make_claim(cluster, "source", size="2Mi"))
    clone = make_claim(cluster, "clone", size="2Mi", data_source=CLONE_OF_SOURCE)
    pv = await wait_for_bound(cluster, clone)

    source_id = source_pv["spec"]["csi"]["volumeHandle"]
    assert created[-1].source == Source(kind="volume", id=source_id)
    backend = driver.state.volume(pv["spec"]["csi"]["volumeHandle"])
    assert backend is not None
    assert backend.source == Source(kind="volume", id=source_id)
    source = cluster.get("persistentvolumeclaims", NAMESPACE, "source")
    assert source is not None
    assert names.FINALIZER_CLONING_PROTECTION in source["metadata"]["finalizers"]

    # No clone is pending any more: the deleted source loses its protection and goes.
    cluster.delete("persistentvolumeclaims", NAMESPACE, "source")
    await wait_for_gone(cluster, "persistentvolumeclaims", "source", namespace=NAMESPACE)
    await wait_for_gone(cluster, "persistentvolumes", source_pv["metadata"]["name"])


async def test_clone_of_a_pending_source_waits_for_it(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    await make_storage_class(cluster, operator, "late", binding="WaitForFirstConsumer")
    await make_storage_class(cluster, operator)
    make_claim(cluster, "source", storage_class="late")  # Pending until a pod uses it
    clone = make_claim(cluster, "clone", data_source=CLONE_OF_SOURCE)
    await wait_for_event(
        cluster,
        clone,
        FAILED,
        message="error getting handle for DataSource Type PersistentVolumeClaim by Name source:"
        " the PVC DataSource source must have a status of Bound."
        "  Got {Pending [] map[] [] map[] map[] <nil> <nil>}",
    )
    assert calls.count("CreateVolume") == 0

    make_pod(cluster, "app", "source")
    await wait_for_bound(cluster, clone)
    assert calls.count("CreateVolume") == 2


async def test_clone_smaller_than_its_source_fails_clearly(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    await make_storage_class(cluster, operator)
    await wait_for_bound(cluster, make_claim(cluster, "source", size="2Mi"))
    clone = make_claim(cluster, "clone", size="1Mi", data_source=CLONE_OF_SOURCE)
    await wait_for_event(
        cluster,
        clone,
        FAILED,
        message="error getting handle for DataSource Type PersistentVolumeClaim by Name source:"
        " error, new PVC request must be greater than or equal in size to the specified PVC"
        " data source, requested 1048576 but source is 2097152",
    )
    await wait_until(lambda: events_for(cluster, clone, FAILED)[0]["count"] >= 2, what="retried")
    assert calls.count("CreateVolume") == 1  # the source's only


# --- Restores ----------------------------------------------------------------------------------


@pytest.fixture
async def csi_client(settings: Settings, driver: Driver) -> AsyncIterator[CSIClient]:
    async with CSIClient(settings.csi.address, timeout=5) as client:
        yield client


async def make_snapshot(
    cluster: EmulatedCluster, client: CSIClient, source_pv: Body, *, ready: bool = True
) -> tuple[str, Body]:
    """A snapshot on the driver, and its VolumeSnapshot + VolumeSnapshotContent, bound."""
    answer = await client.create_snapshot(
        csi.CreateSnapshotRequest(
            name="snapshot-1", source_volume_id=source_pv["spec"]["csi"]["volumeHandle"]
        )
    )
    assert answer.snapshot is not None
    handle, size = answer.snapshot.snapshot_id, answer.snapshot.size_bytes
    snapshot = cluster.create(
        "volumesnapshots",
        {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
         "metadata": {"name": "snap", "namespace": NAMESPACE},
         "spec": {"source": {"persistentVolumeClaimName": "source"}}},
    )  # fmt: skip
    content = cluster.create(
        "volumesnapshotcontents",
        {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
         "metadata": {"name": "snapcontent-1"},
         "spec": {"driver": DRIVER_NAME, "deletionPolicy": "Delete",
                  "source": {"snapshotHandle": handle}, "sourceVolumeMode": "Filesystem",
                  "volumeSnapshotRef": {"kind": "VolumeSnapshot", "name": "snap",
                                        "namespace": NAMESPACE,
                                        "uid": snapshot["metadata"]["uid"]}}},
    )  # fmt: skip
    cluster.patch(
        "volumesnapshotcontents", None, content["metadata"]["name"],
        {"status": {"snapshotHandle": handle, "readyToUse": True, "restoreSize": size}},
        subresource="status",
    )  # fmt: skip
    snapshot = cluster.patch(
        "volumesnapshots", NAMESPACE, "snap",
        {"status": {"boundVolumeSnapshotContentName": "snapcontent-1", "readyToUse": ready,
                    "restoreSize": str(size)}},
        subresource="status",
    )  # fmt: skip
    return handle, snapshot


async def test_restore_sends_the_snapshot_handle_and_releases_the_snapshot(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    csi_client: CSIClient,
    created: list[VolumeRequest],
) -> None:
    await make_storage_class(cluster, operator)
    source_pv = await wait_for_bound(cluster, make_claim(cluster, "source"))
    handle, _ = await make_snapshot(cluster, csi_client, source_pv)
    with cluster.subscribe("volumesnapshots") as feed:
        restored = make_claim(cluster, "restored", data_source=FROM_SNAPSHOT)
        pv = await wait_for_bound(cluster, restored)
        await wait_until(
            lambda: (
                not (cluster.get("volumesnapshots", NAMESPACE, "snap") or {})["metadata"].get(
                    "finalizers"
                )
            ),
            what="the snapshot released",
        )
        changes = await drain(feed)

    assert created[-1].source == Source(kind="snapshot", id=handle)
    backend = driver.state.volume(pv["spec"]["csi"]["volumeHandle"])
    assert backend is not None
    assert backend.source == Source(kind="snapshot", id=handle)
    protected = [c for c in changes if c.object["metadata"].get("finalizers")]
    assert protected  # it was protected while the volume was being made
    assert protected[0].object["metadata"]["finalizers"] == [
        names.FINALIZER_SNAPSHOT_SOURCE_PROTECTION
    ]


async def test_restore_from_a_snapshot_that_is_not_ready_waits_for_it(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    csi_client: CSIClient,
    calls: Calls,
) -> None:
    await make_storage_class(cluster, operator)
    source_pv = await wait_for_bound(cluster, make_claim(cluster, "source"))
    await make_snapshot(cluster, csi_client, source_pv, ready=False)
    restored = make_claim(cluster, "restored", data_source=FROM_SNAPSHOT)
    await wait_for_event(
        cluster,
        restored,
        FAILED,
        message="error getting handle for DataSource Type VolumeSnapshot by Name snap:"
        " snapshot snap is not Ready",
    )
    assert calls.count("CreateVolume") == 1  # the source's only

    cluster.patch(
        "volumesnapshots", NAMESPACE, "snap", {"status": {"readyToUse": True}},
        subresource="status",
    )  # fmt: skip
    await wait_for_bound(cluster, restored)


# --- Other kinds -------------------------------------------------------------------------------


async def test_other_data_source_kinds_are_left_to_a_populator(
    cluster: EmulatedCluster, operator: OperatorThread, calls: Calls
) -> None:
    await make_storage_class(cluster, operator)
    claim = make_claim(
        cluster,
        data_source={"apiGroup": "populators.example.com", "kind": "Dataset", "name": "d"},
    )
    await wait_for_event(
        cluster, claim, names.REASON_PROVISIONING, message=names.MESSAGE_EXTERNAL_POPULATOR
    )
    assert names.MESSAGE_EXTERNAL_POPULATOR == (
        "Assuming an external populator will provision the volume"
    )
    await assert_stays(
        lambda: calls.count("CreateVolume") == 0 and not events_for(cluster, claim, FAILED),
        duration=0.2,
        what="nothing provisioned, nothing failed",
    )


# --- Protection comes before anything that can fail ----------------------------------------

SECRET_PARAMETERS = {
    "csi.storage.k8s.io/provisioner-secret-name": "creds",
    "csi.storage.k8s.io/provisioner-secret-namespace": NAMESPACE,
}
MISSING_SECRET = f'error getting secret creds in namespace {NAMESPACE}: secrets "creds" not found'


def finalizers_of(cluster: EmulatedCluster, resource: str, name: str) -> list[str]:
    obj = cluster.get(resource, NAMESPACE, name)
    return list((obj or {}).get("metadata", {}).get("finalizers") or ())


def make_creds(cluster: EmulatedCluster) -> None:
    cluster.create("secrets", {"metadata": {"name": "creds", "namespace": NAMESPACE}, "data": {}})


async def restore_waiting_for_its_secret(
    cluster: EmulatedCluster, operator: OperatorThread, csi_client: CSIClient
) -> Body:
    """A restore whose class names a provisioner secret that does not exist (yet)."""
    await make_storage_class(cluster, operator)
    await make_storage_class(cluster, operator, "secured", parameters=SECRET_PARAMETERS)
    source_pv = await wait_for_bound(cluster, make_claim(cluster, "source"))
    await make_snapshot(cluster, csi_client, source_pv)
    restored = make_claim(cluster, "restored", storage_class="secured", data_source=FROM_SNAPSHOT)
    await wait_for_event(cluster, restored, FAILED, message=MISSING_SECRET)
    return restored


async def test_a_restore_waiting_for_its_secret_keeps_the_snapshot_protected(
    cluster: EmulatedCluster, operator: OperatorThread, csi_client: CSIClient
) -> None:
    """As the Go provisioner on a real server: the finalizer first, then the secret fails."""
    restored = await restore_waiting_for_its_secret(cluster, operator, csi_client)
    protection = names.FINALIZER_SNAPSHOT_SOURCE_PROTECTION
    assert finalizers_of(cluster, "volumesnapshots", "snap") == [protection]
    await assert_stays(  # while the claim retries
        lambda: finalizers_of(cluster, "volumesnapshots", "snap") == [protection],
        duration=0.3,
        what="the snapshot stays protected",
    )

    make_creds(cluster)
    await wait_for_bound(cluster, restored, timeout=RETRY_MAX + 5)
    await wait_until(lambda: not finalizers_of(cluster, "volumesnapshots", "snap"), what="released")


async def test_a_deleted_restore_releases_the_snapshot(
    cluster: EmulatedCluster, operator: OperatorThread, csi_client: CSIClient
) -> None:
    await restore_waiting_for_its_secret(cluster, operator, csi_client)
    assert finalizers_of(cluster, "volumesnapshots", "snap")

    cluster.delete("persistentvolumeclaims", NAMESPACE, "restored")
    await wait_until(
        lambda: not finalizers_of(cluster, "volumesnapshots", "snap"),
        what="released once no claim needs it",
    )


async def test_a_clone_waiting_for_its_secret_keeps_the_source_protected(
    cluster: EmulatedCluster, operator: OperatorThread
) -> None:
    await make_storage_class(cluster, operator, parameters=SECRET_PARAMETERS)
    make_creds(cluster)
    await wait_for_bound(cluster, make_claim(cluster, "source"))
    cluster.delete("secrets", NAMESPACE, "creds")

    clone = make_claim(cluster, "clone", data_source=CLONE_OF_SOURCE)
    await wait_for_event(cluster, clone, FAILED, message=MISSING_SECRET)
    protection = names.FINALIZER_CLONING_PROTECTION
    assert protection in finalizers_of(cluster, "persistentvolumeclaims", "source")

    make_creds(cluster)
    await wait_for_bound(cluster, clone, timeout=RETRY_MAX + 5)


async def test_a_lost_release_of_the_restored_snapshot_is_retried_at_once(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    csi_client: CSIClient,
) -> None:
    """The snapshot was written between our read and the guarded release (a snapshot-controller
    removing its own finalizer): read it again and release, not 5 minutes later by the sweep."""
    await make_storage_class(cluster, operator)
    source_pv = await wait_for_bound(cluster, make_claim(cluster, "source"))
    await make_snapshot(cluster, csi_client, source_pv)
    # The release comes after CreateVolume: held long enough for the fault to be in place
    # first, however busy the machine.
    driver.faults.delay("CreateVolume", seconds=2.0, times=1)
    make_claim(cluster, "restored", data_source=FROM_SNAPSHOT)

    def protected() -> bool:
        snap = cluster.get("volumesnapshots", NAMESPACE, "snap") or {}
        return bool(snap.get("metadata", {}).get("finalizers"))

    await wait_until(protected, what="the snapshot protected")
    # Someone writes the snapshot just before our release: the real server's 409.
    cluster.faults.lose_race("volumesnapshots")
    # At once, not 5 minutes later by the sweep.
    await wait_until(lambda: not protected(), what="the snapshot released", timeout=30.0)
    assert len(cluster.faults) == 0  # the injected conflict was met
