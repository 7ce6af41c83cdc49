"""kubectl's tables (``as=Table``), held to a real kube-apiserver v1.36.2's (data/tables.json).

We test these aspects:
- the column definitions of claims, PVs, VolumeAttachments and StorageClasses are the real
  ones, and the VolumeSnapshotClass's too but for the one description our CRD words itself;
- the cells and row objects made from the recorded objects are the recorded ones (the age
  computed at a fixed time);
- the snapshot and group snapshot kinds' columns are their CRDs' additionalPrinterColumns
  (manifests/crds), converted as apiextensions-apiserver does: null when missing, an age for a
  date, typed booleans and integers;
- core events: printEvent's columns and wide cells (last and first seen, the series' count, the
  new API's singletons, `kind/name` in lower case, the source);
- the printers' details: Terminating, `(default)`, the access modes' order, canonical
  quantities, HumanDuration's steps;
- over HTTP: a LIST and a GET asked as a Table (includeObject None and Object too, a paginated
  LIST with its continue token), and a watch (the column definitions in the first event
  only); plain JSON is unchanged.
"""

from __future__ import annotations

import datetime
import json
import pathlib
from typing import Any

import aiohttp
import pytest

from kopf_csi.testing import tables
from kopf_csi.testing.emulator import EmulatedCluster

DATA = pathlib.Path(__file__).parent / "data"
REAL = json.loads((DATA / "tables.json").read_text())
NOW = datetime.datetime(2026, 12, 2, 5, 6, 30, tzinfo=datetime.UTC)
CLAIMS = "/api/v1/namespaces/bodies2/persistentvolumeclaims"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def recorded(path: str, index: int = 0) -> dict[str, Any]:
    """The metadata of a recorded row's object."""
    metadata: dict[str, Any] = REAL[path]["rows"][index]["object"]["metadata"]
    return metadata


OBJECTS: dict[str, list[dict[str, Any]]] = {
    CLAIMS: [
        {
            "metadata": recorded(CLAIMS),
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Mi"}},
                "storageClassName": "csi-hostpath-sc",
                "volumeMode": "Filesystem",
                "volumeName": "pvc-94d0ac59-0578-4c99-86c9-145e7b09a294",
            },
            "status": {
                "phase": "Bound",
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Mi"},
            },
        }
    ],
    "/api/v1/persistentvolumes": [
        {
            "metadata": recorded("/api/v1/persistentvolumes"),
            "spec": {
                "capacity": {"storage": "1Mi"},
                "accessModes": ["ReadWriteOnce"],
                "claimRef": {
                    "kind": "PersistentVolumeClaim",
                    "namespace": "bodies2",
                    "name": "data",
                },
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": "csi-hostpath-sc",
                "volumeMode": "Filesystem",
            },
            "status": {"phase": "Bound"},
        }
    ],
    "/apis/storage.k8s.io/v1/volumeattachments": [],
    "/apis/storage.k8s.io/v1/storageclasses": [
        {
            "metadata": recorded("/apis/storage.k8s.io/v1/storageclasses", index),
            "provisioner": "hostpath.csi.k8s.io",
            "reclaimPolicy": "Delete",
            "volumeBindingMode": mode,
            **({"allowVolumeExpansion": True} if index == 0 else {}),
        }
        for index, mode in enumerate(("Immediate", "WaitForFirstConsumer"))
    ],
    "/apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses": [
        {
            "metadata": recorded("/apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses"),
            "driver": "hostpath.csi.k8s.io",
            "deletionPolicy": "Delete",
        }
    ],
}


def _resource(path: str) -> tuple[str, str]:
    parts = path.strip("/").split("/")
    return ("" if parts[0] == "api" else parts[1]), parts[-1]


@pytest.mark.parametrize("path", list(REAL))
def test_tables_as_the_real_server_makes_them(path: str) -> None:
    real = REAL[path]
    ours = tables.table(*_resource(path), OBJECTS[path], metadata=real["metadata"], now=NOW)
    if path.endswith("volumesnapshotclasses"):
        (policy,) = [c for c in ours["columnDefinitions"] if c["name"] == "DeletionPolicy"]
        assert policy["description"] == (  # manifests/crds words its own
            "What happens to a VolumeSnapshotContent when its VolumeSnapshot is deleted."
        )
        policy["description"] = next(
            c["description"] for c in real["columnDefinitions"] if c["name"] == "DeletionPolicy"
        )
    assert ours == real


CRD_KINDS = sorted(key for key in tables.COLUMNS if key[0].endswith("snapshot.storage.k8s.io"))


def test_every_crd_has_its_columns(crds: list[tuple[Any, Any]]) -> None:
    assert sorted((crd["spec"]["group"], crd["spec"]["names"]["plural"]) for crd, _ in crds) == (
        CRD_KINDS
    )


