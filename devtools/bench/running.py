"""Run the benchmark: claims through the whole provisioner, or the operator's memory at scale.

Two processes. This one hosts the emulated API (`MeasuredCluster`), the KCM stand-in and the
reference driver (`durable=False`: no fsync per state record); the operator runs alone in a
child process (`devtools.bench.operator`), so its CPU time and memory read from /proc are its
own. The benchmark creates and deletes objects through the emulator's Python-level API, which
makes no HTTP request: every request the API serves is the operator's, and the emulator checks
that per connection.

Claims mode (the default): create N claims in one burst (a yield to the loop every 50), wait
until all are Bound and the operator is idle, then delete them all and wait until every PV is
gone and the operator is idle again. Each phase reports claims/s, latencies from the commit
times of the objects, the operator's CPU and its API requests by verb, per volume.

Scale mode (`--scale N`): create N bound PV/PVC pairs directly (what the operator would have
provisioned earlier), then start the operator, wait until it has listed them and gone idle (its
queues empty, no request and almost no CPU for a while), and read its memory; again after
`--idle-wait` seconds, when kopf's per-object workers have exited.

Attach mode (`--attach N`): create N volumes on the driver (CreateVolume over its socket) and
their PVs, spread over ATTACH_NODES nodes with CSINodes, then start the operator and let it
settle. Then create N VolumeAttachments in one burst and wait until all are attached and the
operator is idle; then delete them all and wait until every one is gone (detached) and the
operator is idle again. Each phase reports VAs/s, latencies, CPU and requests per VA.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import datetime
import functools
import gc
import json
import os
import pathlib
import platform
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from devtools.bench import procfs, report
from devtools.bench.cluster import MeasuredCluster, Timeline
from devtools.bench.looplag import LagProbe
from devtools.bench.process import OperatorProcess, OperatorProcessError
from devtools.bench.progress import Progress
from kopf_csi import heap, logs, names
from kopf_csi.csi import CSIClient
from kopf_csi.csi import messages as csi
from kopf_csi.driver import DriverConfig, Features, running_driver
from kopf_csi.driver.calllog import CallLog, CallRecord
from kopf_csi.driver.config import DEFAULT_NAME, DEFAULT_TOPOLOGY_KEY, Limits
from kopf_csi.testing.kcm import PV_CONTROLLER, ControllerManager
from kopf_csi.testing.latency import REAL_SERVER, LatencyModel

__all__ = ["BenchError", "Options", "main", "run", "run_attach", "run_claims", "run_scale"]

NODE = "node-1"
DRIVER = DEFAULT_NAME
NAMESPACE = "default"
CLASSES = {"immediate": "kopf-csi-immediate", "wffc": "kopf-csi-wffc"}
ATTACH_NODES = 10  # attach mode: VolumeAttachments go round-robin to node-1 .. node-10
CHUNK = 50  # objects created or deleted between two yields to the event loop
KCM_RESYNC_PERIOD = 15.0  # seconds: KCM's --pvclaimbinder-sync-period default
QUIET = 0.5  # seconds without an operator request, its queues empty: the operator is done
IDLE_CPU = 0.03  # at most this much operator CPU (s) in the last second: it is idle
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
    """Scale mode: trace the operator's allocations (frames kept) and report the top sites."""
    log_level: str = "INFO"
    """The operator's log level: `kopf-csi run`'s default, as deployed."""
    write_latency: float = 0.0
    """Seconds each of the operator's writes waits before the emulated API applies it (only
    with `latency="none"`: a uniform model)."""
    tls: bool = True
    """The emulated API over HTTPS, as a real server and every real client (the operator pays
    for TLS)."""
    latency: str = "real"
    """The emulated API's request durations (`LATENCY_MODELS`): `real`, the real server's under
    a 200-claim burst (`kopf_csi.testing.latency.REAL_SERVER`), or `none` (microseconds)."""


