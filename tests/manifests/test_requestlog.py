"""The request log: HTTP requests classified as the API server's authorizer sees them.

- verbs: get, list, watch (query and the old /watch/ prefix), create, update, patch, delete,
  deletecollection;
- core and named groups, namespaced and cluster-scoped resources, subresources, a namespace's
  own subresources;
- discovery and other URLs are non-resource requests;
- the emulator records every request it serves, including refused ones.
"""

from __future__ import annotations

import aiohttp
import pytest

from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.requestlog import Access, RequestLog, classify


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        pytest.param(
            "GET", "/api/v1/persistentvolumes", {}, Access("list", "", "persistentvolumes"),
            id="list-cluster-scoped",
        ),
        pytest.param(
            "GET", "/api/v1/persistentvolumeclaims", {"watch": "true"},
            Access("watch", "", "persistentvolumeclaims"), id="watch-all-namespaces",
        ),
        pytest.param(
            "GET", "/api/v1/namespaces/ns1/persistentvolumeclaims", {"watch": "1"},
            Access("watch", "", "persistentvolumeclaims", None, "ns1"), id="watch-namespaced",
        ),
        pytest.param(
            "GET", "/api/v1/watch/namespaces/ns1/pods", {},
            Access("watch", "", "pods", None, "ns1"), id="watch-prefix",
        ),
        pytest.param(
            "GET", "/api/v1/namespaces/ns1/secrets/s1", {},
            Access("get", "", "secrets", None, "ns1"), id="get-namespaced",
        ),
        pytest.param(
            "GET", "/api/v1/namespaces/ns1/persistentvolumeclaims/c1/status", {},
            Access("get", "", "persistentvolumeclaims", "status", "ns1"), id="get-status",
        ),
        pytest.param(
            "POST", "/api/v1/namespaces/ns1/events", {},
            Access("create", "", "events", None, "ns1"), id="create-namespaced",
        ),
        pytest.param(
            "POST", "/apis/storage.k8s.io/v1/volumeattachments", {},
            Access("create", "storage.k8s.io", "volumeattachments"), id="create-cluster-scoped",
        ),
        pytest.param(
            "PUT", "/apis/coordination.k8s.io/v1/namespaces/kopf-csi/leases/l1", {},
            Access("update", "coordination.k8s.io", "leases", None, "kopf-csi"), id="update",
        ),
        pytest.param(
            "PATCH", "/apis/storage.k8s.io/v1/volumeattachments/va1/status", {},
            Access("patch", "storage.k8s.io", "volumeattachments", "status"), id="patch-status",
        ),
        pytest.param(
            "DELETE", "/api/v1/persistentvolumes/pv1", {},
            Access("delete", "", "persistentvolumes"), id="delete",
        ),
        pytest.param(
            "DELETE", "/api/v1/namespaces/ns1/configmaps", {},
            Access("deletecollection", "", "configmaps", None, "ns1"), id="deletecollection",
        ),
        pytest.param(
            "GET", "/api/v1/namespaces/ns1", {},
            Access("get", "", "namespaces", None, "ns1"), id="get-namespace",
        ),
        pytest.param(
            "PUT", "/api/v1/namespaces/ns1/finalize", {},
            Access("update", "", "namespaces", "finalize", "ns1"), id="namespace-subresource",
        ),
        pytest.param(
            "GET", "/api/v1/namespaces", {}, Access("list", "", "namespaces"),
            id="list-namespaces",
        ),
        pytest.param(
            "get", "/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents/", {},
            Access("list", "snapshot.storage.k8s.io", "volumesnapshotcontents"),
            id="lowercase-method-trailing-slash",
        ),
    ],
)  # fmt: skip
def test_resource_requests(method: str, path: str, query: dict[str, str], expected: Access) -> None:
    assert classify(method, path, query) == expected


@pytest.mark.parametrize(
    "path",
    ["/", "/api", "/api/v1", "/apis", "/apis/storage.k8s.io", "/apis/storage.k8s.io/v1",
     "/version", "/healthz", "/openapi/v2"],
)  # fmt: skip
def test_non_resource_requests(path: str) -> None:
    assert classify("GET", path) is None


def test_rbac_names() -> None:
    assert Access("patch", "", "persistentvolumeclaims", "status").rbac_resource == (
        "persistentvolumeclaims/status"
    )
    assert str(Access("get", "", "configmaps", None, "ns")) == "get core/configmaps in ns"
    assert str(Access("list", "storage.k8s.io", "csinodes")) == (
        "list storage.k8s.io/csinodes cluster-wide"
    )


def test_log_counts_and_clears() -> None:
    log = RequestLog()
    log.record("GET", "/api/v1/nodes")
    log.record("GET", "/api/v1/nodes")
    log.record("GET", "/apis")
    assert log.accesses == {Access("list", "", "nodes"): 2}
    assert log.non_resource == {("GET", "/apis"): 1}
    assert list(log) == [Access("list", "", "nodes")]
    log.clear()
    assert len(log) == 0
    assert not log.non_resource


async def test_emulator_records_served_and_refused_requests(cluster: EmulatedCluster) -> None:
    cluster.faults.add(403, verb="get", resource="secrets")
    async with aiohttp.ClientSession(cluster.url) as session:
        async with session.get("/api/v1/namespaces/default/secrets/s1") as response:
            assert response.status == 403
        async with session.get("/api/v1/nodes", params={"watch": "true", "timeoutSeconds": "0"}):
            pass
        async with session.get("/apis/storage.k8s.io/v1"):
            pass
    assert set(cluster.requests) == {
        Access("get", "", "secrets", None, "default"),
        Access("watch", "", "nodes"),
    }
    assert ("GET", "/apis/storage.k8s.io/v1") in cluster.requests.non_resource
