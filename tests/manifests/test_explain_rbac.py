"""manifests/explain: the read-only ClusterRole for `kopf-csi explain`, against what explain asks.

explain runs as a process, as a user in the role's group, against an emulated API that
authorizes with the rendered manifests/explain, over objects that take every path of its
reading (a default class, a selected node, a data source of each kind, secrets, capacity, a
bound claim, an unbound snapshot (its class), and each other kind). Then: no request was
refused, every granted permission decided some request, and the role grants only get and list.
"""

from __future__ import annotations

import pathlib

from kopf_csi.testing.authorization import Authorizer, User
from kopf_csi.testing.emulator import EmulatedCluster

from ..explain.conftest import run_explain
from .rendering import MANIFESTS, find, render

DRIVER = "hostpath.csi.kopf.dev"
EXPLAINER = User("alice", frozenset({"kopf-csi:explain", "system:authenticated"}))


def _objects(cluster: EmulatedCluster) -> list[str]:
    """Objects on every path of explain's reading; the targets to explain."""

    def make(
        resource: str, body: dict[str, object], status: dict[str, object] | None = None
    ) -> None:
        created = cluster.create(resource, body)
        if status is not None:
            meta = created["metadata"]
            cluster.patch(resource, meta.get("namespace"), meta["name"], {"status": status},
                          subresource="status")  # fmt: skip

    def claim(name: str, spec: dict[str, object], **meta: object) -> None:
        body = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}
        metadata = {"name": name, "namespace": "default", **meta}
        make("persistentvolumeclaims", {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": metadata, "spec": {**body, **spec}})  # fmt: skip

    secret_parameters = {
        "csi.storage.k8s.io/provisioner-secret-name": "creds",
        "csi.storage.k8s.io/provisioner-secret-namespace": "default",
    }
    make("storageclasses", {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": "std", "annotations": {
             "storageclass.kubernetes.io/is-default-class": "true"}},
         "provisioner": DRIVER, "parameters": secret_parameters})  # fmt: skip
    make("storageclasses", {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": "wffc"}, "provisioner": DRIVER,
         "volumeBindingMode": "WaitForFirstConsumer"})  # fmt: skip
    make("csidrivers", {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
         "metadata": {"name": DRIVER}, "spec": {"storageCapacity": True}})  # fmt: skip
    make("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})
    make("csinodes", {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
         "metadata": {"name": "node-1"}, "spec": {"drivers": []}})  # fmt: skip
    claim("origin", {"storageClassName": "wffc"})
    claim("plain", {"dataSource": {"kind": "PersistentVolumeClaim", "name": "origin"}})
    claim("placed", {"storageClassName": "wffc", "dataSource": {
        "kind": "VolumeSnapshot", "name": "snap", "apiGroup": "snapshot.storage.k8s.io"}},
        annotations={"volume.kubernetes.io/selected-node": "node-1"})  # fmt: skip
    make("persistentvolumes", {"apiVersion": "v1", "kind": "PersistentVolume",
         "metadata": {"name": "pv-1"}, "spec": {
             "capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteOnce"],
             "claimRef": {"namespace": "default", "name": "bound"},
             "csi": {"driver": DRIVER, "volumeHandle": "v1"}}},
         {"phase": "Bound"})  # fmt: skip
    claim("bound", {"storageClassName": "std", "volumeName": "pv-1"})
    cluster.patch("persistentvolumeclaims", "default", "bound", {"status": {"phase": "Bound"}},
                  subresource="status")  # fmt: skip
    make("volumeattachments", {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
         "metadata": {"name": "va-1"}, "spec": {"attacher": DRIVER, "nodeName": "node-1",
         "source": {"persistentVolumeName": "pv-1"}}})  # fmt: skip
    make("volumesnapshots", {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
         "metadata": {"name": "snap", "namespace": "default"},
         "spec": {"source": {"persistentVolumeClaimName": "bound"}}},
         {"boundVolumeSnapshotContentName": "content-1", "readyToUse": False})  # fmt: skip
    make("volumesnapshots", {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
         "metadata": {"name": "unbound", "namespace": "default"},
         "spec": {"source": {"persistentVolumeClaimName": "bound"}}})  # fmt: skip
    make("volumesnapshotcontents", {"apiVersion": "snapshot.storage.k8s.io/v1",
         "kind": "VolumeSnapshotContent", "metadata": {"name": "content-1"},
         "spec": {"driver": DRIVER, "deletionPolicy": "Delete",
                  "source": {"volumeHandle": "v1"},
                  "volumeSnapshotRef": {"name": "snap", "namespace": "default"}}})  # fmt: skip
    make("volumegroupsnapshots", {"apiVersion": "groupsnapshot.storage.k8s.io/v1",
         "kind": "VolumeGroupSnapshot", "metadata": {"name": "group", "namespace": "default"},
         "spec": {"source": {"selector": {"matchLabels": {"app": "x"}}}}},
         {"boundVolumeGroupSnapshotContentName": "group-content"})  # fmt: skip
    return [
        "pvc/default/plain", "pvc/default/placed", "pvc/default/bound", "pv/pv-1", "va/va-1",
        "vs/default/snap", "vs/default/unbound", "vsc/content-1", "vgs/default/group",
    ]  # fmt: skip


async def test_explain_needs_exactly_the_role(tmp_path: pathlib.Path) -> None:
    objects = render(MANIFESTS / "explain")
    (role,) = find(objects, "ClusterRole", "kopf-csi-explain")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert {verb for _, _, verb in granted} <= {"get", "list"}  # read-only
    authorizer = Authorizer(objects)
    async with EmulatedCluster(authorizer=authorizer) as cluster:
        targets = _objects(cluster)
        token = authorizer.login(EXPLAINER)
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig", token=token)
        for target in targets:
            run = await run_explain(target, "--kubeconfig", str(kubeconfig))
            assert run.code in (0, 1), (target, run.stderr)
            assert "cannot be read" not in run.stdout, run
            assert "cannot read" not in run.stdout, run
    assert authorizer.denials == []
    used = {
        (access.group, access.rbac_resource, access.verb)
        for (binding, access), _ in authorizer.uses.items()
        if binding == "ClusterRoleBinding/kopf-csi-explain" and not isinstance(access, str)
    }
    assert used == granted, (sorted(granted - used), sorted(used - granted))