# -- the environment ---------------------------------------------------------------------------


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
class _Env:
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
        counts = self.cluster.counts
        await _wait(
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
            cpu_idle = oldest_time <= now - 1.0 and cpu - oldest_cpu <= IDLE_CPU
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
async def _environment(options: Options, progress: Progress, timeout: float) -> AsyncIterator[_Env]:
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
                latency=LATENCY_MODELS[options.latency],
            ) as cluster,  # fmt: skip
            # KCM is its own process on a real cluster: it never holds the API server up for a
            # whole pass, so here it lets the emulated API serve others after each object. Its
            # resync (15 s, at a moment unrelated to the run) is left out: the writes per phase
            # stay exact, and the PATCHes a resync adds are reported as their expectation.
            ControllerManager(cluster, yield_every=1, resync_period=None) as kcm,
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
                log_path=workdir / "operator.log",
                profile=options.profile.resolve() if options.profile else None,
                tracemalloc=options.tracemalloc,
                log_level=options.log_level,
            )
            env = _Env(cluster, kcm, driver, operator, progress, timeout, socket_path)
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


async def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
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


def _config(options: Options, env: _Env, **extra: Any) -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "revision": _revision(),
        "operator_modules": env.modules,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "workers": options.workers,
        "driver_durable": False,
        "write_latency": options.write_latency,
        "tls": options.tls,
        "latency": options.latency,
        **extra,
    }


def _other_clients(cluster: MeasuredCluster) -> dict[str, int]:
    return {
        f"{client} {verb} {resource}": n
        for (client, verb, resource), n in sorted(cluster.request_counts.items())
        if client != "operator"
    }


# -- claims mode -------------------------------------------------------------------------------


def _claim(index: int, storage_class: str, *, wffc: bool) -> Body:
    meta: Body = {"name": f"bench-{index:05d}", "namespace": NAMESPACE}
    if wffc:  # stands in for the scheduler, as if a pod using the claim had been scheduled
        meta["annotations"] = {names.ANN_SELECTED_NODE: NODE}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


@dataclasses.dataclass(frozen=True)
class _Mark:
    """Where a phase starts: the request counts and operator CPU to subtract, and the time."""

    counts: collections.Counter[tuple[str, str]]
    cpu: float
    started: float
    writes: collections.Counter[tuple[str, str, str]]  # every client's, by manager
    watch_events: collections.Counter[tuple[str, str]]
    watch_bytes: collections.Counter[str]


def _mark(env: _Env) -> _Mark:
    cluster = env.cluster
    counts, cpu = cluster.counts(), env.sample().cpu
    env.bench_cpu_before = procfs.cpu_seconds(os.getpid())
    env.errors_before = cluster.error_counts()
    return _Mark(
        counts, cpu, time.perf_counter(), collections.Counter(cluster.writes),
        collections.Counter(cluster.watch_events), collections.Counter(cluster.watch_bytes),
    )  # fmt: skip


def _status(
    env: _Env,
    mark: _Mark,
    *,
    label: str,
    n: int,
    done: Mapping[str, float],
    what: Callable[[], str],
) -> Callable[[], str]:
    """A progress line: `what()` so far, how many are `done` and at what rate, and the cost."""

    def status() -> str:
        sample = env.sample()
        elapsed = time.perf_counter() - mark.started
        count = len(done)
        until = max(done.values()) - mark.started if count >= n else elapsed
        return (
            f"{label:<9} {elapsed:6.1f}s  {what()} {count} ({count / max(until, 1e-9):.0f}/s)"
            f"  operator CPU {sample.cpu - mark.cpu:.2f}s RSS {sample.rss / procfs.MiB:.0f} MiB"
            f"  requests {env.operator_requests() - sum(mark.counts.values())}"
        )

    return status


async def _burst(items: Sequence[Any], act: Callable[[int, Any], None]) -> None:
    """Act on every item at once, yielding to the loop every CHUNK items (the API serves)."""
    for index, item in enumerate(items):
        act(index, item)
        if index % CHUNK == CHUNK - 1:
            await asyncio.sleep(0)


def _steps(timeline: Timeline, uid: str) -> dict[str, float | None]:
    """Where one claim's wait went: seconds from its creation to each step, in order."""
    created = timeline.created[uid]

    def since(moments: dict[str, float]) -> float | None:
        moment = moments.get(uid)
        return None if moment is None else round(moment - created, 3)

    return {
        "annotated": since(timeline.annotated),  # the KCM stand-in asked for provisioning
        "provisioning_event": since(timeline.provisioning),  # the operator took the claim
        "create_volume": since(timeline.create_volume),  # the driver made the volume
        "volume": since(timeline.volume_created),
    }


