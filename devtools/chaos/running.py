"""The chaos run and the soak run: scenario, checkpoints, results.

Chaos (`run_chaos`), three phases, each under chaos until its goal holds, then calm, then a
checkpoint that waits for every count to reach 0 (and the operator to go idle) and records them:

1. provision: N claims arrive in chunks; goal: every one Bound;
2. attach: pods on NODES nodes use M of the claims (the KCM stand-in creates their
   VolumeAttachments); goal: every one attached, on the driver too;
3. delete everything: the pods and the claims at once (so some DeleteVolume calls meet volumes
   that are still published and must wait); goal: no claim, PV or VA left.

The end checkpoint also requires that nothing is left at all, the driver included. Then every
operator log, every object (Secrets aside) at every checkpoint, and the call log are searched for
the secret values the StorageClass hands to the driver.

Soak (`run_soak`): TOTAL claims in waves of WAVE: create the wave, wait until all are Bound,
delete them, wait until their volumes are gone and the operator is idle; the operator's CPU and
RSS after each wave are the curve. No chaos: the soak measures drift, not recovery.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from devtools.bench.procfs import MiB
from devtools.bench.progress import Progress
from devtools.chaos.environment import Chaos, ChaosError, Env, LossyCluster
from devtools.chaos.observing import Duplicates
from kopf_csi import names
from kopf_csi.driver import CallLog, DriverConfig, Features, Limits, SecretsPolicy
from kopf_csi.driver.config import DEFAULT_NAME
from kopf_csi.driver.running import Driver
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.secrets import LeakChecker

__all__ = ["ChaosOptions", "SoakOptions", "run_chaos", "run_soak"]

DRIVER = DEFAULT_NAME
NAMESPACE = "default"
CLASS = "kopf-csi-chaos"
SECRET = "chaos-credentials"
CHUNK = 50
Body = dict[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChaosOptions:
    claims: int = 500
    attach: int = 500
    seed: int = 1
    kills: int = 3
    """Operator SIGKILLs per phase (some phases add one more during a start-up)."""
    driver_restarts: int = 1
    """Driver restarts per phase."""
    apiserver_restarts: int = 1
    """API server restarts per phase (drained, gone, back: `testing.outages`)."""
    etcd_stops: int = 1
    """etcd stops per phase."""
    outage: tuple[float, float] = (2.0, 1.0)
    """Seconds an API server restart drains, then is gone; etcd stops for twice the second,
    its requests failing after the second."""
    api_faults: bool = True
    driver_faults: bool = True
    nodes: int = 4
    workers: int = 100
    csi_timeout: float = 5.0
    log_level: str = "INFO"
    timeout: float | None = None
    """Seconds allowed per phase and per checkpoint; default max(120, claims / 2)."""
    workdir: pathlib.Path | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class SoakOptions:
    total: int = 10_000
    wave: int = 500
    workers: int = 100
    timeout: float = 300.0
    """Seconds allowed per wave."""
    workdir: pathlib.Path | None = None
    max_cpu_ratio: float = 1.3
    """Flat CPU: the median ms/claim of the last quarter of the waves over that of the first
    quarter (the very first wave, the warm-up, left out) stays at or under this."""
    max_rss_growth_mib: float = 16.0
    """Flat RSS: from the end of the second wave to the end of the last, at most this much."""


# -- the objects ---------------------------------------------------------------------------------


def _credentials(seed: int) -> dict[str, str]:
    """Distinct values per run, long enough that finding one anywhere is no coincidence."""
    token = secrets.token_hex(8)
    return {"username": f"chaos-user-{seed}-{token}", "password": f"chaos-pw-{token}-{seed}"}


def _seed_objects(credentials: dict[str, str], nodes: list[str]) -> list[tuple[str, Body]]:
    data = {k: base64.b64encode(v.encode()).decode() for k, v in credentials.items()}
    parameters = {
        names.PARAM_PROVISIONER_SECRET_NAME: SECRET,
        names.PARAM_PROVISIONER_SECRET_NAMESPACE: NAMESPACE,
        names.PARAM_CONTROLLER_PUBLISH_SECRET_NAME: SECRET,
        names.PARAM_CONTROLLER_PUBLISH_SECRET_NAMESPACE: NAMESPACE,
    }
    objects: list[tuple[str, Body]] = [
        ("secrets", {"metadata": {"name": SECRET, "namespace": NAMESPACE}, "data": data}),
        ("storageclasses", {
            "metadata": {"name": CLASS}, "provisioner": DRIVER, "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate", "parameters": parameters,
        }),
        ("csidrivers", {"metadata": {"name": DRIVER}, "spec": {"attachRequired": True}}),
    ]  # fmt: skip
    for node in nodes:
        objects.append(("nodes", {"metadata": {"name": node}}))
        drivers = [{"name": DRIVER, "nodeID": node}]
        objects.append(("csinodes", {"metadata": {"name": node}, "spec": {"drivers": drivers}}))
    return objects


def _claim(name: str) -> Body:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": CLASS,
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }


def _pod(name: str, claim: str, node: str) -> Body:
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"nodeName": node, "volumes": [volume], "containers": [{"name": "c"}]},
    }


# -- the environment -----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _environment(
    workdir: pathlib.Path | None,
    progress: Progress,
    *,
    nodes: list[str],
    credentials: dict[str, str],
    seed: int,
    workers: int,
    log_level: str,
    csi_timeout: float,
) -> AsyncIterator[Env]:
    temporary = workdir is None
    root = pathlib.Path(tempfile.mkdtemp(prefix="kopf-csi-chaos-")) if workdir is None else workdir
    if not temporary:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
    socket_path = root / "csi.sock"
    config = DriverConfig(
        node_id=nodes[0],
        data_dir=root / "driver",
        known_nodes=None,
        features=Features(attach=True, topology=False),
        limits=Limits(total_capacity=2**50),
        secrets=SecretsPolicy(
            required_for=frozenset(
                {
                    "CreateVolume",
                    "DeleteVolume",
                    "ControllerPublishVolume",
                    "ControllerUnpublishVolume",
                }
            ),
            expected=credentials,
        ),
        faults_seed=seed,
        durable=False,
    )
    calls = CallLog(path=root / "calls.jsonl")
    failed = True
    env: Env | None = None
    try:
        async with LossyCluster(seed=seed) as cluster, ControllerManager(cluster) as kcm:
            for plural, body in _seed_objects(credentials, nodes):
                cluster.create(plural, body)
            driver = Driver(config, socket_path=socket_path, calls=calls)
            await driver.start()
            duplicates = Duplicates(cluster, driver=DRIVER)
            calls.subscribe(duplicates.observe)
            env = Env(
                cluster=cluster,
                kcm=kcm,
                driver=driver,
                calls=calls,
                duplicates=duplicates,
                workdir=root,
                kubeconfig=cluster.write_kubeconfig(root / "kubeconfig"),
                socket_path=socket_path,
                progress=progress,
                storage_classes=frozenset({CLASS}),
                workers=workers,
                log_level=log_level,
                csi_timeout=csi_timeout,
            )
            try:
                await env.start_operator()
                yield env
            finally:
                if env.operator is not None and env.operator.alive:
                    await env.stop_operator()
                await driver.stop(grace=0.5)
        failed = False
    finally:
        if temporary and not failed:
            shutil.rmtree(root, ignore_errors=True)
        elif failed:
            progress.note(f"kept {root} (operator-*.log have the operators' logs)")


async def _until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise ChaosError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.05)


def _revision() -> str | None:
    try:
        result = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True, text=True, timeout=10, check=True,
            cwd=pathlib.Path(__file__).resolve().parent,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def _machine() -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "revision": _revision(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


# -- chaos ---------------------------------------------------------------------------------------


def _bound(env: Env) -> int:
    return sum(
        1
        for c in env.cluster.peek("persistentvolumeclaims")
        if (c.get("status") or {}).get("phase") == "Bound"
    )


def _attached(env: Env) -> int:
    return sum(
        1
        for va in env.cluster.peek("volumeattachments")
        if (va.get("status") or {}).get("attached")
    )


def _left(env: Env) -> int:
    return sum(
        len(env.cluster.peek(plural))
        for plural in ("persistentvolumeclaims", "persistentvolumes", "volumeattachments")
    )


async def _in_chunks(items: list[Body], act: Callable[[Body], object], pause: float) -> None:
    for index, item in enumerate(items):
        act(item)
        if index % CHUNK == CHUNK - 1:
            await asyncio.sleep(pause)


async def run_chaos(options: ChaosOptions, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress()
    n, m = options.claims, min(options.attach, options.claims)
    if n < 1:
        raise ChaosError("--claims must be at least 1")
    timeout = options.timeout or max(120.0, n / 2)
    nodes = [f"node-{i}" for i in range(1, options.nodes + 1)]
    credentials = _credentials(options.seed)
    started = time.monotonic()
    async with _environment(
        options.workdir, progress, nodes=nodes, credentials=credentials, seed=options.seed,
        workers=options.workers, log_level=options.log_level, csi_timeout=options.csi_timeout,
    ) as env:  # fmt: skip
        cluster = env.cluster
        chaos = Chaos(
            env,
            seed=options.seed,
            kills=options.kills,
            driver_restarts=options.driver_restarts,
            api_faults=options.api_faults,
            driver_faults=options.driver_faults,
            apiserver_restarts=options.apiserver_restarts,
            etcd_stops=options.etcd_stops,
            outage=options.outage,
        )
        converged: dict[str, float | None] = {}
        checkpoints: list[dict[str, Any]] = []
        phases: dict[str, float] = {}
        checker = LeakChecker(credentials.values())  # the secrets helper's reusable checker

        def status(label: str, done: Callable[[], int], total: int) -> Callable[[], str]:
            begun = time.monotonic()
            return lambda: (
                f"{label:<10} {time.monotonic() - begun:6.1f}s  {done()}/{total}"
                f"  kills {chaos.tally.operator_kills}  driver restarts"
                f" {chaos.tally.driver_restarts}  duplicates {len(env.duplicates.problems)}"
            )

        async def phase(
            label: str, work: Callable[[], Any], done: Callable[[], int], total: int,
            goal: Callable[[], bool], *, expect_empty: bool = False,
        ) -> None:  # fmt: skip
            begun = time.monotonic()
            async with progress.showing(status(label, done, total)):
                task = asyncio.create_task(work())
                try:
                    await chaos.run_phase(
                        lambda: done() / max(total, 1),
                        lambda: task.done() and goal(),
                        timeout=timeout,
                    )
                finally:
                    await task
            phases[label] = round(time.monotonic() - begun, 2)
            back = chaos.back_at  # the goal held this long after the control plane's return
            converged[label] = None if back is None else round(time.monotonic() - back, 2)
            async with progress.showing(lambda: f"checkpoint after {label} ..."):
                checkpoint = await env.checkpoint(
                    label, goal, timeout=timeout, expect_empty=expect_empty
                )
            checkpoints.append(checkpoint)
            checker.scan(f"objects after {label}", env.dump_objects())

        claims = [_claim(f"chaos-{i:05d}") for i in range(n)]
        pods = [_pod(f"user-{i:05d}", f"chaos-{i:05d}", nodes[i % len(nodes)]) for i in range(m)]

        def create(plural: str) -> Callable[[Body], object]:
            return lambda body: cluster.create(plural, body)

        def delete(plural: str) -> Callable[[Body], object]:
            return lambda body: cluster.delete(plural, NAMESPACE, body["metadata"]["name"])

        await phase(
            "provision",
            lambda: _in_chunks(claims, create("persistentvolumeclaims"), 0.1),
            lambda: _bound(env), n, lambda: _bound(env) >= n,
        )  # fmt: skip
        await phase(
            "attach",
            lambda: _in_chunks(pods, create("pods"), 0.1),
            lambda: _attached(env), m, lambda: _attached(env) >= m,
        )  # fmt: skip

        async def delete_everything() -> None:
            await _in_chunks(pods, delete("pods"), 0.05)
            await _in_chunks(claims, delete("persistentvolumeclaims"), 0.05)

        total_objects = _left(env)
        await phase(
            "delete",
            delete_everything,
            lambda: total_objects - _left(env), total_objects,
            lambda: _left(env) == 0 and not env.driver.state.volumes,
            expect_empty=True,
        )  # fmt: skip

        checker.scan_paths([path for path in env.log_paths if path.exists()])
        checker.scan_paths([env.workdir / "calls.jsonl"])
        checker.scan_cluster(cluster)  # the events, and whatever is left
        exposures = [str(leak) for leak in checker.leaks]
        lost = _lost_task_exceptions(env.log_paths)
        result: dict[str, Any] = {
            "mode": "chaos",
            "config": {
                **_machine(),
                **{
                    k: str(v) if isinstance(v, pathlib.Path) else v
                    for k, v in dataclasses.asdict(options).items()
                },
                "attach": m,
            },
            "seconds": round(time.monotonic() - started, 1),
            "phases": phases,
            "converged_after_control_plane": converged,
            "lost_task_exceptions": lost,
            "outage_warnings": _outage_warnings(env.log_paths),
            "warning_lines": _warning_lines(env.log_paths),
            "chaos": dataclasses.asdict(chaos.tally),
            "operator_incarnations": env.incarnations,
            "operator_start_failures": len(env.start_failures),
            "operator_start_failure_tails": [text[-600:] for text in env.start_failures],
            "operator_crashes": env.crashes,
            "driver_calls": {
                f"{method} {outcome}": env.calls.count(method, outcome)
                for method, outcome in sorted({(r.method, r.outcome) for r in env.calls.records})
            },
            "checkpoints": checkpoints,
            "duplicates": env.duplicates.problems,
            "secrets_searched": {
                "values": len(credentials),
                "sources": len(checker.scanned),
                "bytes": sum(checker.scanned.values()),
            },
            "secret_exposures": exposures,
        }
        result["ok"] = (
            all(sum(c["counts"].values()) == 0 and c["goal"] for c in checkpoints)
            and not exposures
            and not env.crashes
            and not chaos.tally.phases_timed_out
            and not lost
        )
    return result


LOST_TASK = "exception was never retrieved"


def _lost_task_exceptions(paths: list[pathlib.Path]) -> int:
    """Lines of asyncio's "Task exception was never retrieved" in every operator's log: a
    background task died, and whoever awaited it may wait for ever (issue 30)."""
    return sum(path.read_text(errors="replace").count(LOST_TASK) for path in paths if path.exists())


def _warning_lines(paths: list[pathlib.Path]) -> dict[str, int]:
    """Every operator's warning (and worse) lines, by event: with only the control plane as
    chaos, the outage's own two are all there should be."""
    counts: collections.Counter[str] = collections.Counter()
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("level") in ("warning", "error", "critical"):
                counts[str(record.get("event"))] += 1
    return dict(counts.most_common())


