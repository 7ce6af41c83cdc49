"""An emulated Kubernetes API server over real local HTTP, for tests, the sandbox and benchmarks.

What belongs to the emulator, one module each, put together here as ``EmulatedCluster``: the
served kinds, and those a created CRD adds (``kinds.py``); the object store (resourceVersion,
uid, generation, finalizers with deletionTimestamp, the spec/status split, watch history and
410 Gone) with a Python-level API for tests that goes through the same write path
(``store.py``); the server's defaulting of what a write leaves out (``defaults.py``); watches
and change feeds (``watches.py``); the HTTP translation of the verbs, bookmarks and timeouts
(``serving.py``); fault injection (``faults.py``). This module adds the server's lifecycle, TLS
and the kubeconfig. What does not belong: controllers (``kcm.py``) and the patch and selector
algorithms (``apimachinery.py``). Import the public names from here, as before the split.

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
import json
import ssl
from pathlib import Path
from types import TracebackType

import aiohttp.web

from kopf_csi.testing.apimachinery import StatusError
from kopf_csi.testing.authorization import Authorizer
from kopf_csi.testing.faults import OTHER_WRITER, Fault, Faults, Race
from kopf_csi.testing.kinds import KINDS, Body, Kind
from kopf_csi.testing.latency import LatencyModel, uniform_writes
from kopf_csi.testing.serving import HttpServing
from kopf_csi.testing.store import PROTECTION_FINALIZERS, TEST_MANAGER, PatchType
from kopf_csi.testing.watches import Change, HttpWatch, Subscription

__all__ = [
    "KINDS",
    "OTHER_WRITER",
    "PROTECTION_FINALIZERS",
    "TEST_MANAGER",
    "Body",
    "Change",
    "EmulatedCluster",
    "Fault",
    "Faults",
    "Kind",
    "PatchType",
    "Race",
    "StatusError",
    "Subscription",
]

TLS_DIR = Path(__file__).parent / "tls"


def _server_tls() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(TLS_DIR / "server.crt", TLS_DIR / "server.key")
    return context


class EmulatedCluster(HttpServing):
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
        self._initial_namespaces = namespaces
        super().__init__(
            kinds=kinds,
            history=history,
            bookmark_interval=bookmark_interval,
            storage_protection=storage_protection,
            authorizer=authorizer,
            latency=latency or uniform_writes(write_latency),
        )
        self._runner: aiohttp.web.ServerRunner | None = None
        self._site: aiohttp.web.TCPSite | None = None

    # --- Lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> EmulatedCluster:
        await self._discovery.__aenter__()
        # No access log: it costs CPU on every request; aiohttp's cancellation ends the
        # watch handlers of vanished clients, so their listeners are dropped at once.
        server = aiohttp.web.Server(self._on_request, handler_cancellation=True, access_log=None)
        self._runner = aiohttp.web.ServerRunner(server, shutdown_timeout=1.0)
        await self._runner.setup()
        await self._listen()
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
        self.control_plane.start_etcd()  # requests held for it end
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self._discovery.__aexit__(exc_type, exc, tb)

    async def _listen(self) -> None:
        assert self._runner is not None
        self._site = aiohttp.web.TCPSite(
            self._runner, self.host, self.port, ssl_context=_server_tls() if self.tls else None
        )
        await self._site.start()

    # --- Outages (outages.py) -------------------------------------------------------------

    async def restart_apiserver(self, *, drain: float = 1.0, gone: float = 0.5) -> None:
        """The API server stops, as SIGTERM in a rolling upgrade stops it, and comes back.

        For `drain` seconds it answers some requests, refuses others with 503 `apiserver is
        shutting down` and resets the connections of others (`outages.DRAIN_CYCLE`); the
        open watches end at once. Then for `gone` seconds every connection is closed and
        connects are refused. Then it listens again on the same port, with the same store.
        """
        await self.stop_apiserver(drain=drain)
        await asyncio.sleep(gone)
        await self.start_apiserver()

    async def stop_apiserver(self, *, drain: float = 1.0) -> None:
        """The first half of `restart_apiserver`: drain, then stop listening."""
        self.control_plane.drain()
        self.end_watches()
        await asyncio.sleep(drain)
        self.control_plane.go()
        self.end_watches()
        if self._site is not None:
            await self._site.stop()
            self._site = None
        server = self._runner.server if self._runner is not None else None
        for handler in list(server.connections if server is not None else ()):
            transport = handler.transport
            if transport is not None:
                transport.abort()

    async def start_apiserver(self) -> None:
        """The second half of `restart_apiserver`: listen again, serving the same store."""
        if self._site is None:
            await self._listen()
        self.control_plane.come_back()

    async def stop_etcd(self, seconds: float, *, timeout: float | None = None) -> None:
        """etcd goes away for `seconds`: requests that need it hang, and fail after
        `timeout` (`ControlPlane.etcd_timeout`) if it is not back by then."""
        self.control_plane.stop_etcd(timeout)
        try:
            await asyncio.sleep(seconds)
        finally:
            self.control_plane.start_etcd()

    def end_watches(self, plural: str | None = None) -> None:
        """End every HTTP watch stream (of `plural`, or all): the clients watch again. The
        in-process subscriptions of the stand-ins go on."""
        for kind, listeners in self._listeners.items():
            if plural is not None and kind.plural != plural:
                continue
            for listener in list(listeners):
                if isinstance(listener, HttpWatch):
                    listener.close()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

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
