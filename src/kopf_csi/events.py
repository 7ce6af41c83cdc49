"""Kubernetes Events, posted the way client-go's recorder posts them.

A repeated event (same object, type, reason and message) within ten minutes bumps the `count`
and `lastTimestamp` of the first one instead of creating another, as client-go's event
correlator does, so a claim retried for hours leaves one event with a count, not thousands.
Posting is best effort: a failure is logged and never fails the operation that reported it.
"""

from __future__ import annotations

import dataclasses
import datetime
import socket
import time
import uuid
from collections.abc import Mapping
from typing import Any

import aiohttp
import structlog

from kopf_csi import kube

__all__ = ["NORMAL", "WARNING", "Recorder"]

NORMAL = "Normal"
WARNING = "Warning"
REPEAT_WINDOW = 600.0  # seconds: client-go's correlator aggregates within 10 minutes
MAX_REMEMBERED = 4096

log = structlog.get_logger("kopf_csi.events")


@dataclasses.dataclass
class _Posted:
    name: str
    namespace: str
    count: int
    first_seen: float


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def component_name(driver: str) -> str:
    """The library's event source: `<driver>_<hostname>_<uuid>`."""
    return f"{driver}_{socket.gethostname()}_{uuid.uuid4()}"


class Recorder:
    """Posts events about objects through `kube.KubeClient`."""

    def __init__(self, api: kube.KubeClient, *, component: str) -> None:
        self.api = api
        self.component = component
        self.host = socket.gethostname()
        self._posted: dict[tuple[str, str, str, str], _Posted] = {}

    async def post(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        meta = obj.get("metadata", {})
        uid = str(meta.get("uid", ""))
        key = (uid, type_, reason, message)
        now = time.monotonic()
        seen = self._posted.get(key)
        try:
            if seen is not None and now - seen.first_seen < REPEAT_WINDOW:
                seen.count += 1
                patch = {"count": seen.count, "lastTimestamp": _now()}
                await self.api.patch(kube.EVENTS, seen.name, patch, seen.namespace)
                return
            body = self._event(obj, type_=type_, reason=reason, message=message)
            created = await self.api.create(kube.EVENTS, body)
        except (kube.KubeError, aiohttp.ClientError, OSError) as exc:
            # Events are best effort: an API that refuses or cannot be reached loses only this.
            log.warning("event_not_posted", reason=reason, object_uid=uid, error=str(exc))
            self._posted.pop(key, None)
            return
        if len(self._posted) >= MAX_REMEMBERED:
            self._posted.pop(next(iter(self._posted)))
        self._posted[key] = _Posted(
            name=created["metadata"]["name"],
            namespace=created["metadata"].get("namespace", "default"),
            count=1,
            first_seen=now,
        )

    def _event(
        self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str
    ) -> dict[str, Any]:
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        now = _now()
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
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
