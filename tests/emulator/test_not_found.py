"""A missing object's 404, byte for byte the real server's body (kube-apiserver v1.36.2).

We test these aspects: a GET of a missing object of a core kind (namespaced and cluster-wide),
of a built-in grouped kind and of a custom resource answers with the real server's Status
body: the message `<resource>[.<group>] "<name>" not found`, reason `NotFound`, and the name,
group (left out for the core group) and resource in the details; a PATCH and a DELETE of a
missing object answer the same.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client

from kopf_csi.testing.emulator import EmulatedCluster

MERGE = "application/merge-patch+json"


def not_found(resource: str, group: str, name: str) -> dict[str, Any]:
    """The body as recorded (real-server-bodies/errors.json)."""
    qualified = f"{resource}.{group}" if group else resource
    details = {"name": name, "group": group, "kind": resource} if group else {
        "name": name, "kind": resource
    }  # fmt: skip
    return {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'{qualified} "{name}" not found', "reason": "NotFound",
        "details": details, "code": 404,
    }  # fmt: skip


async def _raw(api: client.ApiClient, method: str, path: str) -> tuple[int, dict[str, Any]]:
    response = await api.call_api(
        path,
        method,
        header_params={"Accept": "application/json", "Content-Type": MERGE},
        body={} if method == "PATCH" else None,
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    async with response:
        return response.status, json.loads(await response.read())


@pytest.mark.parametrize(
    ("path", "resource", "group", "name"),
    [
        (
            "/api/v1/namespaces/default/persistentvolumeclaims/missing-pvc",
            "persistentvolumeclaims", "", "missing-pvc",
        ),
        ("/api/v1/persistentvolumes/missing-pv", "persistentvolumes", "", "missing-pv"),
        ("/api/v1/namespaces/default/secrets/missing-secret", "secrets", "", "missing-secret"),
        (
            "/apis/storage.k8s.io/v1/volumeattachments/missing-va",
            "volumeattachments", "storage.k8s.io", "missing-va",
        ),
        (
            "/apis/snapshot.storage.k8s.io/v1/namespaces/default/volumesnapshots/missing-snap",
            "volumesnapshots", "snapshot.storage.k8s.io", "missing-snap",
        ),
    ],
)  # fmt: skip
@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
async def test_a_missing_object_is_the_real_404(
    cluster: EmulatedCluster,
    api: client.ApiClient,
    method: str,
    path: str,
    resource: str,
    group: str,
    name: str,
) -> None:
    status, body = await _raw(api, method, path)
    assert status == 404
    assert body == not_found(resource, group, name)
