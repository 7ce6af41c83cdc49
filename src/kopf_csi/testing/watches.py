"""What a watch is in the emulated API: a committed `Change`, the listeners the store feeds in
commit order (`Listener`), one HTTP watch's filter and queue of ready lines (`HttpWatch`), and
the in-process change feed for tests and the controller stand-ins (`Subscription`).

Part of the emulator (``emulator.py`` puts the parts together). The store registers listeners
and feeds them (``store.py``); HTTP streams a watch's queue (``serving.py``).
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

from kopf_csi.testing import apimachinery
from kopf_csi.testing.kinds import Body, Kind

__all__ = ["Change", "HttpWatch", "Listener", "Subscription", "dumps", "event_line"]


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def event_line(type_: str, obj: Mapping[str, Any]) -> bytes:
    return (dumps({"type": type_, "object": obj}) + "\n").encode()


class Change:
    """One committed write as listeners see it. ``object``/``old`` are shared: never mutate."""

    __slots__ = ("_line", "kind", "object", "old", "resource_version", "type")

    def __init__(self, type_: str, kind: Kind, obj: Body, old: Body | None) -> None:
        self.type, self.kind, self.object, self.old = type_, kind, obj, old
        self.resource_version = int(obj["metadata"]["resourceVersion"])
        self._line: bytes | None = None

    @property
    def line(self) -> bytes:
        """The watch-event line, encoded once however many watchers send it."""
        if self._line is None:
            self._line = event_line(self.type, self.object)
        return self._line

    def __repr__(self) -> str:
        meta = self.object["metadata"]
        return f"<Change {self.type} {self.kind.plural} {meta.get('namespace')}/{meta['name']}>"


class Listener(Protocol):
    def offer(self, change: Change) -> None: ...
    def close(self) -> None: ...


class HttpWatch:
    """One HTTP watch: filters changes and queues ready-to-send lines (b"" ends the stream)."""

    def __init__(
        self,
        *,
        namespace: str | None,
        selectors: list[apimachinery.Selector],
        sent: collections.Counter[tuple[str, str]],
        sent_bytes: collections.Counter[str],
        render: Callable[[Body], Body] | None = None,
    ) -> None:
        self.namespace = namespace
        self.selectors = selectors
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.sent = sent  # the cluster's count of watch events, by (plural, type)
        self.sent_bytes = sent_bytes
        self.render = render  # what each event carries instead of the object (a Table)

    def line(self, type_: str, obj: Body, shared: bytes | None = None) -> bytes:
        """The event line of `obj`; `shared`, the change's own, when it can be reused."""
        if self.render is not None:
            return event_line(type_, self.render(obj))
        return shared if shared is not None else event_line(type_, obj)

    def put(self, plural: str, type_: str, line: bytes) -> None:
        self.sent[plural, type_] += 1
        self.sent_bytes[plural] += len(line)
        self.queue.put_nowait(line)

    def matches(self, obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return all(selector(obj) for selector in self.selectors)

    def offer(self, change: Change) -> None:
        now, before = self.matches(change.object), self.matches(change.old)
        type_ = change.type
        # As in the real API server, an object entering or leaving a selector's scope is seen
        # by that watch as ADDED or DELETED.
        if type_ == "MODIFIED" and self.selectors and now != before:
            type_ = "ADDED" if now else "DELETED"
        elif not now:
            return
        shared = change.line if type_ == change.type else None
        self.put(change.kind.plural, type_, self.line(type_, change.object, shared))

    def close(self) -> None:
        self.queue.put_nowait(b"")


class _Registry(Protocol):
    """Where a subscription unregisters itself (the cluster's store)."""

    def _unlisten(self, listener: Listener, kinds: tuple[Kind, ...]) -> None: ...


class Subscription:
    """An in-process change feed over some kinds: the emulator's informer (see ``subscribe``)."""

    def __init__(self, cluster: _Registry, kinds: tuple[Kind, ...]) -> None:
        self._cluster, self.kinds = cluster, kinds
        self._queue: asyncio.Queue[Change | None] = asyncio.Queue()

    def offer(self, change: Change) -> None:
        self._queue.put_nowait(change)

    def close(self) -> None:
        self._cluster._unlisten(self, self.kinds)
        self._queue.put_nowait(None)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def pending(self) -> int:
        """Changes queued and not yet taken."""
        return self._queue.qsize()

    def __aiter__(self) -> AsyncIterator[Change]:
        return self

    async def __anext__(self) -> Change:
        change = await self._queue.get()
        if change is None:
            raise StopAsyncIteration
        return change

    async def batch(self) -> list[Change]:
        """Wait for at least one change, then take all queued ones; empty when closed."""
        first = await self._queue.get()
        changes = [first]
        while first is not None and not self._queue.empty():
            changes.append(self._queue.get_nowait())
        if None in changes:
            self._queue.put_nowait(None)  # stay closed for the next caller
        return [change for change in changes if change is not None]