async def _claim_waits(env: _Env, uids: Sequence[str], started: float) -> dict[str, Any]:
    """Each claim's way to its PV, and where the operator's claims waited.

    A claim arrives when the KCM stand-in annotates it for our provisioner (it is ours to
    provision from then on), reaches CreateVolume when the driver has made its volume, and its
    PV once the PV is committed. The PVs per 100 ms since the first claim show bursts and
    lulls; the operator reports its own waits (`devtools.bench.waits`) over the same span.
    """
    timeline = env.cluster.timeline
    last = max(timeline.volume_created[u] for u in uids)
    timeline_pvs = [0] * (int((last - started) / 0.1) + 1)
    for uid in uids:
        timeline_pvs[int((timeline.volume_created[uid] - started) / 0.1)] += 1
    made = [u for u in uids if u in timeline.create_volume]
    return {
        "pvs_per_100ms": timeline_pvs,
        "latency_arrival_to_create_volume": report.latencies(
            [timeline.create_volume[u] - timeline.annotated[u] for u in made]
        ),
        "latency_create_volume_to_volume": report.latencies(
            [timeline.volume_created[u] - timeline.create_volume[u] for u in made]
        ),
        "operator_waits": await env.operator.waits(started, last),
        "bench_loop_lag": {
            **env.lag.summary(since=started),
            "by_100ms": env.lag.by_bucket(since=started, until=last),
        },
    }


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else float("nan")


