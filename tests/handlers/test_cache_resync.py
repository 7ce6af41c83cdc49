"""The cache resync drops objects whose deletion no watch event reported.

We test these aspects:
- `Cache.prune` drops what a complete LIST did not have, but keeps what was stored after the
  LIST began (it may be newer than the LIST's snapshot);
- end to end: a VolumeAttachment left in the cache although the API has no such object (a
  "ghost", as after a restart race) is dropped by the operator's next resync, and the
  controllers hear of it as deleted; real objects stay; the PVs, which their informer keeps
  current from the priming LIST on, are not listed again.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog.testing

from kopf_csi import kube, runtime
from kopf_csi.caches import Cache
from kopf_csi.driver import Driver
from kopf_csi.runtime import OperatorMemo
from kopf_csi.settings import KubeSettings, Settings
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread, running_operator

from ..conftest import NODE, seed_node, until


def _va(name: str, pv: str) -> dict[str, object]:
    return {
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"attacher": "other.csi.example.com", "nodeName": NODE,
                 "source": {"persistentVolumeName": pv}},
    }  # fmt: skip


def test_prune_drops_the_unlisted_and_keeps_the_newer() -> None:
    cache = Cache()
    for name in ("kept", "ghost"):
        cache.store({"metadata": {"name": name, "resourceVersion": "1"}})
    before = cache.mark()
    cache.store({"metadata": {"name": "new", "resourceVersion": "2"}})  # after the LIST began
    gone = cache.prune({"kept"}, before=before)
    assert [obj["metadata"]["name"] for obj in gone] == ["ghost"]
    assert "kept" in cache
    assert "new" in cache
    assert "ghost" not in cache
    # The next round's LIST still lacks it: by then it was stored before the mark, so it goes.
    again = cache.prune({"kept"}, before=cache.mark())
    assert [obj["metadata"]["name"] for obj in again] == ["new"]


@pytest.fixture
async def operator(settings: Settings, driver: Driver) -> AsyncIterator[OperatorThread]:
    kube = dataclasses.replace(settings.kube, cache_resync=0.2)
    settings = dataclasses.replace(settings, kube=kube)
    async with running_operator(settings=settings) as operator:
        yield operator


async def test_a_ghost_attachment_is_dropped_and_real_ones_stay(
    cluster: EmulatedCluster, operator: OperatorThread
) -> None:
    seed_node(cluster)
    cluster.create("volumeattachments", _va("real", "pv-real"))
    caches = operator.memo.caches
    await until(lambda: "real" in caches.attachments)
    heard: list[tuple[str, bool]] = []

    def listener(obj: dict[str, object], deleted: bool) -> None:
        heard.append((obj["metadata"]["name"], deleted))  # type: ignore[index]

    operator.memo["listeners"][("storage.k8s.io", "volumeattachments")].append(listener)
    # One failing LIST costs a round, not the resync: the next round still finds the ghost.
    cluster.faults.add(500, verb="list", resource="volumeattachments", times=2)
    caches.attachments.store(_va("ghost", "pv-ghost"))  # never in the API: a missed deletion
    await until(lambda: "ghost" not in caches.attachments, timeout=5)
    await until(lambda: ("ghost", True) in heard)
    await asyncio.sleep(0.5)  # more rounds: the real one stays
    assert "real" in caches.attachments
    assert ("real", True) not in heard
    # The PVs are the informer's: no round lists them (it watches on from the priming LIST).
    assert cluster.requests.count(verb="list", resource="persistentvolumes") == 1


def test_the_setting_is_validated() -> None:
    with pytest.raises(ValueError, match="cache resync cannot be negative"):
        KubeSettings(cache_resync=-1)


async def test_a_failing_listener_does_not_keep_the_event_from_the_others() -> None:
    memo = OperatorMemo()
    heard: list[str] = []

    def broken(obj: dict[str, Any], deleted: bool) -> None:
        raise KeyError("bug")

    async def fine(obj: dict[str, Any], deleted: bool) -> None:
        heard.append(obj["metadata"]["name"])

    runtime.subscribe(memo, kube.VOLUMES, broken)
    runtime.subscribe(memo, kube.VOLUMES, fine)
    runtime.subscribe(memo, kube.CLAIMS, fine)
    with structlog.testing.capture_logs() as logs:
        await runtime.notify(memo, kube.VOLUMES, {"metadata": {"name": "pv-1"}}, deleted=False)
    assert heard == ["pv-1"]  # and only once: the claims' listener is not called for a PV
    failed = [entry for entry in logs if entry["event"] == "listener_failed"]
    assert len(failed) == 1
    assert "broken" in failed[0]["listener"]
    assert "KeyError" in failed[0]["error"]