@pytest.mark.parametrize("key", CRD_KINDS)
def test_crd_columns_are_the_manifests(key: tuple[str, str], crds: list[tuple[Any, Any]]) -> None:
    (columns,) = [
        version["additionalPrinterColumns"]
        for crd, version in crds
        if (crd["spec"]["group"], crd["spec"]["names"]["plural"]) == key
    ]
    wanted = [
        {
            "name": column["name"],
            "type": column["type"],
            "format": column.get("format", ""),
            "description": column.get("description")
            or f"Custom resource definition column (in JSONPath format): {column['jsonPath']}",
            "priority": column.get("priority", 0),
        }
        for column in columns
    ]
    ours = [column.definition() for column in tables.COLUMNS[key]]
    assert ours[0]["name"] == "Name"
    assert ours[1:] == wanted


def _cells(group: str, plural: str, obj: dict[str, Any]) -> list[Any]:
    obj = {"metadata": {"name": "x", "creationTimestamp": "2026-12-02T05:00:00Z"}, **obj}
    (row,) = tables.table(group, plural, [obj], metadata={}, now=NOW)["rows"]
    cells: list[Any] = row["cells"]
    return cells


def test_crd_cells() -> None:
    snapshot = {
        "spec": {"source": {"persistentVolumeClaimName": "data"}},
        "status": {
            "readyToUse": True,
            "restoreSize": "1Gi",
            "creationTime": "2026-12-02T05:06:00Z",
        },
    }
    assert _cells("snapshot.storage.k8s.io", "volumesnapshots", snapshot) == [
        "x", True, "data", None, "1Gi", None, None, "30s", "6m30s",
    ]  # fmt: skip
    content = {"spec": {"driver": "d", "deletionPolicy": "Retain"}, "status": {"restoreSize": 5}}
    assert _cells("snapshot.storage.k8s.io", "volumesnapshotcontents", content) == [
        "x", None, 5, "Retain", "d", None, None, None, "6m30s",
    ]  # fmt: skip
    group = {"status": {"readyToUse": False}}
    assert _cells("groupsnapshot.storage.k8s.io", "volumegroupsnapshots", group) == [
        "x", False, None, None, None, "6m30s",
    ]  # fmt: skip


