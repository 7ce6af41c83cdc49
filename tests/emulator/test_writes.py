"""Writes over real HTTP with kubernetes-asyncio: the metadata and error semantics of the API.

We test these aspects: server-owned metadata (uid, creationTimestamp, resourceVersion,
generation bumped by spec changes only); 409 on a stale resourceVersion (PUT and merge patch)
and on a duplicate create; the same bare 422 for every JSON patch that cannot be applied
(a failed ``test`` included), byte for byte as the real server; 404 with a Status body;
generateName; the spec/status split; finalizers and deletionTimestamp; no-op writes; the
strategic-merge patch kubernetes-asyncio sends by default; PUT replaces (what leases need);
``metadata.managedFields``: one entry per manager and subresource, the manager taken from
``fieldManager`` or else the User-Agent up to its first ``/``; the storage-protection
finalizers every new claim and volume gets from admission; every write attempted, over HTTP
or the Python API, is counted by field manager, verb and resource; with `write_latency`, an
HTTP write waits that long (a real server's etcd round trip) while reads and other clients
are served meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from kopf_csi.testing.emulator import EmulatedCluster, StatusError
from kopf_csi.testing.pytest_plugin import until

PVCS = "persistentvolumeclaims"


def claim(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"], **spec}}


def status_of(error: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(error.body)
    return body


async def test_create_sets_server_metadata(core: client.CoreV1Api) -> None:
    created = await core.create_namespaced_persistent_volume_claim("default", claim("a"))
    meta = created.metadata
    assert meta.uid
    assert meta.creation_timestamp is not None
    assert meta.resource_version.isdigit()
    assert meta.generation == 1
    assert meta.namespace == "default"
    assert created.status.phase == "Pending"  # defaulted; status is not writable on create


async def test_stale_resource_version_is_409(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    await core.create_namespaced_persistent_volume_claim("default", claim("a"))
    stale = await core.read_namespaced_persistent_volume_claim("a", "default")
    cluster.patch(PVCS, "default", "a", {"metadata": {"labels": {"changed": "meanwhile"}}})

    stale.metadata.labels = {"mine": "yes"}
    with pytest.raises(ApiException) as error:
        await core.replace_namespaced_persistent_volume_claim("a", "default", stale)
    assert error.value.status == 409
    assert status_of(error.value) == {  # the real server's body, byte for byte
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Operation cannot be fulfilled on persistentvolumeclaims "a": the object has '
                   "been modified; please apply your changes to the latest version and try again",
        "reason": "Conflict", "details": {"name": "a", "kind": "persistentvolumeclaims"},
        "code": 409,
    }  # fmt: skip

    patch = {"metadata": {"resourceVersion": stale.metadata.resource_version, "labels": {"x": "y"}}}
    with pytest.raises(ApiException) as error:
        await core.patch_namespaced_persistent_volume_claim(
            "a", "default", patch, _content_type="application/merge-patch+json"
        )
    assert error.value.status == 409

    fresh = await core.read_namespaced_persistent_volume_claim("a", "default")
    fresh.metadata.labels = {"mine": "yes"}
    replaced = await core.replace_namespaced_persistent_volume_claim("a", "default", fresh)
    assert replaced.metadata.labels == {"mine": "yes"}  # PUT replaces, labels included
    assert int(replaced.metadata.resource_version) > int(fresh.metadata.resource_version)


async def test_duplicate_create_is_409_and_missing_is_404(core: client.CoreV1Api) -> None:
    await core.create_namespaced_persistent_volume_claim("default", claim("a"))
    with pytest.raises(ApiException) as error:
        await core.create_namespaced_persistent_volume_claim("default", claim("a"))
    assert error.value.status == 409
    assert status_of(error.value)["reason"] == "AlreadyExists"

    with pytest.raises(ApiException) as error:
        await core.read_namespaced_persistent_volume_claim("missing", "default")
    status = status_of(error.value)
    assert error.value.status == 404
    assert (status["kind"], status["status"], status["reason"], status["code"]) == (
        "Status",
        "Failure",
        "NotFound",
        404,
    )
    assert status["message"] == 'persistentvolumeclaims "missing" not found'


# Byte for byte what kube-apiserver v1.36.2 answers for every JSON patch it cannot apply
# (../shared/reference/real-server-bodies/errors.json): no causes, nothing names the failure.
REJECTED_BODY = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    b'"message":"the server rejected our request due to an error in our request",'
    b'"reason":"Invalid","details":{},"code":422}'
)


@pytest.mark.parametrize(
    ("path", "failing"),
    [
        ("/api/v1/persistentvolumes/pv", {"op": "test", "path": "/metadata/resourceVersion"}),
        ("/api/v1/persistentvolumes/pv", {"op": "test", "path": "/metadata/finalizers/0"}),
        ("/api/v1/persistentvolumes/pv", {"op": "remove", "path": "/metadata/finalizers/5"}),
        ("/api/v1/namespaces/default/configmaps/cm", {"op": "remove", "path": "/data/gone"}),
        (
            "/apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses/vsc",
            {"op": "test", "path": "/metadata/resourceVersion"},
        ),
        ("/api/v1/persistentvolumes/pv", {"op": "frobnicate", "path": "/metadata"}),
    ],
)
async def test_every_failed_json_patch_is_the_same_bare_422(
    cluster: EmulatedCluster, path: str, failing: dict[str, Any]
) -> None:
    cluster.create("persistentvolumes", {"metadata": {"name": "pv", "finalizers": ["a/b"]}})
    cluster.create("configmaps", {"metadata": {"name": "cm"}, "data": {}}, namespace="default")
    cluster.create("volumesnapshotclasses", {"metadata": {"name": "vsc"}, "driver": "d"})
    before = cluster.resource_version
    patch = [{**failing, "value": "not-what-is-there"}, {"op": "add", "path": "/x", "value": 1}]
    headers = {"Content-Type": "application/json-patch+json"}
    url = cluster.url + path
    async with (
        aiohttp.ClientSession() as session,
        session.patch(url, json=patch, headers=headers) as response,
    ):
        assert response.status == 422
        assert await response.read() == REJECTED_BODY
    assert cluster.resource_version == before  # nothing was written


async def test_a_json_patch_that_applies_is_written(core: client.CoreV1Api) -> None:
    created = await core.create_namespaced_persistent_volume_claim("default", claim("a"))
    rv = created.metadata.resource_version
    guarded = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/finalizers", "value": ["x/y"]},
    ]
    patched = await core.patch_namespaced_persistent_volume_claim("a", "default", guarded)
    assert patched.metadata.finalizers == ["x/y"]
    with pytest.raises(ApiException) as error:  # the same patch again: the version moved on
        await core.patch_namespaced_persistent_volume_claim("a", "default", guarded)
    assert error.value.status == 422
    assert error.value.body.encode() == REJECTED_BODY


async def test_a_merge_patch_with_a_stale_version_is_the_real_409(
    cluster: EmulatedCluster,
) -> None:
    pv = cluster.create("persistentvolumes", {"metadata": {"name": "bodies-pv"}})
    cluster.patch("persistentvolumes", None, "bodies-pv", {"metadata": {"labels": {"a": "b"}}})
    patch = {"metadata": {"resourceVersion": pv["metadata"]["resourceVersion"], "labels": None}}
    headers = {"Content-Type": "application/merge-patch+json"}
    url = cluster.url + "/api/v1/persistentvolumes/bodies-pv"
    async with (
        aiohttp.ClientSession() as session,
        session.patch(url, json=patch, headers=headers) as response,
    ):
        assert response.status == 409
        assert await response.read() == (
            b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
            b'"message":"Operation cannot be fulfilled on persistentvolumes \\"bodies-pv\\": '
            b"the object has been modified; please apply your changes to the latest version "
            b'and try again","reason":"Conflict",'
            b'"details":{"name":"bodies-pv","kind":"persistentvolumes"},"code":409}'
        )


async def test_generate_name(core: client.CoreV1Api) -> None:
    body = {"metadata": {"generateName": "pvc-"}, "spec": {}}
    first = await core.create_namespaced_persistent_volume_claim("default", body)
    second = await core.create_namespaced_persistent_volume_claim("default", body)
    assert first.metadata.name.startswith("pvc-")
    assert len(first.metadata.name) == len("pvc-") + 5
    assert first.metadata.name != second.metadata.name


async def test_spec_and_status_are_written_separately(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    await core.create_namespaced_persistent_volume_claim("default", claim("a"))
    main = await core.patch_namespaced_persistent_volume_claim(
        "a", "default", {"spec": {"volumeName": "pv"}, "status": {"phase": "Bound"}}
    )
    assert main.spec.volume_name == "pv"
    assert main.status.phase == "Pending"  # the main resource ignores status
    assert main.metadata.generation == 2

    status = await core.patch_namespaced_persistent_volume_claim_status(
        "a", "default", {"spec": {"volumeName": "other"}, "status": {"phase": "Bound"}}
    )
    assert status.spec.volume_name == "pv"  # /status ignores everything else
    assert status.status.phase == "Bound"
    assert status.metadata.generation == 2  # status changes never bump the generation
    assert cluster.get(PVCS, "default", "a")["status"] == {"phase": "Bound"}  # type: ignore[index]


@pytest.mark.parametrize("storage_protection", [False])  # only the test's own finalizers
async def test_finalizers_hold_a_deleted_object(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    body = claim("a")
    body["metadata"]["finalizers"] = ["one/f", "two/f"]
    await core.create_namespaced_persistent_volume_claim("default", body)
    await core.delete_namespaced_persistent_volume_claim("a", "default")
    held = await core.read_namespaced_persistent_volume_claim("a", "default")
    assert held.metadata.deletion_timestamp is not None

    with pytest.raises(ApiException) as error:  # no new finalizers while deleting
        await core.patch_namespaced_persistent_volume_claim(
            "a",
            "default",
            {"metadata": {"finalizers": ["one/f", "two/f", "three/f"]}},
            _content_type="application/merge-patch+json",
        )
    assert error.value.status == 422

    with cluster.subscribe(PVCS) as feed:
        # kubernetes-asyncio sends a strategic merge patch for dicts: finalizers merge (union)
        # there, so removing one needs the $deleteFromPrimitiveList directive, as in client-go.
        await core.patch_namespaced_persistent_volume_claim(
            "a", "default", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["one/f"]}}
        )
        await core.patch_namespaced_persistent_volume_claim(
            "a",
            "default",
            {"metadata": {"finalizers": None}},
            _content_type="application/merge-patch+json",
        )
        changes = [await feed.__anext__(), await feed.__anext__()]
    assert [change.type for change in changes] == ["MODIFIED", "DELETED"]
    assert changes[0].object["metadata"]["finalizers"] == ["two/f"]
    assert cluster.get(PVCS, "default", "a") is None


async def test_strategic_merge_patch_unions_finalizers(core: client.CoreV1Api) -> None:
    body = claim("a")
    body["metadata"]["finalizers"] = ["one/f"]
    await core.create_namespaced_persistent_volume_claim("default", body)
    patched = await core.patch_namespaced_persistent_volume_claim(
        "a", "default", {"metadata": {"finalizers": ["two/f"], "labels": {"a": "b"}}}
    )
    protection = "kubernetes.io/pvc-protection"  # admission adds it on create
    assert patched.metadata.finalizers == ["one/f", protection, "two/f"]
    assert patched.metadata.labels == {"a": "b"}


async def test_a_no_op_write_changes_nothing(cluster: EmulatedCluster) -> None:
    created = cluster.create(
        PVCS, {"metadata": {"name": "a", "labels": {"k": "v"}}}, namespace="default"
    )
    same = cluster.patch(PVCS, "default", "a", {"metadata": {"labels": {"k": "v"}}})
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert cluster.resource_version == int(created["metadata"]["resourceVersion"])  # no event


def test_python_level_errors_are_status_errors() -> None:
    cluster = EmulatedCluster()
    with pytest.raises(StatusError) as error:
        cluster.patch(PVCS, "default", "missing", {})
    assert error.value.code == 404
    with pytest.raises(KeyError):
        cluster.get("nonsense", None, "x")


async def test_managed_fields_name_each_writer(
    cluster: EmulatedCluster, api: client.ApiClient, core: client.CoreV1Api
) -> None:
    api.user_agent = "csi-provisioner/v6.0.0 (linux/amd64) kubernetes/abcdef"
    await core.create_namespaced_persistent_volume_claim("default", claim("a"))
    await core.patch_namespaced_persistent_volume_claim_status(
        "a", "default", {"status": {"phase": "Bound"}}, field_manager="csi-resizer"
    )
    cluster.patch(PVCS, "default", "a", {"metadata": {"labels": {"k": "v"}}}, manager="kubectl")
    obj = cluster.get(PVCS, "default", "a")
    assert obj is not None
    entries = {(e["manager"], e.get("subresource")): e for e in obj["metadata"]["managedFields"]}
    assert set(entries) == {("csi-provisioner", None), ("csi-resizer", "status"), ("kubectl", None)}
    assert all(
        e["operation"] == "Update" and e["fieldsType"] == "FieldsV1" for e in entries.values()
    )
    provisioner = entries["csi-provisioner", None]["fieldsV1"]
    assert provisioner["f:spec"]["f:accessModes"] == {".": {}, 'v:"ReadWriteOnce"': {}}
    assert entries["csi-resizer", "status"]["fieldsV1"] == {"f:status": {"f:phase": {}}}
    assert entries["kubectl", None]["fieldsV1"] == {"f:metadata": {"f:labels": {"f:k": {}}}}


async def test_claims_and_volumes_get_the_storage_protection_finalizers(
    core: client.CoreV1Api,
) -> None:
    created = await core.create_namespaced_persistent_volume_claim("default", claim("a"))
    assert created.metadata.finalizers == ["kubernetes.io/pvc-protection"]
    volume = {
        "metadata": {"name": "pv", "finalizers": ["example.com/mine"]},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]},
    }
    created_pv = await core.create_persistent_volume(volume)
    assert created_pv.metadata.finalizers == ["example.com/mine", "kubernetes.io/pv-protection"]


async def test_every_write_is_counted_by_manager_verb_and_resource(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    await core.create_namespaced_persistent_volume_claim("default", claim("a"))
    cluster.create(PVCS, claim("b"), namespace="default", manager="kcm")
    current = cluster.get(PVCS, "default", "b")
    assert current is not None
    cluster.replace(PVCS, "default", "b", current, subresource="status", manager="kcm")
    cluster.patch(PVCS, "default", "b", {"metadata": {"labels": {"x": "y"}}}, manager="kcm")
    with pytest.raises(StatusError):  # failed attempts count too
        cluster.replace(PVCS, "default", "b", {**current, "spec": {}}, manager="kcm")
    cluster.delete(PVCS, "default", "a", manager="kcm")
    assert {key: n for key, n in cluster.writes.items() if key[1:] != ("create", "namespaces")} == {
        ("OpenAPI-Generator", "create", PVCS): 1,
        ("kcm", "create", PVCS): 1,
        ("kcm", "update", f"{PVCS}/status"): 1,
        ("kcm", "patch", PVCS): 1,
        ("kcm", "update", PVCS): 1,
        ("kcm", "delete", PVCS): 1,
    }


def test_custom_resources_refuse_strategic_merge_patches(cluster: EmulatedCluster) -> None:
    """As kube-apiserver: a CRD's objects take JSON and merge patches, never strategic ones."""
    body = {"metadata": {"name": "snap"}, "spec": {"source": {"persistentVolumeClaimName": "a"}}}
    cluster.create("volumesnapshots", body, namespace="default")
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}
    with pytest.raises(StatusError) as error:
        cluster.patch("volumesnapshots", "default", "snap", patch, patch_type="strategic")
    assert error.value.code == 415
    assert error.value.reason == "UnsupportedMediaType"
    merged = cluster.patch(
        "volumesnapshots", "default", "snap", {"metadata": {"labels": {"a": "b"}}}
    )
    assert merged["metadata"]["labels"] == {"a": "b"}


