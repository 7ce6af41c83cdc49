"""The diagnostics HTTP server of `--http-endpoint`: metrics, liveness, readiness.

Paths (constants in `kopf_csi.names`):

- `--metrics-path` (`/metrics`): Prometheus' text format, from `kopf_csi.metrics`.
- `/healthz`: liveness. The driver must answer Probe within `probe_timeout` (the Go sidecars
  exit when the driver goes away; we fail liveness instead, so the kubelet restarts us while the
  driver is down, see docs/operations.md), and every check in `memo.health_checks` must pass.
- `/readyz`: readiness: no module's start-up handler is failing, the driver answered at
  start-up and the caches are primed
  (`memo.driver` is set, which `kopf_csi_handlers.lifecycle` does last; with `--no-csi`,
  `memo.without_driver`), or this replica is a connected standby waiting for its Leases (so
  that a rolling update does not wait for it to lead). Until then it names the step of
  start-up it is at (`readiness`).
- `/healthz/leader-election`: csi-lib-utils' path: 200 `ok` unless the `leader-election` check
  fails (the election's watchdog: a leader that has not renewed its lease in time).
- `/debug/objects/<kind>/[<namespace>/]<name>`: read-only, what this operator knows of one
  object (its work-queue state, CSI calls in flight, newest event, journal entry, Leases) for
  `kopf-csi explain --operator` (`kopf_csi.introspection`).

`memo.health_checks` maps a name to a zero-argument callable returning `(ok, detail)` (or an
awaitable of it). Other modules add entries; a check that raises counts as failed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import structlog
from aiohttp import web

from kopf_csi import introspection, metrics, names, runtime
from kopf_csi.csi import CSIClient, CSIError
from kopf_csi.settings import Settings
from kopf_csi.targets import TargetError, parse_target

__all__ = [
    "LEADER_ELECTION_CHECK",
    "CheckResult",
    "Endpoints",
    "HealthCheck",
    "health_checks",
    "parse_endpoint",
    "readiness",
]

log = structlog.get_logger("kopf_csi.endpoints")

LEADER_ELECTION_CHECK = "leader-election"
"""The key of the leader-election watchdog in `memo.health_checks`."""

DRIVER_CHECK = "driver"

PATH_DEBUG_OBJECTS = "/debug/objects"
"""`/debug/objects/<kind>/[<namespace>/]<name>`: the operator's knowledge of one object (JSON)."""

PROBE_TIMEOUT = 3.0
"""Seconds the driver gets to answer Probe for `/healthz` (at most `--timeout`)."""

CheckResult = tuple[bool, str]
HealthCheck = Callable[[], CheckResult | Awaitable[CheckResult]]


def health_checks(memo: Any) -> MutableMapping[str, HealthCheck]:
    """`memo.health_checks`, created empty by whichever module asks first."""
    checks: MutableMapping[str, HealthCheck] | None = getattr(memo, "health_checks", None)
    if checks is None:
        checks = {}
        memo.health_checks = checks
    return checks


