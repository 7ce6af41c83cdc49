"""The emulated API's object store: every object by kind and key, resourceVersions, uid,
generation, finalizers with deletionTimestamp, the spec/status split, managed fields; each
kind's watch history (410 Gone once evicted) and the listeners fed in commit order; paginated
LISTs on one snapshot; and the Python-level API for tests, which goes through the same write
path as HTTP and returns copies.

Every write stores the object without the fields its schema does not declare, as a real server
prunes every write (``openapi.prune``); HTTP adds the ``fieldValidation`` answers (Strict's
400, Warn's headers) in ``serving``. Writes through the Python API are pruned too, silently, as
Ignore: the controller stand-ins and tests that write through it stand for a real server's
clients, and a stand-in or test that stored a field the real server drops would let the
operator read back what it never could on a real cluster.

Part of the emulator (``emulator.py`` puts the parts together); HTTP serving is built on it
(``serving.py``). Every write is a synchronous function without ``await``: atomic with respect
to every request, which is what makes "no event lost or replayed" hold without locks.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import json
import random
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, cast

from kopf_csi.testing import apimachinery, defaults, openapi
from kopf_csi.testing.apimachinery import StatusError
from kopf_csi.testing.kinds import CRDS, Body, Kind, defined_by, established
from kopf_csi.testing.watches import Change, HttpWatch, Listener, Subscription, dumps, event_line

__all__ = ["PROTECTION_FINALIZERS", "TEST_MANAGER", "ObjectStore", "PatchType", "patch_function"]

PatchType = Literal["merge", "strategic", "json"]

# The API server gives these a Pending phase on create (Go: SetDefaults_PersistentVolume[Claim],
# the pod strategy's PrepareForCreate).
_PENDING_ON_CREATE = {("", "persistentvolumeclaims"), ("", "persistentvolumes"), ("", "pods")}
# Server-owned metadata: a client's values are ignored on every write.
_SERVER_METADATA = (
    "name", "namespace", "uid", "creationTimestamp", "resourceVersion", "generation",
    "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields",
)  # fmt: skip
# The StorageObjectInUseProtection admission plugin (on by default) puts these on every new
# claim and volume; kube-controller-manager's pvc- and pv-protection controllers remove them.
PROTECTION_FINALIZERS = {
    ("", "persistentvolumeclaims"): "kubernetes.io/pvc-protection",
    ("", "persistentvolumes"): "kubernetes.io/pv-protection",
}
TEST_MANAGER = "kopf-csi-tests"
"""The field manager of writes through the Python-level API (a test acting as a user)."""
_SNAPSHOTS_KEPT = 16  # paginated LISTs whose `continue` tokens still work
_EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)

_T = TypeVar("_T")
Check = Callable[[list[str]], None] | None
"""What a write does with the unknown fields it drops, besides dropping them (HTTP's answers)."""


def _clone(obj: _T) -> _T:
    return cast(_T, json.loads(dumps(obj)))  # faster than deepcopy; makes tuples lists


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ObjectStore:
    """The objects and the write path; ``EmulatedCluster`` serves them over HTTP."""

    def __init__(
        self,
        *,
        kinds: tuple[Kind, ...],
        history: int,  # watch events kept per kind; older resourceVersions get 410
        storage_protection: bool,  # the StorageObjectInUseProtection admission plugin
    ) -> None:
        self.storage_protection = storage_protection
        # Every write attempted, over HTTP or the Python API, failed ones too: (field manager,
        # verb, plural or plural/subresource) -> count. The controller stand-ins write through
        # the Python API, so `requests` alone misses them.
        self.writes: collections.Counter[tuple[str, str, str]] = collections.Counter()
        # The unknown fields dropped from what was written (``openapi.prune``): (field manager,
        # plural, path) -> count. A real server drops them too, so a writer that reads one back
        # would never see it: tests check the operator's writes leave nothing here.
        self.dropped: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self._kinds: dict[tuple[str, str, str], Kind] = {}
        self._names: dict[str, Kind] = {}
        self._store: dict[Kind, dict[tuple[str, str], Body]] = {}
        self._history: dict[Kind, collections.deque[Change]] = {}
        self._history_limit = max(1, history)
        self._evicted: dict[Kind, int] = {}  # the newest resourceVersion dropped from history
        self._listeners: dict[Kind, set[Listener]] = {}
        self._rv = 0
        self._snapshots: dict[str, tuple[int, list[Body]]] = {}  # paginated LISTs in progress
        for kind in kinds:
            self.serve(kind)

    @property
    def resource_version(self) -> int:
        return self._rv

    # --- Python-level API (same write path as HTTP; returns copies) -------------------------

    def serve(self, kind: Kind) -> None:
        """Serve one more resource from now on, as a CRD once established."""
        self._kinds[kind.group, kind.version, kind.plural] = kind
        for alias in (kind.plural, kind.kind, f"{kind.api_version}/{kind.plural}"):
            self._names.setdefault(alias, kind)
        self._store.setdefault(kind, {})
        self._history.setdefault(kind, collections.deque(maxlen=self._history_limit))
        self._evicted.setdefault(kind, 0)
        self._listeners.setdefault(kind, set())

    def kind(self, resource: str) -> Kind:
        """Resolve a plural, a Kind name or ``group/version/plural`` (``v1/plural`` for core)."""
        try:
            return self._names[resource]
        except KeyError:
            raise KeyError(f"unknown resource {resource!r}") from None

    def get(self, resource: str, namespace: str | None, name: str) -> Body | None:
        kind = self.kind(resource)
        obj = self._store[kind].get(self._key(kind, namespace, name))
        return None if obj is None else _clone(obj)

    def objects(
        self,
        resource: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Body]:
        return _clone(self._list(self.kind(resource), namespace, label_selector, field_selector))

    def create(
        self,
        resource: str,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        manager: str = TEST_MANAGER,
    ) -> Body:
        kind = self.kind(resource)
        self._count_write(manager, "create", kind, None)
        return _clone(self._create(kind, namespace, _clone(body), manager))

    def replace(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        *,
        subresource: str | None = None,
        manager: str = TEST_MANAGER,
    ) -> Body:
        new = _clone(body)
        kind = self.kind(resource)
        self._count_write(manager, "update", kind, subresource)
        return _clone(self._update(kind, namespace, name, lambda old: new, subresource, manager))

    def patch(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        manager: str = TEST_MANAGER,
    ) -> Body:
        kind = self.kind(resource)
        patcher, body = patch_function(kind, patch_type), _clone(patch)
        self._count_write(manager, "patch", kind, subresource)
        return _clone(
            self._update(
                kind, namespace, name, lambda old: patcher(old, body), subresource, manager
            )
        )

    def delete(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        *,
        preconditions: Mapping[str, str] | None = None,
        manager: str = TEST_MANAGER,
    ) -> Body:
        kind = self.kind(resource)
        self._count_write(manager, "delete", kind, None)
        return _clone(self._delete(kind, namespace, name, preconditions))

    def subscribe(self, *resources: str, initial: bool = False) -> Subscription:
        """Feed every change of these kinds (all kinds if none), from now on.

        With ``initial``, first an ADDED change for every existing object, like a watch without
        a resourceVersion. Registration is immediate: nothing committed after the call is missed.
        """
        kinds = tuple(self.kind(r) for r in resources) if resources else tuple(self._store)
        subscription = Subscription(self, kinds)
        for kind in kinds:
            if initial:
                for key in sorted(self._store[kind]):
                    subscription.offer(Change("ADDED", kind, self._store[kind][key], None))
            self._listeners[kind].add(subscription)
        return subscription

    async def wait_for(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        predicate: Callable[[Body | None], bool] | None = None,
        *,
        timeout: float = 10.0,
    ) -> Body | None:
        """Wait until ``predicate(object or None)`` holds (default: the object exists)."""
        check = predicate if predicate is not None else (lambda obj: obj is not None)
        obj = None
        try:
            async with asyncio.timeout(timeout):
                with self.subscribe(resource) as feed:
                    while not check(obj := self.get(resource, namespace, name)):
                        await feed.batch()
        except TimeoutError:
            where = f"{resource} {namespace or ''}/{name}"
            raise TimeoutError(
                f"{where} did not get there in {timeout}s; last seen: {obj!r}"
            ) from None
        return obj

    # --- The write path ------------------------------------------------------------------

    def _count_write(self, manager: str, verb: str, kind: Kind, subresource: str | None) -> None:
        resource = f"{kind.plural}/{subresource}" if subresource else kind.plural
        self.writes[manager, verb, resource] += 1

    def _key(self, kind: Kind, namespace: str | None, name: str) -> tuple[str, str]:
        return (namespace or "", name) if kind.namespaced else ("", name)

    def _existing(self, kind: Kind, namespace: str | None, name: str) -> Body:
        obj = self._store[kind].get(self._key(kind, namespace, name))
        if obj is None:
            raise apimachinery.not_found(kind.plural, kind.group, name)
        return obj

    def _page(
        self, kind: Kind, namespace: str | None, params: Mapping[str, str]
    ) -> tuple[list[Body], dict[str, Any]]:
        """One page of a LIST: everything, or `limit` items with a `continue` token.

        As with the real API server, every page of one list shows the same snapshot: the first
        page takes it, and the token names it. Only the newest few snapshots are kept; an
        unknown or expired token is 410 Gone, and the client lists again from the start.
        """
        token = params.get("continue")
        if token:
            snapshot = self._snapshots.get(token.partition(":")[0])
            if snapshot is None:
                raise StatusError(410, _EXPIRED_CONTINUE)
            rv, items = snapshot
            start = int(token.partition(":")[2] or 0)
        else:
            rv = self._rv
            items = self._list(
                kind, namespace, params.get("labelSelector"), params.get("fieldSelector")
            )
            start = 0
        limit = int(params.get("limit") or 0)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit <= 0 or start + limit >= len(items):
            return items[start:], meta
        if not token:
            snapshot_id = uuid.uuid4().hex
            self._snapshots[snapshot_id] = (rv, items)
            while len(self._snapshots) > _SNAPSHOTS_KEPT:
                self._snapshots.pop(next(iter(self._snapshots)))
        else:
            snapshot_id = token.partition(":")[0]
        meta["continue"] = f"{snapshot_id}:{start + limit}"
        meta["remainingItemCount"] = len(items) - start - limit
        return items[start : start + limit], meta

    def _list(
        self,
        kind: Kind,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Body]:
        selectors = [
            s
            for s in (
                apimachinery.parse_label_selector(label_selector),
                apimachinery.parse_field_selector(field_selector),
            )
            if s is not None
        ]
        store = self._store[kind]
        return [
            store[key]
            for key in sorted(store)
            if (namespace is None or key[0] == namespace) and all(s(store[key]) for s in selectors)
        ]

    def _create(
        self, kind: Kind, namespace: str | None, body: Any, manager: str, check: Check = None
    ) -> Body:
        if not isinstance(body, dict):
            raise StatusError(400, "the body must be an object")
        body = defaults.apply(kind, self._prune(kind, body, manager, check))
        meta = dict(body.get("metadata") or {})
        if kind.namespaced:
            if namespace and meta.get("namespace") not in (None, "", namespace):
                raise StatusError(400, "the namespace of the object does not match the request")
            namespace = namespace or meta.get("namespace")
            if not namespace:
                raise StatusError(400, "a namespace is required for a namespaced kind")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        name = meta.get("name")
        if not name and not meta.get("generateName"):
            raise StatusError(422, "metadata.name or metadata.generateName is required")
        while not name or self._key(kind, namespace, name) in self._store[kind]:
            if meta.get("name"):
                raise StatusError(
                    409, f'{kind.plural} "{name}" already exists', reason="AlreadyExists"
                )
            name = meta["generateName"] + "".join(
                random.choices("bcdfghjklmnpqrstvwxz2456789", k=5)
            )
        for field in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
        ):
            meta.pop(field, None)
        meta.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        protection = PROTECTION_FINALIZERS.get((kind.group, kind.plural))
        if self.storage_protection and protection is not None:
            finalizers: list[str] = list(meta.get("finalizers") or [])
            meta["finalizers"] = finalizers + [protection] * (protection not in finalizers)
        obj: Body = {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": _tidy(meta)}
        obj.update((k, v) for k, v in body.items() if k not in ("apiVersion", "kind", "metadata"))
        if kind.status:
            obj.pop("status", None)  # the status is written through /status only
        status = obj.get("status") or {}  # a kind without /status (pods here) keeps its own
        if (kind.group, kind.plural) in _PENDING_ON_CREATE and not status.get("phase"):
            obj["status"] = {**status, "phase": "Pending"}
        if (kind.group, kind.plural) == CRDS and defined_by(obj):
            obj["status"] = established(obj, _now())  # served at once: established at once
        obj["metadata"]["managedFields"] = self._managed(None, obj, manager, None)
        return self._commit(kind, self._key(kind, namespace, name), "ADDED", obj, None)

    def _prune(self, kind: Kind, obj: Body, manager: str, check: Check) -> Body:
        """The object without its unknown fields, counted; `check` (HTTP's ``fieldValidation``)
        sees them first, and may refuse the write."""
        pruned, unknown = openapi.prune(kind, obj)
        if check is not None:
            check(unknown)
        for path in unknown:
            self.dropped[manager, kind.plural, path] += 1
        return cast(Body, pruned)

    def _managed(self, old: Body | None, new: Body, manager: str, sub: str | None) -> list[Body]:
        return apimachinery.managed_fields(old, new, manager=manager, subresource=sub, time=_now())

    def _update(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        transform: Callable[[Body], Any],
        subresource: str | None,
        manager: str,
        check: Check = None,
    ) -> Body:
        old = self._existing(kind, namespace, name)
        if subresource is not None and (subresource != "status" or not kind.status):
            raise StatusError(404, f"{kind.plural} has no subresource {subresource!r}")
        proposed = transform(old)
        if not isinstance(proposed, dict):
            raise StatusError(422, "the result must be an object")
        proposed = defaults.apply(kind, self._prune(kind, proposed, manager, check))
        meta = proposed.get("metadata") or {}
        if meta.get("resourceVersion") not in (None, "", old["metadata"]["resourceVersion"]):
            raise apimachinery.conflict(kind.plural, kind.group, name)
        if meta.get("name", name) != name:
            raise StatusError(400, "the name of the object does not match the name in the URL")
        new = self._merge_write(kind, old, proposed, subresource)
        if new == old:
            return old  # a no-op write bumps nothing and notifies no one, as in the real server
        new["metadata"] = {
            **new["metadata"],
            "managedFields": self._managed(old, new, manager, subresource),
        }
        deleted = new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers")
        return self._commit(
            kind, self._key(kind, namespace, name), "DELETED" if deleted else "MODIFIED", new, old
        )

    def _merge_write(self, kind: Kind, old: Body, proposed: Body, subresource: str | None) -> Body:
        """Keep what this write may not change: server metadata, and spec vs status."""
        if subresource == "status":
            new = {k: v for k, v in old.items() if k != "status"}
            if "status" in proposed:
                new["status"] = proposed["status"]
            return new
        old_meta = old["metadata"]
        meta = {
            k: v for k, v in (proposed.get("metadata") or {}).items() if k not in _SERVER_METADATA
        }
        meta.update((k, old_meta[k]) for k in _SERVER_METADATA if k in old_meta)
        meta = _tidy(meta)
        if old_meta.get("deletionTimestamp") and set(meta.get("finalizers", [])) - set(
            old_meta.get("finalizers", [])
        ):
            raise StatusError(
                422, "Forbidden: no new finalizers can be added if the object is being deleted"
            )
        new = {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta}
        new.update(
            (k, v)
            for k, v in proposed.items()
            if k not in ("apiVersion", "kind", "metadata", "status")
        )
        if "status" in (old if kind.status else proposed):
            new["status"] = (old if kind.status else proposed)["status"]
        if _spec_of(new) != _spec_of(old):
            meta["generation"] = old_meta.get("generation", 1) + 1
        return new

    def _delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        preconditions: Mapping[str, Any] | None,
    ) -> Body:
        old = self._existing(kind, namespace, name)
        meta = old["metadata"]
        for field, wanted in (preconditions or {}).items():
            if wanted is not None and meta.get(field) != wanted:
                message = f"Precondition failed: {field} in precondition: {wanted}"
                raise StatusError(409, f"{message}, in object meta: {meta.get(field)}")
        key = self._key(kind, namespace, name)
        if not meta.get("finalizers"):
            return self._commit(kind, key, "DELETED", old, old)
        if meta.get("deletionTimestamp"):
            return old
        new = {
            **old,
            "metadata": {**meta, "deletionTimestamp": _now(), "deletionGracePeriodSeconds": 0},
        }
        return self._commit(kind, key, "MODIFIED", new, old)

    def _delete_collection(
        self, kind: Kind, namespace: str | None, params: Mapping[str, str]
    ) -> Body:
        """DELETE on a collection (its selectors apply): each object as a DELETE would; the
        answer lists them as they were deleted or marked, as the real server's does."""
        selected = self._list(
            kind, namespace, params.get("labelSelector"), params.get("fieldSelector")
        )
        items = [
            self._delete(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"], None)
            for obj in selected
        ]
        meta = {"resourceVersion": str(self._rv)}
        return {
            "apiVersion": kind.api_version,
            "kind": f"{kind.kind}List",
            "metadata": meta,
            "items": items,
        }

    def _commit(
        self, kind: Kind, key: tuple[str, str], type_: str, obj: Body, old: Body | None
    ) -> Body:
        self._rv += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self._rv)}}
        if type_ == "DELETED":
            del self._store[kind][key]
        else:
            self._store[kind][key] = obj
        if (kind.group, kind.plural) == CRDS and type_ != "DELETED":
            self._serve_new(defined_by(obj))  # before its watchers hear of it: kopf scans then
        change = Change(type_, kind, obj, old)
        history = self._history[kind]
        if len(history) == history.maxlen:
            self._evicted[kind] = history[0].resource_version
        history.append(change)
        for listener in list(self._listeners[kind]):
            listener.offer(change)
        return obj

    def _serve_new(self, kinds: tuple[Kind, ...]) -> None:
        """Serve a CRD's resources at once, as a real server once the CRD is established (what
        is served already, built in or from an earlier write, stays as it is; a deleted CRD's
        resources stay served)."""
        for kind in kinds:
            if (kind.group, kind.version, kind.plural) not in self._kinds:
                self.serve(kind)

    def _unlisten(self, listener: Listener, kinds: tuple[Kind, ...]) -> None:
        for kind in kinds:
            self._listeners[kind].discard(listener)

    def _start_watch(
        self, kind: Kind, watch: HttpWatch, *, since: str | None, initial: bool, end_bookmark: bool
    ) -> None:
        """Queue the backlog and register, atomically: nothing lost, nothing replayed."""
        if initial:
            for obj in self._list(kind, watch.namespace):
                if watch.matches(obj):
                    watch.put(kind.plural, "ADDED", watch.line("ADDED", obj))
            if end_bookmark:
                watch.queue.put_nowait(self._bookmark(kind, initial_end=True))
        elif since is not None:
            try:
                since_rv = int(since)
            except ValueError:
                raise StatusError(400, f"invalid resourceVersion: {since!r}") from None
            if since_rv < self._evicted[kind]:
                raise StatusError(
                    410,
                    f"too old resource version: {since_rv} ({self._evicted[kind]})",
                    reason="Expired",
                )
            for change in self._history[kind]:
                if change.resource_version > since_rv:
                    watch.offer(change)
        self._listeners[kind].add(watch)

    def _bookmark(self, kind: Kind, *, initial_end: bool = False) -> bytes:
        meta: Body = {"resourceVersion": str(self._rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return event_line(
            "BOOKMARK", {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta}
        )


def _tidy(meta: Body) -> Body:
    """Drop empty finalizers/labels/annotations: the API server omits them (omitempty)."""
    return {
        k: v
        for k, v in meta.items()
        if not (k in ("finalizers", "labels", "annotations") and not v)
    }


def _spec_of(obj: Body) -> Body:
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}


_PATCHERS: dict[PatchType, Callable[[Any, Any], Any]] = {
    "merge": apimachinery.merge_patch,
    "strategic": apimachinery.strategic_merge_patch,
    "json": apimachinery.json_patch,
}


def patch_function(kind: Kind, patch_type: PatchType) -> Callable[[Any, Any], Any]:
    """The patch algorithm; custom resources have no strategic merge (their schema has no
    patch strategies), which a real API server answers with this 415."""
    if patch_type == "strategic" and kind.custom:
        raise StatusError(
            415,
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json, "
            "application/apply-patch+yaml",
            reason="UnsupportedMediaType",
        )
    return _PATCHERS[patch_type]
