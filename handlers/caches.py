"""Keep the shared caches current from kopf's watches (the informers of the Go sidecars).

`lifecycle.connect` primes the caches with one LIST per kind before any controller starts (the
Go sidecars' WaitForCacheSync); these handlers apply every later change. Watch-event handlers
store nothing on the objects and are never retried, which is right for a cache. They are
coroutines so that kopf runs them in its loop, not in executor threads.

PersistentVolumes, PersistentVolumeClaims and VolumeAttachments have one handler each here,
which updates the cache and then passes the event to every controller that subscribed to the
kind (`runtime.subscribe`): the provisioner, the attacher, the resizer. The controllers need
this module loaded.
"""

from __future__ import annotations

from typing import Any

import kopf

from kopf_csi import kube, runtime


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


@kopf.on.event("storage.k8s.io", "v1", "volumeattachments", id="caches.volumeattachments")
async def attachments(memo: kopf.Memo, event: kopf.RawEvent, **_: Any) -> None:
    _apply(memo, "attachments", event)
    deleted = event.get("type") == "DELETED"
    await runtime.notify(memo, kube.VOLUME_ATTACHMENTS, event["object"], deleted=deleted)


@kopf.on.event("", "v1", "persistentvolumes", id="caches.volumes")
async def volumes(memo: kopf.Memo, event: kopf.RawEvent, **_: Any) -> None:
    _apply(memo, "volumes", event)
    deleted = event.get("type") == "DELETED"
    await runtime.notify(memo, kube.VOLUMES, event["object"], deleted=deleted)


@kopf.on.event("", "v1", "persistentvolumeclaims", id="caches.claims")
async def claims(memo: kopf.Memo, event: kopf.RawEvent, **_: Any) -> None:
    # No shared claim cache is kept here: each controller keeps the claims it has work for
    # (bound claims at rest are most of a cluster, and nothing reads them).
    deleted = event.get("type") == "DELETED"
    await runtime.notify(memo, kube.CLAIMS, event["object"], deleted=deleted)
