"""The claim and PV informers (our own list-and-watch), against the emulated API over HTTP.

We test these aspects:
- every existing object comes as ADDED, then every change in order, each exactly once, also
  across the end of a watch request (resumed from the last resourceVersion);
- a watch too old for the server's history (410 Gone) lists again, and an object deleted in
  the gap comes as DELETED (a stub with its name and namespace);
- an API error is logged and retried, and the informer carries on;
- a deletion found by a relist reaches the controllers with the last cached state;
- the operator watches claims and PVs through them, not through kopf (no kopf handler for
  either kind), once every start-up handler has run;
- an informer given a LIST someone made (`since`, `known`) does not list again: it watches on
  from there, so the operator lists PVs once at start-up, and still sees every later change
  (and, after a 410, the deletions among the keys it was given).
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog

from kopf_csi import kube, modules, runtime
from kopf_csi.informers import Informer
from kopf_csi.settings import Settings
from kopf_csi.testing import permissions
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import running_operator

from .conftest import until

PVCS = "persistentvolumeclaims"


@pytest.fixture
async def cluster(
    kit_rbac: bool, handler_modules: tuple[str, ...]
) -> AsyncIterator[EmulatedCluster]:
    rbac = permissions.cluster_arguments(kit_rbac=kit_rbac, handler_modules=handler_modules)
    async with EmulatedCluster(storage_protection=False, **rbac) as cluster:  # claims: a sample
        yield cluster


@pytest.fixture
async def api(kubeconfig: pathlib.Path) -> AsyncIterator[kube.KubeClient]:
    client = await kube.KubeClient.connect(kubeconfig)
    yield client
    await client.close()


def claim(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"resources": {}}}


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str | None]] = []
        self.changed = asyncio.Event()

    async def __call__(self, type_: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.events.append((type_, meta["name"], meta.get("labels", {}).get("step")))
        self.changed.set()

    async def until(self, count: int) -> None:
        async with asyncio.timeout(10):
            while len(self.events) < count:
                self.changed.clear()
                await self.changed.wait()


async def watches(cluster: EmulatedCluster, count: int) -> None:
    """Wait until the informer has sent `count` watch requests (however busy the machine)."""
    await until(lambda: cluster.requests.count(verb="watch", resource=PVCS) >= count, timeout=20)


async def test_lists_then_streams_every_change_once_across_watch_requests(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    cluster.create(PVCS, claim("old"), namespace="default")
    recorder = Seen()
    informer = Informer(api, kube.CLAIMS, recorder, timeout=1)  # each watch request ends in 1 s
    informer.start()
    try:
        await recorder.until(1)
        assert informer.synced.is_set()
        cluster.patch(PVCS, "default", "old", {"metadata": {"labels": {"step": "1"}}})
        await recorder.until(2)
        await watches(cluster, 2)  # the first watch request ended and was resumed
        cluster.create(PVCS, claim("new"), namespace="default")
        cluster.delete(PVCS, "default", "old")
        await recorder.until(4)
        await watches(cluster, cluster.requests.count(verb="watch", resource=PVCS) + 1)
    finally:
        await informer.stop()
    assert recorder.events == [
        ("ADDED", "old", None),
        ("MODIFIED", "old", "1"),
        ("ADDED", "new", None),
        ("DELETED", "old", "1"),
    ]


async def test_a_watch_too_old_lists_again_and_reports_the_gaps_deletions(
    kubeconfig: pathlib.Path,
) -> None:
    async with EmulatedCluster(history=2, storage_protection=False) as small:
        config = small.write_kubeconfig(kubeconfig.parent / "small")
        small.create(PVCS, claim("gone"), namespace="default")
        small.create(PVCS, claim("kept"), namespace="default")
        async with await kube.KubeClient.connect(config) as client:
            recorder = Seen()
            informer = Informer(client, kube.CLAIMS, recorder, timeout=1)
            # Listed, then the informer is paused past the history the server keeps.
            original = informer._follow
            paused = asyncio.Event()

            async def follow() -> None:
                if not paused.is_set():
                    paused.set()
                    small.delete(PVCS, "default", "gone")
                    for step in "123":  # three changes: the listed version falls out
                        small.patch(PVCS, "default", "kept", {"metadata": {"labels": {"s": step}}})
                await original()

            informer._follow = follow  # type: ignore[method-assign]
            informer.start()
            try:
                await recorder.until(4)
            finally:
                await informer.stop()
    assert recorder.events[:2] == [("ADDED", "gone", None), ("ADDED", "kept", None)]
    assert recorder.events[2:] == [("ADDED", "kept", None), ("DELETED", "gone", None)]


async def test_a_watch_cut_mid_stream_resumes_where_it_broke_off(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    """A real server's watch may break off between two events: nothing repeated, no relist."""
    cluster.create(PVCS, claim("a"), namespace="default")
    cluster.faults.cut_watch(PVCS, after=2)  # the first watch: two events, then dropped
    recorder = Seen()
    informer = Informer(api, kube.CLAIMS, recorder)
    informer.start()
    try:
        await recorder.until(1)
        await watches(cluster, 1)
        for step in "123":
            cluster.patch(PVCS, "default", "a", {"metadata": {"labels": {"step": step}}})
        await recorder.until(4)
        await watches(cluster, 2)
    finally:
        await informer.stop()
    assert recorder.events == [
        ("ADDED", "a", None),
        ("MODIFIED", "a", "1"),
        ("MODIFIED", "a", "2"),
        ("MODIFIED", "a", "3"),
    ]
    assert cluster.requests.count(verb="list", resource=PVCS) == 1  # resumed, not relisted
    assert not cluster.faults  # the cut happened


