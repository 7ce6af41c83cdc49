"""Watch semantics, over real HTTP.

We test these aspects: resuming from a resourceVersion loses and replays nothing (also across
a disconnect); a watch without one lists then streams; a resourceVersion older than the kept
history gets 410 Gone (as an ERROR event, like the real API server); every spelling of
``watch=true`` is a watch; ``timeoutSeconds`` ends the stream; bookmarks; the initial-events
stream kopf can use; objects entering/leaving a label selector become ADDED/DELETED; the events
sent on HTTP watches are counted by kind and type.
"""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from kopf_csi.testing.emulator import EmulatedCluster

PVCS = "persistentvolumeclaims"


@pytest.fixture
def storage_protection() -> bool:
    return False  # claims are a sample kind here: no admission finalizers to account for


def claim(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"resources": {}}}


async def collect(
    core: client.CoreV1Api, *, since: str | None, count: int, **kwargs: Any
) -> list[tuple[str, str, int]]:
    """Watch PVCs in "default" until ``count`` events arrived (or the server ends it in 5 s)."""
    events = []
    stream = watch.Watch()
    async for event in stream.stream(
        core.list_namespaced_persistent_volume_claim,
        "default",
        resource_version=since,
        timeout_seconds=5,
        **kwargs,
    ):
        obj = event["object"]
        events.append((event["type"], obj.metadata.name, int(obj.metadata.resource_version)))
        if len(events) == count:
            stream.stop()
            break
    return events


async def raw_watch(
    cluster: EmulatedCluster, query: str, *, count: int | None = None
) -> tuple[int, list[dict[str, Any]], float]:
    """Raw lines of a watch, until ``count`` lines or the end of the stream."""
    started = time.monotonic()
    lines: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session:
        url = f"{cluster.url}/api/v1/namespaces/default/persistentvolumeclaims?{query}"
        async with session.get(url) as response:
            async for line in response.content:
                if line.strip():
                    lines.append(json.loads(line))
                if len(lines) == count:
                    break
            return response.status, lines, time.monotonic() - started


