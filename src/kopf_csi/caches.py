"""What the operator knows of the cluster: the latest body of each watched object.

The asyncio analogue of client-go's informer caches. kopf's watch handlers keep them current
(`handlers/caches.py`); operations read them instead of calling the API, as the Go sidecars read
their listers. A cache can be stale by the length of one watch event, which is why every write
that depends on what was read is guarded (a resourceVersion or a JSON-patch `test`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["Cache", "Caches", "object_key"]

Body = Mapping[str, Any]
INTERNED_LENGTH = 64  # names, labels and phases repeat; longer strings rarely do


def object_key(obj: Body) -> str:
    """`namespace/name` for namespaced objects, `name` for cluster-scoped ones."""
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def _slim(obj: Body) -> Body:
    """A compact copy: no `metadata.managedFields`, and every key and short string interned.

    managedFields is server-side-apply bookkeeping that a real API server adds to every object,
    often its largest part, and nothing here reads it. Interning shares the strings that repeat
    from object to object (keys, driver and class names, phases): a parsed PV takes about 7.6 KB
    of Python objects, and thousands of them were most of the operator's memory
    (docs/benchmarks.md).
    """
    meta = obj.get("metadata") or {}
    if "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    compact: Body = _intern(obj)
    return compact


def _intern(value: Any) -> Any:
    if isinstance(value, str):
        return sys.intern(value) if len(value) <= INTERNED_LENGTH else value
    if isinstance(value, dict):
        return {sys.intern(k): _intern(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_intern(item) for item in value]
    return value


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
