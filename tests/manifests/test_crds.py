"""The snapshot.storage.k8s.io/v1 and groupsnapshot.storage.k8s.io/v1 CRDs in manifests/crds.

- names, group, scope, the v1 version served and stored, the status subresource;
- the schemas are structural (every property typed), as apiextensions/v1 requires;
- what the operator's run wrote (VolumeSnapshots, VolumeSnapshotContents and their status, by
  the snapshot-controller stand-in and our snapshotter) and the example objects fit the
  schemas: no field the API server would prune, required fields present, enums respected.
"""

from __future__ import annotations

from typing import Any

import pytest

from .rendering import MANIFESTS, Body, find, render
from .scenarios import Observation

GROUP = "snapshot.storage.k8s.io"
GROUPS = "groupsnapshot.storage.k8s.io"
EXPECTED = {
    # plural: (kind, scope, has status)
    "volumesnapshots": ("VolumeSnapshot", "Namespaced", True),
    "volumesnapshotcontents": ("VolumeSnapshotContent", "Cluster", True),
    "volumesnapshotclasses": ("VolumeSnapshotClass", "Cluster", False),
    "volumegroupsnapshots": ("VolumeGroupSnapshot", "Namespaced", True),
    "volumegroupsnapshotcontents": ("VolumeGroupSnapshotContent", "Cluster", True),
    "volumegroupsnapshotclasses": ("VolumeGroupSnapshotClass", "Cluster", False),
}


@pytest.fixture(scope="module")
def schemas() -> dict[str, Body]:
    crds = find(render(MANIFESTS / "crds"), "CustomResourceDefinition")
    return {crd["spec"]["names"]["plural"]: crd for crd in crds}


def _schema(crd: Body) -> Body:
    (version,) = crd["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"])


def problems(value: Any, schema: Body, path: str = "") -> list[str]:
    """What the API server would refuse or prune in `value` (the subset of OpenAPI we use)."""
    where = path or "."
    if schema.get("x-kubernetes-int-or-string"):
        return [] if isinstance(value, int | str) else [f"{where}: not an int or a string"]
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        found = [f"{where}: {name} is required" for name in schema.get("required", [])
                 if name not in value]  # fmt: skip
        properties, extra = schema.get("properties"), schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                found += problems(item, properties[key], f"{path}.{key}")
            elif extra is not None:
                found += problems(item, extra, f"{path}.{key}")
            elif properties is not None:  # (metadata has no properties: the server's own)
                found.append(f"{where}: unknown field {key!r} (would be pruned)")
        return found
    expected = {"string": str, "boolean": bool, "integer": int, "array": list}[kind]
    if not isinstance(value, expected) or (kind == "integer" and isinstance(value, bool)):
        return [f"{where}: not a {kind}: {value!r}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: {value!r} is not one of {schema['enum']}"]
    if kind == "integer" and value < schema.get("minimum", value):
        return [f"{where}: below {schema['minimum']}"]
    return []


def _typed(schema: Body, path: str = "") -> list[str]:
    """Properties without a type (a non-structural schema), recursively."""
    if schema.get("x-kubernetes-int-or-string"):
        return []
    untyped = [] if "type" in schema else [path or "."]
    for name, child in (schema.get("properties") or {}).items():
        untyped += _typed(child, f"{path}.{name}")
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        untyped += _typed(extra, f"{path}.*")
    return untyped


def test_names_scope_versions(schemas: dict[str, Body]) -> None:
    assert set(schemas) == set(EXPECTED)
    for plural, (kind, scope, status) in EXPECTED.items():
        crd = schemas[plural]
        group = GROUPS if "group" in plural else GROUP
        assert crd["metadata"]["name"] == f"{plural}.{group}"
        assert crd["metadata"]["annotations"]["api-approved.kubernetes.io"].startswith("https://")
        assert crd["spec"]["group"] == group
        assert crd["spec"]["scope"] == scope
        assert crd["spec"]["names"]["kind"] == kind
        (version,) = crd["spec"]["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
        assert ("status" in version.get("subresources", {})) == status


def test_schemas_are_structural(schemas: dict[str, Body]) -> None:
    for plural, crd in schemas.items():
        assert _typed(_schema(crd)) == [], plural


def test_the_validator_catches_mistakes(schemas: dict[str, Body]) -> None:
    schema = _schema(schemas["volumesnapshotcontents"])
    bad = {"apiVersion": f"{GROUP}/v1", "kind": "VolumeSnapshotContent", "metadata": {},
           "spec": {"driver": "d", "deletionPolicy": "Keep", "source": {"volumeHandle": "v"},
                    "volumeSnapshotRef": {"name": "s", "namespace": "n"}},
           "status": {"readyToUse": "yes", "restoreSize": -1, "snapshotID": "x"}}  # fmt: skip
    assert sorted(problems(bad, schema)) == sorted([
        ".spec.deletionPolicy: 'Keep' is not one of ['Delete', 'Retain']",
        ".status.readyToUse: not a boolean: 'yes'",
        ".status.restoreSize: below 0",
        ".status: unknown field 'snapshotID' (would be pruned)",
    ])  # fmt: skip


def test_objects_written_during_the_run_fit(
    schemas: dict[str, Body], observation: Observation
) -> None:
    written = observation.objects
    assert written["volumesnapshotcontents"], "the run wrote no VolumeSnapshotContent"
    assert any((obj.get("status") or {}).get("readyToUse") for obj in written["volumesnapshots"])
    assert any(
        (obj.get("status") or {}).get("volumeSnapshotInfoList")
        for obj in written["volumegroupsnapshotcontents"]
    ), "the run wrote no group content with its member snapshots"
    for plural, objects in written.items():
        schema = _schema(schemas[plural])
        for obj in objects:
            assert problems(obj, schema) == [], f"{plural} {obj['metadata']['name']}"


def test_example_objects_fit(schemas: dict[str, Body]) -> None:
    objects = render(MANIFESTS / "examples") + render(MANIFESTS)
    checked = 0
    for plural, (kind, _, _) in EXPECTED.items():
        for obj in find(objects, kind):
            assert problems(obj, _schema(schemas[plural])) == [], obj["metadata"]["name"]
            checked += 1
    assert checked == 2  # the example VolumeSnapshot and the base's VolumeSnapshotClass
