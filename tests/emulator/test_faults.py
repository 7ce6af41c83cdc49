"""Injected API faults, and the bounded cost per request on long runs.

`lose_race`: another writer writes the object just before each matching write of ours (a
PATCH or a PUT, over HTTP); reads never meet it; a write guarded by the version read before
then answers the real 409, a JSON patch's `test` the real bare 422, and an unguarded write
goes through.
"""

from __future__ import annotations

import pathlib

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from kopf_csi import kube
from kopf_csi.testing.emulator import OTHER_WRITER, EmulatedCluster


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


async def test_a_lost_race_is_another_writer_just_before_ours(
    cluster: EmulatedCluster, kubeconfig: pathlib.Path
) -> None:
    read = cluster.create("configmaps", {"metadata": {"name": "cm"}}, namespace="default")
    version = read["metadata"]["resourceVersion"]
    race = cluster.faults.lose_race("configmaps", "cm", times=4)
    async with await kube.KubeClient.connect(kubeconfig) as api:
        seen = await api.get(kube.CONFIGMAPS, "cm", "default") or {}
        assert seen["metadata"]["resourceVersion"] == version  # a read never meets it
        guarded = kube.guarded_patch(read, {"data": {"a": "b"}})
        with pytest.raises(kube.StaleWriteError):  # the real 409
            await api.patch(kube.CONFIGMAPS, "cm", guarded, "default")
        with pytest.raises(kube.StaleWriteError):  # a stale PUT: the real 409 too
            await api.replace(kube.CONFIGMAPS, read)
        test = [{"op": "test", "path": "/metadata/resourceVersion", "value": version}]
        with pytest.raises(kube.KubeError) as invalid:  # the real bare 422
            await api.patch(kube.CONFIGMAPS, "cm", test, "default", patch_type="json")
        assert (invalid.value.status, invalid.value.reason) == (422, "Invalid")
        written = await api.patch(kube.CONFIGMAPS, "cm", {"data": {"a": "b"}}, "default")
    assert written["data"] == {"a": "b"}  # unguarded: it goes through after the other write
    assert race.times == 0
    assert not cluster.faults
    assert cluster.writes[OTHER_WRITER, "update", "configmaps"] == 4
    stored = cluster.get("configmaps", "default", "cm") or {}
    assert {e["manager"] for e in stored["metadata"]["managedFields"]} >= {OTHER_WRITER}


async def test_kmock_request_log_stays_bounded(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    # kmock re-filters its whole request log on every request it serves (stack-notes); only
    # discovery reaches kmock, and its log is trimmed.
    for _ in range(150):
        await core.get_api_resources()
        await core.list_namespace()
    assert len(cluster._discovery._requests) <= 100
