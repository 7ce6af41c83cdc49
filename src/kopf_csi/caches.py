"""What the operator knows of the cluster: the latest body of each watched object.

The asyncio analogue of client-go's informer caches. kopf's watch handlers keep them current
(`handlers/caches.py`); operations read them instead of calling the API, as the Go sidecars read
their listers. A cache can be stale by the length of one watch event, which is why every write
that depends on what was read is guarded (by the resourceVersion read: 409 when stale).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["Cache", "Caches", "attached_volume", "object_key"]

Body = Mapping[str, Any]


def object_key(obj: Body) -> str:
    """`namespace/name` for namespaced objects, `name` for cluster-scoped ones."""
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def attached_volume(attachment: Body) -> str | None:
    """The PV a VolumeAttachment attaches (`spec.source.persistentVolumeName`): the attachments'
    index, as client-go's indexers, so that a PV's check finds its VAs without reading them all."""
    name = ((attachment.get("spec") or {}).get("source") or {}).get("persistentVolumeName")
    return str(name) if name else None


def _slim(obj: Body, previous: Body | None = None) -> Body:
    """A compact copy: no `metadata.managedFields`, keys and short strings interned.

    `managedFields` is server-side-apply bookkeeping that a real API server adds to every
    object, often its largest part, and nothing here reads it. Interning shares the keys and
    the repeated values ("Bound", the driver's name, the class's name) between the thousands of
    cached objects: a PV parsed from JSON takes 7.3 KB, and 3.7 KB interned, for about 11 µs
    per store (docs/benchmarks.md, "Where the memory goes").

    A new version of a cached object (`previous`, compact already) takes from it every part
    that did not change, a PV's spec above all, instead of compacting it again: comparing runs
    in C, compacting in Python (docs/benchmarks.md, "Operator CPU (fourth session)").
    """
    before = previous or {}
    slim = {_intern(key): _kept(before.get(key), value) for key, value in obj.items()
            if key != "metadata"}  # fmt: skip
    meta = obj.get("metadata")
    if meta is not None:
        was = before.get("metadata") or {}
        slim["metadata"] = {_intern(key): _kept(was.get(key), value) for key, value in meta.items()
                            if key != "managedFields"}  # fmt: skip
    return slim


def _kept(known: Any, value: Any) -> Any:
    """`known` (compact) where it equals `value`, else a compact copy of `value`. (Equal JSON
    of one field is the same JSON: the API's schema fixes each field's type, so a `1` never
    stands where a `true` was.)"""
    return known if known is not None and known == value else _compact(value)


def _unmanaged(obj: Body) -> Body:
    """The object without `metadata.managedFields` (a shallow copy only if it has them)."""
    meta = obj.get("metadata") or {}
    if "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _compact(value: Any) -> Any:
    kind = type(value)  # exact types: JSON gives nothing else, and `is` is cheaper
    if kind is str:
        return _intern(value) if len(value) <= _INTERN_MAX else value
    if kind is dict:
        return {_intern(key): _compact(item) for key, item in value.items()}
    if kind is list:
        return [_compact(item) for item in value]
    return value


def _older(version: str, known: str | None) -> bool:
    """Whether `version` precedes `known`. resourceVersions are opaque to clients, but every
    API server we know gives etcd's revisions, integers that grow; with anything else, the
    version that arrives last wins, as in an informer."""
    if known is None or not (version.isdigit() and known.isdigit()):
        return False
    return int(version) < int(known)


_intern = sys.intern
GONE_REMEMBERED = 1024  # objects deleted by our writes whose DELETED event has not come yet
_INTERN_MAX = 64  # names, uids and enum-like values; not long texts such as messages


class Cache:
    """Objects of one kind by key; stores plain dicts, never kopf bodies.

    `compact` caches (the default) keep interned copies (`_slim`): for kinds with an object per
    volume that stay for the volume's life. Short-lived entries (claims on their way to being
    bound) are kept as they came, minus managedFields: compacting them costs more than it saves.
    """

    def __init__(
        self, *, compact: bool = True, index: Callable[[Body], str | None] | None = None
    ) -> None:
        self._objects: dict[str, Body] = {}
        self._index = index  # one value per object, looked up by `indexed`
        self._indexed: dict[str, dict[str, None]] = {}  # index value -> keys (ordered set)
        self._compact = compact
        self._stores = 0
        self._stored_at: dict[str, int] = {}  # key -> the store that wrote it (for `prune`)
        self._gone: dict[str, str] = {}  # key -> the version our own write deleted (`deleted`)

    def store(self, obj: Body) -> None:
        """Keep a compact copy; the same version again (another handler's view of the same
        watch event, or our own write's answer echoed by the watch) is not copied again, and an
        older one is not kept: the watch event of a version before our own write's answer,
        arriving after it, would undo what we know (the resizer expanded twice)."""
        key = object_key(obj)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version and (gone := self._gone.get(key)) is not None:
            if gone == version or _older(version, gone):
                return  # a watch event from before our write deleted it
            del self._gone[key]  # made again since
        known = self._objects.get(key)
        if version and known is not None:
            known_version = known["metadata"].get("resourceVersion")
            if known_version == version or _older(version, known_version):
                return
        self._objects[key] = kept = _slim(obj, known) if self._compact else _unmanaged(obj)
        if self._index is not None:
            self._reindex(key, known, kept)
        self._stores += 1
        self._stored_at[key] = self._stores

    def remove(self, obj: Body) -> None:
        """Forget the object: its DELETED event (or a LIST without it) says it is gone."""
        key = object_key(obj)
        self._reindex(key, self._objects.pop(key, None), None)
        self._stored_at.pop(key, None)
        self._gone.pop(key, None)

    def deleted(self, obj: Body) -> None:
        """Forget the object, gone by our own write (`obj` is its answer: the last finalizer
        removed), and ignore the watch's events of its versions up to that one until its
        DELETED event comes. A write's answer arrives ahead of the watch: another writer's
        change from just before ours, arriving after it, would otherwise bring the object
        back for a moment, and its controller would work on it again (a second
        ControllerUnpublish for a VA already gone)."""
        self.remove(obj)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self._gone[object_key(obj)] = version
            while len(self._gone) > GONE_REMEMBERED:  # DELETED events lost to a relist
                del self._gone[next(iter(self._gone))]

    def mark(self) -> int:
        """A point in this cache's history, for `prune`: take it before a LIST starts."""
        return self._stores

    def prune(self, listed: set[str], *, before: int) -> list[Body]:
        """Drop and return the objects a complete LIST did not have, unless stored since `mark`.

        A watch misses no event, except around a restart: an object deleted between our
        start-up LIST and kopf's would stay here for good (a "ghost"). An object stored after
        the mark may have been created after the LIST's snapshot, so it stays.
        """
        gone = [
            key for key, stored in self._stored_at.items()
            if stored <= before and key not in listed
        ]  # fmt: skip
        removed = []
        self._gone = {key: version for key, version in self._gone.items() if key in listed}
        for key in gone:
            self._stored_at.pop(key, None)
            obj = self._objects.pop(key, None)
            if obj is not None:
                self._reindex(key, obj, None)
                removed.append(obj)
        return removed

    def indexed(self, value: str) -> list[Body]:
        """The objects whose index value is `value` (a cache made with `index=`)."""
        if self._index is None:
            raise TypeError("this cache has no index")
        return [self._objects[key] for key in self._indexed.get(value, ())]

    def _reindex(self, key: str, old: Body | None, new: Body | None) -> None:
        if self._index is None:
            return
        before = self._index(old) if old is not None else None
        after = self._index(new) if new is not None else None
        if before == after:
            return
        if before is not None and (keys := self._indexed.get(before)) is not None:
            keys.pop(key, None)
            if not keys:
                del self._indexed[before]
        if after is not None:
            self._indexed.setdefault(after, {})[key] = None

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
        self.claims = Cache(compact=False)  # only claims with work ahead: short-lived
        self.volumes = Cache()
        self.storage_classes = Cache()
        self.attachments = Cache(index=attached_volume)
        self.csinodes = Cache()
        self.nodes = Cache()