async def test_watch_resumes_from_resource_version_without_loss_or_replay(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    await core.create_namespaced_persistent_volume_claim("default", claim("a"))
    listed = await core.list_namespaced_persistent_volume_claim("default")
    since = listed.metadata.resource_version
    # Changes between the list and the watch must arrive through the watch.
    cluster.create(PVCS, claim("b"), namespace="default")

    first: list[tuple[str, str, int]] = []
    stream = watch.Watch()
    async for event in stream.stream(
        core.list_namespaced_persistent_volume_claim,
        "default",
        resource_version=since,
        timeout_seconds=5,
    ):
        obj = event["object"]
        first.append((event["type"], obj.metadata.name, int(obj.metadata.resource_version)))
        if len(first) == 1:
            cluster.create(PVCS, claim("c"), namespace="default")  # live, during the stream
        else:
            stream.stop()
            break

    # While disconnected: more changes, then resume from the last resourceVersion seen.
    cluster.patch(PVCS, "default", "a", {"metadata": {"labels": {"x": "y"}}})
    cluster.delete(PVCS, "default", "b")
    second = await collect(core, since=str(first[-1][2]), count=2)

    seen = first + second
    assert [(type_, name) for type_, name, _ in seen] == [
        ("ADDED", "b"),
        ("ADDED", "c"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
    ]
    versions = [rv for _, _, rv in seen]
    assert versions == sorted(set(versions))  # strictly increasing: no replay
    assert versions[-1] == cluster.resource_version


async def test_watch_without_resource_version_lists_then_streams(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    cluster.create(PVCS, claim("old"), namespace="default")
    cluster.create(PVCS, claim("elsewhere"), namespace="other")
    events: list[tuple[str, str]] = []
    stream = watch.Watch()
    async for event in stream.stream(
        core.list_namespaced_persistent_volume_claim, "default", timeout_seconds=5
    ):
        events.append((event["type"], event["object"].metadata.name))
        if len(events) == 1:
            cluster.patch(PVCS, "default", "old", {"spec": {"volumeName": "pv"}})
        else:
            stream.stop()
            break
    assert events == [("ADDED", "old"), ("MODIFIED", "old")]
    # What the HTTP watches sent is counted by kind and type (the benchmark reports it).
    assert cluster.watch_events == {(PVCS, "ADDED"): 1, (PVCS, "MODIFIED"): 1}


async def test_too_old_resource_version_is_410_gone() -> None:
    async with EmulatedCluster(history=3) as small, aiohttp.ClientSession() as session:
        small.create(PVCS, claim("a"), namespace="default")
        since = small.resource_version
        for n in range(4):
            small.patch(PVCS, "default", "a", {"metadata": {"labels": {"n": str(n)}}})
        path = "/api/v1/namespaces/default/persistentvolumeclaims"
        url = f"{small.url}{path}?watch=true&resourceVersion={since}"
        async with session.get(url) as response:
            assert response.status == 200  # as the real server: 200, then an ERROR event
            events = [json.loads(line) async for line in response.content if line.strip()]
        assert [event["type"] for event in events] == ["ERROR"]
        assert events[0]["object"]["kind"] == "Status"
        assert events[0]["object"]["code"] == 410
        assert events[0]["object"]["reason"] == "Expired"

        # kubernetes-asyncio turns it into ApiException(410); the recent history still works.
        async with client.ApiClient(client.Configuration(host=small.url)) as api:
            with pytest.raises(ApiException) as error:
                await collect(client.CoreV1Api(api), since=str(since), count=1)
            assert error.value.status == 410
            recent = await collect(
                client.CoreV1Api(api), since=str(small.resource_version - 2), count=2
            )
            assert [type_ for type_, _, _ in recent] == ["MODIFIED", "MODIFIED"]


@pytest.mark.parametrize("spelling", ["true", "True", "1"])
async def test_every_watch_spelling_is_a_watch(cluster: EmulatedCluster, spelling: str) -> None:
    cluster.create(PVCS, claim("a"), namespace="default")
    status, events, _ = await raw_watch(cluster, f"watch={spelling}", count=1)
    assert status == 200
    assert [(event["type"], event["object"]["metadata"]["name"]) for event in events] == [
        ("ADDED", "a")
    ]


async def test_timeout_seconds_ends_the_stream(cluster: EmulatedCluster) -> None:
    status, events, elapsed = await raw_watch(cluster, "watch=true&timeoutSeconds=1")
    assert status == 200
    assert events == []
    assert 0.9 < elapsed < 2.0


async def test_bookmarks_carry_the_current_resource_version(cluster: EmulatedCluster) -> None:
    cluster.bookmark_interval = 0.2
    cluster.create(PVCS, claim("a"), namespace="default")
    query = f"watch=true&allowWatchBookmarks=true&resourceVersion={cluster.resource_version}"
    _, events, elapsed = await raw_watch(cluster, query, count=2)
    assert [event["type"] for event in events] == ["BOOKMARK", "BOOKMARK"]
    assert elapsed < 1.0
    assert events[0]["object"]["metadata"]["resourceVersion"] == str(cluster.resource_version)


async def test_initial_events_end_with_a_bookmark(cluster: EmulatedCluster) -> None:
    cluster.create(PVCS, claim("a"), namespace="default")
    query = "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
    query += "&allowWatchBookmarks=true"
    _, events, _ = await raw_watch(cluster, query, count=2)
    assert [event["type"] for event in events] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_label_selector_watch_sees_objects_enter_and_leave(
    cluster: EmulatedCluster, core: client.CoreV1Api
) -> None:
    cluster.create(PVCS, claim("a", app="x"), namespace="default")
    since = str(cluster.resource_version)
    cluster.patch(PVCS, "default", "a", {"metadata": {"labels": {"app": "y"}}})  # leaves
    cluster.create(PVCS, claim("b", app="y"), namespace="default")  # never in scope
    cluster.patch(PVCS, "default", "b", {"metadata": {"labels": {"app": "x"}}})  # enters
    events = await collect(core, since=since, count=2, label_selector="app=x")
    assert [(type_, name) for type_, name, _ in events] == [("DELETED", "a"), ("ADDED", "b")]
