"""Kubernetes Events, posted the way client-go's recorder posts them.

A repeated event (same object, type, reason and message) within ten minutes bumps the `count`
and `lastTimestamp` of the first one instead of creating another, as client-go's event
correlator does, so a claim retried for hours leaves one event with a count, not thousands.

Posting is in the background and best effort, as client-go's broadcaster posts: `post` queues
the event and returns. An operation never waits for its events (in a burst of 100 claims, each
claim's `Provisioning` POST waited behind the other 99 before the claim could go on), and a
failure is logged and lost, never the operation's. `SENDERS` senders per recorder post them,
each one event at a time, an object's events always by the same sender: every object's events
arrive in the order they were posted. When the role's API rate limit is reached
(`--kube-api-qps`), events give way: the role's other requests take the tokens first
(`kube.KubeClient.giving_way`), so the work is not held up by the events reporting it. At most
`MAX_QUEUED` events wait; more are dropped with
a warning (client-go drops beyond 1,000; one sender, as client-go has, fell behind a burst of
1,000 claims and dropped 40 % of their events). `flush_all` posts what is queued before the
API closes.

What a recorder remembers of an object (its events to aggregate, its newest event) goes with
the object (`forget`, on its DELETED watch event), and at most `MAX_REMEMBERED` entries of
each kind stay otherwise: under a steady churn of claims, a cap alone kept 4,096 dead
objects' entries each, the operator's largest structure to keep growing after the live set
had stopped (docs/benchmarks.md, "RSS over 10 minutes").
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import socket
import time
import uuid
import weakref
from collections.abc import Mapping
from typing import Any

import structlog

from kopf_csi import kube

__all__ = [
    "NORMAL",
    "WARNING",
    "LastEvent",
    "Recorder",
    "event_name",
    "flush_all",
    "forget",
    "last_event",
]

NORMAL = "Normal"
WARNING = "Warning"
REPEAT_WINDOW = 600.0  # seconds: client-go's correlator aggregates within 10 minutes
MAX_REMEMBERED = 4096
MAX_QUEUED = 10_000  # events waiting per recorder (about 1.5 KB each)
SENDERS = 8  # concurrent POSTs per recorder
DROPS_PER_WARNING = 1000
TRIES_PER_EVENT = 12  # client-go's broadcaster tries an event 12 times ...
RETRY_WAIT = 10.0  # ... 10 s apart: here, at once when the API server is back

log = structlog.get_logger("kopf_csi.events")


_recorders: weakref.WeakSet[Recorder] = weakref.WeakSet()


async def flush_all(timeout: float) -> None:
    """Post what every recorder of this loop has queued, within `timeout` seconds (before the
    API closes). Recorders whose senders run on another loop (another operator in this
    process, a test's that ended) are theirs to flush."""
    loop = asyncio.get_running_loop()
    recorders = [r for r in list(_recorders) if r._runs_on(loop)]
    try:
        await asyncio.wait_for(asyncio.gather(*(r.flush() for r in recorders)), timeout=timeout)
    except TimeoutError:
        # Given up, said once: the senders must not go on against a client about to close.
        log.warning("events_not_posted", queued=sum(r.queued for r in recorders))
        for recorder in recorders:
            await recorder.abandon()


@dataclasses.dataclass(frozen=True)
class LastEvent:
    """The newest event a recorder was asked to post about one object (its message in full)."""

    type: str
    reason: str
    message: str
    at: float  # time.monotonic()


def forget(uid: str) -> None:
    """The object `uid` is gone (its DELETED watch event): no live recorder of this process
    keeps anything of it (a uid never comes back, so its entries could only wait for the cap)."""
    for recorder in list(_recorders):
        recorder.forget(uid)


def last_event(uid: str) -> LastEvent | None:
    """The newest event any live recorder of this process was asked to post about `uid`."""
    found = [r._last[uid] for r in list(_recorders) if uid in r._last]
    return max(found, key=lambda event: event.at) if found else None


@dataclasses.dataclass
class _Queued:
    key: tuple[str, str, str, str]  # (uid, type, reason, message)
    body: dict[str, Any] | None  # None: forget the object, once its events before are sent


@dataclasses.dataclass
class _Posted:
    name: str
    namespace: str
    count: int
    first_seen: float


_last_nanoseconds = 0


def event_name(object_name: str) -> str:
    """`<object>.<nanoseconds since the epoch, in hex>`, as client-go's recorder names an event
    (`fmt.Sprintf("%v.%x", ref.Name, t.UnixNano())`); strictly increasing in this process, so
    that two events in one nanosecond never share a name."""
    global _last_nanoseconds
    _last_nanoseconds = max(time.time_ns(), _last_nanoseconds + 1)
    return f"{object_name}.{_last_nanoseconds:x}"


def _shard(uid: str) -> int:
    """The sender of an object's events: always the same one, so they stay in order."""
    return hash(uid) % SENDERS


def _now() -> str:
    """Now, in UTC, to the second (an Event's times): the text made once per second."""
    return _second_text(int(time.time()))


@functools.lru_cache(maxsize=4)
def _second_text(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def component_name(driver: str) -> str:
    """The library's event source: `<driver>_<hostname>_<uuid>`."""
    return f"{driver}_{socket.gethostname()}_{uuid.uuid4()}"


class Recorder:
    """Posts events about objects through `kube.KubeClient`."""

    def __init__(self, api: kube.KubeClient, *, component: str) -> None:
        self.api = api.giving_way()  # rate-limited: the work goes first, its events after
        self.component = component
        self.host = socket.gethostname()
        # The events posted, to aggregate repeats: by object uid, then (type, reason, message).
        self._posted: dict[str, dict[tuple[str, str, str], _Posted]] = {}
        self._posted_count = 0
        self._queues: list[collections.deque[_Queued]] = [
            collections.deque() for _ in range(SENDERS)
        ]
        self._senders: list[asyncio.Task[None] | None] = [None] * SENDERS
        self.dropped = 0  # events dropped because MAX_QUEUED were waiting
        self._last: dict[str, LastEvent] = {}
        _recorders.add(self)

    def _runs_on(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether this recorder's senders (if it has any yet) run on `loop`."""
        return all(s is None or s.get_loop() is loop for s in self._senders)

    def forget(self, uid: str) -> None:
        """Drop what is remembered of the object `uid` (it is gone; see `forget`): at once, or
        when its sender is busy, after the events queued before (its sender takes the object's
        events in order), so that an event still on its way is not remembered again."""
        self._last.pop(uid, None)
        shard = _shard(uid)
        sender = self._senders[shard]
        if sender is not None and not sender.done():
            self._queues[shard].append(_Queued(key=(uid, "", "", ""), body=None))
        else:
            self._drop_object(uid)

    def _drop_object(self, uid: str) -> None:
        self._posted_count -= len(self._posted.pop(uid, {}))

    @property
    def remembered(self) -> int:
        """Entries kept about objects: events to aggregate and newest events (both capped)."""
        return self._posted_count + len(self._last)

    @property
    def queued(self) -> int:
        """Events waiting to be posted."""
        return sum(len(queue) for queue in self._queues)

    async def post(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        """Queue an event about `obj`; it is posted in the background (see the module)."""
        uid = str(obj.get("metadata", {}).get("uid", ""))
        if (queued := self.queued) >= MAX_QUEUED:
            self.dropped += 1
            if self.dropped % DROPS_PER_WARNING == 1:  # the first, then one per thousand
                log.warning("events_dropped", reason=reason, queued=queued, dropped=self.dropped)
            return
        body = self._event(obj, type_=type_, reason=reason, message=message)
        if uid:  # the newest per object, in full, for the debug endpoint (`last_event`)
            self._last.pop(uid, None)
            if len(self._last) >= MAX_REMEMBERED:
                self._last.pop(next(iter(self._last)))
            self._last[uid] = LastEvent(type_, reason, message, time.monotonic())
        shard = _shard(uid)
        self._queues[shard].append(_Queued(key=(uid, type_, reason, message), body=body))
        sender = self._senders[shard]
        if sender is None or sender.done():
            sender = asyncio.get_running_loop().create_task(self._send_queued(shard))
            self._senders[shard] = sender

    async def flush(self) -> None:
        """Return once every event queued so far is posted (or given up)."""
        for shard in range(SENDERS):
            while (sender := self._senders[shard]) is not None and not sender.done():
                await asyncio.shield(sender)

    async def abandon(self) -> None:
        """Drop what is queued and stop the senders (the API is going away)."""
        for queue in self._queues:
            queue.clear()
        senders = [sender for sender in self._senders if sender is not None]
        for sender in senders:
            sender.cancel()
        await asyncio.gather(*senders, return_exceptions=True)

    async def _send_queued(self, shard: int) -> None:
        queue = self._queues[shard]
        while queue:
            queued = queue.popleft()
            if queued.body is None:
                self._drop_object(queued.key[0])
                continue
            try:
                await self._send(queued)
            except Exception:  # a bug here must not strand the events queued behind this one
                log.exception("event_not_posted", reason=queued.key[2], object_uid=queued.key[0])

    async def _send(self, queued: _Queued) -> None:
        """Post one event; while the API server is away, wait for it (quietly: the outage
        is logged once, by the client), up to `TRIES_PER_EVENT` tries, as client-go does."""
        for attempt in range(1, TRIES_PER_EVENT + 1):
            try:
                await self._send_once(queued)
            except kube.UnavailableError as exc:
                log.debug("event_not_posted_yet", reason=queued.key[2], error=str(exc))
                if attempt < TRIES_PER_EVENT:
                    await self.api.reachability.wait_back(timeout=RETRY_WAIT)
                    continue
                log.warning(
                    "event_not_posted", reason=queued.key[2], object_uid=queued.key[0],
                    error=str(exc), tries=attempt,
                )  # fmt: skip
                self._unremember(queued.key)
            return

    async def _send_once(self, queued: _Queued) -> None:
        key, body = queued.key, queued.body
        assert body is not None  # `_send_queued` took the forgetting marker
        now = time.monotonic()
        seen = self._posted.get(key[0], {}).get(key[1:])
        try:
            if seen is not None and now - seen.first_seen < REPEAT_WINDOW:
                seen.count += 1
                patch = {"count": seen.count, "lastTimestamp": body["lastTimestamp"]}
                await self.api.patch(kube.EVENTS, seen.name, patch, seen.namespace)
                return
            await self.api.create(kube.EVENTS, body, answer=False)  # named by `_event`
        except kube.UnavailableError:
            raise  # waited for and tried again (`_send`)
        except kube.KubeError as exc:
            # Events are best effort: an API that refuses one loses only this.
            log.warning("event_not_posted", reason=key[2], object_uid=key[0], error=str(exc))
            self._unremember(key)
            return
        posted = _Posted(
            name=body["metadata"]["name"],
            namespace=body["metadata"]["namespace"],
            count=1,
            first_seen=now,
        )
        self._unremember(key)
        while self._posted_count >= MAX_REMEMBERED:  # the oldest object's entries go first
            self._posted_count -= len(self._posted.pop(next(iter(self._posted))))
        self._posted.setdefault(key[0], {})[key[1:]] = posted
        self._posted_count += 1

    def _unremember(self, key: tuple[str, str, str, str]) -> None:
        entries = self._posted.get(key[0])
        if entries is not None and entries.pop(key[1:], None) is not None:
            self._posted_count -= 1
            if not entries:
                del self._posted[key[0]]

    def _event(
        self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str
    ) -> dict[str, Any]:
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        now = _now()
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name(meta.get("name", "object")), "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", ""),
                "kind": obj.get("kind", ""),
                "name": meta.get("name", ""),
                "namespace": meta.get("namespace", ""),
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
