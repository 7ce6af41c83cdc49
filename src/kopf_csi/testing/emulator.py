"""An emulated Kubernetes API server over real local HTTP, for tests, the sandbox and benchmarks.

What belongs here: the object store (resourceVersion, uid, generation, finalizers with
deletionTimestamp, the spec/status split), watches (history, 410 Gone, bookmarks, timeouts),
the HTTP translation of the verbs, fault injection, and a Python-level API for tests that goes
through the same write path. What does not: controllers (``kcm.py``) and the patch and selector
algorithms (``apimachinery.py``).

It is built on kmock 0.8, whose ``KubernetesEmulator`` lacks what kopf and kubernetes-asyncio
rely on (stack-notes, "kmock 0.8"). Its storage and serving are replaced rather than patched:
every gap sits in them, its per-object history grows without bound, and its request parser
fails on ``/api/v1/namespaces``. What is kept is kmock's ``KubernetesScaffold``, which serves
API discovery from registered ``ResourceInfo`` records. Resource requests are routed before
kmock sees them, so kmock's request log (re-filtered on every request it serves) only holds
discovery requests, and it is trimmed as well.

Concurrency model: one event loop, and every write is a synchronous function without ``await``.
A write is therefore atomic with respect to every request, a watch registers and takes its
snapshot atomically, and listeners are fed in commit order. That is what makes "no event lost
or replayed" hold without locks. Call the Python-level API from the cluster's loop only.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import dataclasses
import datetime
import json
import logging
import random
import ssl
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar, cast

import aiohttp.web
import kmock

from kopf_csi.testing import apimachinery, discovery, openapi, tables
from kopf_csi.testing.apimachinery import StatusError
from kopf_csi.testing.authorization import Authorizer
from kopf_csi.testing.latency import Latency, LatencyModel, uniform_writes
from kopf_csi.testing.requestlog import RequestLog

__all__ = [
    "KINDS",
    "Body",
    "Change",
    "EmulatedCluster",
    "Fault",
    "Faults",
    "Kind",
    "StatusError",
    "Subscription",
]

log = logging.getLogger(__name__)

Body = dict[str, Any]
PatchType = Literal["merge", "strategic", "json"]


@dataclasses.dataclass(frozen=True)
class Kind:
    """One served resource; ``status=True`` adds the /status subresource and the split."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def custom(self) -> bool:
        """Served from a CustomResourceDefinition (the snapshot kinds), not built in."""
        return self.group not in _BUILT_IN_GROUPS

    @property
    def qualified(self) -> str:
        """``plural.group``, as the real server names a resource in its messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


KINDS: tuple[Kind, ...] = (
    Kind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, status=True),
    Kind("", "v1", "persistentvolumes", "PersistentVolume", False, status=True),
    Kind("", "v1", "nodes", "Node", False),
    Kind("", "v1", "secrets", "Secret", True),
    Kind("", "v1", "configmaps", "ConfigMap", True),
    Kind("", "v1", "events", "Event", True),
    Kind("", "v1", "pods", "Pod", True),
    Kind("", "v1", "namespaces", "Namespace", False),
    Kind("storage.k8s.io", "v1", "storageclasses", "StorageClass", False),
    Kind("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False, status=True),
    Kind("storage.k8s.io", "v1", "csinodes", "CSINode", False),
    Kind("storage.k8s.io", "v1", "csidrivers", "CSIDriver", False),
    Kind("storage.k8s.io", "v1", "csistoragecapacities", "CSIStorageCapacity", True),
    Kind("storage.k8s.io", "v1", "volumeattributesclasses", "VolumeAttributesClass", False),
    Kind("coordination.k8s.io", "v1", "leases", "Lease", True),
    Kind("events.k8s.io", "v1", "events", "Event", True),
    Kind("snapshot.storage.k8s.io", "v1", "volumesnapshots", "VolumeSnapshot", True, status=True),
    Kind(
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshotcontents",
        "VolumeSnapshotContent",
        False,
        status=True,
    ),
    Kind("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses", "VolumeSnapshotClass", False),
    # Served by every API server; kopf watches it unless told not to (docs/operations.md).
    Kind(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        status=True,
    ),
    *(
        Kind(
            "groupsnapshot.storage.k8s.io",
            "v1",
            plural,
            kind,
            kind == "VolumeGroupSnapshot",
            status,
        )
        for plural, kind, status in (
            ("volumegroupsnapshots", "VolumeGroupSnapshot", True),
            ("volumegroupsnapshotcontents", "VolumeGroupSnapshotContent", True),
            ("volumegroupsnapshotclasses", "VolumeGroupSnapshotClass", False),
        )
    ),
)
"""What the operator and the controller stand-ins touch. Core ``events`` wins the bare name."""

_BUILT_IN_GROUPS = frozenset(
    {"", "storage.k8s.io", "coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io"}
)
# The API server defaults these phases on create (Go: SetDefaults_PersistentVolume[Claim]).
_PENDING_ON_CREATE = {("", "persistentvolumeclaims"), ("", "persistentvolumes")}
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
_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
_KMOCK_LOG_LIMIT = 100  # discovery requests kept by kmock (it re-filters them per request)
_SNAPSHOTS_KEPT = 16  # paginated LISTs whose `continue` tokens still work
_EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


_T = TypeVar("_T")


def _clone(obj: _T) -> _T:
    return cast(_T, json.loads(_dumps(obj)))  # faster than deepcopy; makes tuples lists


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _event_line(type_: str, obj: Mapping[str, Any]) -> bytes:
    return (_dumps({"type": type_, "object": obj}) + "\n").encode()


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
            self._line = _event_line(self.type, self.object)
        return self._line

    def __repr__(self) -> str:
        meta = self.object["metadata"]
        return f"<Change {self.type} {self.kind.plural} {meta.get('namespace')}/{meta['name']}>"


class _Listener(Protocol):
    def offer(self, change: Change) -> None: ...
    def close(self) -> None: ...


class _HttpWatch:
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
            return _event_line(type_, self.render(obj))
        return shared if shared is not None else _event_line(type_, obj)

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


class Subscription:
    """An in-process change feed over some kinds: the emulator's informer (see ``subscribe``)."""

    def __init__(self, cluster: EmulatedCluster, kinds: tuple[Kind, ...]) -> None:
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