def parse_endpoint(endpoint: str) -> tuple[str | None, int]:
    """`:8080` (every interface), `0.0.0.0:8080`, `[::1]:8080` → (host or None, port)."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--http-endpoint={endpoint!r} is not [host]:port (such as :8080)")
    host = host.removeprefix("[").removesuffix("]")
    return host or None, int(port)


@dataclasses.dataclass
class Endpoints:
    """The aiohttp server; `start()` binds it, `stop()` closes it."""

    endpoint: str
    metrics_path: str
    metrics: metrics.Metrics
    memo: Any
    probe_timeout: float = PROBE_TIMEOUT

    _runner: web.AppRunner | None = dataclasses.field(default=None, init=False, repr=False)
    address: tuple[str, int] | None = dataclasses.field(default=None, init=False)
    """Where the server listens once started (host, port): the first bound socket."""

    @property
    def url(self) -> str:
        if self.address is None:
            raise RuntimeError("the HTTP endpoint is not started")
        host, port = self.address
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}"

    async def start(self) -> None:
        host, port = parse_endpoint(self.endpoint)
        app = web.Application()
        app.router.add_get(self.metrics_path, self._metrics)
        app.router.add_get(names.PATH_HEALTHZ, self._healthz)
        app.router.add_get(names.PATH_READYZ, self._readyz)
        app.router.add_get(names.PATH_LEADER_ELECTION_HEALTHZ, self._leader_election)
        app.router.add_get(PATH_DEBUG_OBJECTS + "/{kind}/{name}", self._debug_object)
        app.router.add_get(PATH_DEBUG_OBJECTS + "/{kind}/{namespace}/{name}", self._debug_object)
        # No access log: kubelet probes every few seconds would drown the operator's own lines.
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, host=host, port=port).start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        bound = runner.addresses[0]
        self.address = (str(bound[0]), int(bound[1]))
        log.info("http_endpoint_listening", address=self.url, metrics_path=self.metrics_path)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # -- handlers ---------------------------------------------------------------------------------

    async def _metrics(self, _: web.Request) -> web.Response:
        body = self.metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})

    async def _healthz(self, _: web.Request) -> web.Response:
        results = {DRIVER_CHECK: await self._probe_driver()}
        for name, check in list(health_checks(self.memo).items()):
            results[name] = await _run_check(check)
        healthy = all(ok for ok, _ in results.values())
        lines = [f"[{'+' if ok else '-'}]{name} {detail}" for name, (ok, detail) in results.items()]
        lines.append("healthz check passed" if healthy else "healthz check failed")
        if not healthy:
            failed = {name: detail for name, (ok, detail) in results.items() if not ok}
            log.warning("liveness_failed", checks=failed)
        return web.Response(text="\n".join(lines) + "\n", status=200 if healthy else 500)

    async def _readyz(self, _: web.Request) -> web.Response:
        ready, text = readiness(self.memo)
        if ready:
            return web.Response(text=text if text == "ok" else f"{text}\n")
        return web.Response(text=f"{text}\n", status=500)

    async def _leader_election(self, _: web.Request) -> web.Response:
        check = health_checks(self.memo).get(LEADER_ELECTION_CHECK)
        if check is not None:
            ok, detail = await _run_check(check)
            if not ok:
                return web.Response(text=f"internal server error: {detail}\n", status=500)
        return web.Response(text="ok")

    async def _debug_object(self, request: web.Request) -> web.Response:
        """What this operator knows of one object, for `kopf-csi explain --operator` (GET only;
        `?uid=` adds its newest event and its journal entry). Nothing secret: see
        `kopf_csi.introspection`."""
        info = request.match_info
        namespace = info.get("namespace")
        parts = [info["kind"], *([namespace] if namespace else []), info["name"]]
        try:
            found = parse_target("/".join(parts), default_namespace=None)
        except TargetError as exc:
            return web.json_response({"error": str(exc)}, status=404)
        if found.namespace is not None and namespace is None:
            return web.json_response({"error": f"{found.kind} needs a namespace"}, status=404)
        state = introspection.object_state(
            self.memo, found.kind, found.namespace, found.name, request.query.get("uid")
        )
        ready, step = readiness(self.memo)
        if not ready:
            state["starting"] = step  # serves nothing yet: not "does not serve"
        return web.json_response(state)

    async def _probe_driver(self) -> CheckResult:
        client: CSIClient | None = getattr(self.memo, "csi", None)
        if client is None:
            if getattr(self.memo, "without_driver", False) or _without_csi(self.memo):
                return True, "off (--no-csi)"
            # Start-up has a deadline of its own (`--csi-connect-timeout`): then the process ends.
            return True, "connecting"
        try:
            response = await client.probe(timeout=self.probe_timeout)
        except CSIError as exc:
            return False, f"failed: the CSI driver does not answer Probe: {exc}"
        if response.ready is False:
            # As kubernetes-csi/livenessprobe judges a driver: answering "not ready" fails.
            return False, "failed: the CSI driver answers Probe with ready=false"
        return True, "ok"


def readiness(memo: Any) -> CheckResult:
    """`/readyz`'s answer from how far `lifecycle.connect` got (it sets `memo.csi` once the
    driver answered, `memo.api` once logged in, then primes the caches and sets `memo.driver`,
    or with `--no-csi` `memo.without_driver`): ready, or the step start-up is at. A module's
    start-up handler that is failing (`runtime.startup_failures`) makes it not ready, naming
    the handler, its module and its error, until kopf's retry of it succeeds: no watch starts
    before every start-up handler has."""
    failures = runtime.startup_failures(memo)
    if failures:
        failing = "; ".join(str(failure) for failure in failures.values())
        return False, f"not ready: {failing} (kopf retries it)"
    if getattr(memo, "driver", None) is not None:
        return True, "ok"
    if getattr(memo, "without_driver", False):
        return True, "ok: no CSI driver (--no-csi)"
    if runtime.is_standby(memo):
        # Ready to take over: a rolling update must not wait for a standby to lead.
        return True, "ok: standby, another replica leads"
    if getattr(memo, "api", None) is not None:
        return False, "not ready: priming the caches from the Kubernetes API"
    if getattr(memo, "csi", None) is not None:
        return False, "not ready: logging in to Kubernetes (the CSI driver answered)"
    if _without_csi(memo):
        return False, "not ready: logging in to Kubernetes (--no-csi)"
    return False, "not ready: connecting to the CSI driver"


def _without_csi(memo: Any) -> bool:
    """`--no-csi` was given: no driver to connect to (known once the settings are in the memo,
    which `lifecycle.connect` makes sure of first)."""
    settings = getattr(memo, "settings", None)
    return isinstance(settings, Settings) and settings.csi.disabled


async def _run_check(check: HealthCheck) -> CheckResult:
    try:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        ok, detail = result
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a broken check is a failed check, not a broken endpoint
        return False, f"failed: {type(exc).__name__}: {exc}"
    return bool(ok), ("ok" if ok else "failed") + (f": {detail}" if detail else "")
