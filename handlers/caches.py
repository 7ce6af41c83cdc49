"""Keep the shared caches current from kopf's watches (the informers of the Go sidecars).

`lifecycle.connect` primes the caches with one LIST per kind before any controller starts (the
Go sidecars' WaitForCacheSync); these handlers apply every later change. Watch-event handlers
store nothing on the objects and are never retried, which is right for a cache. They are
coroutines so that kopf runs them in its loop, not in executor threads.

PersistentVolumes, PersistentVolumeClaims and VolumeAttachments have one handler each here,
which updates the cache and then passes the event to every controller that subscribed to the
kind (`runtime.subscribe`): the provisioner, the attacher, the resizer. The controllers need
this module loaded.

Claims and PVs, the kinds with about six watch events per volume each, and VolumeAttachments
are not watched through kopf: an `informers.Informer` per kind (one task, a LIST and then a
watch) feeds the same handler functions, without kopf's per-object worker, cause detection and
logger per event, 36 % of the operator's CPU in the benchmark (docs/benchmarks.md); kopf's
share for the VolumeAttachments alone was 3-5 % under churn. They start once every start-up
handler has run (`runtime.all_started`), as kopf starts its watches, so that every controller
has subscribed by then. The handlers of a user's modules on the same streams
(`kopf_csi.on`) get each event after the controllers (`kopf_csi.streams`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from kopf_csi import events, kube, on, runtime
from kopf_csi.caches import object_key
from kopf_csi.informers import Informer
from kopf_csi.streams import Streams


def _apply(memo: kopf.Memo, cache_name: str, event: kopf.RawEvent) -> None:
    cache = getattr(runtime.caches_from_memo(memo), cache_name)
    obj = event["object"]  # the watch event's own dict: plain JSON, not a kopf view
    if event.get("type") == "DELETED":
        cache.remove(obj)
    else:
        cache.store(obj)


@kopf.on.event("storage.k8s.io", "v1", "storageclasses", id="caches.storageclasses")
async def storage_classes(memo: kopf.Memo, event: kopf.RawEvent, **_: Any) -> None:
    _apply(memo, "storage_classes", event)


@kopf.on.event("storage.k8s.io", "v1", "csinodes", id="caches.csinodes")
async def csinodes(memo: kopf.Memo, event: kopf.RawEvent, **_: Any) -> None:
    _apply(memo, "csinodes", event)


@kopf.on.event("", "v1", "nodes", id="caches.nodes")
async def nodes(memo: kopf.Memo, event: kopf.RawEvent, **_: Any) -> None:
    _apply(memo, "nodes", event)


async def attachments(memo: kopf.Memo, event: kopf.RawEvent) -> None:
    if event.get("type") == "DELETED":
        event = {"type": "DELETED", "object": _cached(memo, "attachments", event["object"])}
    _apply(memo, "attachments", event)
    deleted = event.get("type") == "DELETED"
    await runtime.notify(memo, kube.VOLUME_ATTACHMENTS, event["object"], deleted=deleted)
    _forget_if(deleted, event["object"])


async def volumes(memo: kopf.Memo, event: kopf.RawEvent) -> None:
    if event.get("type") == "DELETED":
        # A deletion found by a relist comes as a stub: the controllers get the last state.
        event = {"type": "DELETED", "object": _cached(memo, "volumes", event["object"])}
    _apply(memo, "volumes", event)
    deleted = event.get("type") == "DELETED"
    await runtime.notify(memo, kube.VOLUMES, event["object"], deleted=deleted)
    if (streams := getattr(memo, "streams", None)) is not None:  # `kopf_csi.on` handlers
        streams.volume(event["type"], event["object"])
    _forget_if(deleted, event["object"])


async def claims(memo: kopf.Memo, event: kopf.RawEvent) -> None:
    # No shared claim cache is kept here: each controller keeps the claims it has work for
    # (bound claims at rest are most of a cluster, and nothing reads them).
    deleted = event.get("type") == "DELETED"
    obj = _cached(memo, "claims", event["object"]) if deleted else event["object"]
    await runtime.notify(memo, kube.CLAIMS, obj, deleted=deleted)
    if (streams := getattr(memo, "streams", None)) is not None:  # `kopf_csi.on` handlers
        streams.claim(event["type"], obj)
    _forget_if(deleted, obj)


def _forget_if(deleted: bool, obj: Any) -> None:
    """A deleted object's uid never comes back: the event recorders drop what they kept of
    it (otherwise only their cap would, thousands of dead objects later)."""
    uid = (obj.get("metadata") or {}).get("uid") if deleted else None
    if uid:
        events.forget(str(uid))


def _cached(memo: kopf.Memo, cache_name: str, obj: Any) -> Any:
    """The object, or for a stub (a deletion found by a relist) its last cached state."""
    if "spec" in obj:
        return obj
    cached = getattr(runtime.caches_from_memo(memo), cache_name).get(object_key(obj))
    return obj if cached is None else cached


@kopf.on.startup(id="caches.informers")
async def informers(memo: kopf.Memo, **_: Any) -> None:
    """Start the claim and PV informers once every start-up handler has run (in a task: the
    start-up handlers after this one must run first)."""
    await runtime.wait_for_driver(memo)
    api: kube.KubeClient = memo.api
    # The PVs and VAs were listed into the caches by `lifecycle` a moment ago: watch on from
    # those lists.
    primed = getattr(memo, "primed_versions", None) or {}

    def watched_on(resource: kube.Resource, cache_name: str, handler: Any) -> Informer:
        since = primed.get(resource.plural)
        cache = getattr(memo.caches, cache_name)
        known = [object_key(obj) for obj in cache] if since else []
        return Informer(api, resource, _feeding(memo, handler), since=since, known=known)

    # The handlers of `kopf_csi.on` in the user's modules: on these same streams.
    handlers = on.registered(getattr(memo, "registry", None))
    memo.streams = Streams(handlers, memo, volumes=memo.caches.volumes) if handlers else None
    running = [
        watched_on(kube.VOLUMES, "volumes", volumes),
        watched_on(kube.VOLUME_ATTACHMENTS, "attachments", attachments),
        Informer(api, kube.CLAIMS, _feeding(memo, claims)),
    ]
    memo.informers = running

    async def start() -> None:
        await runtime.all_started(memo)
        for informer in running:
            informer.start()

    starter = asyncio.create_task(start(), name="informers")

    async def stop() -> None:
        starter.cancel()
        for informer in running:
            await informer.stop()
        if memo.streams is not None:
            await memo.streams.stop()

    memo.stoppers.append(stop)


def _feeding(memo: kopf.Memo, handler: Any) -> Any:
    async def on_event(type_: str, obj: Any) -> None:
        await handler(memo, {"type": type_, "object": obj})

    return on_event