async def run_claims(options: Options, progress: Progress) -> dict[str, Any]:
    n = options.claims
    if n < 1:
        raise BenchError("--claims must be at least 1")
    timeout = options.timeout or max(120.0, n / 5)
    class_name = CLASSES[options.storage_class]
    async with _environment(options, progress, timeout) as env:
        cluster, timeline = env.cluster, env.cluster.timeline
        progress.note("starting the operator process ...")
        before_start = cluster.counts()
        await env.start_operator()
        idle = env.sample()
        startup = {
            "seconds": round(time.perf_counter() - env.spawned_at, 2),
            "cpu_seconds": idle.cpu,
            "requests": report.requests_summary(cluster.counts() - before_start, 1),
        }
        bench_cpu = procfs.cpu_seconds(os.getpid())
        heap.freeze_startup()  # the emulated API's own GC passes skip the set-up (Go's GC is
        # concurrent: a real server does not stop for seconds' worth of objects)

        # -- provision --
        uids: list[str] = []
        claim_names: list[str] = []
        mark = _mark(env)
        wffc = options.storage_class == "wffc"

        def create(index: int, _: Any) -> None:
            claim = cluster.create("persistentvolumeclaims", _claim(index, class_name, wffc=wffc))
            uids.append(claim["metadata"]["uid"])
            claim_names.append(claim["metadata"]["name"])

        status = _status(
            env, mark, label="provision", n=n, done=timeline.bound,
            what=lambda: f"claims {len(uids)}/{n}  PVs {len(timeline.volume_created)}  Bound",
        )  # fmt: skip
        async with progress.showing(status):
            await _burst(range(n), create)
            await _wait(lambda: len(timeline.bound) >= n, timeout, f"{n} claims to be Bound")
            await env.settle()
        provision = _phase(
            env, n, mark,
            latencies={
                "latency_to_volume": [
                    timeline.volume_created[u] - timeline.created[u] for u in uids
                ],
                "latency_to_bound": [timeline.bound[u] - timeline.created[u] for u in uids],
            },
        )  # fmt: skip
        provision["seconds_to_volumes"] = round(
            max(timeline.volume_created[u] for u in uids) - mark.started, 3
        )
        first = min(uids, key=lambda u: timeline.volume_created[u])
        provision["seconds_to_first_volume"] = round(
            timeline.volume_created[first] - mark.started, 3
        )
        provision["first_volume_after_its_claim"] = round(
            timeline.volume_created[first] - timeline.created[first], 3
        )
        provision["first_volume_steps"] = _steps(timeline, first)
        waits = [timeline.volume_created[u] - timeline.annotated[u] for u in uids]
        provision["mean_wait_for_volume"] = round(sum(waits) / len(waits), 3)
        provision.update(await _claim_waits(env, uids, mark.started))
        # KCM re-posts ExternalProvisioning for every claim still waiting at its resync (every
        # 15 s, at a moment independent of the burst): a PATCH of the event per such claim.
        provision["kcm_event_patches_expected"] = round(
            provision["mean_wait_for_volume"] / KCM_RESYNC_PERIOD, 4
        )
        provision["seconds_to_bound"] = round(
            max(timeline.bound[u] for u in uids) - mark.started, 3
        )
        provision["claims_per_s"] = _rate(n, provision["seconds_to_bound"])
        provision["volumes_per_s"] = _rate(n, provision["seconds_to_volumes"])

        # -- delete --
        mark = _mark(env)
        deleted: list[str] = []

        def delete_one(_: int, name: str) -> None:
            cluster.delete("persistentvolumeclaims", NAMESPACE, name)
            deleted.append(name)

        status = _status(
            env, mark, label="delete", n=n, done=timeline.volume_deleted,
            what=lambda: f"claims deleted {len(deleted)}/{n}  PVs gone",
        )  # fmt: skip
        async with progress.showing(status):
            await _burst(claim_names, delete_one)
            await _wait(
                lambda: all(u in timeline.volume_deleted for u in uids),
                timeout,
                f"{n} volumes to be deleted",
            )
            await env.settle()
        delete = _phase(
            env, n, mark,
            latencies={
                "latency_to_volume_gone": [
                    timeline.volume_deleted[u] - timeline.deleted[u] for u in uids
                ],
            },
        )  # fmt: skip
        delete["seconds"] = round(max(timeline.volume_deleted[u] for u in uids) - mark.started, 3)
        delete["claims_per_s"] = _rate(n, delete["seconds"])

        end = env.sample()
        events = collections.Counter(
            event.get("reason", "")
            for event in cluster.objects("events", namespace=NAMESPACE)
            if (event.get("source") or {}).get("component") != PV_CONTROLLER
        )
        result = {
            "mode": "claims",
            "config": _config(options, env, claims=n, storage_class=options.storage_class),
            "startup": startup,
            "provision": provision,
            "delete": delete,
            "lifecycle_cpu_ms_per_volume": round(
                provision["cpu_ms_per_volume"] + delete["cpu_ms_per_volume"], 2
            ),
            "operator": {
                "rss_idle": idle.rss,
                "rss_peak": end.hwm,
                "rss_end": end.rss,
                "threads_peak": env.threads_peak,
            },
            "other_clients": _other_clients(cluster),
            "operator_events": dict(sorted(events.items())),
            "driver_volumes_left": len(env.driver.state.volumes),
            "bench_cpu_seconds": round(procfs.cpu_seconds(os.getpid()) - bench_cpu, 2),
            "targets": [
                report.target(
                    "API writes per provisioned volume",
                    provision["requests"]["writes_per_volume"],
                    report.TARGET_WRITES,
                    "writes/volume",
                ),
                report.target(
                    "operator CPU per provisioned volume",
                    provision["cpu_ms_per_volume"],
                    report.TARGET_CPU_MS,
                    "ms/volume",
                ),
            ],
        }
        if n == report.BURST_CLAIMS:  # the burst measured on the real server (issue 13)
            result["targets"] += report.burst_targets(provision, delete, end.hwm)
    return result


def _phase(
    env: _Env,
    n: int,
    mark: _Mark,
    *,
    latencies: dict[str, list[float]],
) -> dict[str, Any]:
    sample = env.sample()
    cpu = sample.cpu - mark.cpu
    cluster = env.cluster
    phase: dict[str, Any] = {
        "claims": n,
        "rss_peak": sample.hwm,  # VmHWM: the peak so far, this phase included
        "watch_events": report.watch_summary(
            cluster.watch_events - mark.watch_events, cluster.watch_bytes - mark.watch_bytes, n
        ),
        "writes": report.writes_summary(cluster.writes - mark.writes, n),
        "settled_seconds": round(time.perf_counter() - mark.started, 3),
        "cpu_seconds": round(cpu, 2),
        "cpu_ms_per_volume": round(cpu * 1000 / n, 2),
        "bench_cpu_seconds": round(procfs.cpu_seconds(os.getpid()) - env.bench_cpu_before, 2),
        "requests": report.requests_summary(env.cluster.counts() - mark.counts, n),
        "errors": dict(sorted((env.cluster.error_counts() - env.errors_before).items())),
    }
    phase.update({name: report.latencies(values) for name, values in latencies.items()})
    return phase


