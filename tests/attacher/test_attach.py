"""Attach and detach end to end: kopf, the emulated API and the reference driver.

We test these aspects:
- a new VolumeAttachment is published: the VA gets our finalizer and the node-ID annotation,
  the PV our finalizer, the driver the attachment, the status `attached` and the publish
  context as `attachmentMetadata`, with no `attachError`;
- a pod scheduled to a node makes the controller-manager create `csi-<sha256>`, which we attach;
  deleting the pod detaches it and the VA is gone;
- a deleted VA is unpublished, loses our finalizer and disappears; the PV keeps its finalizer;
- readonly reaches the driver only when it has PUBLISH_READONLY;
- a block PV with an fsType and mount options publishes the one capability they make;
- controller-publish secrets reach ControllerPublish and ControllerUnpublish; a missing secret
  is an `attachError` (no gRPC code) until the secret appears.
"""

from __future__ import annotations

import base64
import pathlib

import pytest

from kopf_csi.driver import Driver, Features, SecretsPolicy
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import FINALIZER_PV_PROTECTION as PV_PROTECTION
from kopf_csi.testing.kcm import ControllerManager, attachment_name
from kopf_csi.testing.operator import OperatorThread

from ..conftest import DRIVER_NAME, NODE, field_managers
from .helpers import (
    FINALIZER,
    NODE_ID_ANNOTATION,
    attached_volume,
    attachment,
    seed_node,
    status,
    until,
    va,
)


async def test_a_new_attachment_is_published(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    seed_node(cluster, node_id="node-1-id")
    handle, _ = await attached_volume(
        cluster, socket_path, "pv-1", volumeAttributes={"tier": "gold"}
    )
    cluster.create("volumeattachments", attachment("va-1", "pv-1"))

    await until(lambda: status(cluster, "va-1").get("attached"))
    attached = va(cluster, "va-1")
    assert attached["metadata"]["finalizers"] == [FINALIZER]
    assert attached["metadata"]["annotations"] == {NODE_ID_ANNOTATION: "node-1-id"}
    device = str(driver.backend.storage.volume_path(handle))
    assert attached["status"] == {"attached": True, "attachmentMetadata": {"devicePath": device}}
    pv = cluster.get("persistentvolumes", None, "pv-1") or {}
    assert pv["metadata"]["finalizers"] == [PV_PROTECTION, FINALIZER]
    # Written as csi-attacher, as the Go sidecar: the VA's metadata and status, the PV's finalizer.
    assert {("csi-attacher", None), ("csi-attacher", "status")} <= field_managers(attached)
    assert ("csi-attacher", None) in field_managers(pv)
    published = driver.state.volumes[handle].attachments["node-1-id"]
    assert not published.readonly
    assert published.capability.access_mode == "SINGLE_NODE_MULTI_WRITER"  # the driver has SNMW
    assert not published.capability.block


async def test_a_pod_on_a_node_is_attached_and_detached_through_the_controller_manager(
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    driver: Driver,
    socket_path: pathlib.Path,
    operator: OperatorThread,
) -> None:
    seed_node(cluster)
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "default"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": "pv-1",
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }
    cluster.create("persistentvolumeclaims", claim)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "app", "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }
    cluster.create("pods", pod)
    name = attachment_name(handle, DRIVER_NAME, NODE)

    await until(lambda: status(cluster, name).get("attached"))
    assert NODE in driver.state.volumes[handle].attachments

    cluster.delete("pods", "default", "app")
    await until(lambda: not va(cluster, name))
    assert not driver.state.volumes[handle].attachments


