"""The benchmark's world: its options, and the environment each mode runs in (the emulated API
measured, the KCM stand-in, the reference driver, the operator in its child process), with what
every mode reports about it (the run's configuration, the other clients' requests).

Part of the benchmark (`devtools.bench.running` runs the modes: `claims`, `scale`, `attach`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime
import functools
import gc
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from devtools.bench import procfs
from devtools.bench.cluster import MeasuredCluster, Timeline
from devtools.bench.looplag import LagProbe
from devtools.bench.process import OperatorProcess
from devtools.bench.progress import Progress
from kopf_csi.driver import DriverConfig, Features, running_driver
from kopf_csi.driver.calllog import CallLog, CallRecord
from kopf_csi.driver.config import DEFAULT_NAME, DEFAULT_TOPOLOGY_KEY, Limits
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.latency import REAL_SERVER, LatencyModel

__all__ = [
    "CHUNK", "CLASSES", "DRIVER", "KCM_RESYNC_PERIOD", "LATENCY_MODELS", "NAMESPACE", "NODE",
    "BenchError", "Body", "Env", "Options", "kcm_clients", "open_environment", "other_clients",
    "run_config", "wait_until",
]  # fmt: skip

NODE = "node-1"
DRIVER = DEFAULT_NAME
NAMESPACE = "default"
CLASSES = {"immediate": "kopf-csi-immediate", "wffc": "kopf-csi-wffc"}
CHUNK = 50  # objects created or deleted between two yields to the event loop
KCM_RESYNC_PERIOD = 15.0  # seconds: KCM's --pvclaimbinder-sync-period default
QUIET = 0.5  # seconds without an operator request, its queues empty: the operator is done
IDLE_CPU = 0.03  # at most this much operator CPU (s) in the last second: it is idle
TRACED_IDLE_CPU = 0.3  # the same, traced by tracemalloc (its lag probe alone costs more)
Body = dict[str, Any]
LATENCY_MODELS: dict[str, LatencyModel | None] = {"real": REAL_SERVER, "none": None}


class BenchError(RuntimeError):
    """The benchmark could not finish (a timeout, a crashed operator)."""


@dataclasses.dataclass(frozen=True)
class Options:
    claims: int = 1000
    storage_class: str = "immediate"
    workers: int = 100
    scale: int | None = None
    """Scale mode: this many bound PV/PVC pairs, instead of the claims run."""
    attach: int | None = None
    """Attach mode: attach and detach this many VolumeAttachments, instead of the claims run."""
    workdir: pathlib.Path | None = None
    """Kept after the run (driver data, kubeconfig, operator.log); a temporary one otherwise."""
    timeout: float | None = None
    """Seconds allowed per phase; default max(120, claims / 5)."""
    idle_wait: float = 6.0
    """Scale mode: seconds to wait after settling (kopf's idle workers exit after 5 s)."""
    profile: pathlib.Path | None = None
    """cProfile the operator process into this file."""
    tracemalloc: int = 0
    """Trace the operator's allocations (frames kept): scale mode reports the top sites, churn
    mode's `memory_every` looks compare them by traceback."""
    memory_every: float = 0.0
    """Churn mode: ask the operator what grew every this many seconds (`devtools.bench.growth`;
    0: never)."""
    bench_freeze_every: float = 10.0
    """Churn mode: the benchmark process collects and freezes its own heap every this many
    seconds (`devtools.bench.collector`), so that its full collections, which stop the
    emulated API, stay short as a real server's; 0: never (the sessions before the sixth)."""
    memory_walk: bool = False
    """Churn mode: the looks also walk every reachable container (its transient set of ids
    takes 8 MiB or so, which stays in the operator's RSS until the next trim)."""
    log_level: str = "INFO"
    """The operator's log level: `kopf-csi run`'s default, as deployed."""
    write_latency: float = 0.0
    """Seconds each of the operator's writes waits before the emulated API applies it (only
    with `latency="none"`: a uniform model)."""
    tls: bool = True
    """The emulated API over HTTPS, as a real server and every real client (the operator pays
    for TLS)."""
    kube_api_qps: float = 1000.0
    """The operator's `--kube-api-qps`: 1000 per role, as in the real server's comparison with
    the Go sidecars (real-apiserver.md, "Burst latency"; kopf-csi's default is 100)."""
    kube_api_burst: int = 2000
    """The operator's `--kube-api-burst`: 2000, as in that comparison (default 200)."""
    kcm_api_qps: float | None = None
    """The KCM stand-in's `--kube-api-qps`, a token bucket per controller's client (with a
    latency model): none by default. The real server's KCM was noted at 200 / 400
    (stack-notes.md, "A minimal kopf operator against a real API server"; KCM's defaults are
    20 / 30); at 200 claims nothing waits, at 1,000 the PV controller's annotations, events
    and bindings wait (docs/benchmarks.md, "The deletion path")."""
    kcm_api_burst: int = 400
    churn: float | None = None
    """Churn mode: claims posted per second, each deleted `lifetime` seconds after its POST,
    for `duration` seconds (`devtools.bench.churn`)."""
    lifetime: float = 30.0
    duration: float = 90.0
    attached: float = 0.25
    """Churn mode: the share of claims posted with a pod (attached, then detached)."""
    latency: str = "real"
    """The emulated API's request durations (`LATENCY_MODELS`): `real`, the real server's under
    a 200-claim burst (`kopf_csi.testing.latency.REAL_SERVER`), or `none` (microseconds)."""
    operator_python: str | None = None
    """The interpreter the operator process runs on (None: this one). It needs kopf-csi and
    its dependencies installed (e.g. a venv made with another Python), and runs this tree's
    `devtools.bench.operator` from the current directory."""
    server_load: float = 1.0
    """Every duration of the latency model times this (`LatencyModel.scaled`), in every mode:
    a server slower under sustained load than over the burst its means were measured in.

    The lever meant for calibrating the churn against the lab (issue 34: the lab's claim -> PV
    p50 of 2.69 s at 20 / 30 / 90, where this benchmark gave 0.2-1.2 s): its durations under
    two minutes of sustained writes were not measured, so this would be FITTED, not measured.
    Not fitted: on this shared machine the churn's figures at one setting varied more from
    run to run (p50 0.34-22.5 s at 1) than between settings (3.3 s at 1.4, 7.1 s at 1.3, 9.2 s at
    2), the benchmark process's own CPU deciding them (docs/benchmarks.md, "Calibration
    against the lab"). So 1: the measured burst means."""

    @property
    def latency_model(self) -> LatencyModel | None:
        """The emulated API's model: `latency`'s, scaled by `server_load`."""
        model = LATENCY_MODELS[self.latency]
        return None if model is None else model.scaled(self.server_load)


def _seed_objects() -> list[tuple[str, Body]]:
    """StorageClasses, the CSIDriver, and what kubelet and the node registrar would register."""
    classes = [
        {
            "metadata": {"name": name},
            "provisioner": DRIVER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": mode,
        }
        for name, mode in (
            (CLASSES["immediate"], "Immediate"),
            (CLASSES["wffc"], "WaitForFirstConsumer"),
        )
    ]
    labels = {"kubernetes.io/hostname": NODE, DEFAULT_TOPOLOGY_KEY: NODE}
    return [
        *(("storageclasses", body) for body in classes),
        ("csidrivers", {"metadata": {"name": DRIVER}, "spec": {"attachRequired": True}}),
        ("nodes", {"metadata": {"name": NODE, "labels": labels}}),
        (
            "csinodes",
            {
                "metadata": {"name": NODE},
                "spec": {
                    "drivers": [
                        {"name": DRIVER, "nodeID": NODE, "topologyKeys": [DEFAULT_TOPOLOGY_KEY]}
                    ]
                },
            },
        ),
    ]


@dataclasses.dataclass
class Env:
    cluster: MeasuredCluster
    kcm: ControllerManager
    driver: Any
    operator: OperatorProcess
    progress: Progress
    timeout: float
    socket_path: pathlib.Path | None = None
    threads_peak: int = 0
    spawned_at: float = 0.0
    lag: LagProbe = dataclasses.field(default_factory=LagProbe)
    """The benchmark process's own loop (the emulated API, the KCM stand-in, the driver)."""
    bench_cpu_before: float = 0.0
    errors_before: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    modules: list[str] = dataclasses.field(default_factory=list)
    event_loop: str = "asyncio"
    python: str = ""
    """The operator process's Python version, as it says (older operators: none)."""
    idle_cpu: float = IDLE_CPU
    """The operator's CPU per second below which it counts as idle (`settle`)."""

    def sample(self) -> procfs.Sample:
        sample = self.operator.sample()
        self.threads_peak = max(self.threads_peak, sample.threads)
        return sample

    def operator_requests(self) -> int:
        return sum(self.cluster.counts().values())

    async def start_operator(self) -> dict[str, Any]:
        """Start the operator; return once its watches run and it is idle (see `settle`)."""
        self.spawned_at = time.perf_counter()
        pid = await self.operator.spawn()
        self.cluster.watch_client("operator", pid)
        ready = await self.operator.wait_ready()
        self.modules = list(ready.get("modules", []))
        self.event_loop = str(ready.get("event_loop", "asyncio"))  # older operators: asyncio's
        self.python = str(ready.get("python", ""))
        counts = self.cluster.counts
        await wait_until(
            lambda: (
                counts()[("watch", "persistentvolumeclaims")] > 0
                and counts()[("watch", "persistentvolumes")] > 0
            ),
            self.timeout,
            "the operator's watches on claims and volumes",
        )
        stats = await self.settle()
        return stats

    async def settle(self) -> dict[str, Any]:
        """Wait until the operator is done with everything it has seen.

        That is: its work queues are empty, it has made no API request for QUIET seconds, and
        it has used at most IDLE_CPU seconds of CPU in the last second (so it has also been
        through every watch event, including those that lead to no work).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        last_total, last_change = self.operator_requests(), loop.time()
        cpu_samples: collections.deque[tuple[float, float]] = collections.deque()
        while True:
            now, cpu = loop.time(), self.sample().cpu
            cpu_samples.append((now, cpu))
            while len(cpu_samples) > 1 and cpu_samples[1][0] <= now - 1.0:
                cpu_samples.popleft()
            oldest_time, oldest_cpu = cpu_samples[0]
            cpu_idle = oldest_time <= now - 1.0 and cpu - oldest_cpu <= self.idle_cpu
            stats = await self.operator.stats()
            if not stats.get("alive", False):
                raise BenchError(f"the operator stopped\n{self.operator.log_tail()}")
            total = self.operator_requests()
            if total != last_total:
                last_total, last_change = total, loop.time()
            queues = stats.get("queues", {})
            idle = bool(queues) and not any(
                q["depth"] or q["in_flight"] or q["pending_delayed"] for q in queues.values()
            )
            if idle and cpu_idle and loop.time() - last_change >= QUIET:
                return stats
            if loop.time() > deadline:
                raise BenchError(
                    f"the operator did not settle in {self.timeout:g}s: {stats}\n"
                    f"{self.operator.log_tail()}"
                )
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def open_environment(
    options: Options, progress: Progress, timeout: float
) -> AsyncIterator[Env]:
    temporary = options.workdir is None
    workdir = (
        pathlib.Path(tempfile.mkdtemp(prefix="kopf-csi-bench-"))
        if options.workdir is None
        else options.workdir.resolve()
    )
    if not temporary:
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
    socket_path = workdir / "csi.sock"
    config = DriverConfig(
        node_id=NODE,
        data_dir=workdir / "driver",
        known_nodes=None,
        features=Features(attach=True),
        limits=Limits(total_capacity=2**50),  # 1 PiB: never the limit here
        durable=False,
    )
    failed = True
    if options.latency not in LATENCY_MODELS:
        raise BenchError(f"unknown latency model {options.latency!r}: {sorted(LATENCY_MODELS)}")
    calls = CallLog()
    try:
        async with (
            MeasuredCluster(
                write_latency=options.write_latency,
                tls=options.tls,
                latency=options.latency_model,
            ) as cluster,  # fmt: skip
            # KCM is its own process on a real cluster: it never holds the API server up for a
            # whole pass, so here it lets the emulated API serve others after each object. Its
            # resync (15 s, at a moment unrelated to the run) is left out of the burst and scale
            # modes: the writes per phase stay exact, and the PATCHes a resync adds are
            # reported as their expectation. A churn runs for minutes, as a real KCM does: the
            # resync is on, every 15 s, as KCM's default.
            ControllerManager(
                cluster,
                yield_every=1,
                resync_period=KCM_RESYNC_PERIOD if options.churn else None,
                kube_api_qps=options.kcm_api_qps,
                kube_api_burst=options.kcm_api_burst,
            ) as kcm,
            running_driver(config, socket_path=socket_path, grace=1.0, calls=calls) as driver,
        ):
            calls.subscribe(functools.partial(_created_on_driver, cluster.timeline))
            for plural, body in _seed_objects():
                cluster.create(plural, body)
            kubeconfig = cluster.write_kubeconfig(workdir / "kubeconfig")
            operator = OperatorProcess(
                kubeconfig=kubeconfig,
                csi_address=f"unix://{socket_path}",
                workers=options.workers,
                qps=options.kube_api_qps,
                burst=options.kube_api_burst,
                log_path=workdir / "operator.log",
                profile=options.profile.resolve() if options.profile else None,
                tracemalloc=options.tracemalloc,
                log_level=options.log_level,
                # churn: no per-request steps kept (they would grow the RSS it watches)
                trace_requests=0 if options.churn else None,
                python=options.operator_python,
            )
            env = Env(cluster, kcm, driver, operator, progress, timeout, socket_path)
            if options.tracemalloc:
                env.idle_cpu = TRACED_IDLE_CPU
            env.lag.start()
            try:
                yield env
            finally:
                code = await operator.stop()
                if code and sys.exc_info()[0] is None:
                    raise BenchError(f"the operator exited with {code}\n{operator.log_tail()}")
        failed = False
    finally:
        gc.unfreeze()  # what `heap.freeze_startup` froze (a test's process goes on)
        if temporary and not failed:
            shutil.rmtree(workdir, ignore_errors=True)
        elif failed:
            progress.note(f"kept {workdir} (operator.log has the operator's log)")


def _created_on_driver(timeline: Timeline, record: CallRecord) -> None:
    """CreateVolume made a volume: the claim's step, by its uid (in the name `pvc-<uid>`)."""
    if record.method == "CreateVolume" and record.name.startswith("pvc-"):
        timeline.create_volume.setdefault(record.name[len("pvc-") :], time.perf_counter())


def kcm_clients(
    kcm: ControllerManager, since: dict[str, dict[str, float]] | None = None
) -> dict[str, dict[str, float]]:
    """The KCM stand-in's clients' token buckets: requests, how many waited and how long in
    all (since an earlier reading of these, with `since`)."""
    counted = ("requests", "delayed", "waited_seconds")
    result = {}
    for name, bucket in kcm.buckets.items():
        figures = {key: float(value) for key, value in bucket.summary().items()}
        before = (since or {}).get(name, {})
        for key in counted:
            figures[key] = round(figures[key] - before.get(key, 0.0), 3)
        result[name] = figures
    return result


async def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise BenchError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.02)


def _revision() -> str | None:
    """`git describe --always --dirty` of the code measured, if it is a git checkout."""
    try:
        result = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=pathlib.Path(__file__).resolve().parent,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def run_config(options: Options, env: Env, **extra: Any) -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "revision": _revision(),
        "operator_modules": env.modules,
        "operator_event_loop": env.event_loop,
        "operator_python": env.python,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "workers": options.workers,
        "kube_api_qps": options.kube_api_qps,
        "kube_api_burst": options.kube_api_burst,
        "kcm_api_qps": options.kcm_api_qps,
        "kcm_api_burst": options.kcm_api_burst,
        "driver_durable": False,
        "write_latency": options.write_latency,
        "tls": options.tls,
        "latency": options.latency,
        "server_load": options.server_load,
        "kcm_resync_seconds": env.kcm.resync_period,
        **extra,
    }


def other_clients(cluster: MeasuredCluster) -> dict[str, int]:
    return {
        f"{client} {verb} {resource}": n
        for (client, verb, resource), n in sorted(cluster.request_counts.items())
        if client != "operator"
    }