# -- scale mode --------------------------------------------------------------------------------


def _bound_pair(cluster: MeasuredCluster, index: int, identity: str) -> None:
    """A claim and its PV as they are once our operator has provisioned and the KCM bound them.

    Five synchronous writes: the KCM stand-in (a task on this loop) sees the finished pair.
    """
    name = f"data-{index:05d}"
    class_name = CLASSES["immediate"]
    provisioner = {
        names.ANN_STORAGE_PROVISIONER: DRIVER,
        names.ANN_BETA_STORAGE_PROVISIONER: DRIVER,
    }
    claim = cluster.create(
        "persistentvolumeclaims",
        {
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "annotations": {
                    **provisioner,
                    names.ANN_BIND_COMPLETED: "yes",
                    names.ANN_BOUND_BY_CONTROLLER: "yes",
                },
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": class_name,
                "resources": {"requests": {"storage": "1Gi"}},
                "volumeMode": "Filesystem",
            },
        },
    )
    meta = claim["metadata"]
    volume_name = f"pvc-{meta['uid']}"
    cluster.create(
        "persistentvolumes",
        {
            "metadata": {
                "name": volume_name,
                "annotations": {
                    names.ANN_PROVISIONED_BY: DRIVER,
                    names.ANN_DELETION_SECRET_NAME: "",
                    names.ANN_DELETION_SECRET_NAMESPACE: "",
                },
                "finalizers": [names.FINALIZER_PV],
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Gi"},
                "csi": {
                    "driver": DRIVER,
                    "volumeHandle": meta["uid"],
                    "volumeAttributes": {names.PROVISIONER_IDENTITY_KEY: identity},
                    "fsType": "ext4",
                },
                "claimRef": {
                    "kind": "PersistentVolumeClaim",
                    "namespace": NAMESPACE,
                    "name": name,
                    "uid": meta["uid"],
                    "apiVersion": "v1",
                    "resourceVersion": meta["resourceVersion"],
                },
                "storageClassName": class_name,
                "persistentVolumeReclaimPolicy": "Delete",
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": DEFAULT_TOPOLOGY_KEY,
                                        "operator": "In",
                                        "values": [NODE],
                                    }
                                ]
                            }
                        ]
                    }
                },
                "volumeMode": "Filesystem",
            },
        },
    )
    cluster.patch(
        "persistentvolumes", None, volume_name, {"status": {"phase": "Bound"}}, subresource="status"
    )
    cluster.patch("persistentvolumeclaims", NAMESPACE, name, {"spec": {"volumeName": volume_name}})
    status = {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}
    cluster.patch(
        "persistentvolumeclaims", NAMESPACE, name, {"status": status}, subresource="status"
    )