@dataclasses.dataclass
class Fault:
    """Answer matching requests with ``code``; ``None`` criteria match anything."""

    code: int
    verb: str | None = None  # get, list, watch, create, update, patch, delete
    resource: str | None = None  # plural
    name: str | None = None
    times: int | None = 1  # None: until removed
    message: str = "injected fault"
    body: str | None = None  # sent verbatim instead of a Status (e.g. malformed JSON)
    subresource: str | None = None  # "status"; "" for the object itself; None: either

    def matches(
        self, *, verb: str, plural: str, name: str | None, subresource: str | None = None
    ) -> bool:
        wanted = (
            (self.verb, verb), (self.resource, plural), (self.name, name),
            (self.subresource, subresource or ""),
        )  # fmt: skip
        return all(want is None or want == got for want, got in wanted)


OTHER_WRITER = "other-writer"
"""The field manager of the writes `Faults.lose_race` makes before ours."""


def _other_writer(obj: Body) -> Body:
    meta = obj["metadata"]
    annotations = dict(meta.get("annotations") or {})
    annotations["testing.kopf-csi.dev/other-writer"] = str(int(meta["resourceVersion"]) + 1)
    return {**obj, "metadata": {**meta, "annotations": annotations}}


@dataclasses.dataclass(eq=False)
class Race:
    """Another writer's write, made just before a matching write of ours (`lose_race`)."""

    resource: str | None
    name: str | None
    times: int
    subresource: str | None
    change: Callable[[Body], Body]


