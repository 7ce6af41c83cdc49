"""The VolumeSnapshotContent of a group member, end to end: the snapshot-controller's alone.

For each member of a ready group, the snapshot-controller makes a content that looks dynamic
(the member's volume as `source.volumeHandle`, no class) and marks it with the
`groupsnapshot.storage.k8s.io/volumeGroupSnapshotHandle` annotation; it writes the content's
whole status itself, in a second write. The Go csi-snapshotter never creates a snapshot for
such a content, and writes or posts nothing on it (external-snapshotter's `syncContent` and
`checkandUpdateContentStatusOperation`).

We test these aspects:
- a member content without a status yet (between the snapshot-controller's two writes): no
  CreateSnapshot, no status write, no event; nor once its ready status is there;
- a member whose status names its snapshot but is not ready yet is polled as Go polls it:
  GetSnapshot with the secret of its deletion-secret annotations (it has no class), and the
  status turns ready, keeping its group handle.
(The whole group, its members made by the stand-in, restored from and deleted through the
group content, is in test_groups.py.)
"""

from __future__ import annotations

import pathlib
from typing import Any

from kopf_csi import names
from kopf_csi.testing.emulator import Body, EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls, SecretsSeen

from ..conftest import DRIVER_NAME, field_managers
from ..provisioner.conftest import assert_stays, events_for
from .conftest import NAMESPACE, content, driver_snapshot, make_secret, source_claim, until

CONTROLLER = "snapshot-controller"
GROUP_HANDLE = "group-1"


def member_content(
    name: str, volume: str, *, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A member's content as snapshot-controller creates it (its status comes after)."""
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotContent",
        "metadata": {
            "name": name,
            "annotations": {names.ANN_GROUP_SNAPSHOT_HANDLE: GROUP_HANDLE, **(annotations or {})},
            "finalizers": [names.FINALIZER_SNAPSHOT_CONTENT_BOUND],
        },
        "spec": {
            "volumeSnapshotRef": {
                "kind": "VolumeSnapshot", "name": f"snapshot-{name}", "namespace": NAMESPACE,
                "uid": f"uid-{name}",
            },
            "source": {"volumeHandle": volume},
            "deletionPolicy": "Delete",
            "driver": DRIVER_NAME,
            "sourceVolumeMode": "Filesystem",
        },
    }  # fmt: skip


def untouched(cluster: EmulatedCluster, name: str) -> bool:
    found = content(cluster, name)
    assert found is not None
    return field_managers(found) <= {(CONTROLLER, None), (CONTROLLER, "status")} and not (
        events_for(cluster, found)
    )


async def test_a_member_content_is_left_to_the_snapshot_controller(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    socket_path: pathlib.Path,
    calls: Calls,
    kcm: object,
) -> None:
    pv = await source_claim(cluster, operator)
    volume = pv["spec"]["csi"]["volumeHandle"]
    handle = await driver_snapshot(socket_path, volume, "member")
    name = "snapcontent-member"
    cluster.create("volumesnapshotcontents", member_content(name, volume), manager=CONTROLLER)
    # A witness made after the member: once the operator has made it ready, it has seen the
    # member too (one watch, in order).
    witness = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": "witness"},
        "spec": {
            "driver": DRIVER_NAME, "deletionPolicy": "Retain", "source": {"snapshotHandle": handle},
            "volumeSnapshotRef": {"name": "w", "namespace": NAMESPACE},
        },
    }  # fmt: skip
    cluster.create("volumesnapshotcontents", witness)
    await until(lambda: (content(cluster, "witness") or {}).get("status", {}).get("readyToUse"))

    # Between the snapshot-controller's create and its status write: nothing to do.
    await assert_stays(lambda: untouched(cluster, name), duration=1.0, what="member written")
    status = {
        "snapshotHandle": handle, "volumeGroupSnapshotHandle": GROUP_HANDLE,
        "readyToUse": True, "restoreSize": 1024**2, "creationTime": 1_700_000_000_000_000_000,
    }  # fmt: skip
    cluster.patch(
        "volumesnapshotcontents", None, name, {"status": status},
        subresource="status", manager=CONTROLLER,
    )  # fmt: skip
    await assert_stays(lambda: untouched(cluster, name), duration=0.5, what="member written")
    assert (content(cluster, name) or {})["status"] == status
    assert calls.count("CreateSnapshot") == 1  # the test's own, above


async def test_a_member_that_is_not_ready_is_polled_with_its_annotated_secret(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    socket_path: pathlib.Path,
    calls: Calls,
    secrets_seen: SecretsSeen,
    kcm: object,
) -> None:
    pv = await source_claim(cluster, operator)
    volume = pv["spec"]["csi"]["volumeHandle"]
    handle = await driver_snapshot(socket_path, volume, "member")
    make_secret(cluster, "group-creds", {"token": "g-s3cr3t"})
    secret = {
        names.ANN_SNAPSHOT_DELETION_SECRET_NAME: "group-creds",
        names.ANN_SNAPSHOT_DELETION_SECRET_NAMESPACE: NAMESPACE,
    }
    name = "snapcontent-member"
    body = {
        **member_content(name, volume, annotations=secret),
        "status": {"snapshotHandle": handle, "volumeGroupSnapshotHandle": GROUP_HANDLE,
                   "readyToUse": False},
    }  # fmt: skip
    cluster.create("volumesnapshotcontents", body, manager=CONTROLLER)
    cluster.patch(
        "volumesnapshotcontents", None, name, {"status": body["status"]},
        subresource="status", manager=CONTROLLER,
    )  # fmt: skip

    def ready() -> Body | None:
        found = content(cluster, name)
        return found if (found or {}).get("status", {}).get("readyToUse") else None

    found: Body = await until(ready)
    assert found["status"]["snapshotHandle"] == handle
    assert found["status"]["volumeGroupSnapshotHandle"] == GROUP_HANDLE
    assert found["status"]["restoreSize"] == 1024**2
    assert ("GetSnapshot", {"token": "g-s3cr3t"}) in secrets_seen
    assert calls.count("CreateSnapshot") == 1  # the test's own, above
    assert events_for(cluster, found) == []