async def test_a_deleted_attachment_is_detached(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    seed_node(cluster)
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    cluster.create("volumeattachments", attachment("va-1", "pv-1"))
    await until(lambda: status(cluster, "va-1").get("attached"))

    cluster.delete("volumeattachments", None, "va-1")
    await until(lambda: not va(cluster, "va-1"))
    assert not driver.state.volumes[handle].attachments
    pv = cluster.get("persistentvolumes", None, "pv-1") or {}
    assert pv["metadata"]["finalizers"] == [PV_PROTECTION, FINALIZER]  # the PV is not being deleted


async def test_a_detach_keeps_other_finalizers(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    seed_node(cluster)
    handle, _ = await attached_volume(cluster, socket_path, "pv-1")
    cluster.create("volumeattachments", attachment("va-1", "pv-1", finalizers=["other/keep"]))
    await until(lambda: status(cluster, "va-1").get("attached"))
    assert va(cluster, "va-1")["metadata"]["finalizers"] == ["other/keep", FINALIZER]

    cluster.delete("volumeattachments", None, "va-1")
    await until(lambda: va(cluster, "va-1")["metadata"]["finalizers"] == ["other/keep"])
    await until(lambda: status(cluster, "va-1") == {"attached": False})
    assert not driver.state.volumes[handle].attachments


@pytest.mark.parametrize(
    ("driver_options", "readonly"),
    [
        pytest.param({}, True, id="publish-readonly"),
        pytest.param(
            {"features": Features(attach=True, publish_readonly=False)}, False, id="no-capability"
        ),
    ],
    indirect=["driver_options"],
)
async def test_readonly_reaches_the_driver_only_with_publish_readonly(
    cluster: EmulatedCluster,
    driver: Driver,
    socket_path: pathlib.Path,
    operator: OperatorThread,
    readonly: bool,
) -> None:
    seed_node(cluster)
    handle, _ = await attached_volume(
        cluster, socket_path, "pv-1", readOnly=True, access_modes=["ReadOnlyMany"]
    )
    cluster.create("volumeattachments", attachment("va-1", "pv-1"))
    await until(lambda: status(cluster, "va-1").get("attached"))
    published = driver.state.volumes[handle].attachments[NODE]
    assert published.readonly is readonly
    assert published.capability.access_mode == "MULTI_NODE_READER_ONLY"


async def test_a_block_volume_publishes_one_block_capability(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    seed_node(cluster)
    handle, _ = await attached_volume(
        cluster, socket_path, "pv-1", volumeMode="Block", access_modes=["ReadWriteOncePod"]
    )
    cluster.create("volumeattachments", attachment("va-1", "pv-1"))
    await until(lambda: status(cluster, "va-1").get("attached"))
    published = driver.state.volumes[handle].attachments[NODE]
    assert published.capability.block
    assert published.capability.access_mode == "SINGLE_NODE_SINGLE_WRITER"


SECRETS = SecretsPolicy(
    required_for=frozenset({"ControllerPublishVolume", "ControllerUnpublishVolume"}),
    expected={"user": "admin"},
)


@pytest.mark.parametrize("driver_options", [{"secrets": SECRETS}], indirect=True)
async def test_controller_publish_secrets_reach_publish_and_unpublish(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    seed_node(cluster)
    ref = {"name": "creds", "namespace": "default"}
    handle, _ = await attached_volume(cluster, socket_path, "pv-1", controllerPublishSecretRef=ref)
    cluster.create("volumeattachments", attachment("va-1", "pv-1"))

    message = 'failed to load secret "default/creds": secrets "creds" not found'
    # (The PV may reach the cache after the VA: "not found" first, then the secret's error.)
    error = await until(
        lambda: (
            (status(cluster, "va-1").get("attachError") or {}).get("message") == message
            and status(cluster, "va-1")["attachError"]
        )
    )
    assert "errorCode" not in error  # not a gRPC error
    assert not va(cluster, "va-1")["metadata"].get("finalizers")  # checked before the finalizer

    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "default"},
        "data": {"user": base64.b64encode(b"admin").decode()},
    }
    cluster.create("secrets", secret)
    await until(lambda: status(cluster, "va-1").get("attached"), timeout=5)
    assert "attachError" not in status(cluster, "va-1")
    assert NODE in driver.state.volumes[handle].attachments

    cluster.delete("volumeattachments", None, "va-1")
    await until(lambda: not va(cluster, "va-1"))
    assert not driver.state.volumes[handle].attachments


async def test_attachments_of_one_volume_on_many_nodes_race_for_its_finalizer_quietly(
    cluster: EmulatedCluster, driver: Driver, socket_path: pathlib.Path, operator: OperatorThread
) -> None:
    """Each VA adds our finalizer to the same PV with a guarded patch; the losers of the race
    re-read the PV and try again at once, so none shows an attachError for it."""
    nodes = [f"node-{index}" for index in range(1, 6)]
    for node in nodes:
        seed_node(cluster, node=node)
    await attached_volume(cluster, socket_path, "pv-1")
    cluster.patch("persistentvolumes", None, "pv-1", {"spec": {"accessModes": ["ReadWriteMany"]}})
    known = operator.memo.caches.volumes  # as when the KCM creates VAs: the PV is known
    await until(
        lambda: (known.get("pv-1") or {}).get("spec", {}).get("accessModes") == ["ReadWriteMany"]
    )
    with cluster.subscribe("volumeattachments") as changes:
        for index, node in enumerate(nodes):
            cluster.create("volumeattachments", attachment(f"va-{index}", "pv-1", node=node))
        names = [f"va-{index}" for index in range(len(nodes))]
        await until(lambda: all(status(cluster, name).get("attached") for name in names))
        errors = []
        while changes.pending:
            for change in await changes.batch():
                error = (change.object.get("status") or {}).get("attachError")
                if error:
                    errors.append(error["message"])
    assert errors == []  # not even for a moment
    pv = cluster.get("persistentvolumes", None, "pv-1") or {}
    assert pv["metadata"]["finalizers"] == [PV_PROTECTION, FINALIZER]
