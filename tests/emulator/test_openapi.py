"""The OpenAPI v3 documents kubectl reads, and the field validation they promise.

We test these aspects:
- ``/openapi/v3`` lists every served group version (each one the real server lists too), and
  each URL serves that group version's document: every kind's paths, a PATCH operation
  naming its group-version-kind and taking ``fieldValidation``, a schema per kind;
- the snapshot and group snapshot kinds declare the properties their CRDs declare
  (manifests/crds), and are free-form only where their CRDs preserve unknown fields;
- over HTTP: ``fieldValidation=Strict`` refuses unknown fields, nested and in metadata too,
  with the real 400 texts (create, update, and a patch's result: JSON, merge and strategic
  patches alike) and writes nothing; ``Warn``, and the absence of the parameter (the real
  server's default), write without the unknown fields and answer with one Warning header per
  field; ``Ignore`` drops them silently; a list's items are checked too;
- pruning: what is written never holds an unknown field (create, update, every patch type,
  /status, a CRD's spec, status and metadata), over HTTP and through the Python API; a
  preserved (free-form) part keeps what it is given;
- a key given twice in a create's or an update's body is named (Strict's 400, Warn's header)
  and its last value written;
- ``/openapi/v2`` and unknown documents are 404.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import aiohttp
import pytest

from kopf_csi.testing import openapi
from kopf_csi.testing.emulator import KINDS, EmulatedCluster, Kind

DATA = pathlib.Path(__file__).parent / "data"
REAL_PATHS = json.loads((DATA / "discovery.json").read_text())["/openapi/v3 (paths only)"]["paths"]
CLAIMS = "/api/v1/namespaces/default/persistentvolumeclaims"


async def test_index_and_documents(cluster: EmulatedCluster) -> None:
    async with aiohttp.ClientSession(cluster.url) as session:
        async with session.get("/openapi/v3") as response:
            index = await response.json()
        documents = {}
        for path, entry in index["paths"].items():
            async with session.get(entry["serverRelativeURL"]) as response:
                assert response.status == 200
                documents[path] = await response.json()
        for missing in ("/openapi/v2", "/openapi/v3/apis/apps/v1", "/openapi/v3/apis"):
            async with session.get(missing) as response:
                assert response.status == 404, missing
    served = {f"apis/{k.group}/{k.version}" if k.group else "api/v1" for k in KINDS}
    assert set(index["paths"]) == served
    assert served <= set(REAL_PATHS)
    for kind in KINDS:
        document = documents[f"apis/{kind.group}/{kind.version}" if kind.group else "api/v1"]
        assert document["info"]["version"] == "v1.36.2"
        gvk = {"group": kind.group, "version": kind.version, "kind": kind.kind}
        patches = [
            item["patch"]
            for path, item in document["paths"].items()
            if "patch" in item and item["patch"]["x-kubernetes-group-version-kind"] == gvk
        ]
        assert len(patches) == (2 if kind.status else 1), kind
        for patch in patches:
            assert {"name": "fieldValidation", "in": "query"}.items() <= patch["parameters"][
                2
            ].items()
        schemas = [
            schema
            for schema in document["components"]["schemas"].values()
            if gvk in schema.get("x-kubernetes-group-version-kind", [])
        ]
        assert len(schemas) == 1, kind


CRD_KINDS = sorted(key for key in openapi.FIELDS if key[0].endswith("snapshot.storage.k8s.io"))


def _compare(ours: Any, theirs: dict[str, Any], path: str) -> None:
    # A free-form part of ours is one the CRD preserves too: elsewhere both prune alike.
    assert ours != openapi.ANY or theirs.get("x-kubernetes-preserve-unknown-fields"), path
    if isinstance(ours, list):
        _compare(ours[0], theirs["items"], f"{path}[]")
    elif isinstance(ours, dict) and "*" not in ours:
        assert set(ours) == set(theirs.get("properties", {})), path
        for key, spec in ours.items():
            _compare(spec, theirs["properties"][key], f"{path}.{key}")


@pytest.mark.parametrize("key", CRD_KINDS)
def test_crd_kinds_declare_their_crds_properties(
    key: tuple[str, str], crds: list[tuple[Any, Any]]
) -> None:
    (crd,) = [
        version["schema"]["openAPIV3Schema"]
        for crd, version in crds
        if (crd["spec"]["group"], crd["spec"]["names"]["kind"]) == key
    ]
    assert len(crds) == len(CRD_KINDS)
    ours = openapi.FIELDS[key]
    assert set(ours) == set(crd["properties"]) - {"apiVersion", "kind", "metadata"}
    _compare(ours, {"properties": {k: crd["properties"][k] for k in ours}}, key[1])


CLAIM = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "data", "labels": {"a": "b"}, "colour": "red"},
    "spec": {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}, "request": {"storage": "1Gi"}},
        "storageClassNmae": "fast",
    },
}
UNKNOWN = ["metadata.colour", "spec.resources.request", "spec.storageClassNmae"]


async def test_field_validation_over_http(cluster: EmulatedCluster) -> None:
    async with aiohttp.ClientSession(cluster.url) as session:

        async def call(method: str, path: str, body: Any, **kwargs: Any) -> tuple[int, Any, Any]:
            async with session.request(method, path, json=body, **kwargs) as response:
                return (
                    response.status,
                    await response.json(),
                    response.headers.getall("Warning", []),
                )

        strict = {"params": {"fieldValidation": "Strict"}}
        code, created, _ = await call("POST", CLAIMS, CLAIM, **strict)
        assert code == 400
        assert created["reason"] == "BadRequest"
        assert created["message"] == (
            'PersistentVolumeClaim in version "v1" cannot be handled as a PersistentVolumeClaim: '
            "strict decoding error: " + ", ".join(f'unknown field "{field}"' for field in UNKNOWN)
        )
        assert cluster.objects("persistentvolumeclaims") == []  # nothing written

        warned = {**CLAIM, "metadata": {**CLAIM["metadata"], "name": "warned"}}
        code, _, warnings = await call("POST", CLAIMS, warned, params={"fieldValidation": "Warn"})
        assert code == 201
        assert warnings == [f'299 - "unknown field \\"{field}\\""' for field in UNKNOWN]
        clean = {**CLAIM, "metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
        assert (await call("POST", CLAIMS, clean, **strict))[0] == 201

        item = f"{CLAIMS}/data"
        for content_type in ("merge-patch", "strategic-merge-patch"):
            headers = {"Content-Type": f"application/{content_type}+json"}
            patch = {"spec": {"volumeNmae": "x"}, "$patch": "merge"}
            code, body, _ = await call("PATCH", item, patch, headers=headers, **strict)
            assert (code, body["message"]) == (
                400,
                'strict decoding error: unknown field "spec.volumeNmae"',
            )
        json_patch = [{"op": "add", "path": "/spec/volumeNmae", "value": "x"}]
        headers = {"Content-Type": "application/json-patch+json"}
        code, body, _ = await call("PATCH", item, json_patch, headers=headers, **strict)
        assert (code, body["message"]) == (
            400,
            'strict decoding error: unknown field "spec.volumeNmae"',
        )
        json_patch = [{"op": "add", "path": "/spec/volumeName", "value": "x"}]
        assert (await call("PATCH", item, json_patch, headers=headers, **strict))[0] == 200
        code, stored, _ = await call("GET", item, None)
        code, body, _ = await call("PUT", item, {**stored, "extra": 1}, **strict)
        assert code == 400
        assert body["message"].endswith('strict decoding error: unknown field "extra"')
        # The body is decoded before the object is looked up: a missing one is a 400 still.
        code, body, _ = await call("PUT", f"{CLAIMS}/gone", {**stored, "extra": 1}, **strict)
        assert (code, body["reason"]) == (400, "BadRequest")
        assert body["message"].endswith('strict decoding error: unknown field "extra"')
        for params, says in (({}, True), ({"fieldValidation": "Ignore"}, False)):
            code, _, warnings = await call("PUT", item, {**stored, "extra": 1}, params=params)
            assert (code, warnings) == (200, ['299 - "unknown field \\"extra\\""'] * says)
            code, stored, _ = await call("GET", item, None)
            assert "extra" not in stored

        node = {"metadata": {"name": "n"}, "spec": {"drivers": [{"name": "d", "nodeId": "n"}]}}
        code, body, _ = await call("POST", "/apis/storage.k8s.io/v1/csinodes", node, **strict)
        assert code == 400
        assert body["message"].endswith('unknown field "spec.drivers[0].nodeId"')


SNAPSHOTS = "/apis/snapshot.storage.k8s.io/v1/namespaces/default/volumesnapshots"
MERGE = {"Content-Type": "application/merge-patch+json"}


async def test_unknown_fields_are_dropped_as_the_real_server_drops_them(
    cluster: EmulatedCluster,
) -> None:
    """No ``fieldValidation`` (the real server's default is Warn), Warn and Ignore all write
    the object without its unknown fields: on create, on update, in a patch's result (merge,
    strategic, JSON; /status too), for a built-in kind and a CRD's; Warn and the default name
    each one in a ``299`` Warning header, Ignore says nothing."""
    async with aiohttp.ClientSession(cluster.url) as session:

        async def call(method: str, path: str, body: Any, **kwargs: Any) -> tuple[Any, Any]:
            async with session.request(method, path, json=body, **kwargs) as response:
                assert response.status in (200, 201), await response.text()
                return await response.json(), response.headers.getall("Warning", [])

        def header(*fields: str) -> list[str]:
            return [f'299 - "unknown field \\"{field}\\""' for field in fields]

        for name, params, says in (
            ("default", {}, True),
            ("warn", {"fieldValidation": "Warn"}, True),
            ("ignore", {"fieldValidation": "Ignore"}, False),
        ):
            created, warnings = await call(
                "POST", CLAIMS, {**CLAIM, "metadata": {**CLAIM["metadata"], "name": name}},
                params=params,
            )  # fmt: skip
            assert warnings == (header(*UNKNOWN) if says else [])
            stored = cluster.get("persistentvolumeclaims", "default", name)
            assert stored == created
            assert stored is not None
            assert "colour" not in stored["metadata"]
            assert stored["metadata"]["labels"] == {"a": "b"}
            assert stored["spec"] == {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            }

            item = f"{CLAIMS}/{name}"
            replaced, warnings = await call(
                "PUT", item, {**stored, "extra": 1, "spec": {**stored["spec"], "volumeNmae": "x"}},
                params=params,
            )  # fmt: skip
            assert warnings == (header("spec.volumeNmae", "extra") if says else [])
            assert replaced == stored | {"metadata": replaced["metadata"]}  # nothing changed

            patches: list[tuple[str, Any, str]] = [
                ("merge-patch", {"spec": {"volumeNmae": "x"}}, "spec.volumeNmae"),
                ("strategic-merge-patch", {"metadata": {"colour": "red"}}, "metadata.colour"),
                ("json-patch", [{"op": "add", "path": "/extra", "value": 1}], "extra"),
            ]
            for content_type, patch, field in patches:
                headers = {"Content-Type": f"application/{content_type}+json"}
                patched, warnings = await call("PATCH", item, patch, headers=headers, params=params)
                assert warnings == (header(field) if says else [])
                assert patched == replaced, content_type  # a no-op: nothing new was kept
            status = {"status": {"phase": "Bound", "kopf": {"progress": {}}}}
            patched, warnings = await call(
                "PATCH", f"{item}/status", status, headers=MERGE, params=params
            )
            assert warnings == (header("status.kopf") if says else [])
            assert patched["status"] == {"phase": "Bound"}
            assert cluster.get("persistentvolumeclaims", "default", name) == patched

        # A CRD: structural pruning, spec and status alike, and metadata to ObjectMeta's fields.
        snapshot = {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": "snap", "colour": "red"},
            "spec": {"source": {"persistentVolumeClaimName": "data", "pvcName": "data"}},
        }
        created, warnings = await call("POST", SNAPSHOTS, snapshot)
        assert warnings == header("metadata.colour", "spec.source.pvcName")
        assert created["spec"] == {"source": {"persistentVolumeClaimName": "data"}}
        assert "colour" not in created["metadata"]
        status = {"status": {"readyToUse": True, "ready": True, "error": {"message": "m", "x": 1}}}
        patched, warnings = await call("PATCH", f"{SNAPSHOTS}/snap/status", status, headers=MERGE)
        assert warnings == header("status.ready", "status.error.x")
        assert patched["status"] == {"readyToUse": True, "error": {"message": "m"}}
        assert cluster.get("volumesnapshots", "default", "snap") == patched


async def test_preserved_parts_keep_unknown_fields_and_metadata_is_pruned_still(
    cluster: EmulatedCluster,
) -> None:
    """A CRD part with x-kubernetes-preserve-unknown-fields (a made-up kind's whole spec) keeps
    what it is given; its metadata is still pruned to ObjectMeta's fields."""
    cluster.serve(Kind("example.com", "v1", "widgets", "Widget", namespaced=True))
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "colour": "red"},
        "spec": {"anything": {"at": ["all"]}},
    }
    async with aiohttp.ClientSession(cluster.url) as session:
        path = "/apis/example.com/v1/namespaces/default/widgets"
        async with session.post(path, json=widget) as response:
            assert response.status == 201
            assert response.headers.getall("Warning") == [
                '299 - "unknown field \\"metadata.colour\\""'
            ]
    stored = cluster.get("widgets", "default", "w")
    assert stored is not None
    assert stored["spec"] == widget["spec"]
    assert "colour" not in stored["metadata"]


