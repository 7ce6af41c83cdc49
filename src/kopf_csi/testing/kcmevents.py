"""The events of the kube-controller-manager stand-in (`kcm`), and of the scheduler's
(`scheduling`), as client-go's recorder posts them.

Each distinct event (object, reason, message) is posted once; at a resync, a claim still pending
gets its event again, which client-go's correlator sends as a PATCH of the first (``count`` + 1).
How a post is sent is the caller's: client-go's broadcaster posts from a goroutine of its own,
so nobody waits for it (with a latency model, it lands after its time: `kcmrunning`).
"""

from __future__ import annotations

import datetime
import functools
import time
from collections.abc import Callable

from kopf_csi.testing.emulator import Body, EmulatedCluster

__all__ = ["EventRecorder", "Send"]

Send = Callable[[str, str | None, str | None, Callable[[], Body]], None]
"""Posts an event: the verb, the event's namespace and name (None for a POST), the write."""


class EventRecorder:
    """One controller's events (``source.component``), written as `manager`."""

    def __init__(
        self,
        cluster: EmulatedCluster,
        *,
        manager: str,  # the field manager of the writes
        component: str,  # the event's source and reporting component
        send: Send,
        resyncing: Callable[[], bool],  # whether the sync running now is a resync's
    ) -> None:
        self.cluster = cluster
        self.manager = manager
        self.component = component
        self._send = send
        self._resyncing = resyncing
        self._emitted: dict[tuple[str, str, str], tuple[str, str, int]] = {}

    def record(self, obj: Body, type_: str, reason: str, message: str) -> None:
        """Post an event once per object, reason and message; a resync posts it again, which
        client-go's correlator turns into a PATCH of the first one (`count` + 1)."""
        meta = obj["metadata"]
        key = (meta["uid"], reason, message)
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if (posted := self._emitted.get(key)) is not None:
            if not self._resyncing():
                return
            namespace, name, count = posted
            self._emitted[key] = (namespace, name, count + 1)
            repeat = {"count": count + 1, "lastTimestamp": now}
            patch = functools.partial(
                self.cluster.patch, "events", namespace, name, repeat, manager=self.manager
            )
            self._send("PATCH", namespace, name, patch)
            return
        reference = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"]}
        reference.update(uid=meta["uid"], resourceVersion=meta["resourceVersion"])
        if meta.get("namespace"):
            reference["namespace"] = meta["namespace"]
        namespace = meta.get("namespace") or "default"
        name = f"{meta['name']}.{time.time_ns():x}"  # client-go: "<object>.<unix-nanos, hex>"
        event = {
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": reference,
            "type": type_,
            "reason": reason,
            "message": message,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._send(
            "POST",
            namespace,
            None,
            functools.partial(self.cluster.create, "events", event, manager=self.manager),
        )
        self._emitted[key] = (namespace, name, 1)