async def test_a_failing_listener_is_logged_and_the_watch_goes_on(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    recorder = Seen()
    broken = [True]

    async def listener(type_: str, obj: dict[str, Any]) -> None:
        if broken.pop() if broken else False:
            raise RuntimeError("a bug in a controller's listener")
        await recorder(type_, obj)

    informer = Informer(api, kube.CLAIMS, listener)
    with structlog.testing.capture_logs() as logs:
        informer.start()
        try:
            cluster.create(PVCS, claim("a"), namespace="default")
            await recorder.until(1)
        finally:
            await informer.stop()
    assert recorder.events[-1] == ("ADDED", "a", None)
    assert "informer_listener_failed" in [entry["event"] for entry in logs]


async def test_an_api_error_is_retried(cluster: EmulatedCluster, api: kube.KubeClient) -> None:
    cluster.faults.add(500, verb="list", resource=PVCS, times=1)
    cluster.create(PVCS, claim("a"), namespace="default")
    recorder = Seen()
    informer = Informer(api, kube.CLAIMS, recorder)
    informer.start()
    try:
        await recorder.until(1)
    finally:
        await informer.stop()
    assert recorder.events == [("ADDED", "a", None)]
    assert not cluster.faults


async def test_claims_volumes_and_attachments_are_not_watched_through_kopf() -> None:
    import kopf

    registry = kopf.OperatorRegistry()
    modules.load(modules.DEFAULT_MODULES, registry=registry)
    watching = {str(h.id) for h in registry._watching.get_all_handlers()}
    assert "caches.volumes" not in watching
    assert "caches.claims" not in watching
    assert "caches.volumeattachments" not in watching
    memo = runtime.OperatorMemo(registry=registry)
    ids = [str(h.id) for h in registry._activities.get_all_handlers()]
    assert ids[-1] == runtime.STARTED_HANDLER_ID  # after every module's start-up handler
    waiting = asyncio.create_task(runtime.all_started(memo))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    await runtime.mark_started(memo)
    await asyncio.wait_for(waiting, 1)


@pytest.mark.parametrize(
    ("resource", "cache_name", "handler"),
    [(kube.VOLUMES, "volumes", "volumes"), (kube.VOLUME_ATTACHMENTS, "attachments", "attachments")],
)
async def test_a_deletion_found_by_a_relist_reaches_the_controllers_with_the_last_state(
    resource: kube.Resource, cache_name: str, handler: str
) -> None:
    from kopf_csi.caches import Caches
    from kopf_csi_handlers import caches as cache_handlers

    memo = runtime.OperatorMemo(caches=Caches())
    obj = {"metadata": {"name": "x-1", "resourceVersion": "5"}, "spec": {"a": "b"}}
    getattr(memo.caches, cache_name).store(obj)
    got: list[tuple[dict[str, Any], bool]] = []
    runtime.subscribe(memo, resource, lambda obj, deleted: got.append((obj, deleted)))
    await getattr(cache_handlers, handler)(
        memo, {"type": "DELETED", "object": {"metadata": {"name": "x-1"}}}
    )
    assert got == [(obj, True)]
    assert "x-1" not in getattr(memo.caches, cache_name)


async def test_given_a_list_it_watches_on_from_there_without_listing(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    cluster.create(PVCS, claim("listed"), namespace="default")
    listed = [page async for page in api.pages(kube.CLAIMS)]
    version = cluster.resource_version
    cluster.create(PVCS, claim("after"), namespace="default")  # between the list and the watch
    recorder = Seen()
    informer = Informer(
        api, kube.CLAIMS, recorder, since=str(version), known=["default/listed"], timeout=1
    )
    assert informer.synced.is_set()
    informer.start()
    try:
        await recorder.until(1)
        cluster.delete(PVCS, "default", "listed")
        await recorder.until(2)
    finally:
        await informer.stop()
    assert len(listed) == 1
    assert recorder.events == [("ADDED", "after", None), ("DELETED", "listed", None)]
    assert cluster.requests.count(verb="list", resource=PVCS) == 1  # ours above, not its


async def test_the_operator_lists_volumes_once_at_start_up(
    cluster: EmulatedCluster, settings: Settings, driver: Any
) -> None:
    def volume(name: str) -> dict[str, Any]:
        csi = {"driver": "other.example.com", "volumeHandle": name}
        return {"metadata": {"name": name}, "spec": {"capacity": {"storage": "1Gi"}, "csi": csi}}

    for n in range(3):
        cluster.create("persistentvolumes", volume(f"pv-{n}"))
    async with running_operator(settings=settings, modules=modules.DEFAULT_MODULES) as operator:
        caches = operator.memo.caches
        assert {pv["metadata"]["name"] for pv in caches.volumes} == {"pv-0", "pv-1", "pv-2"}
        await until(lambda: cluster.requests.count(verb="watch", resource="persistentvolumes"))
        cluster.create("persistentvolumes", volume("pv-new"))
        cluster.delete("persistentvolumes", None, "pv-0")
        await until(lambda: "pv-new" in caches.volumes and "pv-0" not in caches.volumes)
    assert cluster.requests.count(verb="list", resource="persistentvolumes") == 1


async def test_an_event_that_always_fails_is_skipped_after_a_few_tries(
    cluster: EmulatedCluster, api: kube.KubeClient
) -> None:
    """One bad object must not hold up every later event of its kind: its event is tried a
    few times (a passing bug gets its retry), then skipped with an error."""
    recorder = Seen()
    tries: list[str] = []

    async def listener(type_: str, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == "poison":
            tries.append(type_)
            raise RuntimeError("a bug in the cache for this object")
        await recorder(type_, obj)

    informer = Informer(api, kube.CLAIMS, listener)
    with structlog.testing.capture_logs() as logs:
        informer.start()
        try:
            await watches(cluster, 1)
            cluster.create(PVCS, claim("poison"), namespace="default")
            cluster.create(PVCS, claim("after"), namespace="default")
            await recorder.until(1)
        finally:
            await informer.stop()
    assert recorder.events == [("ADDED", "after", None)]
    assert tries == ["ADDED"] * 3
    assert [e["event"] for e in logs].count("informer_event_skipped") == 1


async def test_a_watch_that_ends_at_once_is_not_retried_in_a_tight_loop() -> None:
    """A proxy that closes every watch at once with nothing in it: the informer backs off
    (as client-go does after a very short watch) instead of spinning on the API."""

    class Closing:
        watches = 0

        async def watch(self, *_: Any, **__: Any) -> AsyncIterator[dict[str, Any]]:
            Closing.watches += 1
            return
            yield {}  # an async generator that ends at once

    informer = Informer(Closing(), kube.CLAIMS, Seen(), since="1")  # type: ignore[arg-type]
    informer.start()
    await asyncio.sleep(1.0)
    await informer.stop()
    assert 2 <= Closing.watches <= 5  # 0.2, 0.4 s apart...: not thousands