async def run_scale(options: Options, progress: Progress) -> dict[str, Any]:
    n = options.scale or 0
    if n < 1:
        raise BenchError("--scale must be at least 1")
    timeout = options.timeout or max(120.0, n / 20)
    async with _environment(options, progress, timeout) as env:
        cluster = env.cluster
        started, made = time.perf_counter(), 0
        identity = f"{int(time.time() * 1000)}-1234-{DRIVER}"

        def populate_status() -> str:
            return f"populating  {time.perf_counter() - started:5.1f}s  pairs {made}/{n}"

        async with progress.showing(populate_status):
            for index in range(n):
                _bound_pair(cluster, index, identity)
                made += 1
                if index % CHUNK == CHUNK - 1:
                    await asyncio.sleep(0)
            populated_rv = cluster.resource_version
            await env.kcm.settled()
        populate_seconds = time.perf_counter() - started
        kcm_writes = cluster.resource_version - populated_rv

        def startup_status() -> str:
            elapsed = time.perf_counter() - (env.spawned_at or started)
            try:
                sample = env.sample()
            except (OSError, OperatorProcessError):
                return f"operator start-up  {elapsed:5.1f}s"
            return (
                f"operator start-up  {elapsed:5.1f}s  CPU {sample.cpu:.2f}s"
                f"  RSS {sample.rss / procfs.MiB:.0f} MiB  peak {sample.hwm / procfs.MiB:.0f} MiB"
                f"  requests {env.operator_requests()}"
            )

        async with progress.showing(startup_status):
            stats = await env.start_operator()
            settled = env.sample()
            startup = {
                "seconds": round(time.perf_counter() - env.spawned_at, 2),
                "cpu_seconds": settled.cpu,
                "requests": report.requests_summary(cluster.counts(), n),
                "errors": dict(sorted(cluster.error_counts().items())),
            }
            await asyncio.sleep(options.idle_wait)
            idle = env.sample()
            collected = await env.operator.collect()
            after_gc = env.sample()
            memory = await env.operator.memory() if options.tracemalloc else None
        result = {
            "mode": "scale",
            "config": _config(options, env, pairs=n),
            "populate_seconds": round(populate_seconds, 2),
            "kcm_writes": kcm_writes,
            "startup": startup,
            "caches": stats.get("caches", {}),
            "idle_wait": options.idle_wait,
            "operator": {
                "rss_settled": settled.rss,
                "rss_idle": idle.rss,
                "rss_peak": idle.hwm,
                "rss_after_gc": after_gc.rss,
                "gc": collected,
                "threads_peak": env.threads_peak,
                "cpu_after_idle_wait": idle.cpu,
            },
            "other_clients": _other_clients(cluster),
            "memory": memory,
            "targets": [
                report.target(
                    f"peak RSS with {n:,} PVs",
                    round(idle.hwm / procfs.MiB, 1),
                    report.TARGET_RSS_MIB,
                    "MiB",
                ),
                report.target(
                    f"RSS with {n:,} PVs, settled",
                    round(settled.rss / procfs.MiB, 1),
                    report.TARGET_RSS_MIB,
                    "MiB",
                ),
            ],
        }
    return result


# -- attach mode -------------------------------------------------------------------------------


def _node_objects(node: str) -> list[tuple[str, Body]]:
    """A Node and the CSINode that maps it to our driver's node ID (the node's name)."""
    labels = {"kubernetes.io/hostname": node, DEFAULT_TOPOLOGY_KEY: node}
    drivers = [{"name": DRIVER, "nodeID": node, "topologyKeys": [DEFAULT_TOPOLOGY_KEY]}]
    return [
        ("nodes", {"metadata": {"name": node, "labels": labels}}),
        ("csinodes", {"metadata": {"name": node}, "spec": {"drivers": drivers}}),
    ]


async def _create_driver_volumes(socket_path: pathlib.Path, names_: Sequence[str]) -> list[str]:
    """Volumes on the driver, made behind the operator's back (20 calls at once); their IDs."""
    access = csi.VolumeCapabilityAccessMode(
        mode=csi.VolumeCapabilityAccessModeMode.SINGLE_NODE_WRITER
    )
    capability = csi.VolumeCapability(mount=csi.VolumeCapabilityMountVolume(), access_mode=access)
    semaphore = asyncio.Semaphore(20)
    async with CSIClient(str(socket_path)) as client:

        async def one(name: str) -> str:
            request = csi.CreateVolumeRequest(
                name=name,
                capacity_range=csi.CapacityRange(required_bytes=1024 * 1024),
                volume_capabilities=[capability],
            )
            async with semaphore:
                response = await client.create_volume(request)
            assert response.volume is not None
            return response.volume.volume_id

        return list(await asyncio.gather(*(one(name) for name in names_)))


def _attach_volume(name: str, handle: str) -> Body:
    """A PV of our driver, not bound to a claim (the attacher needs only its CSI source)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Mi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "volumeMode": "Filesystem",
            "csi": {"driver": DRIVER, "volumeHandle": handle, "fsType": "ext4"},
        },
    }


def _attachment(name: str, pv_name: str, node: str) -> Body:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": name},
        "spec": {
            "attacher": DRIVER,
            "nodeName": node,
            "source": {"persistentVolumeName": pv_name},
        },
    }


def _attach_phase(phase: dict[str, Any]) -> dict[str, Any]:
    """`_phase`'s figures, named per VolumeAttachment."""
    phase["attachments"] = phase.pop("claims")
    phase["cpu_ms_per_attachment"] = phase.pop("cpu_ms_per_volume")
    return phase


