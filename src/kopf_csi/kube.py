"""The Kubernetes API client: the only module that imports kubernetes-asyncio.

Objects go in and come out as plain dicts, the same shape kopf hands to handlers, so the
decision functions never see a client model. kubernetes-asyncio does the login (kubeconfig,
in-cluster, exec plugins, TLS) and makes the TLS context and the aiohttp session. Requests
carry JSON bodies straight, not through its ApiClient, whose per-request work (sanitising
every body and parameter recursively, building models) was 5-7 % of the operator's CPU under
churn, for dicts that are JSON already (docs/benchmarks.md). The watches go to the session
(`KubeClient._send`); every other request to a pool of our own (`httppool`, with the
session's TLS context, server name and limit), unless through a proxy: aiohttp's
`ClientSession` cost about 70 µs of CPU more a request (docs/decisions.md).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import base64
import binascii
import contextlib
import dataclasses
import functools
import inspect
import os
import pathlib
import platform
import socket
import ssl
import string
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar

import aiohttp
import kubernetes_asyncio.client
import kubernetes_asyncio.config
import structlog
import yarl

from kopf_csi import httppool, jsoncodec, loops
from kopf_csi.reachability import Reachability
from kopf_csi.throttling import TokenBucket

__all__ = [
    "CLAIMS",
    "CONFIGMAPS",
    "CSIDRIVERS",
    "CSINODES",
    "CSI_STORAGE_CAPACITIES",
    "EVENTS",
    "GROUP_SNAPSHOTS",
    "GROUP_SNAPSHOT_CLASSES",
    "GROUP_SNAPSHOT_CONTENTS",
    "LEASES",
    "NODES",
    "REQUEST_ERRORS",
    "SECRETS",
    "SNAPSHOTS",
    "SNAPSHOT_CLASSES",
    "SNAPSHOT_CONTENTS",
    "STALE_WRITE_ATTEMPTS",
    "STORAGE_CLASSES",
    "VOLUMES",
    "VOLUME_ATTACHMENTS",
    "VOLUME_ATTRIBUTES_CLASSES",
    "ConflictError",
    "Credentials",
    "KubeClient",
    "KubeError",
    "Limits",
    "LoginError",
    "NotFoundError",
    "RequestObserver",
    "Resource",
    "StaleWriteError",
    "UnavailableError",
    "decode_secret_data",
    "guarded_patch",
    "is_unavailable",
    "kubeconfig_files",
    "login",
    "resource_of",
    "retry_on_conflict",
    "user_agent",
]

log = structlog.get_logger("kopf_csi.kube")
Body = dict[str, Any]
Page = list[Body]  # (`list` is also a method name in KubeClient)
Versions = list[str]
PatchType = Literal["merge", "json", "strategic"]
LIST_PAGE_SIZE = 500
KEEPALIVE = 60.0
"""Seconds an idle connection to the API server is kept (aiohttp's default: 15 s)."""
WARM_CONNECTIONS = 16
"""Connections opened at start-up (`KubeClient.warm`), for the first requests of a burst.

Each idle TLS connection held about 0.4 MiB (asyncio's 256 KiB read buffer among it): warming
all 100 of the provisioner's workers cost 42 MiB of settled RSS with 10,000 PVs (166 instead
of 124 MiB), and the first PV of a 200-claim burst came no sooner than with 16 (0.20-0.25 s
against 0.11-0.18 s, docs/benchmarks.md). A burst opens the rest as it needs them."""
TLS_READ_SIZE = 64 * 1024
"""Bytes read from a TLS connection at once. asyncio gives every TLS connection a read buffer
of `SSLProtocol.max_size`, 256 KiB, allocated and zeroed when the connection opens: in a burst
of 100 connections, 25 MiB of the operator's peak RSS. 64 KiB still takes four TLS records
per read; measured, 100 connections cost 245 instead of 627 KiB each (client and server
together, docs/benchmarks.md)."""
TLS_RECEIVE_BUFFER = 64 * 1024
"""The kernel's receive buffer (`SO_RCVBUF`) of each TLS connection to the API server on uvloop,
which reads whatever the socket holds, up to 256 KiB at once (a constant, not ours to lower as
asyncio's `TLS_READ_SIZE`): each connection kept the largest read it ever made twice, in its
read buffer's touched pages and in its incoming `MemoryBIO`, whose buffer OpenSSL grows and
never shrinks. Rare large reads (events piled up while the loop was busy) raised that record
now and then on every pooled connection: the RSS under churn rose all the time (heaptrack;
docs/benchmarks.md, "RSS at 20/s: the receive buffers"). The kernel doubles the value asked;
the reads stay under about 128 KiB, and the TCP window (about 100 KiB) still carries 100 MB/s
at a millisecond's round trip."""
TLS_RECORD_SIZE = 16 * 1024
"""The most plaintext one TLS record carries (RFC 8446, 5.1), and the most one read asks for
(`_RecordReads`)."""
WATCH_TIMEOUT = 300  # seconds a watch request runs before the server ends it (client-go: 5-10 min)
"""Objects per LIST page: client-go's pager and reflector use 500, and so do we (and kopf)."""
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""The Accept header of a GET that wants the object's metadata alone (`get_metadata`)."""
CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


@dataclasses.dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


CLAIMS = Resource("", "v1", "persistentvolumeclaims", namespaced=True)
VOLUMES = Resource("", "v1", "persistentvolumes", namespaced=False)
NODES = Resource("", "v1", "nodes", namespaced=False)
SECRETS = Resource("", "v1", "secrets", namespaced=True)
CONFIGMAPS = Resource("", "v1", "configmaps", namespaced=True)
EVENTS = Resource("", "v1", "events", namespaced=True)
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", namespaced=False)
VOLUME_ATTACHMENTS = Resource("storage.k8s.io", "v1", "volumeattachments", namespaced=False)
CSINODES = Resource("storage.k8s.io", "v1", "csinodes", namespaced=False)
CSIDRIVERS = Resource("storage.k8s.io", "v1", "csidrivers", namespaced=False)
CSI_STORAGE_CAPACITIES = Resource("storage.k8s.io", "v1", "csistoragecapacities", namespaced=True)
VOLUME_ATTRIBUTES_CLASSES = Resource(
    "storage.k8s.io", "v1", "volumeattributesclasses", namespaced=False
)
LEASES = Resource("coordination.k8s.io", "v1", "leases", namespaced=True)
SNAPSHOTS = Resource("snapshot.storage.k8s.io", "v1", "volumesnapshots", namespaced=True)
SNAPSHOT_CONTENTS = Resource(
    "snapshot.storage.k8s.io", "v1", "volumesnapshotcontents", namespaced=False
)
SNAPSHOT_CLASSES = Resource(
    "snapshot.storage.k8s.io", "v1", "volumesnapshotclasses", namespaced=False
)
GROUP_SNAPSHOTS = Resource(
    "groupsnapshot.storage.k8s.io", "v1", "volumegroupsnapshots", namespaced=True
)
GROUP_SNAPSHOT_CONTENTS = Resource(
    "groupsnapshot.storage.k8s.io", "v1", "volumegroupsnapshotcontents", namespaced=False
)
GROUP_SNAPSHOT_CLASSES = Resource(
    "groupsnapshot.storage.k8s.io", "v1", "volumegroupsnapshotclasses", namespaced=False
)


class LoginError(RuntimeError):
    """Neither the service account nor the kubeconfig gave us a way to the API."""


class KubeError(Exception):
    """The API answered with an error (or with something that is not JSON)."""

    def __init__(self, message: str, *, status: int, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason

    def __str__(self) -> str:
        return f"({self.status} {self.reason}) {self.message}"


class NotFoundError(KubeError):
    """404: the object (or its namespace) does not exist."""


class ConflictError(KubeError):
    """409: a stale resourceVersion, or the object already exists."""


class UnavailableError(KubeError):
    """The API server did not answer, or answered that it cannot serve now.

    A refused connect, a connection reset or closed under the request, a broken pipe, a TLS
    failure, a timeout (status 0: no answer); or `503 apiserver is shutting down`, a 504 (the
    server's own request timeout) or a 500 with etcd's text: what a restart of the control
    plane looks like from a client (`/work/shared/reference/real-apiserver.md`). A transient
    condition of the whole server, not of the request: retry it, quietly. aiohttp's own
    exceptions never leave this module; this is what they become.
    """

    outage = True
    """Says so to code that must not import this module (`queueing`): logged once, here."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "Unavailable") -> None:
        super().__init__(message, status=status, reason=reason)

    def __str__(self) -> str:
        if not self.status:
            return f"(no answer) {self.message}"
        return super().__str__()


class StaleWriteError(ConflictError):
    """Someone else wrote the object after we read it: a lost race, not a failure.

    The API says so in one way only: 409 Conflict, for a PUT or a merge patch that carries the
    `metadata.resourceVersion` it was made from (`guarded_patch`). A JSON patch's failed
    `test` is never one: the real server answers every JSON-patch failure alike (422 Invalid,
    `details: {}`), so a lost race cannot be told from a bad patch by it, and no guarded
    write here is a JSON patch. Either way the write did nothing: read the object again and
    decide again, quietly (`retry_on_conflict`).
    """


def guarded_patch(obj: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch `patch`, guarded by the resourceVersion of `obj`, the copy it was made
    from: if anyone wrote the object since, the server answers 409 (`StaleWriteError`) and
    writes nothing. A list in it (the finalizers) replaces the whole list, which the guard
    makes safe: it can only replace the list as we read it."""
    version = (obj.get("metadata") or {}).get("resourceVersion")
    if not version:
        raise ValueError("a guarded write needs the resourceVersion of the object it was made of")
    metadata = {**(patch.get("metadata") or {}), "resourceVersion": str(version)}
    return {**patch, "metadata": metadata}


_TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError)
"""No answer at all: a refused connection, a reset, a broken pipe, a closed session, a TLS
failure, a timeout (kubernetes-asyncio lets aiohttp's errors through). Only this module knows
the transport: these become `UnavailableError` here (`_unanswered`), and nowhere else is any
of them caught."""

REQUEST_ERRORS = (KubeError,)
"""What any API request may raise: an answer with an error, or none (`UnavailableError`)."""

UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
"""Answers that say the server cannot serve now (a draining server's 503, its own request
timeout's 504, a proxy's 502 in front of a server that is gone)."""


def _unanswered(exc: BaseException, method: str, path: str) -> UnavailableError:
    """What a transport failure of `method path` becomes: one error type, naming the cause."""
    cause = str(exc) or type(exc).__name__
    if isinstance(exc, asyncio.TimeoutError):
        cause = "timed out"
    return UnavailableError(f"{method} {path}: the API server did not answer: {cause}")


def is_unavailable(exc: BaseException | None) -> bool:
    """Whether `exc`, or an error it was raised from, says the API server is away (an outage),
    not that the request failed: the outage is reported once (`reachability`), and a claim
    whose attempt failed only for it gets neither a warning line nor a Warning event."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, UnavailableError):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


STALE_WRITE_ATTEMPTS = 5
"""Guarded writes tried per operation before a lost race goes back to the work queue
(client-go's `retry.RetryOnConflict` tries 5 times too)."""

_T = TypeVar("_T")


async def retry_on_conflict(
    write: Callable[[Mapping[str, Any]], Awaitable[_T]],
    obj: Mapping[str, Any],
    *,
    read: Callable[[], Awaitable[Mapping[str, Any] | None]],
    attempts: int = STALE_WRITE_ATTEMPTS,
) -> _T:
    """`write(obj)`; when it loses a race (`StaleWriteError`), `read()` and write again.

    client-go's `retry.RetryOnConflict`, the one place every role's guarded writes go
    through: `write` decides from the object it is given (and may write nothing), so a retry
    decides again from the fresh copy, at once and quietly. `NotFoundError` when the object
    is gone (from `write`, or `read` answering None); the last `StaleWriteError` when every
    attempt lost.
    """
    for attempt in range(1, attempts + 1):
        try:
            return await write(obj)
        except StaleWriteError:
            if attempt >= attempts:
                raise
        fresh = await read()
        if fresh is None:
            name = (obj.get("metadata") or {}).get("name")
            raise NotFoundError(f'"{name}" not found: deleted meanwhile', status=404)
        obj = fresh
    raise AssertionError("attempts must be at least 1")


DEFAULT_MANAGER = "kopf-csi"
"""The field manager of writes that belong to no sidecar role (the sandbox, tools)."""


def user_agent(manager: str) -> str:
    """`<manager>/<version> (<os>/<arch>) kopf-csi/<version>`, shaped like client-go's.

    The API server names the field manager of an Update after the User-Agent up to its first
    `/` when no `fieldManager` is given: with the Go sidecar's name first, our writes show up
    in `managedFields`, audit logs and `kubectl` as that sidecar's.
    """
    from kopf_csi import __version__

    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return f"{manager}/v{__version__} ({sys.platform}/{arch}) kopf-csi/{__version__}"


@dataclasses.dataclass(frozen=True, repr=False)
class Credentials:
    server: str
    insecure: bool
    ca_path: str | None = None
    scheme: str | None = None
    token: str | None = None
    certificate_path: str | None = None
    private_key_path: str | None = None

    def __repr__(self) -> str:  # the token is a secret: never print it
        return f"Credentials(server={self.server!r}, insecure={self.insecure})"


async def _load(kubeconfig: pathlib.Path | None, context: str | None = None) -> Any:
    try:
        if kubeconfig is not None:
            configuration = kubernetes_asyncio.client.Configuration()
            await kubernetes_asyncio.config.load_kube_config(
                config_file=str(kubeconfig), context=context, client_configuration=configuration
            )
            return configuration
        configuration = kubernetes_asyncio.client.Configuration()
        try:
            # Re-reads the projected service-account token as it rotates.
            kubernetes_asyncio.config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration, try_refresh_token=True
            )
        except kubernetes_asyncio.config.ConfigException as exc:
            if not _default_kubeconfigs():  # the library would say "Expected key current-context"
                raise LoginError(
                    "cannot log in to Kubernetes: not in a pod (no service account), and no"
                    f" kubeconfig at {_DEFAULT_KUBECONFIG} (set KUBECONFIG or --kubeconfig)"
                ) from exc
            await kubernetes_asyncio.config.load_kube_config(client_configuration=configuration)
    except (kubernetes_asyncio.config.ConfigException, OSError) as exc:
        where = str(kubeconfig) if kubeconfig else "in-cluster or ~/.kube/config"
        raise LoginError(f"cannot log in to Kubernetes ({where}): {exc}") from exc
    return configuration


_DEFAULT_KUBECONFIG = "$KUBECONFIG or ~/.kube/config"


def kubeconfig_files(listed: str) -> list[pathlib.Path]:
    """The files of a kubeconfig list (separated by the OS's path separator, as `KUBECONFIG`
    and kubectl's) that exist."""
    paths = (pathlib.Path(p).expanduser() for p in listed.split(os.pathsep) if p)
    return [path for path in paths if path.is_file()]


def _default_kubeconfigs() -> list[pathlib.Path]:
    """The files the client library reads without a kubeconfig given: `KUBECONFIG`'s, else
    `~/.kube/config`; those that exist."""
    return kubeconfig_files(os.environ.get("KUBECONFIG") or "~/.kube/config")


def _limit_tls_reads(size: int) -> None:
    """Every TLS connection the process opens from now on reads at most `size` bytes at once,
    and holds a read buffer of that size (`TLS_READ_SIZE`); never raised above asyncio's own."""
    protocol = asyncio.sslproto.SSLProtocol
    protocol.max_size = min(protocol.max_size, size)


class _RecordReads(ssl.SSLObject):
    """A TLS connection whose reads ask for one record's plaintext at most (`TLS_RECORD_SIZE`).

    uvloop reads a TLS connection with `SSLObject.read(256 KiB)` when the protocol above it is
    not a buffered one (aiohttp's is not), and Python allocates the whole 256 KiB for each read,
    then shrinks it to the bytes that came: hundreds of times a second under churn. The heads
    kept alive while aiohttp holds the data, between the freed tails, fragmented the C heap, and
    the operator's RSS grew about 1 MiB a minute at 20 claims a second while its live memory
    stayed flat (docs/benchmarks.md, "RSS at 20/s: the TLS reads"). OpenSSL returns one
    record's data per read at most, and both loops read again while data is pending: smaller
    asks lose and delay nothing."""

    def read(self, len: int = 1024, buffer: Any = None) -> Any:  # SSLObject's own names
        return super().read(min(len, TLS_RECORD_SIZE), buffer)


def _read_tls_by_records(connector: Any) -> None:
    """Every TLS connection of this pool reads a record at a time (`_RecordReads`): through
    the SSL context, which makes each connection's `SSLObject` on either loop."""
    context = getattr(connector, "_ssl", None)
    if isinstance(context, ssl.SSLContext):
        context.sslobject_class = _RecordReads


def _small_receive_buffers(connector: Any, size: int) -> None:
    """Every TLS connection this pool opens from now on asks the kernel for a receive buffer
    of `size` (`TLS_RECEIVE_BUFFER`), set before it connects (TCP agrees the window's scale
    then); plain HTTP keeps the kernel's own (uvloop reads it into one buffer per loop)."""
    if not isinstance(getattr(connector, "_ssl", None), ssl.SSLContext):
        return

    def sized(address: Any) -> socket.socket:
        family, kind, proto, _, _ = address
        sock = socket.socket(family=family, type=kind, proto=proto)
        with contextlib.suppress(OSError):  # refused: the kernel's own size, a bit more memory
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
        return sock

    connector._socket_factory = sized


def _reuse_newest_first(connector: Any) -> None:
    """Make the pool hand out its most recently released connection, as Go's `http.Transport`
    does, so that connections beyond what the last `KEEPALIVE` seconds needed idle out.

    aiohttp (3.10 on) keeps the idle connections in a deque, appends a released one on the
    right and takes the next from the left: round robin over all of them. Under a steady flow
    of requests, no connection then ever idles for `KEEPALIVE` seconds, and the pool stays at
    the highest concurrency it ever saw, each connection holding its TLS state (asyncio's
    `TLS_READ_SIZE` buffer, OpenSSL's buffers and BIOs: about 0.15 MiB). Under churn that peak
    kept rising for the whole run, and the RSS with it (docs/benchmarks.md, "RSS over 10
    minutes"). Turning the deque before each take makes the left end the newest: the deque
    stays in release order, and the oldest connections are the ones left to expire."""
    get = connector._get

    async def newest_first(key: Any, traces: Any) -> Any:
        idle = connector._conns.get(key)
        if idle:
            idle.rotate(1)  # the newest (the right end) to the left, where `_get` takes from
        return await get(key, traces)

    connector._get = newest_first


def _environment_proxy(host: str) -> str | None:
    """`HTTPS_PROXY`/`HTTP_PROXY` for the API server, unless `NO_PROXY` exempts it."""
    parts = urllib.parse.urlsplit(host)
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if parts.hostname and bypass(parts.hostname):
        return None
    proxies = urllib.request.getproxies_environment()
    proxy: str | None = proxies.get(parts.scheme or "https")
    return proxy


async def login(kubeconfig: pathlib.Path | None) -> Credentials:
    """The credentials in the kubeconfig (explicit path wins) or of the service account.

    The path is passed explicitly because kubernetes-asyncio reads `$KUBECONFIG` once, at
    import time (stack-notes).
    """
    config = await _load(kubeconfig)
    maybe_header: Any = config.get_api_key_with_prefix("BearerToken")
    header: str | None = await maybe_header if inspect.isawaitable(maybe_header) else maybe_header
    parts = header.split(" ", 1) if header else []
    scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0] if parts else None)
    if not config.host:
        raise LoginError("the Kubernetes configuration names no API server")
    return Credentials(
        server=config.host,
        insecure=not config.verify_ssl,
        ca_path=config.ssl_ca_cert,
        scheme=scheme,
        token=token,
        certificate_path=config.cert_file,
        private_key_path=config.key_file,
    )