def test_writes_through_the_python_api_are_pruned_too(cluster: EmulatedCluster) -> None:
    """The controller stand-ins and tests write through the Python API, standing for clients
    of a real server: what they write is pruned as an HTTP write is."""
    created = cluster.create("persistentvolumeclaims", CLAIM, namespace="default")
    assert "colour" not in created["metadata"]
    assert "storageClassNmae" not in created["spec"]
    patched = cluster.patch(
        "persistentvolumeclaims", "default", "data", {"status": {"kopf": {"progress": {}}}},
        subresource="status",
    )  # fmt: skip
    assert "kopf" not in patched["status"]
    replaced = cluster.replace("persistentvolumeclaims", "default", "data", {**patched, "extra": 1})
    assert "extra" not in replaced
    assert cluster.get("persistentvolumeclaims", "default", "data") == replaced
    assert dict(cluster.dropped) == {
        ("kopf-csi-tests", "persistentvolumeclaims", path): 1
        for path in (*UNKNOWN, "status.kopf", "extra")
    }


async def test_duplicate_fields_are_named_as_the_real_server_names_them(
    cluster: EmulatedCluster,
) -> None:
    """A key given twice in a create's or an update's body: the last value is written; Strict
    refuses it with the real 400 (duplicates before unknown fields), Warn and the default name
    it in a Warning header, Ignore says nothing."""
    body = (
        '{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "%s"},'
        ' "spec": {"volumeMode": "Block", "accessModes": ["ReadWriteOnce"],'
        ' "volumeMode": "Filesystem", "volumeNmae": "x"}}'
    )
    json_type = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(cluster.url) as session:
        async with session.post(
            CLAIMS, data=body % "strict", headers=json_type, params={"fieldValidation": "Strict"}
        ) as response:
            assert response.status == 400
            assert (await response.json())["message"] == (
                'PersistentVolumeClaim in version "v1" cannot be handled as a '
                "PersistentVolumeClaim: strict decoding error: "
                'duplicate field "spec.volumeMode", unknown field "spec.volumeNmae"'
            )
        for name, params, says in (
            ("default", {}, True),
            ("warn", {"fieldValidation": "Warn"}, True),
            ("ignore", {"fieldValidation": "Ignore"}, False),
        ):
            async with session.post(
                CLAIMS, data=body % name, headers=json_type, params=params
            ) as response:
                assert response.status == 201
                assert (
                    response.headers.getall("Warning", [])
                    == [
                        '299 - "duplicate field \\"spec.volumeMode\\""',
                        '299 - "unknown field \\"spec.volumeNmae\\""',
                    ]
                    * says
                )
            stored = cluster.get("persistentvolumeclaims", "default", name)
            assert stored is not None
            assert stored["spec"] == {"volumeMode": "Filesystem", "accessModes": ["ReadWriteOnce"]}
            async with session.put(
                f"{CLAIMS}/{name}", data=body % name, headers=json_type, params=params
            ) as response:
                assert response.status == 200
                assert len(response.headers.getall("Warning", [])) == 2 * says
    assert cluster.get("persistentvolumeclaims", "default", "strict") is None