class Faults:
    """API faults to inject over HTTP (the Python-level API is never affected)."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._races: list[Race] = []
        self._cuts: list[list[Any]] = []  # [plural, events sent before the cut, times left]

    def cut_watch(self, resource: str, *, after: int = 1, times: int = 1) -> None:
        """The next watch of `resource` breaks off after `after` events, the connection
        dropped mid-stream (a server restart, a load balancer's idle cut, a GOAWAY)."""
        self._cuts.append([resource, after, times])

    def take_cut(self, plural: str) -> int | None:
        for cut in self._cuts:
            if cut[0] == plural:
                cut[2] -= 1
                if cut[2] <= 0:
                    self._cuts.remove(cut)
                return int(cut[1])
        return None

    def add(
        self,
        code: int,
        *,
        verb: str | None = None,
        resource: str | None = None,
        name: str | None = None,
        times: int | None = 1,
        message: str = "injected fault",
        body: str | None = None,
        subresource: str | None = None,
    ) -> Fault:
        """With `body`, answer `code` with that text as a JSON response (`"{not json"`)."""
        fault = Fault(code, verb, resource, name, times, message, body, subresource)
        self._faults.append(fault)
        return fault

    def lose_race(
        self,
        resource: str,
        name: str | None = None,
        *,
        times: int = 1,
        subresource: str | None = "",
        change: Callable[[Body], Body] | None = None,
    ) -> Race:
        """Another writer writes the object just before each of our next `times` writes to it
        (a PATCH or PUT; `subresource` as for `add`), as on a real server: a write guarded by
        the version read before (a merge patch's or a PUT's resourceVersion) then answers the
        real 409, a JSON patch's `test` the real bare 422, and an unguarded write goes
        through. `change` is the other writer's edit (default: an annotation of its own)."""
        race = Race(resource, name, times, subresource, change or _other_writer)
        self._races.append(race)
        return race

    def take_race(
        self, *, verb: str, plural: str, name: str | None, subresource: str | None
    ) -> Race | None:
        if verb not in ("patch", "update"):
            return None
        for race in self._races:
            wanted = (
                (race.resource, plural),
                (race.name, name),
                (race.subresource, subresource or ""),
            )
            if all(want is None or want == got for want, got in wanted):
                race.times -= 1
                if race.times <= 0:
                    self._races.remove(race)
                return race
        return None

    def remove(self, fault: Fault | Race) -> None:
        if isinstance(fault, Race):
            if fault in self._races:
                self._races.remove(fault)
        elif fault in self._faults:
            self._faults.remove(fault)

    def clear(self) -> None:
        self._faults.clear()
        self._races.clear()

    def __len__(self) -> int:
        return len(self._faults) + len(self._cuts) + len(self._races)

    def take(
        self, *, verb: str, plural: str, name: str | None, subresource: str | None = None
    ) -> Fault | None:
        for fault in self._faults:
            if fault.matches(verb=verb, plural=plural, name=name, subresource=subresource):
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                return fault
        return None


class _Discovery(kmock.KubernetesScaffold):
    """kmock's discovery endpoints; resource requests never reach it."""

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        # kmock logs every request and re-filters the log on each one: keep it short.
        del self._requests[:-_KMOCK_LOG_LIMIT]
        for payload in self._payloads:
            del payload._requests[:-_KMOCK_LOG_LIMIT]
        if self._errors:
            del self._errors[-1][:-_KMOCK_LOG_LIMIT]
        response: aiohttp.web.StreamResponse = await super()._handle(request)
        return response

    kinds: Mapping[tuple[str, str, str], Kind] = {}  # the cluster's, set by it

    async def _serve_version(self, request: kmock.Request) -> kmock.Payload:
        """A group version's resources with the real server's facts (``discovery``)."""
        assert request.resource is not None  # kmock routes only /api/<v> and /apis/<g>/<v> here
        group, version = str(request.resource.group), str(request.resource.version)
        if group and not any(k[:2] == (group, version) for k in self.kinds):
            raise kmock.KubernetesResourceNotFoundError()
        return discovery.group_version(group, version, self.kinds.values())

    async def _serve_server_version(self, request: kmock.Request) -> kmock.Payload:
        return discovery.server_version()

    async def _serve_api(self, request: kmock.Request) -> kmock.Payload:
        return discovery.core_versions(request.url.host or "", request.url.port)


@dataclasses.dataclass(frozen=True)
class _Target:
    group: str
    version: str
    namespace: str | None
    plural: str
    name: str | None
    subresource: str | None


def _parse_path(path: str) -> _Target | None:
    parts = [part for part in path.split("/") if part]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None  # discovery
    name = rest[1] if len(rest) > 1 else None
    return _Target(group, version, namespace, rest[0], name, "/".join(rest[2:]) or None)


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _verb(method: str, target: _Target, params: Mapping[str, str]) -> str | None:
    if method == "GET":
        return "watch" if _truthy(params.get("watch")) else "get" if target.name else "list"
    verbs = (
        {"POST": "create", "DELETE": "deletecollection"}
        if target.name is None
        else {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    )
    return verbs.get(method)


TLS_DIR = Path(__file__).parent / "tls"


def _server_tls() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(TLS_DIR / "server.crt", TLS_DIR / "server.key")
    return context


class EmulatedCluster:
    """An emulated API server: ``async with EmulatedCluster() as cluster: cluster.url``."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        kinds: tuple[Kind, ...] = KINDS,
        history: int = 1000,  # watch events kept per kind; older resourceVersions get 410
        bookmark_interval: float = 30.0,  # kopf reconnects a watch silent for 70 s
        namespaces: tuple[str, ...] = ("default", "kube-system"),
        storage_protection: bool = True,  # the StorageObjectInUseProtection admission plugin
        authorizer: Authorizer | None = None,  # None: no authentication, everything allowed
        write_latency: float = 0.0,  # seconds an HTTP write waits before it is applied
        tls: bool = False,  # HTTPS with the test certificate (testing/tls), as a real server
        latency: LatencyModel | None = None,  # request durations (testing/latency.py)
    ) -> None:
        self.host, self.port = host, port
        self.tls = tls
        self.latency = Latency(latency or uniform_writes(write_latency))
        """How long each HTTP request waits before it is served, the server serving others
        meanwhile (a real server's writes wait for etcd); none by default."""
        self.storage_protection = storage_protection
        self.authorizer = authorizer
        self.bookmark_interval = bookmark_interval
        self.faults = Faults()
        self.requests = RequestLog()  # every HTTP request, as RBAC sees it (counts only)
        # Every write attempted, over HTTP or the Python API, failed ones too: (field manager,
        # verb, plural or plural/subresource) -> count. The controller stand-ins write through
        # the Python API, so `requests` alone misses them.
        self.writes: collections.Counter[tuple[str, str, str]] = collections.Counter()
        # Watch events sent on HTTP watches (initial ADDED ones included): (plural, type),
        # and their bytes by plural.
        self.watch_events: collections.Counter[tuple[str, str]] = collections.Counter()
        self.watch_bytes: collections.Counter[str] = collections.Counter()
        self._initial_namespaces = namespaces
        self._kinds: dict[tuple[str, str, str], Kind] = {}
        self._names: dict[str, Kind] = {}
        self._store: dict[Kind, dict[tuple[str, str], Body]] = {}
        self._history: dict[Kind, collections.deque[Change]] = {}
        self._history_limit = max(1, history)
        self._evicted: dict[Kind, int] = {}  # the newest resourceVersion dropped from history
        self._listeners: dict[Kind, set[_Listener]] = {}
        self._rv = 0
        self._snapshots: dict[str, tuple[int, list[Body]]] = {}  # paginated LISTs in progress
        self._discovery = _Discovery()
        self._discovery.kinds = self._kinds
        for kind in kinds:
            self.serve(kind)
        self._runner: aiohttp.web.ServerRunner | None = None

    # --- Lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> EmulatedCluster:
        await self._discovery.__aenter__()
        # No access log: it costs CPU on every request; aiohttp's cancellation ends the
        # watch handlers of vanished clients, so their listeners are dropped at once.
        server = aiohttp.web.Server(self._on_request, handler_cancellation=True, access_log=None)
        self._runner = aiohttp.web.ServerRunner(server, shutdown_timeout=1.0)
        await self._runner.setup()
        site = aiohttp.web.TCPSite(
            self._runner, self.host, self.port, ssl_context=_server_tls() if self.tls else None
        )
        await site.start()
        self.port = self._runner.addresses[0][1]
        for namespace in self._initial_namespaces:
            self.create("namespaces", {"metadata": {"name": namespace}})
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for listeners in self._listeners.values():
            for listener in list(listeners):
                listener.close()  # ends the watch streams, so the runner need not wait for them
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self._discovery.__aexit__(exc_type, exc, tb)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def resource_version(self) -> int:
        return self._rv

    def write_kubeconfig(self, path: Path | str, *, token: str | None = None) -> Path:
        """A kubeconfig (JSON is YAML) with one context pointing at this cluster.

        With `token` (from ``authorizer.login(user)``), requests are made as that user.
        """
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulated", "cluster": self._kubeconfig_cluster()}],
            "users": [{"name": "emulated", "user": {"token": token} if token else {}}],
            "contexts": [
                {"name": "emulated", "context": {"cluster": "emulated", "user": "emulated"}}
            ],
            "current-context": "emulated",
        }
        path = Path(path)
        path.write_text(json.dumps(config, indent=2) + "\n")
        return path

    def _kubeconfig_cluster(self) -> dict[str, str]:
        cluster = {"server": self.url}
        if self.tls:
            authority = (TLS_DIR / "ca.crt").read_bytes()
            cluster["certificate-authority-data"] = base64.b64encode(authority).decode()
        return cluster

    # --- Python-level API (same write path as HTTP; returns copies) -------------------------

    def serve(self, kind: Kind) -> None:
        """Serve one more resource from now on (in discovery too), as a CRD once established."""
        self._kinds[kind.group, kind.version, kind.plural] = kind
        for alias in (kind.plural, kind.kind, f"{kind.api_version}/{kind.plural}"):
            self._names.setdefault(alias, kind)
        self._store.setdefault(kind, {})
        self._history.setdefault(kind, collections.deque(maxlen=self._history_limit))
        self._evicted.setdefault(kind, 0)
        self._listeners.setdefault(kind, set())
        self._discovery.resources[kmock.resource(kind.group, kind.version, kind.plural)] = (
            kmock.ResourceInfo(
                kind=kind.kind,
                singular=kind.kind.lower(),
                namespaced=kind.namespaced,
                verbs=_VERBS,
                subresources={"status"} if kind.status else set(),
            )
        )

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
        patcher, body = _patcher(kind, patch_type), _clone(patch)
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

    def _create(self, kind: Kind, namespace: str | None, body: Any, manager: str) -> Body:
        if not isinstance(body, dict):
            raise StatusError(400, "the body must be an object")
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
            if (kind.group, kind.plural) in _PENDING_ON_CREATE:
                obj["status"] = {"phase": "Pending"}
        obj["metadata"]["managedFields"] = self._managed(None, obj, manager, None)
        return self._commit(kind, self._key(kind, namespace, name), "ADDED", obj, None)

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
    ) -> Body:
        old = self._existing(kind, namespace, name)
        if subresource is not None and (subresource != "status" or not kind.status):
            raise StatusError(404, f"{kind.plural} has no subresource {subresource!r}")
        proposed = transform(old)
        if not isinstance(proposed, dict):
            raise StatusError(422, "the result must be an object")
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
        change = Change(type_, kind, obj, old)
        history = self._history[kind]
        if len(history) == history.maxlen:
            self._evicted[kind] = history[0].resource_version
        history.append(change)
        for listener in list(self._listeners[kind]):
            listener.offer(change)
        return obj

    def _unlisten(self, listener: _Listener, kinds: tuple[Kind, ...]) -> None:
        for kind in kinds:
            self._listeners[kind].discard(listener)

    def _start_watch(
        self, kind: Kind, watch: _HttpWatch, *, since: str | None, initial: bool, end_bookmark: bool
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
        return _event_line(
            "BOOKMARK", {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta}
        )

    # --- HTTP ----------------------------------------------------------------------------

    async def _on_request(self, request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        self.requests.record(request.method, request.path, request.query)
        if self.authorizer is not None:
            refusal = self.authorizer.check(
                request.method, request.path, request.query, request.headers.get("Authorization")
            )
            if refusal is not None:
                return aiohttp.web.json_response(refusal, status=refusal["code"], dumps=_dumps)
        target = _parse_path(request.path)
        watch = request.method == "GET" and _truthy(request.query.get("watch"))
        async with self.latency.request(request.method, target, watch=watch):  # latency.py
            return await self._route(request, target)

    async def _route(
        self, request: aiohttp.web.BaseRequest, target: _Target | None
    ) -> aiohttp.web.StreamResponse:
        if target is None and request.path.startswith("/openapi/"):
            return self._serve_openapi(request.path)
        if target is None:
            if len(request.path) > 1 and request.path.endswith("/"):  # kmock wants "/api/v1"
                request = request.clone(rel_url=request.rel_url.with_path(request.path.rstrip("/")))
            response: aiohttp.web.StreamResponse = await self._discovery(request)
            return response
        try:
            response = await self._serve(request, target)
        except StatusError as error:
            return aiohttp.web.json_response(error.status(), status=error.code, dumps=_dumps)
        for warning in request.get(_WARNINGS, ()):
            response.headers.add("Warning", f'299 - "{_dumps(warning)[1:-1]}"')
        return response

    @property
    def write_latency(self) -> float:
        """Seconds every HTTP write waits (a uniform model; see `latency` for a full one)."""
        return self.latency.model.write

    @write_latency.setter
    def write_latency(self, seconds: float) -> None:
        self.latency = Latency(uniform_writes(seconds))

    async def _serve(
        self, request: aiohttp.web.BaseRequest, target: _Target
    ) -> aiohttp.web.StreamResponse:
        kind = self._kinds.get((target.group, target.version, target.plural))
        if kind is None or (target.namespace is not None and not kind.namespaced):
            raise StatusError(404, "the server could not find the requested resource")
        params = request.query
        verb = _verb(request.method, target, params)
        if verb is None:
            raise StatusError(405, f"{request.method} is not supported on {request.path}")
        fault = self.faults.take(
            verb=verb, plural=kind.plural, name=target.name, subresource=target.subresource
        )
        if fault is not None and fault.body is not None:
            return aiohttp.web.Response(
                status=fault.code, text=fault.body, content_type="application/json"
            )
        if fault is not None:
            raise StatusError(fault.code, fault.message)
        ns, name, sub = target.namespace, target.name or "", target.subresource
        race = self.faults.take_race(
            verb=verb, plural=kind.plural, name=target.name, subresource=sub
        )
        if race is not None and self._key(kind, ns, name) in self._store[kind]:
            # Someone else writes the object first, between our read and our write.
            self._count_write(OTHER_WRITER, "update", kind, None)
            self._update(kind, ns, name, race.change, None, OTHER_WRITER)
        if verb == "watch":
            return await self._serve_watch(request, kind, target)
        as_table = tables.wants_table(request.headers.get("Accept", ""))
        if verb == "list":
            items, meta = self._page(kind, ns, params)
            if as_table:
                return _table_response(kind, items, meta, params)
            body = {
                "apiVersion": kind.api_version,
                "kind": f"{kind.kind}List",
                "metadata": meta,
                "items": items,
            }
            return aiohttp.web.json_response(body, dumps=_dumps)
        if verb == "get":
            if sub is not None and (sub != "status" or not kind.status):
                raise StatusError(404, f"{kind.plural} has no subresource {sub!r}")
            found = self._existing(kind, ns, name)
            if as_table and sub is None:
                meta = {"resourceVersion": found["metadata"]["resourceVersion"]}
                return _table_response(kind, [found], meta, params)
            if "as=PartialObjectMetadata" in request.headers.get("Accept", ""):
                # As the real server: the metadata alone (a Secret's data stays on the server).
                found = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                         "metadata": found.get("metadata", {})}  # fmt: skip
            return aiohttp.web.json_response(found, dumps=_dumps)
        payload = await _read_json(request)
        manager = apimachinery.manager_name(
            params.get("fieldManager"), request.headers.get("User-Agent")
        )
        self._count_write(manager, verb, kind, sub)
        warnings = request[_WARNINGS] = []
        validate = _field_validation(kind, verb, params.get("fieldValidation"), warnings)
        if verb in ("create", "update"):
            validate(payload)
        if verb == "create":
            if kind.namespaced and ns is None:
                raise StatusError(405, "create namespaced objects under /namespaces/<namespace>/")
            return aiohttp.web.json_response(
                self._create(kind, ns, payload, manager), status=201, dumps=_dumps
            )
        if verb == "deletecollection":
            if verb not in discovery.facts(kind).verbs:  # namespaces
                raise StatusError(
                    405, "the server does not allow this method on the requested resource"
                )
            return aiohttp.web.json_response(
                self._delete_collection(kind, ns, params), dumps=_dumps
            )
        if verb == "delete":
            preconditions = (
                (payload or {}).get("preconditions") if isinstance(payload, dict) else None
            )
            return aiohttp.web.json_response(
                self._delete(kind, ns, name, preconditions), dumps=_dumps
            )
        if verb == "update":
            result = self._update(kind, ns, name, lambda old: payload, sub, manager)
        else:
            patcher = _patcher(kind, _patch_type(request.content_type))
            result = self._update(
                kind, ns, name, lambda old: validate(patcher(old, payload)), sub, manager
            )
        return aiohttp.web.json_response(result, dumps=_dumps)

    def _serve_openapi(self, path: str) -> aiohttp.web.Response:
        """``/openapi/v3`` and its group versions' documents (``openapi``); v2 is not served."""
        body: Mapping[str, Any] | None = None
        if path.rstrip("/") == "/openapi/v3":
            body = openapi.index(self._kinds.values())
        elif path.startswith("/openapi/v3/"):
            body = openapi.served_document(path.removeprefix("/openapi/v3/"), self._kinds.values())
        if body is None:
            error = StatusError(404, "the server could not find the requested resource")
            return aiohttp.web.json_response(error.status(), status=404, dumps=_dumps)
        return aiohttp.web.json_response(body, dumps=_dumps)

    async def _serve_watch(
        self, request: aiohttp.web.BaseRequest, kind: Kind, target: _Target
    ) -> aiohttp.web.StreamResponse:
        params = request.query
        selectors = [
            s
            for s in (
                apimachinery.parse_label_selector(params.get("labelSelector")),
                apimachinery.parse_field_selector(params.get("fieldSelector")),
                apimachinery.parse_field_selector(
                    f"metadata.name={target.name}" if target.name else None
                ),
            )
            if s is not None
        ]
        timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
        bookmarks = _truthy(params.get("allowWatchBookmarks"))
        since = params.get("resourceVersion") or None
        initial_events = _truthy(params.get("sendInitialEvents"))
        watch = _HttpWatch(
            namespace=target.namespace,
            selectors=selectors,
            sent=self.watch_events,
            sent_bytes=self.watch_bytes,
            render=_table_events(kind, params)
            if tables.wants_table(request.headers.get("Accept", ""))
            else None,
        )
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            initial = since in (None, "0") or initial_events
            self._start_watch(
                kind, watch, since=since, initial=initial, end_bookmark=initial_events and bookmarks
            )
        except StatusError as error:
            if error.code != 410:
                raise
            # The real API server answers 200 and sends the 410 as an ERROR event.
            await response.prepare(request)
            await response.write(_event_line("ERROR", error.status()))
            await response.write_eof()
            return response
        try:
            await response.prepare(request)
            await self._stream(
                watch, response, kind, duration=timeout, bookmarks=bookmarks,
                cut_after=self.faults.take_cut(kind.plural), transport=request.transport,
            )  # fmt: skip
        except ConnectionError:
            pass  # the client went away
        finally:
            self._listeners[kind].discard(watch)
        return response

    async def _stream(
        self,
        watch: _HttpWatch,
        response: aiohttp.web.StreamResponse,
        kind: Kind,
        *,
        duration: float | None,
        bookmarks: bool,
        cut_after: int | None = None,
        transport: asyncio.Transport | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()
        sent = 0
        deadline = None if duration is None else loop.time() + duration
        while True:
            wait = self.bookmark_interval if bookmarks else None
            if deadline is not None:
                if (remaining := deadline - loop.time()) <= 0:
                    break
                wait = remaining if wait is None else min(wait, remaining)
            try:
                # asyncio.timeout, not wait_for: no task per event, so an event goes out on the
                # loop's next turn, as a real server's within a millisecond (wait_for's extra
                # hops held each event back by two turns of whatever else the loop runs).
                async with asyncio.timeout(wait):
                    lines = [await watch.queue.get()]
            except TimeoutError:
                # An idle queue means everything up to the current resourceVersion was sent.
                if bookmarks and (deadline is None or loop.time() < deadline):
                    await response.write(self._bookmark(kind))
                continue
            while lines[-1] and not watch.queue.empty():
                lines.append(watch.queue.get_nowait())
            if cut_after is not None and sent + len(lines) >= cut_after:
                await response.write(b"".join(lines[: cut_after - sent]))
                if transport is not None:
                    transport.abort()  # mid-stream: no end of the chunked body
                raise ConnectionResetError("watch cut by a fault")
            sent += len(lines)
            await response.write(b"".join(lines))
            if not lines[-1]:
                break  # closed by the cluster
        await response.write_eof()


# A request's field validation warnings (fieldValidation=Warn), for its Warning headers.
_WARNINGS = aiohttp.web.RequestKey("kopf_csi_warnings", list[str])


def _field_validation(
    kind: Kind, verb: str, directive: str | None, warnings: list[str]
) -> Callable[[Any], Any]:
    """``fieldValidation`` as a check of the object a write proposes (a patch's result):
    Strict refuses unknown fields with the real 400, Warn adds them to `warnings` for the
    Warning headers; Ignore, or no directive, checks nothing (``openapi``)."""

    def validate(proposed: Any) -> Any:
        if directive in ("Strict", "Warn"):
            unknown = openapi.unknown_fields(kind, proposed)
            if unknown and directive == "Strict":
                raise StatusError(400, openapi.strict_message(kind, unknown, patch=verb == "patch"))
            warnings.extend(f'unknown field "{field}"' for field in unknown)
        return proposed

    return validate


def _table_events(kind: Kind, params: Mapping[str, str]) -> Callable[[Body], Body]:
    """A watch asked as a Table (``kubectl get -w``): each event's object is a one-row Table,
    and only the first carries the column definitions, as the real server sends them."""
    first = True

    def render(obj: Body) -> Body:
        nonlocal first
        meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
        include = params.get("includeObject")
        table = tables.table(kind.group, kind.plural, [obj], metadata=meta, include_object=include)
        if not first:
            table["columnDefinitions"] = None
        first = False
        return table

    return render


def _table_response(
    kind: Kind, items: list[Body], meta: Mapping[str, Any], params: Mapping[str, str]
) -> aiohttp.web.Response:
    """What ``kubectl get`` asks for: a meta.k8s.io/v1 Table (``tables``)."""
    body = tables.table(
        kind.group, kind.plural, items, metadata=meta, include_object=params.get("includeObject")
    )
    return aiohttp.web.json_response(body, dumps=_dumps)


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


def _patcher(kind: Kind, patch_type: PatchType) -> Callable[[Any, Any], Any]:
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


def _patch_type(content_type: str) -> PatchType:
    types: dict[str, PatchType] = {
        "application/merge-patch+json": "merge",
        "application/strategic-merge-patch+json": "strategic",
        "application/json-patch+json": "json",
    }
    if content_type not in types:
        raise StatusError(415, f"the patch content type {content_type!r} is not supported")
    return types[content_type]


async def _read_json(request: aiohttp.web.BaseRequest) -> Any:
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise StatusError(400, "the body is not valid JSON") from None