@dataclasses.dataclass
class Limits:
    """`--kube-api-qps` and `--kube-api-burst`: a token bucket (`throttling.TokenBucket`) per
    field manager, shared by the clients of one connection.

    Each Go sidecar is its own process with its own client, so each has the whole QPS to
    itself; each role here (`as_manager`: csi-provisioner, csi-attacher, ...) has its own
    bucket likewise, and the caches' informers, which every role shares, have one more. Each
    role's leader election has one too (`for_leader_election`), as each Go sidecar's has its
    own client. A bucket is named after its role's field manager (`csi-provisioner`,
    `csi-provisioner/leader-election`, `kopf-csi` for the informers).

    Every request the client sends waits for its token: reads, writes, and each watch when
    it starts, as client-go's. kopf's own requests (its watches of the few kinds it still
    handles) are not counted.
    """

    qps: float
    burst: int
    buckets: dict[str, TokenBucket] = dataclasses.field(default_factory=dict)

    def bucket(self, name: str) -> TokenBucket:
        """The bucket `name`, made full when first asked for."""
        found = self.buckets.get(name)
        if found is None:
            found = self.buckets[name] = TokenBucket(self.qps, self.burst)
        return found


class RequestObserver(Protocol):
    """Told of every request of the shared client (`KubeClient.observe`; `metrics.Metrics`)."""

    def requested(self, manager: str, verb: str, resource: str, code: str, seconds: float) -> None:
        """A request answered (`code`: its HTTP status) or failed with no answer (`<error>`),
        `seconds` from sending it (its rate limit's wait excluded) to its whole answer."""

    def connection_got(self, seconds: float) -> None:
        """A request got its connection: at once when one was free and open, else after the
        pool's wait (its limit reached) or a new connection's set-up (TCP, the TLS handshake)."""


