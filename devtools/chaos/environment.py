"""The world a chaos or soak run happens in, and the hands that break it.

One process hosts the emulated API (`ChaosCluster`), the KCM stand-in and the reference driver
(with its call log); the operator runs in a child process (`python -m devtools.bench.operator`,
as the benchmark runs it) so that it can be killed for real: SIGKILL, no clean-up, its in-flight
journal left as it was, then a new process. Each incarnation logs to its own file, so that
every line any of them wrote can be searched afterwards.

The chaos itself (`Chaos`):
- operator kills at random moments, tied to the phase's progress so that they land while work
  is in flight; some kill the new process again during its start-up;
- driver restarts (stop, a random pause, start from the same data directory);
- driver faults: errors and latency on a fraction of the volume RPCs, and a hang or two that
  only the operator's CSI timeout ends;
- API faults on a fraction of the requests: conflicts (409) on updates and patches, 5xx on
  any verb, and "lost responses": a write that is committed but answered with a 504;
- the control plane restarted, as an upgrade restarts it (`testing.outages`): the API server
  drains (some requests served, some answered 503, some connections reset; the watches end),
  is gone (connects refused), and comes back; etcd stops for a few seconds (requests hang,
  then fail with its texts). Each restart's return is timed to the phase's goal.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import pathlib
import random
import time
from collections.abc import Callable
from typing import Any

import aiohttp.web

from devtools.bench import procfs
from devtools.bench.process import OperatorProcess, OperatorProcessError
from devtools.bench.progress import Progress
from devtools.chaos import checks
from devtools.chaos.observing import ChaosCluster, Duplicates
from kopf_csi.csi.codes import Code
from kopf_csi.driver import CallLog, Driver, FaultRule
from kopf_csi.testing import serving
from kopf_csi.testing.kcm import ControllerManager

__all__ = ["Chaos", "ChaosError", "Env", "KillableOperator", "LossyCluster"]

IDLE_CPU = 0.05  # operator CPU seconds within one second that still count as idle


class ChaosError(RuntimeError):
    """The run could not go on (an operator that never starts, a phase that never ends)."""


class LossyCluster(ChaosCluster):
    """Answers a fraction of the HTTP requests with errors, or loses the answer to a write.

    `error_rate`: the request fails before it is served: a 409 conflict for half the patches
    and updates, else a 500, 503 or 504. `lost_rate`: a create, patch, update or delete is
    committed, then answered with a 504, as an API server whose etcd write outlived the
    request's timeout answers. Both are 0 until the chaos sets them; the Python-level API (the
    KCM stand-in, the suite itself) is never affected.
    """

    def __init__(self, *, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.random = random.Random(seed)
        self.error_rate = 0.0
        self.lost_rate = 0.0
        self.served: collections.Counter[str] = collections.Counter()

    async def _on_request(self, request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        target = serving.parse_path(request.path)
        if target is None:
            return await super()._on_request(request)
        verb = serving.request_verb(request.method, target, request.query) or ""
        rng = self.random
        if self.error_rate and rng.random() < self.error_rate:
            if verb in ("patch", "update") and rng.random() < 0.5:
                return self._failure(409, "Conflict", "the object has been modified")
            code = rng.choice((500, 503, 504))
            return self._failure(code, "InternalError", "chaos")
        response = await super()._on_request(request)
        lossy = verb in ("create", "patch", "update", "delete") and response.status < 300
        if lossy and self.lost_rate and rng.random() < self.lost_rate:
            self.served["lost 504"] += 1
            message = "Timeout: request did not complete within requested timeout"
            return self._failure(504, "Timeout", message, count=False)
        return response

    def _failure(
        self, code: int, reason: str, message: str, *, count: bool = True
    ) -> aiohttp.web.Response:
        if count:
            self.served[str(code)] += 1
        status = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                  "message": message, "reason": reason, "code": code}  # fmt: skip
        return aiohttp.web.json_response(status, status=code)


class KillableOperator(OperatorProcess):
    """The benchmark's operator process, with a log level, a CSI timeout and a real kill."""

    def __init__(self, *, log_level: str, csi_timeout: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.argv += ["--log-level", log_level, "--csi-timeout", str(csi_timeout)]
        self.killed = False

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def kill(self) -> None:
        """SIGKILL: no shutdown handlers, no flush, nothing finished."""
        process = self._process
        self.killed = True
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        if self._log is not None:
            self._log.close()


@dataclasses.dataclass
class Env:
    """Everything one run holds; `start_operator()` makes a new operator incarnation."""

    cluster: LossyCluster
    kcm: ControllerManager
    driver: Driver
    calls: CallLog
    duplicates: Duplicates
    workdir: pathlib.Path
    kubeconfig: pathlib.Path
    socket_path: pathlib.Path
    progress: Progress
    storage_classes: frozenset[str]
    workers: int = 100
    log_level: str = "INFO"
    csi_timeout: float = 5.0
    operator: KillableOperator | None = None
    incarnations: int = 0
    start_failures: list[str] = dataclasses.field(default_factory=list)
    log_paths: list[pathlib.Path] = dataclasses.field(default_factory=list)
    crashes: list[str] = dataclasses.field(default_factory=list)
    """The log tails of operators that exited without being killed."""

    async def start_operator(self, *, attempts: int = 3) -> None:
        for _ in range(attempts):
            operator = await self.spawn_operator()
            try:
                await operator.wait_ready()
            except OperatorProcessError as exc:
                self.start_failures.append(str(exc)[-2000:])
                await operator.kill()
                continue
            return
        raise ChaosError(f"the operator did not start {attempts} times:\n{self.start_failures[-1]}")

    async def ensure_operator(self) -> None:
        """Start an operator if none runs; one that exited by itself is recorded as a crash."""
        if self.operator is not None and self.operator.alive:
            return
        if self.operator is not None and not self.operator.killed:
            self.crashes.append(self.operator.log_tail())
        await self.start_operator()

    async def spawn_operator(self) -> KillableOperator:
        self.incarnations += 1
        path = self.workdir / f"operator-{self.incarnations:03d}.log"
        self.log_paths.append(path)
        self.operator = KillableOperator(
            kubeconfig=self.kubeconfig,
            csi_address=f"unix://{self.socket_path}",
            workers=self.workers,
            log_path=path,
            log_level=self.log_level,
            csi_timeout=self.csi_timeout,
        )
        await self.operator.spawn()
        return self.operator

    async def kill_operator(self) -> None:
        if self.operator is not None:
            await self.operator.kill()

    async def stop_operator(self) -> None:
        if self.operator is not None:
            await self.operator.stop()

    def sample(self) -> procfs.Sample:
        if self.operator is None:
            raise ChaosError("no operator is running")
        return self.operator.sample()

    async def operator_idle(self) -> bool:
        """Its queues empty twice, one second apart, with almost no CPU used in between."""
        if self.operator is None:
            return False
        try:
            before, first = self.sample().cpu, await self.operator.stats()
            await asyncio.sleep(1.0)
            after, second = self.sample().cpu, await self.operator.stats()
        except (OSError, OperatorProcessError, TimeoutError):
            return False
        return _idle(first) and _idle(second) and after - before <= IDLE_CPU

    # Snapshots.

    def world(self) -> checks.World:
        cluster = self.cluster
        wanted: set[tuple[str, str]] = set()
        claims = cluster.peek("persistentvolumeclaims")
        by_claim = {
            (c["metadata"]["namespace"], c["metadata"]["name"]): (c.get("spec") or {}).get(
                "volumeName"
            )
            for c in claims
        }
        for pod in cluster.peek("pods"):
            node = (pod.get("spec") or {}).get("nodeName")
            for volume in (pod.get("spec") or {}).get("volumes") or []:
                claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
                pv_name = by_claim.get((pod["metadata"]["namespace"], claim))
                if node and pv_name:
                    wanted.add((pv_name, node))
        return checks.World(
            driver=self.driver.config.name,
            storage_classes=self.storage_classes,
            claims=claims,
            volumes=cluster.peek("persistentvolumes"),
            attachments=cluster.peek("volumeattachments"),
            deleting=cluster.deleting(),
            backend={
                volume_id: frozenset(volume.attachments)
                for volume_id, volume in self.driver.state.volumes.items()
            },
            wanted_attachments=frozenset(wanted),
        )

    def counts(self, *, expect_empty: bool = False) -> checks.Counts:
        return checks.count(
            self.world(), done_twice=self.duplicates.problems, expect_empty=expect_empty
        )

    def dump_objects(self) -> str:
        """Every object of every kind but Secrets, as JSON lines (for the secrets search)."""
        lines: list[str] = []
        for kind, objects in self.cluster._store.items():
            if kind.plural == "secrets":
                continue
            lines.extend(json.dumps(obj, sort_keys=True) for obj in objects.values())
        return "\n".join(lines)

    async def checkpoint(
        self,
        label: str,
        goal: Callable[[], bool],
        *,
        timeout: float,
        expect_empty: bool = False,
    ) -> dict[str, Any]:
        """Wait until every count is 0, the goal holds and the operator is idle; then count.

        On timeout the counts are taken as they are: a non-zero count is the finding.
        """
        started = time.monotonic()
        deadline = started + timeout
        while True:
            counts = self.counts(expect_empty=expect_empty)
            if counts.total == 0 and goal() and await self.operator_idle():
                counts = self.counts(expect_empty=expect_empty)
                if counts.total == 0 and goal():
                    break
            if time.monotonic() > deadline:
                break
            await self.ensure_operator()
            await asyncio.sleep(0.2)
        return {
            "label": label,
            "seconds": round(time.monotonic() - started, 2),
            "goal": goal(),
            "counts": counts.as_dict(),
            "details": {name: list(items) for name, items in counts.details.items()},
        }


def _idle(stats: dict[str, Any]) -> bool:
    queues = stats.get("queues") or {}
    return bool(stats.get("alive")) and not any(
        q["depth"] or q["in_flight"] or q["pending_delayed"] for q in queues.values()
    )


DRIVER_METHODS = (
    "CreateVolume",
    "DeleteVolume",
    "ControllerPublishVolume",
    "ControllerUnpublishVolume",
)
DRIVER_CODES = (Code.UNAVAILABLE, Code.ABORTED, Code.INTERNAL, Code.DEADLINE_EXCEEDED)
API_ERROR_RATE = 0.03  # of the operator's HTTP requests, during a phase
API_LOST_RATE = 0.02  # of its successful writes


@dataclasses.dataclass
class Tally:
    """What the chaos did, over the whole run."""

    operator_kills: int = 0
    kills_during_startup: int = 0
    driver_restarts: int = 0
    api_errors: int = 0
    lost_responses: int = 0
    driver_fault_rules: int = 0
    phases_timed_out: int = 0
    apiserver_restarts: int = 0
    etcd_stops: int = 0
    requests_refused_503: int = 0
    requests_reset: int = 0
    requests_held_by_etcd: int = 0


class Chaos:
    """Breaks things during a phase (`async with chaos.phase(...)`), then calms everything."""

    def __init__(
        self,
        env: Env,
        *,
        seed: int,
        kills: int,
        driver_restarts: int,
        api_faults: bool = True,
        driver_faults: bool = True,
        apiserver_restarts: int = 1,
        etcd_stops: int = 1,
        outage: tuple[float, float] = (2.0, 1.0),
    ) -> None:
        self.env = env
        self.random = random.Random(seed)
        self.kills = kills
        self.driver_restarts = driver_restarts
        self.apiserver_restarts = apiserver_restarts
        self.etcd_stops = etcd_stops
        self.outage = outage
        """Seconds an API server restart drains, then is gone (etcd stops for the first)."""
        self.back_at: float | None = None
        """When the phase's last control-plane restart ended (`time.monotonic()`)."""
        self.api_faults = api_faults
        self.driver_faults = driver_faults
        self.tally = Tally()
        self._rules: list[FaultRule] = []

    async def run_phase(
        self, progress: Callable[[], float], goal: Callable[[], bool], *, timeout: float
    ) -> None:
        """Chaos until the goal holds (progress in 0..1 places the kills and restarts)."""
        rng = self.random
        kills = sorted(rng.uniform(0.05, 0.9) for _ in range(self.kills))
        restarts = sorted(rng.uniform(0.05, 0.9) for _ in range(self.driver_restarts))
        # The control plane goes while work is in flight (not at the very start: a claim
        # must be on its way), then etcd; each one at a time, never with a kill at once.
        outages = sorted(rng.uniform(0.1, 0.7) for _ in range(self.apiserver_restarts))
        etcd = sorted(rng.uniform(0.1, 0.7) for _ in range(self.etcd_stops))
        self.back_at = None
        if self.driver_faults:
            self._install_driver_faults()
        if self.api_faults:
            self.env.cluster.error_rate, self.env.cluster.lost_rate = API_ERROR_RATE, API_LOST_RATE
        deadline = time.monotonic() + timeout
        try:
            while not goal() or kills or restarts or outages or etcd:
                done = progress()
                if outages and (done >= outages[0] or goal()):
                    outages.pop(0)
                    await self._restart_apiserver()
                elif etcd and (done >= etcd[0] or goal()):
                    etcd.pop(0)
                    await self._stop_etcd()
                elif kills and (done >= kills[0] or goal()):
                    kills.pop(0)
                    await self._kill_operator()
                elif restarts and (done >= restarts[0] or goal()):
                    restarts.pop(0)
                    await self._restart_driver()
                elif time.monotonic() > deadline:
                    self.tally.phases_timed_out += 1  # the checkpoint then counts what is wrong
                    break
                else:
                    await asyncio.sleep(0.05)
        finally:
            await self.calm()

    async def calm(self) -> None:
        """No faults; the driver up; an operator running."""
        env = self.env
        env.cluster.error_rate = env.cluster.lost_rate = 0.0
        self.tally.api_errors = sum(n for k, n in env.cluster.served.items() if k != "lost 504")
        self.tally.lost_responses = env.cluster.served["lost 504"]
        for rule in self._rules:
            env.driver.faults.remove(rule)
        self._rules.clear()
        if not env.driver.is_running:
            await env.driver.start()
        await env.ensure_operator()

    def _install_driver_faults(self) -> None:
        rng, faults = self.random, self.env.driver.faults
        for method in DRIVER_METHODS:
            code = rng.choice(DRIVER_CODES)
            self._rules.append(faults.fail(method, code, fraction=0.05, message="chaos"))
            seconds = round(rng.uniform(0.05, 0.5), 3)
            self._rules.append(faults.delay(method, seconds=seconds, fraction=0.2))
        self._rules.append(faults.hang(rng.choice(DRIVER_METHODS), times=1))
        self.tally.driver_fault_rules += len(self._rules)

    async def _kill_operator(self) -> None:
        env, rng = self.env, self.random
        await asyncio.sleep(rng.uniform(0.0, 0.3))
        await env.kill_operator()
        self.tally.operator_kills += 1
        if rng.random() < 0.3:  # again, during the new incarnation's start-up
            await env.spawn_operator()
            await asyncio.sleep(rng.uniform(0.2, 1.5))
            await env.kill_operator()
            self.tally.operator_kills += 1
            self.tally.kills_during_startup += 1
        await env.start_operator()

    async def _restart_apiserver(self) -> None:
        cluster = self.env.cluster
        drain, gone = self.outage
        await cluster.restart_apiserver(drain=drain, gone=gone)
        self.back_at = time.monotonic()
        self.tally.apiserver_restarts += 1
        self._count_outage()

    async def _stop_etcd(self) -> None:
        cluster = self.env.cluster
        await cluster.stop_etcd(self.outage[1] * 2, timeout=self.outage[1])
        self.back_at = time.monotonic()
        self.tally.etcd_stops += 1
        self._count_outage()

    def _count_outage(self) -> None:
        plane = self.env.cluster.control_plane
        self.tally.requests_refused_503 = plane.answered_503
        self.tally.requests_reset = plane.reset
        self.tally.requests_held_by_etcd = plane.hung

    async def _restart_driver(self) -> None:
        driver = self.env.driver
        await driver.stop(grace=0.5)
        await asyncio.sleep(self.random.uniform(0.0, 1.0))
        await driver.start()
        self.tally.driver_restarts += 1