async def _va_phase(
    env: _Env,
    progress: Progress,
    va_names: Sequence[str],
    act: Callable[[int, str], None],
    timeout: float,
    *,
    label: str,
    verb: str,
    since: Mapping[str, float],
    done: Mapping[str, float],
    latency: str,
) -> dict[str, Any]:
    """One phase of the attach benchmark: `act` on every VA in a burst, until all are `done`."""
    n, mark, acted = len(va_names), _mark(env), [0]

    def counted(index: int, name: str) -> None:
        act(index, name)
        acted[0] += 1

    status = _status(
        env, mark, label=label, n=n, done=done,
        what=lambda: f"VAs {label} {acted[0]}/{n}  {verb}",
    )  # fmt: skip
    async with progress.showing(status):
        await _burst(va_names, counted)
        await _wait(
            lambda: all(name in done for name in va_names), timeout,
            f"{n} VolumeAttachments to be {verb}",
        )  # fmt: skip
        await env.settle()
    latencies = {latency: [done[v] - since[v] for v in va_names]}
    phase = _attach_phase(_phase(env, n, mark, latencies=latencies))
    phase["seconds"] = round(max(done[v] for v in va_names) - mark.started, 3)
    phase["attachments_per_s"] = _rate(n, phase["seconds"])
    return phase


async def run_attach(options: Options, progress: Progress) -> dict[str, Any]:
    n = options.attach or 0
    if n < 1:
        raise BenchError("--attach must be at least 1")
    timeout = options.timeout or max(120.0, n / 5)
    async with _environment(options, progress, timeout) as env:
        cluster, timeline = env.cluster, env.cluster.timeline
        assert env.socket_path is not None
        nodes = [f"node-{i}" for i in range(1, ATTACH_NODES + 1)]
        for node in nodes[1:]:  # node-1 is seeded for every mode
            for plural, body in _node_objects(node):
                cluster.create(plural, body)
        pv_names = [f"bench-va-pv-{index:05d}" for index in range(n)]
        va_names = [f"bench-va-{index:05d}" for index in range(n)]
        started = time.perf_counter()

        def populate_status() -> str:
            return f"populating  {time.perf_counter() - started:5.1f}s  {n} driver volumes, PVs"

        async with progress.showing(populate_status):
            handles = await _create_driver_volumes(env.socket_path, pv_names)
            for index, (pv_name, handle) in enumerate(zip(pv_names, handles, strict=True)):
                cluster.create("persistentvolumes", _attach_volume(pv_name, handle))
                if index % CHUNK == CHUNK - 1:
                    await asyncio.sleep(0)
            await env.kcm.settled()
        populate_seconds = time.perf_counter() - started

        progress.note("starting the operator process ...")
        await env.start_operator()
        await _wait(
            lambda: cluster.counts()[("watch", "volumeattachments")] > 0,
            timeout,
            "the operator's watch on VolumeAttachments",
        )
        await env.settle()
        idle = env.sample()
        startup = {
            "seconds": round(time.perf_counter() - env.spawned_at, 2),
            "cpu_seconds": idle.cpu,
            "requests": report.requests_summary(cluster.counts(), 1),
        }
        bench_cpu = procfs.cpu_seconds(os.getpid())

        # -- attach --
        def attach_one(index: int, name: str) -> None:
            node = nodes[index % len(nodes)]
            cluster.create("volumeattachments", _attachment(name, pv_names[index], node))

        attach = await _va_phase(
            env, progress, va_names, attach_one, timeout,
            label="attach", verb="attached", since=timeline.va_created,
            done=timeline.va_attached, latency="latency_to_attached",
        )  # fmt: skip
        published = sum(len(v.attachments) for v in env.driver.state.volumes.values())

        # -- detach --
        def detach_one(_: int, name: str) -> None:
            cluster.delete("volumeattachments", None, name)

        detach = await _va_phase(
            env, progress, va_names, detach_one, timeout,
            label="detach", verb="gone", since=timeline.va_deleted,
            done=timeline.va_gone, latency="latency_to_gone",
        )  # fmt: skip

        end = env.sample()
        result = {
            "mode": "attach",
            "config": _config(options, env, attachments=n, nodes=len(nodes)),
            "populate_seconds": round(populate_seconds, 2),
            "startup": startup,
            "attach": attach,
            "detach": detach,
            "operator": {
                "rss_idle": idle.rss,
                "rss_peak": end.hwm,
                "rss_end": end.rss,
                "threads_peak": env.threads_peak,
            },
            "other_clients": _other_clients(cluster),
            "driver_published_after_attach": published,
            "driver_published_left": sum(
                len(v.attachments) for v in env.driver.state.volumes.values()
            ),
            "bench_cpu_seconds": round(procfs.cpu_seconds(os.getpid()) - bench_cpu, 2),
        }
    return result


