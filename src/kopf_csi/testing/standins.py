"""The common frame of the in-process controller stand-ins (`kcm`, `snapshots`).

A stand-in watches some kinds of an `EmulatedCluster` through one change feed and runs as a
background task for the duration of ``async with``: leaving it closes the feed and cancels
the task. It keeps the objects it has seen in a local cache (its informers), updated from the
feed (`_observe`) and at once from its own writes (`_put`). What it does with them is the
subclass's `_run`.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
from types import TracebackType
from typing import ClassVar, Self

from kopf_csi.testing import apimachinery
from kopf_csi.testing.emulator import Body, Change, EmulatedCluster, Subscription

__all__ = ["PassingStandIn", "StandIn"]

log = logging.getLogger(__name__)


class StandIn(abc.ABC):
    """``async with SomeStandIn(cluster): ...`` runs `_run` on a feed of the `watched` kinds."""

    watched: ClassVar[tuple[str, ...]]  # the plurals subscribed to (and cached)
    task_name: ClassVar[str]
    manager: ClassVar[str]  # the field manager of its writes (the real controller's name)

    def __init__(self, cluster: EmulatedCluster) -> None:
        self.cluster = cluster
        self._cache: dict[str, dict[tuple[str, str], Body]] = {p: {} for p in self.watched}
        self._feed: Subscription | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._feed = self.cluster.subscribe(*self.watched, initial=True)
        self._task = asyncio.create_task(self._run(self._feed), name=self.task_name)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._feed is not None:
            self._feed.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @abc.abstractmethod
    async def _run(self, feed: Subscription) -> None:
        """Take the feed's batches until it closes."""

    def _observe(self, change: Change) -> None:
        """Update the cache from one change of the feed."""
        meta = change.object["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        if change.type == "DELETED":
            self._cache[change.kind.plural].pop(key, None)
        else:
            self._cache[change.kind.plural][key] = change.object

    def _put(self, plural: str, obj: Body) -> Body:
        """Record our own write at once, so the rest of this pass sees it (cache objects are
        shared with the emulator and never mutated: every write builds new dicts)."""
        meta = obj["metadata"]
        self._cache[plural][(meta.get("namespace") or "", meta["name"])] = obj
        return obj

    def _patch(self, plural: str, obj: Body, patch: Body, *, status: bool = False) -> Body:
        """A merge patch (of the status, with `status`) as this controller, cached at once."""
        meta = obj["metadata"]
        result = self.cluster.patch(
            plural,
            meta.get("namespace"),
            meta["name"],
            patch,
            subresource="status" if status else None,
            manager=self.manager,
        )
        return self._put(plural, result)

    def _update(self, plural: str, obj: Body, changes: Body, *, status: bool = False) -> Body:
        """An update (PUT, of the status with `status`) as this controller, cached at once: the
        cached object with `changes` merged in (merge-patch rules), guarded by its
        resourceVersion, as client-go's ``Update``/``UpdateStatus`` from an informer's copy."""
        meta = obj["metadata"]
        result = self.cluster.replace(
            plural,
            meta.get("namespace"),
            meta["name"],
            apimachinery.merge_patch(obj, changes),
            subresource="status" if status else None,
            manager=self.manager,
        )
        return self._put(plural, result)

    def _create(self, plural: str, body: Body) -> Body:
        return self._put(plural, self.cluster.create(plural, body, manager=self.manager))


class PassingStandIn(StandIn):
    """A stand-in that makes one level-triggered pass (`sync`) after each batch of changes;
    a failed pass is logged and the next change retries, as a controller carries on."""

    async def _run(self, feed: Subscription) -> None:
        while changes := await feed.batch():
            for change in changes:
                self._observe(change)
            try:
                self.sync()
            except Exception:
                log.exception("%s stand-in pass failed", self.task_name)

    @abc.abstractmethod
    def sync(self) -> None:
        """One pass over what the cache holds."""
