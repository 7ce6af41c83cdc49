"""The emulated cluster, instrumented: who asks the API what, and when each claim got where.

`MeasuredCluster` subclasses `EmulatedCluster` without changing it:

- `_on_request` (the HTTP entry point) counts every request by client, verb and resource, and
  the error answers by status as well. The client is found from the connection's source
  port: the socket's inode in /proc/net/tcp, then which process holds it (`operator` or
  `bench`); once per connection, the new connections of one turn of the loop in one batch at
  the next turn (or when counts are read), so that identifying them does not delay the
  requests being served.
- `_commit` (every write, HTTP or Python-level, in commit order) time-stamps each claim's steps
  as they happen: created, its PV created, Bound, deleted, its PV deleted; and each
  VolumeAttachment's: created, attached, deleted (deletionTimestamp set), gone.

The benchmark itself, the KCM stand-in and the driver never use HTTP (the first two use the
Python-level API, the driver has no API client), so every request counted is the operator's;
the client check proves it rather than assuming it.
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
from collections.abc import Mapping
from typing import Any

import aiohttp.web

from devtools.bench import procfs
from kopf_csi.testing import serving
from kopf_csi.testing.emulator import Body, EmulatedCluster, Kind

__all__ = ["READS", "WRITES", "MeasuredCluster", "RequestKey", "Timeline"]

READS = ("get", "list", "watch", "discovery")
WRITES = ("create", "update", "patch", "delete")
RequestKey = tuple[str, str, str]  # client, verb, resource
Connection = tuple[int, int]  # the client's source port, the transport's id


class Timeline:
    """When each claim (by uid) and each VolumeAttachment (by name) reached each step.

    On the monotonic clock (seconds).
    """

    def __init__(self) -> None:
        self.created: dict[str, float] = {}
        self.volume_created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.deleted: dict[str, float] = {}
        self.volume_deleted: dict[str, float] = {}
        self.annotated: dict[str, float] = {}  # the KCM asked for provisioning
        self.provisioning: dict[str, float] = {}  # the operator's Normal Provisioning event
        self.create_volume: dict[str, float] = {}  # the driver made its volume (CreateVolume)
        self.volumes = 0  # PVs present now
        self.va_created: dict[str, float] = {}
        self.va_attached: dict[str, float] = {}
        self.va_deleted: dict[str, float] = {}
        self.va_gone: dict[str, float] = {}

    def observe(self, plural: str, type_: str, obj: Body, old: Body | None) -> None:
        now = time.perf_counter()
        if plural == "persistentvolumeclaims":
            uid = obj["metadata"]["uid"]
            if type_ == "ADDED":
                self.created[uid] = now
            elif type_ == "DELETED":
                self.deleted[uid] = now
            elif _phase(obj) == "Bound" and _phase(old) != "Bound":
                self.bound.setdefault(uid, now)
            if _ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {}):
                self.annotated.setdefault(uid, now)
        elif plural == "events":
            if type_ == "ADDED" and obj.get("reason") == "Provisioning":
                uid = (obj.get("involvedObject") or {}).get("uid")
                if uid:
                    self.provisioning.setdefault(uid, now)
        elif plural == "persistentvolumes":
            uid = ((obj.get("spec") or {}).get("claimRef") or {}).get("uid")
            if type_ == "ADDED":
                self.volumes += 1
                if uid:
                    self.volume_created.setdefault(uid, now)
            elif type_ == "DELETED":
                self.volumes -= 1
                if uid:
                    self.volume_deleted.setdefault(uid, now)
        elif plural == "volumeattachments":
            name = obj["metadata"]["name"]
            if type_ == "ADDED":
                self.va_created[name] = now
            elif type_ == "DELETED":
                self.va_deleted.setdefault(name, now)  # deleted without a finalizer
                self.va_gone[name] = now
            else:
                if (obj.get("status") or {}).get("attached"):
                    self.va_attached.setdefault(name, now)
                if obj["metadata"].get("deletionTimestamp"):
                    self.va_deleted.setdefault(name, now)


_ANNOTATION = "volume.kubernetes.io/storage-provisioner"


def _phase(obj: Mapping[str, Any] | None) -> str | None:
    return ((obj or {}).get("status") or {}).get("phase")


class MeasuredCluster(EmulatedCluster):
    """An `EmulatedCluster` that counts requests by client and time-stamps claims' steps."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.timeline = Timeline()
        self.clients: dict[str, int] = {"bench": os.getpid()}
        # Counted per connection (source port, transport), attributed to a client in batches.
        self._requests: collections.Counter[tuple[Connection, str, str]] = collections.Counter()
        self._errors: collections.Counter[tuple[Connection, str, str, int]] = collections.Counter()
        self._owners: dict[Connection, str] = {}
        self._unresolved: set[Connection] = set()
        self._resolving: asyncio.Handle | None = None

    async def __aenter__(self) -> MeasuredCluster:
        await super().__aenter__()
        return self

    def watch_client(self, label: str, pid: int) -> None:
        """Attribute requests from sockets of process `pid` to `label`."""
        self.clients[label] = pid

    @property
    def request_counts(self) -> collections.Counter[RequestKey]:
        """(client, verb, resource) -> requests so far."""
        self._resolve()
        counts: collections.Counter[RequestKey] = collections.Counter()
        for (connection, verb, plural), n in self._requests.items():
            counts[(self._owners.get(connection, "unknown"), verb, plural)] += n
        return counts

    @property
    def errors(self) -> collections.Counter[tuple[str, str, str, int]]:
        """(client, verb, resource, status) -> error answers so far."""
        self._resolve()
        counts: collections.Counter[tuple[str, str, str, int]] = collections.Counter()
        for (connection, verb, plural, status), n in self._errors.items():
            counts[(self._owners.get(connection, "unknown"), verb, plural, status)] += n
        return counts

    @property
    def connections(self) -> collections.Counter[str]:
        """client -> connections it opened so far (TCP and, with TLS, a handshake each)."""
        self._resolve()
        return collections.Counter(self._owners.values())

    def counts(self, client: str = "operator") -> collections.Counter[tuple[str, str]]:
        """(verb, resource) -> requests so far, for one client."""
        return collections.Counter(
            {
                (verb, plural): n
                for (who, verb, plural), n in self.request_counts.items()
                if who == client
            }
        )

    def error_counts(self, client: str = "operator") -> collections.Counter[str]:
        """ "verb resource status" -> error answers (4xx, 5xx) so far, for one client."""
        return collections.Counter(
            {
                f"{verb} {plural} {status}": n
                for (who, verb, plural, status), n in self.errors.items()
                if who == client
            }
        )

    async def _on_request(self, request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        target = serving.parse_path(request.path)
        if target is None:
            verb, plural = "discovery", request.path
        else:
            plural = target.plural + (f"/{target.subresource}" if target.subresource else "")
            verb = serving.request_verb(request.method, target, request.query) or request.method
        connection = self._connection(request)
        self._requests[(connection, verb, plural)] += 1
        response = await super()._on_request(request)
        if response.status >= 400:
            self._errors[(connection, verb, plural, response.status)] += 1
        return response

    def _connection(self, request: aiohttp.web.BaseRequest) -> Connection:
        """The request's connection; a new one is attributed to its client soon, in a batch."""
        transport = request.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        if not peer:
            return (0, 0)  # never attributed: "unknown"
        connection = (int(peer[1]), id(transport))
        if connection not in self._owners and connection not in self._unresolved:
            self._unresolved.add(connection)
            if self._resolving is None:  # the next turn: off this request, the socket open
                self._resolving = asyncio.get_running_loop().call_soon(self._resolve)
        return connection

    def _resolve(self) -> None:
        if self._resolving is not None:
            self._resolving.cancel()
            self._resolving = None
        if not self._unresolved:
            return
        batch, self._unresolved = self._unresolved, set()
        owners = procfs.socket_owners({(port, self.port) for port, _ in batch}, self.clients)
        for connection in batch:
            self._owners[connection] = owners[(connection[0], self.port)]

    def _commit(
        self, kind: Kind, key: tuple[str, str], type_: str, obj: Body, old: Body | None
    ) -> Body:
        committed = super()._commit(kind, key, type_, obj, old)
        self.timeline.observe(kind.plural, type_, committed, old)
        return committed