NO_ANSWER = "<error>"
"""The `code` of a request that got no answer (client-go's word in `rest_client_requests_total`)."""


def resource_of(path: str) -> str:
    """The resource a request's path names, with its subresource: `persistentvolumes`,
    `persistentvolumeclaims/status`, `namespaces`, `leases`; `version` for `/version`."""
    words = [word for word in path.split("?", 1)[0].split("/") if word]
    if words[:1] == ["api"]:
        words = words[2:]  # api, v1
    elif words[:1] == ["apis"]:
        words = words[3:]  # apis, group, version
    if words[:1] == ["namespaces"] and len(words) > 2:
        words = words[2:]  # a namespaced resource: namespaces, its name
    if not words:
        return "version" if path.startswith("/version") else "discovery"
    return "/".join(words[:1] + words[2:3])  # the resource and its subresource, not the name


class KubeClient:
    """Plain-dict CRUD on any resource, over the operator's shared connections to the API.

    kubernetes-asyncio's ApiClient logs in and its aiohttp session carries the watches; one
    `httppool.Pool` carries every other request (without one, through a proxy: the session).
    Every request says who sends it: the User-Agent and, on writes, the `fieldManager` name
    the Go sidecar whose role makes it (`as_manager`). The clients of all roles share the
    connections; with `limits`, each role's requests wait for its own token bucket.
    """

    def __init__(
        self,
        api: Any,
        *,
        manager: str = DEFAULT_MANAGER,
        limits: Limits | None = None,
        gives_way: bool = False,
        bucket: str | None = None,
        observers: list[RequestObserver] | None = None,
        reachability: Reachability | None = None,
        pool: httppool.Pool | None = None,
    ) -> None:
        self._api = api
        self._pool = pool  # the plain requests' connections; None: aiohttp's session's
        self._observers = [] if observers is None else observers  # one list for the copies
        if reachability is None:  # the first client of a pool: the copies share its state
            reachability = Reachability()
            reachability.probe_with(self.version)
        self.reachability = reachability
        """Whether the API server answers, as this pool's requests see it (one warning when
        it goes away, one when it is back: `reachability`)."""
        self.manager = manager
        self.limits = limits
        self.gives_way = gives_way
        self.bucket_name = bucket or manager
        self._bucket = limits.bucket(self.bucket_name) if limits is not None else None
        self._headers = {"Accept": "application/json", "User-Agent": user_agent(manager)}
        # kubernetes-asyncio lets its default headers win over a request's: drop its own
        # User-Agent ("OpenAPI-Generator/..."), so that ours reaches the server.
        api.default_headers.pop("User-Agent", None)

    @property
    def server(self) -> str:
        """The API server's URL."""
        return str(self._api.configuration.host)

    def as_manager(self, manager: str) -> KubeClient:
        """The same connection, writing as `manager` (e.g. `csi-provisioner`)."""
        return KubeClient(
            self._api,
            manager=manager,
            limits=self.limits,
            observers=self._observers,
            reachability=self.reachability,
            pool=self._pool,
        )

    def giving_way(self) -> KubeClient:
        """The same client, whose requests give way to this role's others when its rate limit
        is reached (`throttling.TokenBucket.reserve_spare`): for events, which report work and
        should not hold it up. Same limit, same bucket; only the order changes."""
        return KubeClient(
            self._api,
            manager=self.manager,
            limits=self.limits,
            gives_way=True,
            bucket=self.bucket_name,
            observers=self._observers,
            reachability=self.reachability,
            pool=self._pool,
        )

    def for_leader_election(self) -> KubeClient:
        """The same connection and field manager, with a token bucket of its own: each Go
        sidecar gives leader election a client of its own (external-attacher #241,
        external-snapshotter #343), so that a Lease's renewal never waits behind the role's
        throttled work and leadership is not lost in a burst."""
        return KubeClient(
            self._api,
            manager=self.manager,
            limits=self.limits,
            bucket=f"{self.manager}/leader-election",
            observers=self._observers,
            reachability=self.reachability,
            pool=self._pool,
        )

    @classmethod
    async def connect(
        cls,
        kubeconfig: pathlib.Path | None,
        *,
        context: str | None = None,
        qps: float | None = None,
        burst: int = 1,
    ) -> KubeClient:
        """Log in with the kubeconfig (and its `context`, else its current one), or in-cluster.

        With `qps`, every role's requests are limited to `qps` per second on average and
        `burst` at once (`Limits`); without, they are not limited."""
        configuration = await _load(kubeconfig, context)
        _limit_tls_reads(TLS_READ_SIZE)
        if configuration.proxy is None:
            configuration.proxy = _environment_proxy(configuration.host)
        api = kubernetes_asyncio.client.ApiClient(configuration=configuration)
        # kubernetes-asyncio opens its session with trust_env=True: aiohttp then scans the
        # environment for proxies and a netrc file on every request, about a fifth of the
        # operator's CPU per volume (docs/benchmarks.md). The proxy is resolved once, above.
        api.rest_client.pool_manager._trust_env = False
        # Every new connection is a TLS handshake (client-go multiplexes one HTTP/2
        # connection; aiohttp has HTTP/1.1 only): what a burst opened is kept for the next one
        # (below a server's idle timeout, so that it is the server that never closes first).
        connector: Any = api.rest_client.pool_manager.connector
        connector._keepalive_timeout = KEEPALIVE
        _reuse_newest_first(connector)
        _read_tls_by_records(connector)
        small_buffers = loops.name(asyncio.get_running_loop()) == "uvloop"
        if small_buffers:
            _small_receive_buffers(connector, TLS_RECEIVE_BUFFER)
        pool = _pool(api, small_buffers=small_buffers)
        return cls(api, limits=Limits(qps, burst) if qps is not None else None, pool=pool)

    def observe(self, observer: RequestObserver) -> None:
        """Tell `observer` of every request of this client and of every client made from it
        (`as_manager`, ...): each request's outcome and duration, and how long it took to get
        a connection of the shared pool."""
        if not self._observers:
            self._time_connections(self._observers)
        self._observers.append(observer)

    def _time_connections(self, observers: list[RequestObserver]) -> None:
        """Time the pool's wait for a connection (a free one under the limit, or a new one), and
        the session's connector's `connect` (the watches): once per request. aiohttp's request
        tracing would tell the wait and the set-up apart, at 25-40 µs per request for its
        signals; this costs about 2."""
        connector: Any = self._api.rest_client.pool_manager.connector
        connect = connector.connect
        if self._pool is not None:

            def got(seconds: float) -> None:
                for observer in observers:
                    observer.connection_got(seconds)

            self._pool.observe(got)

        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            connection = await connect(*args, **kwargs)
            seconds = time.perf_counter() - started
            for observer in observers:
                observer.connection_got(seconds)
            return connection

        connector.connect = timed

    async def warm(self, connections: int) -> int:
        """Open up to `connections` connections now (TCP and TLS: `connections` requests at
        once, each on a new one), so that a burst of requests finds them open instead of
        waiting for as many handshakes at once; how many requests succeeded."""
        pooled: Any = self._pool or self._api.rest_client.pool_manager.connector
        limit = pooled.limit or connections
        answers = await asyncio.gather(
            *(self.version() for _ in range(min(connections, limit))), return_exceptions=True
        )
        return sum(not isinstance(answer, BaseException) for answer in answers)

    async def close(self) -> None:
        await self.reachability.close()
        if self._pool is not None:
            await self._pool.close()
        await self._api.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def version(self) -> Body:
        return await self._request("GET", "/version")

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Body | None:
        """The object, or None when it does not exist."""
        try:
            return await self.read(resource, name, namespace)
        except NotFoundError:
            return None

    async def get_metadata(
        self, resource: Resource, name: str, namespace: str | None = None
    ) -> Body | None:
        """The object's metadata alone (a PartialObjectMetadata), or None when it does not exist.

        The server leaves the rest out: a Secret's data never comes over the wire.
        """
        try:
            path = resource.path(namespace, name)
            return await self._request("GET", path, accept=METADATA_ONLY, resource=resource.plural)
        except NotFoundError:
            return None

    async def read(self, resource: Resource, name: str, namespace: str | None = None) -> Body:
        """The object; `NotFoundError` when it does not exist, with the server's own text
        (`volumesnapshots.snapshot.storage.k8s.io "x" not found`), as client-go's Get."""
        return await self._request("GET", resource.path(namespace, name), resource=resource.plural)

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Body]:
        items: list[Body] = []
        async for page in self.pages(
            resource, namespace, label_selector=label_selector, field_selector=field_selector
        ):
            items.extend(page)
        return items

    async def pages(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = LIST_PAGE_SIZE,
        versions: Versions | None = None,
    ) -> AsyncIterator[Page]:
        """LIST in pages of `limit` (client-go's pager): one page in memory at a time.

        With `versions`, the list's resourceVersion is appended to it (a watch from there
        misses nothing and repeats nothing of what the pages held).

        A continue token that expired between two pages (410) restarts the list from the
        beginning, once: objects already yielded may come again, which is harmless for the
        caches this feeds (they store by key).
        """
        query: dict[str, str | None] = {
            "labelSelector": label_selector, "fieldSelector": field_selector, "limit": str(limit),
        }  # fmt: skip
        restarted = False
        while True:
            try:
                answer = await self._request(
                    "GET", resource.path(namespace), query=query, resource=resource.plural
                )
            except KubeError as exc:
                if exc.status != 410 or "continue" not in query or restarted:
                    raise
                restarted = True  # the token expired: list again from the start
                query.pop("continue")
                continue
            if versions is not None and "continue" not in query:  # every page: one snapshot
                versions.append(str((answer.get("metadata") or {}).get("resourceVersion") or ""))
            yield answer.get("items") or []
            token = (answer.get("metadata") or {}).get("continue")
            del answer
            if not token:
                return
            query["continue"] = token

    async def create(
        self, resource: Resource, body: Mapping[str, Any], *, answer: bool = True
    ) -> Body:
        """The object created; with `answer=False`, an empty dict (see `patch`)."""
        namespace = body.get("metadata", {}).get("namespace")
        return await self._request(
            "POST", resource.path(namespace), body=body, answer=answer, resource=resource.plural
        )

    async def replace(self, resource: Resource, body: Mapping[str, Any]) -> Body:
        meta = body.get("metadata", {})
        path = resource.path(meta.get("namespace"), meta["name"])
        return await self._request("PUT", path, body=body, resource=resource.plural)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        answer: bool = True,
    ) -> Body:
        """The object patched. With `answer=False`, an empty dict: the server's answer is
        read but not decoded, for a caller that never looks at it (the journal's lanes: each
        answer holds every record of its ConfigMap). An error answer is decoded as ever."""
        path = resource.path(namespace, name) + (f"/{subresource}" if subresource else "")
        named = f"{resource.plural}/{subresource}" if subresource else resource.plural
        return await self._request(
            "PATCH", path, body=patch, content_type=CONTENT_TYPES[patch_type], answer=answer,
            resource=named,
        )  # fmt: skip

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> Body | None:
        """Delete (guarded by preconditions if given); None when it was already gone."""
        options: Body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        preconditions = {"uid": uid, "resourceVersion": resource_version}
        if any(preconditions.values()):
            options["preconditions"] = {k: v for k, v in preconditions.items() if v}
        try:
            return await self._request(
                "DELETE", resource.path(namespace, name), body=options, resource=resource.plural
            )
        except NotFoundError:
            return None

    async def watch(
        self, resource: Resource, *, resource_version: str, timeout: int = WATCH_TIMEOUT
    ) -> AsyncIterator[Body]:
        """The watch events after `resource_version`, until the server ends the stream.

        Each is the event as sent (`type`, `object`), bookmarks included. An ERROR event
        (410 Gone when the version is too old) or an error answer raises `KubeError`.
        """
        query = [
            ("watch", "true"), ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(timeout)),
        ]  # fmt: skip
        path = resource.path()
        await self._throttle("WATCH", path)
        try:
            response = await self._send(
                "GET", path, query, dict(self._headers), None, timeout=timeout + 30
            )
        except _TRANSPORT_ERRORS as exc:
            error = _unanswered(exc, "WATCH", path)
            self.reachability.failed(error)
            raise error from exc
        try:
            async with response:
                if response.status != 200:
                    _decode(await response.read(), status=response.status, method="GET", path=path)
                self.reachability.answered()
                async with contextlib.aclosing(_watch_events(response, path)) as events:
                    async for event in events:
                        yield event
        except _TRANSPORT_ERRORS as exc:  # cut mid-stream: the server went away
            error = _unanswered(exc, "WATCH", path)
            self.reachability.failed(error)
            raise error from exc
        except UnavailableError as exc:  # a 503 for the watch itself
            self.reachability.failed(exc)
            raise

    async def _throttle(self, method: str, path: str) -> None:
        """Wait for this role's token (`Limits`), if its requests are limited; a long wait is
        logged now and then, as client-go's "Waited for ... due to client-side throttling"."""
        bucket = self._bucket
        if bucket is None:
            return
        loop = asyncio.get_running_loop()
        started = now = loop.time()
        if self.gives_way:  # a token only when one is there: the role's work goes first
            while delay := bucket.reserve_spare(now, waited=now - started):
                await asyncio.sleep(delay)
                now = loop.time()
            waited = now - started
        else:
            waited = bucket.reserve(started)
            if waited > 0:
                await asyncio.sleep(waited)
        if waited > 0 and bucket.report_due(started, waited):
            log.info(
                "api_requests_throttled",
                manager=self.manager,
                waited=round(waited, 3),
                request=f"{method} {path}",
                qps=bucket.qps,
                burst=bucket.burst,
                hint="raise --kube-api-qps and --kube-api-burst to send more",
            )

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str | None] | None = None,
        content_type: str = "application/json",
        accept: str | None = None,
        answer: bool = True,
        resource: str = "",
    ) -> Body:
        """One request and its decoded answer; `resource`: what `resource_of(path)` would say,
        given by the callers that know it (each path parsed again took 0.2-0.4 % of the CPU)."""
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        headers = {**self._headers, "Content-Type": content_type}
        if accept is not None:
            headers["Accept"] = accept
        if method in ("POST", "PUT", "PATCH"):
            params.append(("fieldManager", self.manager))
        await self._throttle(method, path)
        started = time.perf_counter() if self._observers else 0.0
        code = NO_ANSWER
        try:
            status, raw = await self._exchange(method, path, params, headers, body)
            code = str(status)
        except _TRANSPORT_ERRORS as exc:
            error = _unanswered(exc, method, path)
            self.reachability.failed(error)
            raise error from exc
        finally:
            if self._observers:
                self._observed(method, resource or resource_of(path), code, started)
        if not answer and 200 <= status < 300:
            self.reachability.answered()
            return {}
        try:
            decoded = _decode(raw, status=status, method=method, path=path)
        except UnavailableError as exc:
            self.reachability.failed(exc)
            raise
        except KubeError:
            self.reachability.answered()
            raise
        self.reachability.answered()
        return decoded

    async def _exchange(
        self,
        method: str,
        path: str,
        params: Sequence[tuple[str, str]],
        headers: dict[str, str],
        body: Any,
    ) -> tuple[int, bytes]:
        """One request answered at once (not a watch), and its answer's status and body: on
        the client's own pool (`httppool`), else (through a proxy) on aiohttp's session."""
        pool = self._pool
        if pool is None:
            response = await self._send(method, path, params, headers, body)
            async with response:
                return response.status, await response.read()
        await self._authorize(headers)
        query = _query(tuple(params)) if params else ""
        target = _target(self._api.configuration.host, path, query)
        data = None if body is None else jsoncodec.dumps(body)
        return await pool.request(method, target, headers, data)

    async def _authorize(self, headers: dict[str, str]) -> None:
        """`headers` as kubernetes-asyncio's ApiClient would send them: its default headers and
        cookie, and the bearer token (refreshed by its hook: exec plugins, in-cluster token
        files)."""
        api = self._api
        headers.update(api.default_headers)
        if api.cookie:
            headers["Cookie"] = api.cookie
        auth = (await api.configuration.auth_settings()).get("BearerToken")
        if auth:
            headers[auth["key"]] = auth["value"]

    async def _send(
        self,
        method: str,
        path: str,
        params: Sequence[tuple[str, str]],
        headers: dict[str, str],
        body: Any,
        *,
        timeout: float | None = None,
    ) -> Any:
        """One request on aiohttp's session, as kubernetes-asyncio's ApiClient would send it
        (`_authorize`), through its proxy, with its TLS server name; no timeout but `timeout`."""
        api = self._api
        await self._authorize(headers)
        url = _url(api.configuration.host, path, _query(tuple(params)) if params else "")
        client: Any = api.rest_client
        options: dict[str, Any] = {}
        if client.proxy:
            options["proxy"] = client.proxy
            if client.proxy_headers:
                options["proxy_headers"] = client.proxy_headers
        if client.server_hostname:
            options["server_hostname"] = client.server_hostname
        return await client.pool_manager.request(
            method,
            url,
            headers=headers,
            data=None if body is None else jsoncodec.dumps(body),
            timeout=_NO_TIMEOUT if timeout is None else aiohttp.ClientTimeout(total=timeout),
            **options,
        )

    def _observed(self, method: str, resource: str, code: str, started: float) -> None:
        seconds = time.perf_counter() - started
        for observer in self._observers:
            observer.requested(self.manager, method, resource, code, seconds)


