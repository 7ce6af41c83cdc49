"""What the operator knows of the cluster: the latest body of each watched object.

The asyncio analogue of client-go's informer caches. kopf's watch handlers keep them current
(`handlers/caches.py`); operations read them instead of calling the API, as the Go sidecars read
their listers. A cache can be stale by the length of one watch event, which is why every write
that depends on what was read is guarded (a resourceVersion or a JSON-patch `test`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["Cache", "Caches", "object_key"]

Body = Mapping[str, Any]


def object_key(obj: Body) -> str:
    """`namespace/name` for namespaced objects, `name` for cluster-scoped ones."""
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def _slim(obj: Body) -> Body:
    """The object without `metadata.managedFields`: server-side-apply bookkeeping that a real
    API server adds to every object, often its largest part, and that nothing here reads.
    (Interning the cached strings was tried: it lowered the live memory but not the RSS, which
    stays at the start-up peak, and it cost CPU on every store; see docs/benchmarks.md.)
    """
    meta = obj.get("metadata") or {}
    if "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


class Cache:
    """Objects of one kind by key; stores plain dicts, never kopf bodies."""

    def __init__(self) -> None:
        self._objects: dict[str, Body] = {}

    def store(self, obj: Body) -> None:
        self._objects[object_key(obj)] = _slim(obj)

    def remove(self, obj: Body) -> None:
        self._objects.pop(object_key(obj), None)

    def get(self, key: str) -> Body | None:
        return self._objects.get(key)

    def __iter__(self) -> Iterator[Body]:
        return iter(list(self._objects.values()))

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, key: object) -> bool:
        return key in self._objects


class Caches:
    """One cache per kind the controllers read."""

    def __init__(self) -> None:
        self.claims = Cache()
        self.volumes = Cache()
        self.storage_classes = Cache()
        self.attachments = Cache()
        self.csinodes = Cache()
        self.nodes = Cache()