def test_printer_details() -> None:
    claim = {
        "metadata": {"name": "x", "deletionTimestamp": "2026-12-02T05:06:00Z"},
        "spec": {"volumeName": "v", "storageClassName": "field"},
        "status": {
            "phase": "Bound",
            "accessModes": ["ReadWriteOncePod", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce"],
            "capacity": {"storage": "2048Mi"},
        },
    }
    claim["metadata"]["annotations"] = {"volume.beta.kubernetes.io/storage-class": "annotated"}
    assert _cells("", "persistentvolumeclaims", claim)[1:6] == [
        "Terminating", "v", "2Gi", "RWO,RWX,RWOP", "annotated",
    ]  # fmt: skip
    unbound = {"spec": {}, "status": {"phase": "Pending", "capacity": {"storage": "1Gi"}}}
    assert _cells("", "persistentvolumeclaims", unbound)[1:6] == ["Pending", "", "", "", ""]
    default = {"metadata": {"name": "gold", "annotations": {
        "storageclass.kubernetes.io/is-default-class": "true"}}, "provisioner": "p"}  # fmt: skip
    assert _cells("storage.k8s.io", "storageclasses", default)[:5] == [
        "gold (default)", "p", "Delete", "Immediate", False,
    ]  # fmt: skip
    attachment = {"spec": {"attacher": "d", "source": {"persistentVolumeName": "pv"},
                           "nodeName": "n"}}  # fmt: skip
    assert _cells("storage.k8s.io", "volumeattachments", attachment) == [
        "x", "d", "pv", "n", False, "6m30s",
    ]  # fmt: skip
    assert _cells("", "configmaps", {}) == ["x", "2026-12-02T05:00:00Z"]  # the generic table


def test_pod_cells() -> None:
    """`kubectl get pods`: printPod's row; with no kubelet a scheduled pod stays Pending."""
    definitions = tables.table("", "pods", [], metadata={})["columnDefinitions"]
    assert [(c["name"], c["priority"]) for c in definitions] == [
        ("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0), ("IP", 1),
        ("Node", 1), ("Nominated Node", 1), ("Readiness Gates", 1),
    ]  # fmt: skip
    scheduled = {
        "spec": {"nodeName": "node-1", "containers": [{"name": "app"}, {"name": "side"}]},
        "status": {"phase": "Pending"},
    }
    assert _cells("", "pods", scheduled) == [
        "x", "0/2", "Pending", 0, "6m30s", "<none>", "node-1", "<none>", "<none>",
    ]  # fmt: skip
    running = {
        "spec": {"containers": [{"name": "app"}], "readinessGates": [{"conditionType": "g"}]},
        "status": {
            "phase": "Running", "podIP": "10.0.0.7",
            "containerStatuses": [{"ready": True, "restartCount": 2}],
            "conditions": [{"type": "g", "status": "True"}],
        },
    }  # fmt: skip
    assert _cells("", "pods", running) == [
        "x", "1/1", "Running", 2, "6m30s", "10.0.0.7", "<none>", "<none>", "1/1",
    ]  # fmt: skip
    evicted = {"status": {"phase": "Failed", "reason": "Evicted"}}
    assert _cells("", "pods", evicted)[2] == "Evicted"
    leaving = {"metadata": {"name": "x", "deletionTimestamp": "2026-12-02T05:06:00Z"},
               "status": {"phase": "Running"}}  # fmt: skip
    assert _cells("", "pods", leaving)[2] == "Terminating"


def test_node_cells() -> None:
    """`kubectl get nodes`: printNode's row; a node no kubelet has reported is `Unknown`."""
    definitions = tables.table("", "nodes", [], metadata={})["columnDefinitions"]
    assert [(c["name"], c["priority"]) for c in definitions] == [
        ("Name", 0), ("Status", 0), ("Roles", 0), ("Age", 0), ("Version", 0),
        ("Internal-IP", 1), ("External-IP", 1), ("OS-Image", 1), ("Kernel-Version", 1),
        ("Container-Runtime", 1),
    ]  # fmt: skip
    created = "2026-12-02T05:00:00Z"
    bare = {"metadata": {"name": "x", "creationTimestamp": created,
                         "labels": {"kubernetes.io/hostname": "x"}}}  # fmt: skip
    assert _cells("", "nodes", bare) == [
        "x", "Unknown", "<none>", "6m30s", "", "<none>", "<none>", "<unknown>", "<unknown>",
        "<unknown>",
    ]  # fmt: skip
    reported = {
        "metadata": {"name": "x", "creationTimestamp": created, "labels": {
            "node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": ""}},
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"},
                           {"type": "Ready", "status": "True"}],
            "addresses": [{"type": "Hostname", "address": "x"},
                          {"type": "InternalIP", "address": "10.0.0.2"}],
            "nodeInfo": {"kubeletVersion": "v1.36.2", "osImage": "Debian GNU/Linux 12",
                         "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://2.1"},
        },
    }  # fmt: skip
    assert _cells("", "nodes", reported) == [
        "x", "Ready,SchedulingDisabled", "control-plane,worker", "6m30s", "v1.36.2",
        "10.0.0.2", "<none>", "Debian GNU/Linux 12", "6.1.0", "containerd://2.1",
    ]  # fmt: skip
    for status in ("False", "Unknown"):  # a node whose kubelet stopped reporting: Unknown
        not_ready = {"status": {"conditions": [{"type": "Ready", "status": status}]}}
        assert _cells("", "nodes", not_ready)[1] == "NotReady"
    legacy = {"metadata": {"name": "x", "creationTimestamp": created, "labels": {
        "kubernetes.io/role": "worker", "node-role.kubernetes.io/worker": ""}}}  # fmt: skip
    assert _cells("", "nodes", legacy)[2] == "worker"


def test_event_cells() -> None:
    """`kubectl get events`: printEvent's wide row (kubectl hides the priority-1 columns)."""
    definitions = tables.table("", "events", [], metadata={})["columnDefinitions"]
    assert [(c["name"], c["priority"]) for c in definitions] == [
        ("Last Seen", 0), ("Type", 0), ("Reason", 0), ("Object", 0), ("Subobject", 1),
        ("Source", 1), ("Message", 0), ("First Seen", 1), ("Count", 1), ("Name", 1),
    ]  # fmt: skip
    core = {  # as the Go sidecars' recorder posts one, repeated
        "involvedObject": {"kind": "PersistentVolumeClaim", "name": "data", "namespace": "ns"},
        "reason": "ProvisioningFailed", "type": "Warning", "message": " no space \n",
        "source": {"component": "csi-provisioner", "host": "node-1"},
        "firstTimestamp": "2026-12-02T05:00:00Z", "lastTimestamp": "2026-12-02T05:06:00Z",
        "count": 3,
    }  # fmt: skip
    assert _cells("", "events", core) == [
        "30s", "Warning", "ProvisioningFailed", "persistentvolumeclaim/data", "",
        "csi-provisioner, node-1", "no space", "6m30s", 3, "x",
    ]  # fmt: skip
    singleton = {  # events.k8s.io/v1's: eventTime, the reporting controller, no count
        "involvedObject": {"kind": "Pod", "name": "app", "fieldPath": "spec.containers{app}"},
        "reason": "Scheduled", "type": "Normal", "message": "assigned",
        "eventTime": "2026-12-02T05:06:20.123456Z", "reportingComponent": "default-scheduler",
        "reportingInstance": "",
    }  # fmt: skip
    assert _cells("", "events", singleton) == [
        "9s", "Normal", "Scheduled", "pod/app", "spec.containers{app}", "default-scheduler",
        "assigned", "9s", 1, "x",  # 9.88 s: HumanDuration truncates
    ]  # fmt: skip
    series = {
        **singleton,
        "involvedObject": {"kind": "Node"},
        "series": {"count": 7, "lastObservedTime": "2026-12-02T05:06:29.000001Z"},
    }
    assert _cells("", "events", series)[:4] == ["0s", "Normal", "Scheduled", "node"]
    assert _cells("", "events", series)[8] == 7
    assert _cells("", "events", {})[:4] == ["<unknown>", "", "", ""]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (599, "9m59s"),
     (600, "10m"), (10799, "179m"), (10800, "3h"), (11100, "3h5m"), (28800, "8h"),
     (172800, "2d"), (180000, "2d2h"), (691200, "8d"), (63072000, "2y"), (63158400, "2y1d"),
     (252288000, "8y")],
)  # fmt: skip
def test_human_duration(seconds: int, text: str) -> None:
    assert tables.human_duration(seconds) == text


