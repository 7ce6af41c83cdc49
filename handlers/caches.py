"""Keep the shared caches current from kopf's watches (the informers of the Go sidecars).

`lifecycle.connect` primes the caches with one LIST per kind before any controller starts (the
Go sidecars' WaitForCacheSync); these handlers apply every later change. Watch-event handlers
store nothing on the objects and are never retried, which is right for a cache. They are
coroutines so that kopf runs them in its loop, not in executor threads.
"""

from __future__ import annotations

from typing import Any

import kopf

from kopf_csi import runtime


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