_NO_TIMEOUT = aiohttp.ClientTimeout(total=None)  # frozen: one for every request without one


def _pool(api: Any, *, small_buffers: bool) -> httppool.Pool | None:
    """The pool of the plain requests, with the session's TLS context (its certificates and
    `_RecordReads`), server name, limit and `KEEPALIVE`; None through a proxy (aiohttp's
    session tunnels to it)."""
    client = api.rest_client
    if client.proxy:
        return None
    base = _base_url(api.configuration.host)
    connector = client.pool_manager.connector
    tls = connector._ssl if base.scheme == "https" else None
    return httppool.Pool(
        base.raw_host or "localhost",
        base.port or (443 if tls is not None else 80),
        tls=tls,
        server_hostname=client.server_hostname,
        limit=connector.limit or 100,
        keepalive=KEEPALIVE,
        receive_buffer=TLS_RECEIVE_BUFFER if small_buffers and tls is not None else None,
    )


def _target(host: str, path: str, query: str) -> str:
    """The request target of `host` + `path` + `?query` (the pool's; `_url` the session's)."""
    path = _full_path(_base_url(host), path)
    return f"{path}?{query}" if query else path


def _full_path(base: yarl.URL, path: str) -> str:
    """`path` below the server's own (an API behind a proxy's path), encoded: `Resource.path`'s
    are, but for a name with a character a path cannot hold, quoted, not misread."""
    if not _PATH_CHARS.issuperset(path):
        path = urllib.parse.quote(path, safe=_PATH_SAFE)
    return base.raw_path.rstrip("/") + path