@pytest.mark.parametrize(
    ("given", "canonical"),
    [("1Mi", "1Mi"), ("1024Mi", "1Gi"), ("1536Mi", "1536Mi"), ("0.5Gi", "512Mi"),
     ("1000M", "1G"), ("1.5G", "1500M"), ("2048", "2048"), ("500m", "500m"), ("0", "0")],
)  # fmt: skip
def test_capacity_is_canonical(given: str, canonical: str) -> None:
    volume = {"spec": {"capacity": {"storage": given}}}
    assert _cells("", "persistentvolumes", volume)[1] == canonical


async def test_served_as_a_table(cluster: EmulatedCluster) -> None:
    for name in ("a", "b", "c"):
        cluster.create("configmaps", {"metadata": {"name": name, "namespace": "default"}})
    claim = cluster.create(
        "persistentvolumeclaims", {"metadata": {"name": "data", "namespace": "default"}}
    )
    claims = "/api/v1/namespaces/default/persistentvolumeclaims"
    async with aiohttp.ClientSession(cluster.url, headers={"Accept": TABLE}) as session:

        async def get(path: str, **params: str) -> Any:
            async with session.get(path, params=params) as response:
                assert response.status == 200
                return await response.json()

        listed = await get(claims)
        one = await get(f"{claims}/data", includeObject="Object")
        bare = await get(claims, includeObject="None")
        page = await get("/api/v1/configmaps", limit="2")
        rest = await get(
            "/api/v1/configmaps", limit="2", **{"continue": page["metadata"]["continue"]}
        )
        async with session.get(claims, headers={"Accept": "application/json"}) as response:
            plain = await response.json()
    assert listed["kind"] == "Table"
    assert listed["metadata"] == {"resourceVersion": str(cluster.resource_version)}
    (row,) = listed["rows"]
    assert row["cells"][:3] == ["data", "Pending", ""]
    assert row["object"] == {
        "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": claim["metadata"],
    }  # fmt: skip
    assert one["metadata"] == {"resourceVersion": claim["metadata"]["resourceVersion"]}
    assert one["rows"][0]["object"] == claim
    assert "object" not in bare["rows"][0]
    assert [r["cells"][0] for r in page["rows"]] == ["a", "b"]
    assert page["metadata"]["remainingItemCount"] == 1
    assert [r["cells"][0] for r in rest["rows"]] == ["c"]
    assert plain["kind"] == "PersistentVolumeClaimList"


async def test_watched_as_a_table(cluster: EmulatedCluster) -> None:
    cluster.create("configmaps", {"metadata": {"name": "a", "namespace": "default"}})
    async with aiohttp.ClientSession(cluster.url, headers={"Accept": TABLE}) as session:
        path = "/api/v1/namespaces/default/configmaps"
        async with session.get(path, params={"watch": "true", "timeoutSeconds": "5"}) as response:
            first = json.loads(await response.content.readline())
            cluster.create("configmaps", {"metadata": {"name": "b", "namespace": "default"}})
            second = json.loads(await response.content.readline())
    assert (first["type"], second["type"]) == ("ADDED", "ADDED")
    assert first["object"]["kind"] == second["object"]["kind"] == "Table"
    assert [c["name"] for c in first["object"]["columnDefinitions"]] == ["Name", "Created At"]
    assert second["object"]["columnDefinitions"] is None  # the header once, as the real server
    assert second["object"]["rows"][0]["cells"][0] == "b"
    created = cluster.get("configmaps", "default", "b")
    assert created is not None
    assert second["object"]["metadata"] == {
        "resourceVersion": created["metadata"]["resourceVersion"]
    }
