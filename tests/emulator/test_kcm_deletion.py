"""The KCM stand-in's deletion path with a latency model: what KCM asks the API server, and
whose rate limit each request takes.

We test these aspects: pvc-protection checks a deleted claim against a live LIST of the
namespace's pods (a pod its informer has not seen keeps the claim), once per batch of the
namespace's claims; the PV controller reads a released Delete-policy volume afresh (its
deleteVolumeOperation's GET) at every sync, and not a Retain one; each controller's requests
wait for tokens of its own client's bucket (``kube_api_qps``), and none without a limit.
Without a latency model (test_kcm.py) none of this runs: a pass is atomic.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from kopf_csi.testing.emulator import Change, EmulatedCluster
from kopf_csi.testing.kcm import FINALIZER_PVC_PROTECTION, ControllerManager
from kopf_csi.testing.kcmrunning import BINDER, PV_PROTECTION, PVC_PROTECTION
from kopf_csi.testing.latency import LatencyModel

DRIVER = "csi.example.com"
PVCS, PVS = "persistentvolumeclaims", "persistentvolumes"
Request = tuple[str, str, str | None]  # method, plural, name (None: a list or a create)


async def until(cluster: EmulatedCluster, condition: Callable[[], Any]) -> Any:
    async with asyncio.timeout(10):
        with cluster.subscribe() as feed:
            while not (result := condition()):
                await feed.batch()
    return result


def claim(cluster: EmulatedCluster, name: str) -> dict[str, Any]:
    spec = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "fast",
    }
    return cluster.create(PVCS, {"metadata": {"name": name}, "spec": spec}, namespace="default")


def bound_volume(
    cluster: EmulatedCluster, name: str, claim: dict[str, Any], *, policy: str = "Delete"
) -> None:
    meta = claim["metadata"]
    spec = {
        "accessModes": ["ReadWriteOnce"],
        "capacity": {"storage": "1Gi"},
        "persistentVolumeReclaimPolicy": policy,
        "csi": {"driver": DRIVER, "volumeHandle": f"handle-{name}"},
        "claimRef": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
    }
    annotations = {"pv.kubernetes.io/provisioned-by": DRIVER}
    cluster.create(PVS, {"metadata": {"name": name, "annotations": annotations}, "spec": spec})


def pod(cluster: EmulatedCluster, name: str, claim_name: str) -> None:
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}
    spec = {"nodeName": "node-1", "volumes": [volume]}
    cluster.create("pods", {"metadata": {"name": name}, "spec": spec}, namespace="default")


def requested(cluster: EmulatedCluster) -> int:
    """Claims the PV controller has asked an external provisioner for (its events)."""
    return sum(e["reason"] == "ExternalProvisioning" for e in cluster.objects("events"))


def gone(obj: dict[str, Any] | None) -> bool:
    return obj is None


def synced(obj: dict[str, Any] | None) -> bool:
    """The PV controller has given the volume a phase."""
    return bool((obj or {}).get("status"))


def released(obj: dict[str, Any] | None) -> bool:
    return ((obj or {}).get("status") or {}).get("phase") == "Released"


@contextlib.contextmanager
def kcm_requests(cluster: EmulatedCluster) -> Iterator[list[Request]]:
    """The requests the stand-in times through the cluster's latency (only it, in these tests:
    the test's own writes go through the Python API, untimed)."""
    seen: list[Request] = []
    latency = cluster.latency
    original = latency.request

    def request(method: str, target: Any, **kwargs: Any) -> Any:
        seen.append((method, target.plural, target.name))
        return original(method, target, **kwargs)

    latency.request = request  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        latency.request = original  # type: ignore[method-assign]


@contextlib.asynccontextmanager
async def timed(
    model: LatencyModel | None = None, **options: Any
) -> AsyncIterator[tuple[EmulatedCluster, ControllerManager]]:
    model = model or LatencyModel(write=0.002, read=0.001)
    async with EmulatedCluster(latency=model) as cluster:
        cluster.create("storageclasses", {"metadata": {"name": "fast"}, "provisioner": DRIVER})
        async with ControllerManager(cluster, resync_period=None, **options) as kcm:
            assert kcm.timed
            yield cluster, kcm


# --- pvc-protection: the live list of pods ----------------------------------------------


async def test_a_pod_the_informer_has_not_seen_keeps_a_deleted_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """isBeingUsed asks the informer, then lists the namespace's pods live: a pod that is not
    in the informer yet still keeps the claim's finalizer."""
    async with timed() as (cluster, kcm):
        observe = kcm._observe

        def blind_to_pods(change: Change) -> None:  # an informer that has not seen the pod
            if change.kind.plural != "pods":
                observe(change)

        monkeypatch.setattr(kcm, "_observe", blind_to_pods)
        claim(cluster, "used")
        claim(cluster, "free")
        pod(cluster, "app", "used")
        await kcm.settled()
        assert not kcm._cache["pods"]
        cluster.delete(PVCS, "default", "used")
        cluster.delete(PVCS, "default", "free")
        await cluster.wait_for(PVCS, "default", "free", gone)
        await kcm.settled()
        held = cluster.get(PVCS, "default", "used")
        assert held is not None
        assert held["metadata"]["finalizers"] == [FINALIZER_PVC_PROTECTION]