def _url(host: str, path: str, query: str) -> yarl.URL:
    """`host` + `path` + `?query` as a URL, built from its parts (already encoded: the paths
    of `Resource.path`, the query of `_query`) instead of parsed and encoded again: each
    request has a new path (a volume's name), and yarl's parsing of it took about 0.9 % of the
    operator's CPU under churn. `host` may have a path of its own (an API behind a proxy)."""
    base = _base_url(host)
    return yarl.URL.build(
        scheme=base.scheme,
        authority=base.raw_authority,
        path=_full_path(base, path),
        query_string=query,
        encoded=True,
    )


_PATH_SAFE = "/-._~:@!$&'()*+,;="
_PATH_CHARS = frozenset(string.ascii_letters + string.digits + _PATH_SAFE)
"""What a path may hold as it is (RFC 3986's path characters, `%` aside: a `%` in a name is
quoted, as is a space, `?` or `#`, so that the server reads the name that was meant)."""


@functools.lru_cache(maxsize=8)
def _base_url(host: str) -> yarl.URL:
    return yarl.URL(host)


@functools.lru_cache(maxsize=256)
def _query(params: tuple[tuple[str, str], ...]) -> str:
    """The encoded query of `params`: a write's is the same each time (its field manager), and
    `urlencode` took about 0.6 % of the operator's CPU under churn."""
    return urllib.parse.urlencode(params)