# -- entry point -------------------------------------------------------------------------------


async def run(options: Options, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress()
    try:
        if options.scale:
            return await run_scale(options, progress)
        if options.attach:
            return await run_attach(options, progress)
        return await run_claims(options, progress)
    except OperatorProcessError as exc:
        raise BenchError(str(exc)) from exc


def _print_profile(path: pathlib.Path, limit: int = 30) -> None:
    stats = pstats.Stats(str(path), stream=sys.stderr)
    print(f"\noperator profile ({path}), top {limit} by own time:", file=sys.stderr)
    stats.sort_stats("tottime").print_stats(limit)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--claims", type=int, default=1000, help="claims to provision and delete")
    parser.add_argument(
        "--class", dest="storage_class", choices=sorted(CLASSES), default="immediate"
    )
    parser.add_argument(
        "--workers", type=int, default=100, help="the operator's provisioner workers"
    )
    parser.add_argument(
        "--scale", type=int, default=None, metavar="N",
        help="instead: the operator's RSS with N bound PV/PVC pairs present",
    )  # fmt: skip
    parser.add_argument(
        "--attach", type=int, default=None, metavar="N",
        help="instead: attach and detach N VolumeAttachments (over 10 nodes)",
    )  # fmt: skip
    parser.add_argument("--idle-wait", type=float, default=6.0, help="scale mode: idle seconds")
    parser.add_argument("--timeout", type=float, default=None, help="seconds allowed per phase")
    parser.add_argument("--dir", type=pathlib.Path, default=None, help="working directory (kept)")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the report here")
    parser.add_argument(
        "--profile", type=pathlib.Path, default=None,
        help="cProfile the operator process into this file",
    )  # fmt: skip
    parser.add_argument(
        "--tracemalloc", type=int, default=0, metavar="FRAMES",
        help="scale mode: trace the operator's allocations (distorts RSS)",
    )  # fmt: skip
    parser.add_argument(
        "--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="the operator's log level (INFO, as `kopf-csi run` by default)",
    )  # fmt: skip
    parser.add_argument(
        "--write-latency", type=float, default=0.0, metavar="SECONDS",
        help="each HTTP write waits this long, as for a real server's etcd (e.g. 0.002)",
    )  # fmt: skip
    parser.add_argument(
        "--tls", action=argparse.BooleanOptionalAction, default=True,
        help="the emulated API over HTTPS, as every real client talks (default: on)",
    )  # fmt: skip
    parser.add_argument(
        "--latency", choices=sorted(LATENCY_MODELS), default="real",
        help="the emulated API's request durations: the real server's under a burst (real, "
        "the default), or none (microseconds)",
    )  # fmt: skip
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
    args = parser.parse_args(argv)
    logs.configure(level="WARNING", json=False)
    options = Options(
        claims=args.claims,
        storage_class=args.storage_class,
        workers=args.workers,
        scale=args.scale,
        attach=args.attach,
        workdir=args.dir,
        timeout=args.timeout,
        idle_wait=args.idle_wait,
        profile=args.profile,
        tracemalloc=args.tracemalloc,
        log_level=args.log_level,
        write_latency=args.write_latency,
        tls=args.tls,
        latency="none" if args.write_latency else args.latency,
    )
    try:
        result = asyncio.run(run(options, Progress(enabled=not args.no_progress)))
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        sys.exit(1)
    formatters = {
        "scale": report.format_scale,
        "attach": report.format_attach,
        "claims": report.format_claims,
    }
    print(formatters[result["mode"]](result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.profile:
        _print_profile(args.profile)
