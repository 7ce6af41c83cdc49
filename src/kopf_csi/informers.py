"""Our own list-and-watch of the busiest kinds (claims, PVs), outside kopf's per-object machinery.

On a real API server a claim and its PV bring about six watch events each (real-apiserver.md).
Through kopf, every one of them costs a per-object worker task, its queue, cause detection, a
per-event logger and handler invocation: 36 % of the operator's CPU in the benchmark's profile,
for handlers that only update a cache and pass the event on (docs/benchmarks.md). An
`Informer` does what client-go's reflector does instead, in one task per kind: a LIST (in
pages) and then a watch from the list's resourceVersion, each event handed to `on_event` in
order; a watch that ends is resumed from the last resourceVersion seen (bookmarks included),
and one that is too old (410 Gone) lists again, reporting the objects that disappeared in the
gap as DELETED. Errors are logged and retried with a backoff, forever, until cancelled; while
the API server is away (`kube.UnavailableError`), quietly, and at once when it is back.

Each listed object is passed as ADDED, as kopf passes its initial listing; a DELETED object
found only by a relist is passed as a stub (`metadata.name`, `metadata.namespace`): its last
state is not kept here. An informer given `since` (a LIST someone else has just made and
passed on, with the keys it held as `known`) skips its first LIST and watches on from there:
the PVs are listed once at start-up, not twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import structlog

from kopf_csi import kube
from kopf_csi.caches import object_key

__all__ = ["Informer", "OnEvent"]

OnEvent = Callable[[str, dict[str, Any]], Awaitable[None]]
"""`(event type, object)`: ADDED, MODIFIED or DELETED, and the object as sent."""

RETRY_FIRST = 0.2
RETRY_MAX = 5.0
EVENT_ATTEMPTS = 3  # tries of one watch event's handling before it is skipped

log = structlog.get_logger("kopf_csi.informers")


class Informer:
    """``await Informer(api, kube.VOLUMES, on_event).run()``: list, then watch, forever."""

    def __init__(
        self,
        api: kube.KubeClient,
        resource: kube.Resource,
        on_event: OnEvent,
        *,
        timeout: int = kube.WATCH_TIMEOUT,
        since: str | None = None,
        known: Iterable[str] = (),
    ) -> None:
        self.api = api
        self.resource = resource
        self.on_event = on_event
        self.timeout = timeout
        self.synced = asyncio.Event()  # the first LIST has been passed on
        self._known: set[str] = set(known)  # the keys of the objects that exist, as we know
        self._version: str | None = since or None  # the last version passed on; None: relist
        self._task: asyncio.Task[None] | None = None
        self._failing: tuple[str | None, int] = (None, 0)  # an event failing, and how often
        if self._version is not None:
            self.synced.set()  # listed already, by whoever passed `since`

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name=f"informer {self.resource.plural}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def run(self) -> None:
        """Forever: a watch that breaks off (even mid-stream) resumes from the last event
        passed on, never from where it started; only a 410 lists again."""
        delay = RETRY_FIRST
        while True:
            try:
                if self._version is None:
                    self._version = await self._relist()
                    self.synced.set()
                started = asyncio.get_running_loop().time()
                if await self._follow() or asyncio.get_running_loop().time() - started > 1.0:
                    delay = RETRY_FIRST
                else:  # a watch that ended at once with nothing (a proxy?): not in a tight loop
                    log.debug("watch_short", resource=self.resource.plural, delay=delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX)
            except kube.KubeError as exc:
                if exc.status == 410:  # too old: list again (the gap's deletions come out)
                    log.debug("watch_expired", resource=self.resource.plural, error=str(exc))
                    self._version = None
                    continue
                delay = await self._backoff(exc, delay)
            except (TimeoutError, ValueError) as exc:  # a cut mid-line, a timeout
                delay = await self._backoff(exc, delay)
            except Exception as exc:  # a bug in a listener: say so, never stop watching
                log.exception("informer_listener_failed", resource=self.resource.plural)
                delay = await self._backoff(exc, delay)

    async def _backoff(self, exc: Exception, delay: float) -> float:
        if kube.is_unavailable(exc):
            # The API server is away: `kube.reachability` said so once, for every request;
            # watch again as soon as it is back (it sees that with a probe), or after `delay`.
            log.debug("watch_failed", resource=self.resource.plural, error=str(exc))
            back = await self.api.reachability.wait_back(timeout=delay)
            return RETRY_FIRST if back else min(delay * 2, RETRY_MAX)
        log.warning(
            "watch_failed", resource=self.resource.plural, error=str(exc) or repr(exc), delay=delay
        )
        await asyncio.sleep(delay)
        return min(delay * 2, RETRY_MAX)

    async def _relist(self) -> str:
        versions: list[str] = []
        listed: set[str] = set()
        restarts = 0
        async for page in self.api.pages(self.resource, versions=versions):
            if len(versions) > restarts + 1:  # the pager started over (an expired token)
                restarts = len(versions) - 1
                listed.clear()
            for obj in page:
                listed.add(object_key(obj))
                await self._deliver("ADDED", obj)
        for key in sorted(self._known - listed):
            namespace, _, name = key.rpartition("/")
            await self._deliver("DELETED", self._stub(namespace, name))
        self._known = listed
        return versions[-1] if versions else ""  # the snapshot the last (complete) pass showed

    async def _follow(self) -> int:
        """One watch request, to its end, from `_version`, which follows every event.

        Returns how many events came. An event whose handling fails is retried (the watch
        resumes from before it) up to `EVENT_ATTEMPTS` times, then skipped with an error:
        one bad object must not hold up every later event of its kind."""
        events = 0
        async for event in self.api.watch(
            self.resource, resource_version=self._version or "", timeout=self.timeout
        ):
            events += 1
            obj = event.get("object") or {}
            seen = (obj.get("metadata") or {}).get("resourceVersion")
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                try:
                    await self._deliver(str(event["type"]), obj)
                except Exception:
                    if not self._gives_up_on(seen):
                        raise  # `run` logs it; the watch resumes from before this event
                    log.exception(
                        "informer_event_skipped", resource=self.resource.plural,
                        type=event["type"], resource_version=seen,
                    )  # fmt: skip
            if seen:
                self._version = str(seen)
        return events

    def _gives_up_on(self, version: str | None) -> bool:
        """Count the failures of the event at `version` in a row: enough to skip it?"""
        if version is None or version != self._failing[0]:
            self._failing = (version, 0)
        self._failing = (version, self._failing[1] + 1)
        return version is None or self._failing[1] >= EVENT_ATTEMPTS

    async def _deliver(self, type_: str, obj: dict[str, Any]) -> None:
        if type_ == "DELETED":
            self._known.discard(object_key(obj))
        else:
            self._known.add(object_key(obj))
        await self.on_event(type_, obj)

    @staticmethod
    def _stub(namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": namespace} if namespace else {"name": name}}
