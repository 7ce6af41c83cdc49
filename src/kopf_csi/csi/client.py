"""An async client for one CSI driver at a unix socket: the operator's only way to the driver.

What belongs here: the channel, the per-call timeout, turning every failure into a `CSIError`,
logging each call once with secrets stripped, caching what the driver says about itself, and
knowing which calls are unanswered now and for which object (`calls_in_flight`, for explain's
debug endpoint: the RPC, its start and timeout, and the object the controller bound for its log
lines; never the request).
What does not: deciding what an error means for an operation (final, in progress, reschedule).
That depends on the operation (RESOURCE_EXHAUSTED reschedules a CreateVolume but is retried for
ControllerPublishVolume), so those tables live with the operations.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

import betterproto2
import structlog
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError
from h2.connection import H2Connection

from kopf_csi.csi import messages as csi
from kopf_csi.csi.codes import Code
from kopf_csi.csi.driverinfo import DriverInfo
from kopf_csi.csi.errors import CSIError, CSITimeoutError, DriverNotReadyError
from kopf_csi.csi.redaction import redact, scrub, secret_values

__all__ = ["CSIClient", "CallInFlight", "CallObserver", "DriverInfo", "parse_address"]

logger = structlog.get_logger("kopf_csi.csi")

Response = TypeVar("Response", bound=betterproto2.Message)
CallObserver = Callable[[str, Code, float], None]
"""Called after every call with the method, its code and its duration in seconds (metrics)."""

MISSING_SOCKET_GRACE = 5.0
"""Seconds `wait_ready` waits for a socket path that does not exist at all before it gives up.