async def _watch_events(response: Any, path: str) -> AsyncGenerator[Body, None]:
    """The watch events of one streamed answer, as they come, line by line."""
    pending = bytearray()
    async for chunk in response.content.iter_any():
        pending += chunk
        if b"\n" not in chunk:
            continue
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            event = jsoncodec.loads(line)
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                raise KubeError(
                    str(status.get("message") or f"watch {path} failed"),
                    status=int(status.get("code") or 500),
                    reason=str(status.get("reason") or ""),
                )
            yield event


def decode_secret_data(secret: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's `data`, base64-decoded (as client-go hands it to the Go sidecars).

    ValueError for a malformed Secret (not a map, or a value that is not base64 text); the
    message names the key, never the value. Bytes that are not UTF-8 are replaced.
    """
    data = secret.get("data") or {}
    if not isinstance(data, Mapping):
        raise ValueError("the secret's data is not a map")  # noqa: TRY004 (bad input, not code)
    decoded: dict[str, str] = {}
    for key, value in data.items():
        try:
            raw = base64.b64decode(value if isinstance(value, str) else b"?", validate=True)
        except binascii.Error:
            raise ValueError(f"the secret's data under key {str(key)!r} is not base64") from None
        decoded[str(key)] = raw.decode("utf-8", "replace")
    return decoded


def _decode(raw: bytes, *, status: int, method: str, path: str) -> Body:
    try:
        data = jsoncodec.loads(raw) if raw else {}
    except ValueError:
        data = None
    if not isinstance(data, dict):
        # A Secret's body is its data: never quote it (into logs, events, exception texts).
        is_secret = "secrets" in path.split("?", 1)[0].split("/")
        snippet = f"<{len(raw)} bytes>" if is_secret else repr(raw[:200].decode("utf-8", "replace"))
        raise KubeError(
            f"{method} {path}: the API answered with something that is not a JSON object: "
            f"{snippet}",
            status=status,
            reason="MalformedResponse",
        )
    if 200 <= status < 300:
        return data
    message = str(data.get("message") or f"{method} {path} failed")
    reason = str(data.get("reason") or "")
    error: type[KubeError] = {404: NotFoundError, 409: ConflictError}.get(status, KubeError)
    if status == 409 and reason == "Conflict":  # not AlreadyExists
        error = StaleWriteError
    elif status in UNAVAILABLE_STATUSES or (status == 500 and "etcdserver:" in message):
        error = UnavailableError  # etcd away: the server wraps its text in a 500
    raise error(message, status=status, reason=reason)
