"""Run the benchmark: claims through the whole provisioner, or the operator's memory at scale.

Two processes. This one hosts the emulated API (`MeasuredCluster`), the KCM stand-in and the
reference driver (`durable=False`: no fsync per state record); the operator runs alone in a
child process (`kopf_csi.bench.operator`), so its CPU time and memory read from /proc are its
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
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import datetime
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
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from kopf_csi import logs, names
from kopf_csi.bench import procfs, report
from kopf_csi.bench.cluster import MeasuredCluster
from kopf_csi.bench.process import OperatorProcess, OperatorProcessError
from kopf_csi.bench.progress import Progress
from kopf_csi.driver import DriverConfig, Features, running_driver
from kopf_csi.driver.config import DEFAULT_NAME, DEFAULT_TOPOLOGY_KEY, Limits
from kopf_csi.testing.kcm import PV_CONTROLLER, ControllerManager

__all__ = ["BenchError", "Options", "main", "run", "run_claims", "run_scale"]

NODE = "node-1"
DRIVER = DEFAULT_NAME
NAMESPACE = "default"
CLASSES = {"immediate": "kopf-csi-immediate", "wffc": "kopf-csi-wffc"}
CHUNK = 50  # objects created or deleted between two yields to the event loop
QUIET = 0.5  # seconds without an operator request, its queues empty: the operator is done
IDLE_CPU = 0.03  # at most this much operator CPU (s) in the last second: it is idle
Body = dict[str, Any]


class BenchError(RuntimeError):
    """The benchmark could not finish (a timeout, a crashed operator)."""


@dataclasses.dataclass(frozen=True)
class Options:
    claims: int = 1000
    storage_class: str = "immediate"
    workers: int = 100
    scale: int | None = None
    """Scale mode: this many bound PV/PVC pairs, instead of the claims run."""
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
    threads_peak: int = 0
    spawned_at: float = 0.0
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
    try:
        async with (
            MeasuredCluster() as cluster,
            ControllerManager(cluster) as kcm,
            running_driver(config, socket_path=socket_path, grace=1.0) as driver,
        ):
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
            )
            env = _Env(cluster, kcm, driver, operator, progress, timeout)
            try:
                yield env
            finally:
                code = await operator.stop()
                if code and sys.exc_info()[0] is None:
                    raise BenchError(f"the operator exited with {code}\n{operator.log_tail()}")
        failed = False
    finally:
        if temporary and not failed:
            shutil.rmtree(workdir, ignore_errors=True)
        elif failed:
            progress.note(f"kept {workdir} (operator.log has the operator's log)")


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
        **extra,
    }


def _other_clients(cluster: MeasuredCluster) -> dict[str, int]:
    return {
        f"{client} {verb} {resource}": n
        for (client, verb, resource), n in sorted(cluster.requests.items())
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

        # -- provision --
        uids: list[str] = []
        claim_names: list[str] = []
        counts_before, cpu_before = cluster.counts(), env.sample().cpu
        env.bench_cpu_before = procfs.cpu_seconds(os.getpid())
        env.errors_before = cluster.error_counts()
        started = time.perf_counter()

        def provision_status() -> str:
            sample = env.sample()
            elapsed = time.perf_counter() - started
            bound = len(timeline.bound)
            until = max(timeline.bound.values()) - started if bound >= n else elapsed
            return (
                f"provision {elapsed:6.1f}s  claims {len(uids)}/{n}  PVs "
                f"{len(timeline.volume_created)}  Bound {bound}"
                f" ({bound / max(until, 1e-9):.0f}/s)"
                f"  operator CPU {sample.cpu - cpu_before:.2f}s RSS {sample.rss / procfs.MiB:.0f}"
                f" MiB  requests {env.operator_requests() - sum(counts_before.values())}"
            )

        async with progress.showing(provision_status):
            for index in range(n):
                body = _claim(index, class_name, wffc=options.storage_class == "wffc")
                claim = cluster.create("persistentvolumeclaims", body)
                uids.append(claim["metadata"]["uid"])
                claim_names.append(claim["metadata"]["name"])
                if index % CHUNK == CHUNK - 1:
                    await asyncio.sleep(0)
            await _wait(lambda: len(timeline.bound) >= n, timeout, f"{n} claims to be Bound")
            await env.settle()
        provision = _phase(
            env, n, counts_before, cpu_before, started,
            latencies={
                "latency_to_volume": [
                    timeline.volume_created[u] - timeline.created[u] for u in uids
                ],
                "latency_to_bound": [timeline.bound[u] - timeline.created[u] for u in uids],
            },
        )  # fmt: skip
        provision["seconds_to_volumes"] = round(
            max(timeline.volume_created[u] for u in uids) - started, 3
        )
        provision["seconds_to_bound"] = round(max(timeline.bound[u] for u in uids) - started, 3)
        provision["claims_per_s"] = _rate(n, provision["seconds_to_bound"])
        provision["volumes_per_s"] = _rate(n, provision["seconds_to_volumes"])

        # -- delete --
        counts_before, cpu_before = cluster.counts(), env.sample().cpu
        env.bench_cpu_before = procfs.cpu_seconds(os.getpid())
        env.errors_before = cluster.error_counts()
        started = time.perf_counter()
        deleted = 0

        def delete_status() -> str:
            sample = env.sample()
            elapsed = time.perf_counter() - started
            gone = len(timeline.volume_deleted)
            until = max(timeline.volume_deleted.values()) - started if gone >= n else elapsed
            return (
                f"delete    {elapsed:6.1f}s  claims deleted {deleted}/{n}  PVs gone {gone}"
                f" ({gone / max(until, 1e-9):.0f}/s)  operator CPU {sample.cpu - cpu_before:.2f}s"
                f" RSS {sample.rss / procfs.MiB:.0f} MiB"
                f"  requests {env.operator_requests() - sum(counts_before.values())}"
            )

        async with progress.showing(delete_status):
            for index, name in enumerate(claim_names):
                cluster.delete("persistentvolumeclaims", NAMESPACE, name)
                deleted += 1
                if index % CHUNK == CHUNK - 1:
                    await asyncio.sleep(0)
            await _wait(
                lambda: all(u in timeline.volume_deleted for u in uids),
                timeout,
                f"{n} volumes to be deleted",
            )
            await env.settle()
        delete = _phase(
            env, n, counts_before, cpu_before, started,
            latencies={
                "latency_to_volume_gone": [
                    timeline.volume_deleted[u] - timeline.deleted[u] for u in uids
                ],
            },
        )  # fmt: skip
        delete["seconds"] = round(max(timeline.volume_deleted[u] for u in uids) - started, 3)
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
    return result


def _phase(
    env: _Env,
    n: int,
    counts_before: collections.Counter[tuple[str, str]],
    cpu_before: float,
    started: float,
    *,
    latencies: dict[str, list[float]],
) -> dict[str, Any]:
    cpu = env.sample().cpu - cpu_before
    phase: dict[str, Any] = {
        "claims": n,
        "settled_seconds": round(time.perf_counter() - started, 3),
        "cpu_seconds": round(cpu, 2),
        "cpu_ms_per_volume": round(cpu * 1000 / n, 2),
        "bench_cpu_seconds": round(procfs.cpu_seconds(os.getpid()) - env.bench_cpu_before, 2),
        "requests": report.requests_summary(env.cluster.counts() - counts_before, n),
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


# -- entry point -------------------------------------------------------------------------------


async def run(options: Options, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress()
    try:
        if options.scale:
            return await run_scale(options, progress)
        return await run_claims(options, progress)
    except OperatorProcessError as exc:
        raise BenchError(str(exc)) from exc


def _print_profile(path: pathlib.Path, limit: int = 30) -> None:
    stats = pstats.Stats(str(path), stream=sys.stderr)
    print(f"\noperator profile ({path}), top {limit} by own time:", file=sys.stderr)
    stats.sort_stats("tottime").print_stats(limit)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m kopf_csi.bench",
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
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
    args = parser.parse_args(argv)
    logs.configure(level="WARNING", json=False)
    options = Options(
        claims=args.claims,
        storage_class=args.storage_class,
        workers=args.workers,
        scale=args.scale,
        workdir=args.dir,
        timeout=args.timeout,
        idle_wait=args.idle_wait,
        profile=args.profile,
        tracemalloc=args.tracemalloc,
    )
    try:
        result = asyncio.run(run(options, Progress(enabled=not args.no_progress)))
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        sys.exit(1)
    print(
        report.format_scale(result) if result["mode"] == "scale" else report.format_claims(result)
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.profile:
        _print_profile(args.profile)