The driver's container starts beside the operator's and creates its socket when it starts
listening, within a second or two. A path still absent after this is most likely a wrong
`--csi-address` or a socket volume not mounted, which no longer wait mends; failing then, not
after the whole connect timeout, says so at once (a driver merely slow to start gets the pod
restarted, and is there the next time). A socket that exists but refuses is a driver starting
up: it gets the whole wait, as csi-lib-utils gives it."""

CLOSED_STREAMS_REMEMBERED = 1024
"""Closed HTTP/2 streams the CSI connection remembers (h2's `MAX_CLOSED_STREAMS`: 65,536).

h2 keeps the id and the closing of every stream it closed, up to 65,536 of them (about 115
bytes each, 7.5 MiB in all), to tell a late frame on a stream it reset (answered with a
RST_STREAM) from a protocol error. The connection to the driver lives as long as the operator
and opens a stream per call, so that memory grew with every CSI call for hours (about 2.5
calls a claim: some 3 MiB over a 10-minute churn of 12,000 claims, and still growing;
docs/benchmarks.md, "RSS over 10 minutes"). Frames after a reset arrive within the socket's
round trip, while a few streams close, not thousands; Go's HTTP/2 client remembers no closed
stream at all. (h2 comes with grpclib, which makes the connection; this is its one knob.)"""

# Failures below gRPC: the socket is missing, refused, or the connection died mid-call.
CONNECTION_ERRORS = (ConnectionError, FileNotFoundError, StreamTerminatedError, ProtocolError)


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class CallInFlight:
    """One call the driver has not answered yet, for the read-only debug endpoint: the RPC's
    name, when it started (`time.monotonic()`), its timeout, and the object it is for (the
    `kind`, `namespace` and `name` the controller bound for its log lines; empty when none).
    Never the request: it may hold secrets."""

    rpc: str
    started: float
    timeout: float
    kind: str
    namespace: str
    name: str


def parse_address(address: str) -> str:
    """`unix:///run/csi/socket`, `unix:/x` or a bare path → the socket path (as csi-lib-utils)."""
    if address.startswith("unix://"):
        return address[len("unix://") :]
    if address.startswith("unix:"):
        return address[len("unix:") :]
    if "://" in address:
        raise ValueError(f"only unix sockets are supported, not {address!r}")
    return address


class CSIClient:
    """One driver, one channel. Create it inside the running event loop."""

    def __init__(
        self,
        address: str,
        *,
        timeout: float = 10.0,
        observers: Iterable[CallObserver] = (),
    ) -> None:
        self.path = parse_address(address)
        self.timeout = timeout
        self.observers = list(observers)
        # Read by each new connection (grpclib makes h2's): every connection of this process.
        H2Connection.MAX_CLOSED_STREAMS = CLOSED_STREAMS_REMEMBERED
        self._channel = Channel(path=self.path)
        self._identity = csi.IdentityStub(self._channel)
        self._controller = csi.ControllerStub(self._channel)
        self._node = csi.NodeStub(self._channel)
        self._groups = csi.GroupControllerStub(self._channel)
        self._info: DriverInfo | None = None
        self._node_capabilities: frozenset[str] | None = None
        self._in_flight: set[CallInFlight] = set()

    def __repr__(self) -> str:
        return f"CSIClient(path={self.path!r}, timeout={self.timeout})"

    async def close(self) -> None:
        self._channel.close()

    async def __aenter__(self) -> CSIClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def calls_in_flight(self, kind: str, namespace: str | None, name: str) -> list[CallInFlight]:
        """The unanswered calls made for one object (`kind` in any case), oldest first."""
        kind = kind.lower()
        found = [
            call
            for call in list(self._in_flight)
            if call.kind.lower() == kind
            and call.name == name
            and call.namespace == (namespace or "")
        ]
        return sorted(found, key=lambda call: call.started)

    # -- start-up -------------------------------------------------------------------------------

    async def wait_ready(
        self,
        *,
        wait: float = 30.0,
        interval: float = 1.0,
        log_every: float = 10.0,
        missing_grace: float = MISSING_SOCKET_GRACE,
    ) -> None:
        """Probe until the driver is ready, for at most `wait` seconds (csi-lib-utils: 30 s).

        A refused connection, DEADLINE_EXCEEDED, UNAVAILABLE and `ready=false` mean "not yet".
        So does a missing socket, but only for `missing_grace` seconds (`MISSING_SOCKET_GRACE`
        says why). Any other answer is the driver telling us something final: raise it.
        """
        started = time.monotonic()
        last_log: float | None = None
        missing_since: float | None = None
        while True:
            missing = False
            try:
                response = await self.probe(timeout=min(self.timeout, max(interval, 1.0)))
            except CSIError as exc:
                if exc.code not in {Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED}:
                    raise
                reason, cause = exc.code.name, exc.message  # the cause: no such file, refused
                missing = isinstance(exc.__cause__, FileNotFoundError)  # no path, not refusing
            else:
                # A missing `ready` counts as ready (CSI spec; csi-lib-utils ProbeForever).
                if response.ready is None or response.ready:
                    return
                reason, cause = "NOT_READY", "Probe answered ready=false"
            now = time.monotonic()
            missing_since = (missing_since or now) if missing else None
            waited_out = now - started >= wait
            if waited_out or (missing_since is not None and now - missing_since >= missing_grace):
                within = wait if waited_out else min(wait, missing_grace)
                raise DriverNotReadyError(
                    f"the CSI driver at {self.path} was not ready within {within:g}s: {cause}",
                    method="/csi.v1.Identity/Probe",
                    code=Code.UNAVAILABLE,
                )
            if last_log is None or now - last_log >= log_every:
                waited = round(now - started, 3)
                logger.info("waiting_for_driver", path=self.path, reason=reason, waited=waited)
                last_log = now
            await asyncio.sleep(interval)

    async def driver_info(
        self, *, refresh: bool = False, named: Callable[[str], None] | None = None
    ) -> DriverInfo:
        """GetPluginInfo, GetPluginCapabilities, ControllerGetCapabilities and (with the
        GROUP_CONTROLLER_SERVICE) GroupControllerGetCapabilities, cached. `named` is told the
        driver's name as soon as GetPluginInfo answers, before the capability calls (the
        sidecars label those calls' metrics with it: `SetDriverName` in between)."""
        if self._info is None or refresh:
            info = await self.get_plugin_info()
            if named is not None:
                named(info.name)
            plugin = await self.get_plugin_capabilities()
            services: set[str] = set()
            expansion: set[str] = set()
            for cap in plugin.capabilities:
                if cap.service is not None:
                    services.add(cap.service.type.name)
                if cap.volume_expansion is not None:
                    expansion.add(cap.volume_expansion.type.name)
            controller: set[str] = set()
            if "CONTROLLER_SERVICE" in services:
                answer = await self.controller_get_capabilities()
                controller = {c.rpc.type.name for c in answer.capabilities if c.rpc is not None}
            group: set[str] = set()
            if "GROUP_CONTROLLER_SERVICE" in services:
                try:
                    groups = await self.group_controller_get_capabilities()
                except CSIError as exc:
                    # Only the group snapshotter needs these: a driver that advertises the
                    # service but fails to describe it leaves that one idle, not every role.
                    logger.warning("group_capabilities_unavailable", error=str(exc))
                else:
                    group = {c.rpc.type.name for c in groups.capabilities if c.rpc is not None}
            self._info = DriverInfo(
                name=info.name,
                vendor_version=info.vendor_version,
                manifest=dict(info.manifest),
                plugin_capabilities=frozenset(services),
                volume_expansion=frozenset(expansion),
                controller_capabilities=frozenset(controller),
                group_controller_capabilities=frozenset(group),
            )
        return self._info

    async def node_capabilities(self, *, refresh: bool = False) -> frozenset[str]:
        """NodeGetCapabilities, cached: the resizer needs it to choose the trivial resizer."""
        if self._node_capabilities is None or refresh:
            answer = await self.node_get_capabilities()
            self._node_capabilities = frozenset(
                c.rpc.type.name for c in answer.capabilities if c.rpc is not None
            )
        return self._node_capabilities

    # -- Identity ---------------------------------------------------------------------------------

    async def probe(self, *, timeout: float | None = None) -> csi.ProbeResponse:
        return await self._call(
            "Identity", "Probe", self._identity.probe, csi.ProbeRequest(), timeout
        )

    async def get_plugin_info(self) -> csi.GetPluginInfoResponse:
        return await self._call(
            "Identity", "GetPluginInfo", self._identity.get_plugin_info,
            csi.GetPluginInfoRequest(), None,
        )  # fmt: skip

    async def get_plugin_capabilities(self) -> csi.GetPluginCapabilitiesResponse:
        return await self._call(
            "Identity", "GetPluginCapabilities", self._identity.get_plugin_capabilities,
            csi.GetPluginCapabilitiesRequest(), None,
        )  # fmt: skip

    # -- Controller -------------------------------------------------------------------------------

    async def controller_get_capabilities(self) -> csi.ControllerGetCapabilitiesResponse:
        return await self._call(
            "Controller", "ControllerGetCapabilities", self._controller.controller_get_capabilities,
            csi.ControllerGetCapabilitiesRequest(), None,
        )  # fmt: skip

    async def create_volume(
        self, request: csi.CreateVolumeRequest, *, timeout: float | None = None
    ) -> csi.CreateVolumeResponse:
        return await self._call(
            "Controller", "CreateVolume", self._controller.create_volume, request, timeout
        )

    async def delete_volume(
        self, request: csi.DeleteVolumeRequest, *, timeout: float | None = None
    ) -> csi.DeleteVolumeResponse:
        return await self._call(
            "Controller", "DeleteVolume", self._controller.delete_volume, request, timeout
        )

    async def controller_publish_volume(
        self, request: csi.ControllerPublishVolumeRequest, *, timeout: float | None = None
    ) -> csi.ControllerPublishVolumeResponse:
        return await self._call(
            "Controller", "ControllerPublishVolume",
            self._controller.controller_publish_volume, request, timeout,
        )  # fmt: skip

    async def controller_unpublish_volume(
        self, request: csi.ControllerUnpublishVolumeRequest, *, timeout: float | None = None
    ) -> csi.ControllerUnpublishVolumeResponse:
        return await self._call(
            "Controller", "ControllerUnpublishVolume",
            self._controller.controller_unpublish_volume, request, timeout,
        )  # fmt: skip

    async def list_volumes(
        self, request: csi.ListVolumesRequest, *, timeout: float | None = None
    ) -> csi.ListVolumesResponse:
        return await self._call(
            "Controller", "ListVolumes", self._controller.list_volumes, request, timeout
        )

    async def iter_volumes(
        self, *, max_entries: int = 0, timeout: float | None = None
    ) -> AsyncIterator[csi.ListVolumesResponseEntry]:
        """All volumes, page by page (the attacher's reconciler pages by `--max-entries`)."""
        token = ""
        while True:
            page = await self.list_volumes(
                csi.ListVolumesRequest(max_entries=max_entries, starting_token=token),
                timeout=timeout,
            )
            for entry in page.entries:
                yield entry
            token = page.next_token
            if not token:
                return

    async def get_capacity(
        self, request: csi.GetCapacityRequest, *, timeout: float | None = None
    ) -> csi.GetCapacityResponse:
        return await self._call(
            "Controller", "GetCapacity", self._controller.get_capacity, request, timeout
        )

    async def controller_expand_volume(
        self, request: csi.ControllerExpandVolumeRequest, *, timeout: float | None = None
    ) -> csi.ControllerExpandVolumeResponse:
        return await self._call(
            "Controller", "ControllerExpandVolume",
            self._controller.controller_expand_volume, request, timeout,
        )  # fmt: skip

    async def controller_modify_volume(
        self, request: csi.ControllerModifyVolumeRequest, *, timeout: float | None = None
    ) -> csi.ControllerModifyVolumeResponse:
        return await self._call(
            "Controller", "ControllerModifyVolume",
            self._controller.controller_modify_volume, request, timeout,
        )  # fmt: skip

    async def controller_get_volume(
        self, request: csi.ControllerGetVolumeRequest, *, timeout: float | None = None
    ) -> csi.ControllerGetVolumeResponse:
        return await self._call(
            "Controller", "ControllerGetVolume",
            self._controller.controller_get_volume, request, timeout,
        )  # fmt: skip

    async def create_snapshot(
        self, request: csi.CreateSnapshotRequest, *, timeout: float | None = None
    ) -> csi.CreateSnapshotResponse:
        return await self._call(
            "Controller", "CreateSnapshot", self._controller.create_snapshot, request, timeout
        )

    async def delete_snapshot(
        self, request: csi.DeleteSnapshotRequest, *, timeout: float | None = None
    ) -> csi.DeleteSnapshotResponse:
        return await self._call(
            "Controller", "DeleteSnapshot", self._controller.delete_snapshot, request, timeout
        )

    async def list_snapshots(
        self, request: csi.ListSnapshotsRequest, *, timeout: float | None = None
    ) -> csi.ListSnapshotsResponse:
        return await self._call(
            "Controller", "ListSnapshots", self._controller.list_snapshots, request, timeout
        )

    async def get_snapshot(
        self, request: csi.GetSnapshotRequest, *, timeout: float | None = None
    ) -> csi.GetSnapshotResponse:
        return await self._call(
            "Controller", "GetSnapshot", self._controller.get_snapshot, request, timeout
        )

    # -- GroupController --------------------------------------------------------------------------

    async def group_controller_get_capabilities(
        self,
    ) -> csi.GroupControllerGetCapabilitiesResponse:
        return await self._call(
            "GroupController", "GroupControllerGetCapabilities",
            self._groups.group_controller_get_capabilities,
            csi.GroupControllerGetCapabilitiesRequest(), None,
        )  # fmt: skip

    async def create_volume_group_snapshot(
        self, request: csi.CreateVolumeGroupSnapshotRequest, *, timeout: float | None = None
    ) -> csi.CreateVolumeGroupSnapshotResponse:
        return await self._call(
            "GroupController", "CreateVolumeGroupSnapshot",
            self._groups.create_volume_group_snapshot, request, timeout,
        )  # fmt: skip

    async def delete_volume_group_snapshot(
        self, request: csi.DeleteVolumeGroupSnapshotRequest, *, timeout: float | None = None
    ) -> csi.DeleteVolumeGroupSnapshotResponse:
        return await self._call(
            "GroupController", "DeleteVolumeGroupSnapshot",
            self._groups.delete_volume_group_snapshot, request, timeout,
        )  # fmt: skip

    async def get_volume_group_snapshot(
        self, request: csi.GetVolumeGroupSnapshotRequest, *, timeout: float | None = None
    ) -> csi.GetVolumeGroupSnapshotResponse:
        return await self._call(
            "GroupController", "GetVolumeGroupSnapshot",
            self._groups.get_volume_group_snapshot, request, timeout,
        )  # fmt: skip

    # -- Node (capabilities only: this is a controller-side client) --------------------------------

    async def node_get_capabilities(self) -> csi.NodeGetCapabilitiesResponse:
        return await self._call(
            "Node", "NodeGetCapabilities", self._node.node_get_capabilities,
            csi.NodeGetCapabilitiesRequest(), None,
        )  # fmt: skip

    # -- the one path every call takes ----------------------------------------------------------

    async def _call(
        self,
        service: str,
        rpc: str,
        send: Callable[..., Awaitable[Response]],
        request: betterproto2.Message,
        timeout: float | None,
    ) -> Response:
        method = f"/csi.v1.{service}/{rpc}"
        budget = self.timeout if timeout is None else timeout
        log = logger.bind(method=method)
        # Redacting means serialising the whole message: only when debug lines are wanted.
        verbose = _debugging()
        if verbose:
            log.debug("csi_request", request=redact(request), timeout=budget)
        started = time.monotonic()
        code = Code.UNKNOWN
        bound = structlog.contextvars.get_contextvars()
        call = CallInFlight(
            rpc, started, budget, bound.get("kind", ""), bound.get("namespace", ""),
            bound.get("name", ""),
        )  # fmt: skip
        self._in_flight.add(call)
        try:
            # No retry here: a lost connection fails this call (UNAVAILABLE) and grpclib's
            # channel reconnects on the next one; the controllers' queues do the retrying.
            with _translated(method, budget, request):
                response = await send(request, timeout=budget)
        except CSIError as exc:
            code = exc.code
            log.debug("csi_error", code=exc.code.name, message=exc.message)
            raise
        else:
            code = Code.OK
            if verbose:
                log.debug("csi_response", response=redact(response))
            return response
        finally:
            self._in_flight.discard(call)
            elapsed = time.monotonic() - started
            for observe in self.observers:
                observe(method, code, elapsed)


def _debugging() -> bool:
    """Whether debug lines of this module go anywhere (stdlib level; structlog's own test
    capture counts as yes, so that tests can see the redacted lines)."""
    config = structlog.get_config()
    if not isinstance(config.get("logger_factory"), structlog.stdlib.LoggerFactory):
        return True
    return _STDLIB_LOGGER.isEnabledFor(logging.DEBUG)  # cached by the stdlib, cleared on change


_STDLIB_LOGGER = logging.getLogger("kopf_csi.csi")  # one object for ever: `getLogger` locks


@contextlib.contextmanager
def _translated(method: str, timeout: float, request: betterproto2.Message) -> Any:
    """The boundary where grpclib's and the OS's errors become `CSIError` (httpx-style). The
    request's secrets are looked up only when there is an error text to scrub of them."""
    try:
        yield
    except GRPCError as exc:
        secrets = secret_values(request)
        code = _code(exc.status)
        text = scrub(exc.message or code.name, secrets)
        if secrets:  # the driver's text may echo a secret: scrub the chained cause too
            exc.message, exc.details, exc.args = text, None, (exc.status, text, None)
        if code is Code.DEADLINE_EXCEEDED:
            raise CSITimeoutError(
                f"timed out after {timeout:g}s: {text}", method=method, driver_message=text
            ) from exc
        raise CSIError(text, method=method, code=code) from exc
    except TimeoutError as exc:
        raise CSITimeoutError(f"timed out after {timeout:g}s", method=method) from exc
    except CONNECTION_ERRORS as exc:
        text = f"connection to the driver failed: {type(exc).__name__}: {exc}"
        text = scrub(text, secret_values(request))
        raise CSIError(text, method=method, code=Code.UNAVAILABLE) from exc
    except OSError as exc:
        text = scrub(f"socket error: {type(exc).__name__}: {exc}", secret_values(request))
        raise CSIError(text, method=method, code=Code.UNAVAILABLE) from exc


def _code(status: Status) -> Code:
    try:
        return Code(status.value)
    except ValueError:
        return Code.UNKNOWN