async def test_the_claims_deleted_together_share_one_live_list() -> None:
    """pvc-protection takes the claims queued for a namespace as one batch and lists its pods
    once for the batch (LazyLivePodList), not once per claim."""
    n, listing = 4, 0.4
    model = LatencyModel(write=0.002, read=0.001, means={"GET pods": listing})
    async with timed(model) as (cluster, kcm):
        for i in range(n):
            claim(cluster, f"data-{i}")
        await kcm.settled()
        with kcm_requests(cluster) as seen:
            loop = asyncio.get_running_loop()
            started = loop.time()
            for i in range(n):
                cluster.delete(PVCS, "default", f"data-{i}")
            await until(cluster, lambda: not cluster.objects(PVCS))
            waited = loop.time() - started
            await kcm.settled()
        assert seen.count(("GET", "pods", None)) == 1
        assert waited >= listing  # the claims waited for the list (one per claim: 1.6 s)


# --- The PV controller: deleteVolumeOperation's read -------------------------------------


async def test_a_released_volume_is_read_afresh_at_every_sync() -> None:
    """reclaimVolume (Delete policy) runs deleteVolumeOperation, which GETs the volume; an
    external provisioner's volume is left to it. Each sync of the released volume does it
    again (an operation per sync, unless one runs)."""
    async with timed() as (cluster, kcm):
        created = claim(cluster, "data")
        bound_volume(cluster, "pvc-1", created)
        await cluster.wait_for(PVS, None, "pvc-1", synced)
        await kcm.settled()
        with kcm_requests(cluster) as seen:
            cluster.delete(PVCS, "default", "data")
            await cluster.wait_for(PVCS, "default", "data", gone)
            await cluster.wait_for(PVS, None, "pvc-1", released)
            await kcm.settled()
            reads = seen.count(("GET", PVS, "pvc-1"))
            assert reads >= 1
            assert ("GET", PVCS, "data") in seen  # syncVolume's check before the release
            cluster.patch(PVS, None, "pvc-1", {"metadata": {"labels": {"touched": "yes"}}})
            await kcm.settled()
            assert seen.count(("GET", PVS, "pvc-1")) > reads
        assert cluster.get(PVS, None, "pvc-1") is not None  # the deletion is not KCM's


async def test_a_retained_volume_is_not_read_when_released() -> None:
    async with timed() as (cluster, kcm):
        created = claim(cluster, "data")
        bound_volume(cluster, "pvc-1", created, policy="Retain")
        await cluster.wait_for(PVS, None, "pvc-1", synced)
        await kcm.settled()
        with kcm_requests(cluster) as seen:
            cluster.delete(PVCS, "default", "data")
            await cluster.wait_for(PVS, None, "pvc-1", released)
            await kcm.settled()
        assert ("GET", PVS, "pvc-1") not in seen


# --- The controllers' clients: a token bucket each ----------------------------------------


async def test_each_controller_waits_for_its_own_clients_tokens() -> None:
    """KCM's --kube-api-qps/--kube-api-burst give each controller's client a bucket: the PV
    controller's annotation updates and events for 3 claims (6 requests) take 5 tokens' time
    at 4 a second after a burst of 1; pvc-protection's requests take its own bucket."""
    qps = 4.0
    async with timed(kube_api_qps=qps, kube_api_burst=1) as (cluster, kcm):
        loop = asyncio.get_running_loop()
        started = loop.time()
        for i in range(3):
            claim(cluster, f"data-{i}")
        await until(cluster, lambda: requested(cluster) == 3)
        assert loop.time() - started >= 4 / qps  # 5 tokens due, 0.25 s apart (margin: 1)
        binder = kcm.buckets[BINDER]
        assert binder.requests >= 6
        assert binder.delayed >= 5
        await kcm.settled()
        before = binder.requests
        for i in range(3):
            cluster.delete(PVCS, "default", f"data-{i}")
        await until(cluster, lambda: not cluster.objects(PVCS))
        await kcm.settled()
        assert kcm.buckets[PVC_PROTECTION].requests == 4  # one live list, three updates
        assert binder.requests == before  # the deleted claims cost the PV controller nothing
        assert PV_PROTECTION not in kcm.buckets


async def test_without_a_client_limit_nothing_waits_for_tokens() -> None:
    async with timed() as (cluster, kcm):
        for i in range(3):
            claim(cluster, f"data-{i}")
        await until(cluster, lambda: requested(cluster) == 3)
        await kcm.settled()
        assert kcm.buckets == {}
