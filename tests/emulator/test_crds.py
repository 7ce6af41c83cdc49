"""A CustomResourceDefinition created in the emulator is served at once, as a real server serves
one once it is established: its group version in discovery, its resource over HTTP and through
the Python API, /status where the version declares it; and the CRD's status says so (what
`kubectl wait --for=condition=Established` reads). Unserved versions are not served; a CRD for
a resource served already (the snapshot kinds) leaves it as it is.
"""

from __future__ import annotations

import copy
from typing import Any

import aiohttp

from kopf_csi.testing.emulator import KINDS, EmulatedCluster
from kopf_csi.testing.kinds import defined_by

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Cluster",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {"name": "v1", "served": True, "storage": True, "subresources": {"status": {}}},
            {"name": "v1beta1", "served": False, "storage": False},
        ],
    },
}


def test_the_kinds_of_a_crd_are_its_served_versions() -> None:
    (kind,) = defined_by(CRD)
    assert (kind.group, kind.version, kind.plural, kind.kind) == (
        "example.com", "v1", "widgets", "Widget",
    )  # fmt: skip
    assert not kind.namespaced
    assert kind.status
    assert defined_by({"spec": {}}) == ()


async def test_a_created_crd_is_served_over_http(cluster: EmulatedCluster) -> None:
    async with aiohttp.ClientSession(cluster.url) as session:
        async with session.get("/apis/example.com/v1") as response:
            assert response.status == 404
        async with session.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=CRD
        ) as response:
            assert response.status == 201
        async with session.get("/apis/example.com/v1") as response:
            assert response.status == 200
            names = [r["name"] for r in (await response.json())["resources"]]
            assert names == ["widgets", "widgets/status"]
        widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
        async with session.post("/apis/example.com/v1/widgets", json=widget) as response:
            assert response.status == 201
        async with session.get("/apis/example.com/v1beta1/widgets") as response:
            assert response.status == 404
    assert cluster.get("widgets", None, "w") is not None


async def test_a_crd_for_a_served_resource_changes_nothing(cluster: EmulatedCluster) -> None:
    snapshots = next(kind for kind in KINDS if kind.plural == "volumesnapshots")
    crd = copy.deepcopy(CRD)
    crd["metadata"]["name"] = "volumesnapshots.snapshot.storage.k8s.io"
    crd["spec"].update(
        group=snapshots.group, scope="Namespaced",
        names={"plural": "volumesnapshots", "kind": "VolumeSnapshot"},
        versions=[{"name": "v1", "served": True, "storage": True}],  # no status: not taken
    )  # fmt: skip
    cluster.create("customresourcedefinitions", crd)
    assert cluster.kind("volumesnapshots") == snapshots
    assert cluster.kind("volumesnapshots").status


async def test_a_created_crd_is_established(cluster: EmulatedCluster) -> None:
    """What `kubectl wait --for=condition=Established` reads: the names accepted (with the
    server's defaults), both conditions true, the storage version stored."""
    cluster.create("customresourcedefinitions", CRD)
    async with aiohttp.ClientSession(cluster.url) as session:
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"
        async with session.get(path) as response:
            status = (await response.json())["status"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert status["acceptedNames"] == {
        "plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList",
    }  # fmt: skip
    assert status["storedVersions"] == ["v1"]