def _outage_warnings(paths: list[pathlib.Path]) -> dict[str, int]:
    """How often the operators said the API server went away and came back."""
    counts = dict.fromkeys(("api_unreachable", "api_reachable"), 0)
    for path in paths:
        if path.exists():
            text = path.read_text(errors="replace")
            for event in counts:
                counts[event] += text.count(f'"{event}"')
    return counts


# -- soak ----------------------------------------------------------------------------------------


async def run_soak(options: SoakOptions, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress()
    if options.total < 1 or options.wave < 1:
        raise ChaosError("--soak and --wave must be at least 1")
    waves = -(-options.total // options.wave)
    nodes = ["node-1"]
    credentials = _credentials(0)
    started = time.monotonic()
    async with _environment(
        options.workdir, progress, nodes=nodes, credentials=credentials, seed=0,
        workers=options.workers, log_level="WARNING", csi_timeout=10.0,
    ) as env:  # fmt: skip
        cluster = env.cluster
        await _until_idle(env, options.timeout)
        start = env.sample()
        points: list[dict[str, Any]] = [{
            "wave": 0, "claims": 0, "seconds": 0.0, "cpu_ms_per_claim": 0.0,
            "rss_mib": round(start.rss / MiB, 1), "hwm_mib": round(start.hwm / MiB, 1),
        }]  # fmt: skip
        done = 0
        for wave in range(1, waves + 1):
            size = min(options.wave, options.total - done)
            names_ = [f"soak-{wave:03d}-{i:04d}" for i in range(size)]
            begun, before = time.monotonic(), env.sample().cpu

            def line(wave: int = wave, begun: float = begun) -> str:
                sample = env.sample()
                return (
                    f"wave {wave}/{waves}  {time.monotonic() - begun:5.1f}s  bound {_bound(env)}"
                    f"  PVs {len(cluster.peek('persistentvolumes'))}"
                    f"  RSS {sample.rss / MiB:.0f} MiB"
                )

            async with progress.showing(line):
                claims = [_claim(x) for x in names_]
                await _in_chunks(claims, lambda b: cluster.create("persistentvolumeclaims", b), 0)
                await _until(_bound_at_least(env, size), options.timeout, "claims Bound")
                await _in_chunks([_claim(x) for x in names_],
                                 lambda b: cluster.delete("persistentvolumeclaims", NAMESPACE,
                                                          b["metadata"]["name"]), 0)  # fmt: skip
                await _until(
                    lambda: _left(env) == 0 and not env.driver.state.volumes,
                    options.timeout, "every volume gone",
                )  # fmt: skip
                await _until_idle(env, options.timeout)
            after = env.sample()
            done += size
            points.append({
                "wave": wave, "claims": done, "seconds": round(time.monotonic() - begun, 2),
                "cpu_ms_per_claim": round((after.cpu - before) * 1000 / size, 3),
                "rss_mib": round(after.rss / MiB, 1), "hwm_mib": round(after.hwm / MiB, 1),
            })  # fmt: skip
        counts = env.counts(expect_empty=True)
        result: dict[str, Any] = {
            "mode": "soak",
            "config": {
                **_machine(),
                "total": options.total,
                "wave": options.wave,
                "workers": options.workers,
            },
            "seconds": round(time.monotonic() - started, 1),
            "points": points,
            "counts": counts.as_dict(),
            "details": {k: list(v) for k, v in counts.details.items()},
            "duplicates": env.duplicates.problems,
            "operator_crashes": env.crashes,
        }
    result["flatness"] = flatness(points[1:], options)
    result["ok"] = counts.total == 0 and not result["operator_crashes"] and result["flatness"]["ok"]
    return result


def _bound_at_least(env: Env, count: int) -> Callable[[], bool]:
    return lambda: _bound(env) >= count


async def _until_idle(env: Env, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await env.operator_idle():
        if time.monotonic() > deadline:
            raise ChaosError(f"the operator did not go idle in {timeout:g}s")


def flatness(points: list[dict[str, Any]], options: SoakOptions) -> dict[str, Any]:
    """Whether CPU per claim and RSS stay flat over the waves (see `SoakOptions`)."""
    if len(points) < 4:
        return {"ok": True, "note": "too few waves to judge"}
    quarter = max(1, (len(points) - 1) // 4)
    early = [p["cpu_ms_per_claim"] for p in points[1 : 1 + quarter]]
    late = [p["cpu_ms_per_claim"] for p in points[-quarter:]]
    ratio = statistics.median(late) / max(statistics.median(early), 1e-9)
    growth = points[-1]["rss_mib"] - points[1]["rss_mib"]
    return {
        "cpu_ms_early": round(statistics.median(early), 3),
        "cpu_ms_late": round(statistics.median(late), 3),
        "cpu_ratio": round(ratio, 3),
        "rss_after_wave_2_mib": points[1]["rss_mib"],
        "rss_end_mib": points[-1]["rss_mib"],
        "rss_growth_mib": round(growth, 1),
        "ok": ratio <= options.max_cpu_ratio and growth <= options.max_rss_growth_mib,
    }
