"""Discovery and /version, held to a real kube-apiserver v1.36.2's answers (data/discovery.json,
recorded with the external-snapshotter v8 CRDs installed).

We test these aspects:
- every resource the emulator serves in a recorded group version is listed as the real server
  lists it (name, singularName, namespaced, kind, verbs, shortNames, categories; its /status
  subresource too), in the real order; only ``storageVersionHash`` is left out;
- the kinds outside the recording (events.k8s.io, CustomResourceDefinitions) have the real
  short names and categories;
- ``/version`` is the real body, ``/api`` names the address the server is reached at;
- the advertised ``deletecollection`` is served (selectors apply; finalizers hold objects as a
  DELETE's do), and refused with a 405 where the real server does not list it (namespaces).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from kopf_csi.testing.emulator import EmulatedCluster

REAL = json.loads((pathlib.Path(__file__).parent / "data" / "discovery.json").read_text())
GROUP_VERSIONS = [path for path in REAL if path.startswith(("/api/", "/apis/"))]


@pytest.fixture
async def get(cluster: EmulatedCluster) -> AsyncIterator[Any]:
    async with aiohttp.ClientSession(cluster.url) as session:

        async def get(path: str) -> Any:
            async with session.get(path) as response:
                assert response.status == 200, path
                return await response.json()

        yield get


@pytest.mark.parametrize("path", GROUP_VERSIONS)
async def test_resources_as_the_real_server_lists_them(get: Any, path: str) -> None:
    served = await get(path)
    real = REAL[path]
    assert {k: v for k, v in served.items() if k != "resources"} == {
        k: v for k, v in real.items() if k != "resources"
    }
    real_entries = {
        entry["name"]: {k: v for k, v in entry.items() if k != "storageVersionHash"}
        for entry in real["resources"]
    }
    names = [entry["name"] for entry in served["resources"]]
    assert names, path
    for entry in served["resources"]:
        assert entry == real_entries[entry["name"]]
    assert names == [name for name in real_entries if name in names]  # the real order


async def test_kinds_beyond_the_recording(get: Any) -> None:
    (event,) = (await get("/apis/events.k8s.io/v1"))["resources"]
    assert (event["shortNames"], event["verbs"][2]) == (["ev"], "deletecollection")
    crds = (await get("/apis/apiextensions.k8s.io/v1"))["resources"]
    assert crds[0]["shortNames"] == ["crd", "crds"]
    assert crds[0]["categories"] == ["api-extensions"]
    assert crds[1] == {
        "name": "customresourcedefinitions/status",
        "singularName": "",
        "namespaced": False,
        "kind": "CustomResourceDefinition",
        "verbs": ["get", "patch", "update"],
    }


async def test_version_and_core_versions(cluster: EmulatedCluster, get: Any) -> None:
    assert await get("/version") == REAL["/version"]
    assert await get("/api") == {
        **REAL["/api"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{cluster.host}:{cluster.port}"}
        ],
    }


async def test_deletecollection_is_served_where_advertised(cluster: EmulatedCluster) -> None:
    for name, labels in (("a", {"app": "x"}), ("b", {"app": "x"}), ("c", {"app": "y"})):
        cluster.create("configmaps", {"metadata": {"name": name, "namespace": "default",
                                                   "labels": labels}})  # fmt: skip
    cluster.create("persistentvolumeclaims", {"metadata": {"name": "kept", "namespace": "default"}})
    async with aiohttp.ClientSession(cluster.url) as session:
        url = "/api/v1/namespaces/default/configmaps?labelSelector=app%3Dx"
        async with session.delete(url) as response:
            assert response.status == 200
            body = await response.json()
        # A claim with the protection finalizer is marked, not gone, and listed as marked.
        async with session.delete("/api/v1/namespaces/default/persistentvolumeclaims") as marked:
            claims = (await marked.json())["items"]
        async with session.delete("/api/v1/namespaces") as refused:
            assert refused.status == 405
    assert body["kind"] == "ConfigMapList"
    assert [item["metadata"]["name"] for item in body["items"]] == ["a", "b"]
    assert [cm["metadata"]["name"] for cm in cluster.objects("configmaps")] == ["c"]
    assert claims[0]["metadata"]["deletionTimestamp"]
    assert cluster.get("persistentvolumeclaims", "default", "kept") is not None
    assert len(cluster.objects("namespaces")) == 2