async def test_write_latency_holds_the_writer_not_the_server(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    cluster.write_latency = 2.0
    started = time.monotonic()
    write = asyncio.create_task(
        core.create_namespaced_persistent_volume_claim("default", claim("a"))
    )
    await until(lambda: cluster.requests.count(verb="create", resource=PVCS))  # it has arrived
    listed = await core.list_namespaced_persistent_volume_claim("default")  # served meanwhile
    assert not write.done()
    assert listed.items == []  # the write is applied after its wait, not before
    await write
    assert time.monotonic() - started >= 2.0
    assert [c["metadata"]["name"] for c in cluster.objects(PVCS)] == ["a"]


def test_a_stale_write_of_a_grouped_kind_names_its_group_apart(cluster: EmulatedCluster) -> None:
    """apimachinery's NewConflict: the group-qualified plural in the message, the group and
    the plural apart in the details."""
    body = {"metadata": {"name": "va"}, "spec": {"attacher": "d", "nodeName": "n"}}
    created = cluster.create("volumeattachments", body)
    cluster.patch("volumeattachments", None, "va", {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(StatusError) as error:
        cluster.replace("volumeattachments", None, "va", created)
    status = error.value.status()
    assert status["message"].startswith(
        'Operation cannot be fulfilled on volumeattachments.storage.k8s.io "va": '
    )
    assert status["details"] == {
        "name": "va",
        "group": "storage.k8s.io",
        "kind": "volumeattachments",
    }


async def test_a_new_pod_is_pending(core: client.CoreV1Api) -> None:
    """As a real server's pod strategy: a pod created with no phase is Pending (no kubelet
    here moves it on); a status given on create is kept (tests set the phase they need)."""
    spec = {"containers": [{"name": "app", "image": "busybox"}]}
    made = await core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": spec})
    assert made.status.phase == "Pending"
    done = {"metadata": {"name": "q"}, "spec": spec, "status": {"phase": "Succeeded"}}
    assert (await core.create_namespaced_pod("default", done)).status.phase == "Succeeded"
