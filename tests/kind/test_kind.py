"""End to end on kind: the image and manifests/kind, with the cluster's own controllers.

- the operator is up: its pod ready (readiness probe on /readyz), /healthz answers, and it
  holds the sidecars' Leases (--leader-election);
- an Immediate claim gets a PV of our driver, which is deleted with the claim;
- a WaitForFirstConsumer claim used by a Pod: provisioned on the Pod's node, attached (a
  VolumeAttachment marked attached), mounted: the Pod writes a file;
- a VolumeSnapshot of it becomes ready (snapshot-controller + our snapshotter); a claim
  restored from it holds the file;
- deleting everything deletes the PVs, the snapshot content, and the volumes.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from .conftest import Kubectl

pytestmark = pytest.mark.kind

DRIVER = "hostpath.csi.kopf.dev"


def claim(name: str, storage_class: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                 "resources": {"requests": {"storage": "16Mi"}}, **spec},
    }  # fmt: skip


def pod(name: str, claim_name: str, script: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "app", "image": "busybox:1.36", "command": ["sh", "-c", script],
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}],
        },
    }  # fmt: skip


def eventually(check: Any, *, timeout: float = 180, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what or check}")
        time.sleep(1)
    return result


def test_the_operator_is_up_and_leads(cluster: Kubectl) -> None:
    cluster("-n", "kopf-csi", "rollout", "status", "deployment/kopf-csi", "--timeout=120s")
    pods = cluster.get("-n", "kopf-csi", "pods", "-l", "app.kubernetes.io/name=kopf-csi")
    (running,) = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    name = running["metadata"]["name"]
    health = cluster("get", "--raw", f"/api/v1/namespaces/kopf-csi/pods/{name}:8080/proxy/healthz")
    assert "ok" in health or "passed" in health
    leases = cluster.get("-n", "kopf-csi", "leases")["items"]
    holders = {lease["spec"].get("holderIdentity") for lease in leases}
    assert leases
    assert holders == {name}


def test_immediate_claim_is_provisioned_and_deleted(kubectl: Kubectl) -> None:
    kubectl.apply(claim("data", "kopf-csi-immediate"))
    kubectl.wait("pvc/data", "jsonpath={.status.phase}=Bound")
    volume = kubectl.get("pvc", "data")["spec"]["volumeName"]
    pv = kubectl.get("pv", volume)
    assert pv["spec"]["csi"]["driver"] == DRIVER
    kubectl("delete", "pvc", "data", "--wait=true")
    kubectl.wait(f"pv/{volume}", "delete")


def test_pod_snapshot_restore_delete(kubectl: Kubectl, cluster: Kubectl) -> None:
    kubectl.apply(
        claim("data", "kopf-csi-wffc"),
        pod("writer", "data", "echo hello > /data/greeting && sync"),
    )
    kubectl.wait("pod/writer", "jsonpath={.status.phase}=Succeeded", timeout=300)
    volume = kubectl.get("pvc", "data")["spec"]["volumeName"]
    attachments = cluster.get("volumeattachments")["items"]
    assert any(
        va["spec"]["source"].get("persistentVolumeName") == volume
        and va["spec"]["attacher"] == DRIVER
        for va in attachments
    )
    kubectl("delete", "pod", "writer", "--wait=true")

    kubectl.apply({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
        "metadata": {"name": "snap"},
        "spec": {"volumeSnapshotClassName": "kopf-csi-snapshots",
                 "source": {"persistentVolumeClaimName": "data"}},
    })  # fmt: skip
    kubectl.wait("volumesnapshot/snap", "jsonpath={.status.readyToUse}=true")
    content = kubectl.get("volumesnapshot", "snap")["status"]["boundVolumeSnapshotContentName"]

    source = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap"}
    restored = claim("restored", "kopf-csi-wffc", dataSource=source)
    kubectl.apply(restored, pod("reader", "restored", "cat /data/greeting"))
    kubectl.wait("pod/reader", "jsonpath={.status.phase}=Succeeded", timeout=300)
    assert kubectl("logs", "reader").strip() == "hello"

    volumes = [volume, kubectl.get("pvc", "restored")["spec"]["volumeName"]]
    kubectl("delete", "pod", "reader", "--wait=true")
    kubectl("delete", "volumesnapshot", "snap", "--wait=true")
    eventually(
        lambda: content not in cluster("get", "volumesnapshotcontents", "-o", "name"),
        what=f"content {content} deleted",
    )
    kubectl("delete", "pvc", "data", "restored", "--wait=true")
    for name in volumes:
        cluster.wait(f"pv/{name}", "delete")
