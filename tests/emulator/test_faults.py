"""Injected API faults, and the bounded cost per request on long runs."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from kopf_csi.testing.emulator import EmulatedCluster


async def test_faults_answer_matching_requests_a_set_number_of_times(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    cluster.create("persistentvolumeclaims", {"metadata": {"name": "a"}}, namespace="default")
    cluster.faults.add(503, verb="patch", resource="persistentvolumeclaims", times=2)
    for _ in range(2):
        with pytest.raises(ApiException) as error:
            await core.patch_namespaced_persistent_volume_claim(
                "a", "default", {"metadata": {"labels": {"a": "b"}}}
            )
        assert error.value.status == 503
    await core.read_namespaced_persistent_volume_claim("a", "default")  # other verbs: untouched
    patched = await core.patch_namespaced_persistent_volume_claim(
        "a", "default", {"metadata": {"labels": {"a": "b"}}}
    )
    assert patched.metadata.labels == {"a": "b"}
    assert len(cluster.faults) == 0

    fault = cluster.faults.add(409, verb="get", name="a", times=None)
    for _ in range(3):
        with pytest.raises(ApiException):
            await core.read_namespaced_persistent_volume_claim("a", "default")
    cluster.faults.remove(fault)
    await core.read_namespaced_persistent_volume_claim("a", "default")
    # The Python-level API is never affected by faults.
    cluster.faults.add(500)
    assert cluster.get("persistentvolumeclaims", "default", "a") is not None


async def test_kmock_request_log_stays_bounded(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    # kmock re-filters its whole request log on every request it serves (stack-notes); only
    # discovery reaches kmock, and its log is trimmed.
    for _ in range(150):
        await core.get_api_resources()
        await core.list_namespace()
    assert len(cluster._discovery._requests) <= 100
