"""Churn mode (`--churn RATE`): claims posted at a steady rate, each deleted `--lifetime` seconds
after it was posted, for `--duration` seconds; each claim's time to its PV and from its delete
to its PV gone at p50/p90/p99/max, the operator's CPU per volume, its RSS over time, the API
writes per volume, and where the time inside the operator went.

The lab's steady churn (issue 34): 20 claims a second for 90 s, each deleted 30 s after it was
posted, 1,800 in all. The client here sends each claim's POST at its moment (not in threads
that wait for each other: a steady client keeps its rate whatever the server takes), each
request taking the latency model's time, and its DELETE `lifetime` seconds after the POST was
sent. A share of the claims (`--attached`) also get a pod on the node, posted with the claim:
the KCM stand-in's attach/detach controller makes its VolumeAttachment once the claim is
bound, and removes it once the pod is deleted, just before the claim. Latencies count from
the client's sending of the request (the lab's client measured so), to the PV's commit.

The operator's CPU and RSS are read every second. CPU per volume is all of the operator's CPU
from the first POST until it has settled after the last PV is gone, divided by the claims
(create and delete together, its idle work over the run included, as the lab's). RSS is
reported as the mean of each third of the steady window (the first POST to the last DELETE).

Part of the benchmark (`devtools.bench.running`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import math
import os
import time
from typing import Any

from devtools.bench import procfs, report
from devtools.bench.collector import FrozenHeap
from devtools.bench.environment import (
    CLASSES,
    NAMESPACE,
    NODE,
    BenchError,
    Body,
    Options,
    kcm_clients,
    open_environment,
    other_clients,
    run_config,
    wait_until,
)
from devtools.bench.phases import phase_figures, status_line, take_mark
from devtools.bench.progress import Progress
from kopf_csi import heap
from kopf_csi.testing.kcm import PV_CONTROLLER
from kopf_csi.testing.latency import ObjectPath

__all__ = ["run_churn"]

PVCS = "persistentvolumeclaims"


def _claim(index: int, storage_class: str) -> Body:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"churn-{index:05d}", "namespace": NAMESPACE},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def _pod(index: int) -> Body:
    """A pod on the node that mounts claim `index` (scheduled: the attach/detach controller
    wants its volume attached once the claim is bound)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"churn-pod-{index:05d}", "namespace": NAMESPACE},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "app", "image": "busybox"}],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": f"churn-{index:05d}"}}
            ],
        },
        "status": {"phase": "Running"},
    }


def _attached(index: int, share: float) -> bool:
    """Every 1/share-th claim gets a pod, spread evenly (0.25: claims 0, 4, 8, ...)."""
    return share > 0 and math.floor(index * share) != math.floor((index - 1) * share)


def _thirds(samples: list[tuple[float, float, int]], start: float, end: float) -> list[float]:
    """Mean RSS (MiB) of the samples in each third of [start, end]."""
    third = (end - start) / 3
    means = []
    for part in range(3):
        low, high = start + part * third, start + (part + 1) * third
        chosen = [rss for moment, _, rss in samples if low <= moment <= high]
        means.append(round(sum(chosen) / len(chosen) / procfs.MiB, 1) if chosen else math.nan)
    return means


async def run_churn(options: Options, progress: Progress) -> dict[str, Any]:
    rate, lifetime, duration = options.churn or 0.0, options.lifetime, options.duration
    if rate <= 0 or lifetime <= 0 or duration <= 0:
        raise BenchError("--churn, --lifetime and --duration must be positive")
    n = max(1, round(rate * duration))
    timeout = options.timeout or max(120.0, lifetime + 60.0)
    class_name = CLASSES["immediate"]
    async with open_environment(options, progress, timeout) as env:
        cluster, timeline = env.cluster, env.cluster.timeline
        latency = cluster.latency
        progress.note("starting the operator process ...")
        await env.start_operator()
        idle = env.sample()
        heap.freeze_startup()
        collector = FrozenHeap(every=options.bench_freeze_every)
        bench_cpu = procfs.cpu_seconds(os.getpid())

        posted: dict[int, float] = {}  # index -> when the client sent the POST
        deleting: dict[int, float] = {}  # index -> when the client sent the DELETE
        uids: dict[int, str] = {}
        pods: set[int] = set()
        samples: list[tuple[float, float, int]] = []  # (moment, operator CPU, RSS)
        mark = take_mark(env)
        started = mark.started

        async def sampler() -> None:
            while True:
                sample = env.sample()
                samples.append((time.perf_counter(), sample.cpu, sample.rss))
                await asyncio.sleep(1.0)

        growth: list[dict[str, Any]] = []
        stop_looking = asyncio.Event()

        async def looker() -> None:  # `--memory-every`: what grew in the operator
            while not stop_looking.is_set():  # never cancelled mid-answer: the pipe stays in step
                growth.append(await env.operator.growth(walk=options.memory_walk))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop_looking.wait(), options.memory_every)

        async def timed(method: str, plural: str, name: str | None, act: Any) -> Any:
            path = ObjectPath(plural, NAMESPACE, name)
            async with latency.request(method, path, watch=False):
                return act()

        async def one(index: int) -> None:
            await asyncio.sleep(max(0.0, started + index / rate - time.perf_counter()))
            posted[index] = time.perf_counter()
            body = _claim(index, class_name)
            claim = await timed("POST", PVCS, None, lambda: cluster.create(PVCS, body))
            uids[index] = claim["metadata"]["uid"]
            if _attached(index, options.attached):
                pod = _pod(index)
                await timed("POST", "pods", None, lambda: cluster.create("pods", pod))
                pods.add(index)
            await asyncio.sleep(max(0.0, posted[index] + lifetime - time.perf_counter()))
            if index in pods:  # the pod goes first: its volume is detached, the claim freed
                name = f"churn-pod-{index:05d}"
                await timed("DELETE", "pods", name, lambda: cluster.delete("pods", NAMESPACE, name))
            deleting[index] = time.perf_counter()
            claim_name = f"churn-{index:05d}"
            await timed(
                "DELETE", PVCS, claim_name, lambda: cluster.delete(PVCS, NAMESPACE, claim_name)
            )

        status = status_line(
            env, mark, label="churn", n=n, done=timeline.volume_deleted,
            what=lambda: (
                f"posted {len(posted)}/{n}  deleted {len(deleting)}  PVs now "
                f"{timeline.volumes}  PVs gone"
            ),
        )  # fmt: skip
        collector.start()
        sampling = asyncio.create_task(sampler())
        looking = asyncio.create_task(looker()) if options.memory_every > 0 else None
        try:
            async with progress.showing(status):
                await asyncio.gather(*(one(index) for index in range(n)))
                steady_end = time.perf_counter()
                if looking is not None:  # its CPU would keep the operator from settling
                    stop_looking.set()
                    await looking
                stuck = await _wait_deleted(env, uids, timeout)
        finally:
            sampling.cancel()
            await collector.stop()
            if looking is not None and not looking.done():
                stop_looking.set()
                await looking
        gone = [i for i in range(n) if uids[i] in timeline.volume_deleted]
        last = max(timeline.volume_deleted[uids[i]] for i in gone)
        figures = phase_figures(env, n, mark, latencies={})
        to_volume = [
            timeline.volume_created[uids[i]] - posted[i]
            for i in range(n)
            if uids[i] in timeline.volume_created  # a stuck claim may have none
        ]
        to_gone = [timeline.volume_deleted[uids[i]] - deleting[i] for i in gone]
        to_bound = [
            timeline.bound[uids[i]] - posted[i] for i in range(n) if uids[i] in timeline.bound
        ]
        attachments = {
            name: moment
            for name, moment in timeline.va_created.items()
            if name in timeline.va_attached
        }
        cpu_by_second = [round((b[1] - a[1]) * 1000, 0) for a, b in itertools.pairwise(samples)]
        rss = _thirds(samples, started, steady_end)
        end = env.sample()
        events = collections.Counter(
            event.get("reason", "")
            for event in cluster.objects("events", namespace=NAMESPACE)
            if (event.get("source") or {}).get("component") != PV_CONTROLLER
        )
        waits = await env.operator.waits(started, last)
        waits.pop("lag_by_100ms", None)  # a 2-minute run: the summary, not every 100 ms
        waits.pop("first_requests", None)
        result: dict[str, Any] = {
            "mode": "churn",
            "config": run_config(
                options,
                env,
                churn=rate,
                lifetime=lifetime,
                duration=duration,
                claims=n,
                attached_share=options.attached,
            ),
            "claims": n,
            "attached": len(pods),
            "seconds": round(last - started, 2),
            "latency_to_volume": report.latencies(to_volume),
            "latency_to_bound": report.latencies(to_bound),
            "latency_to_volume_gone": report.latencies(to_gone),
            "latency_to_attached": report.latencies(
                [timeline.va_attached[name] - moment for name, moment in attachments.items()]
            ),
            "cpu_seconds": figures["cpu_seconds"],
            "cpu_ms_per_volume": figures["cpu_ms_per_volume"],
            "cpu_ms_per_second": cpu_by_second,
            "rss_thirds_mib": rss,
            "rss_samples": len(samples),
            "rss_mib_by_10s": [round(value / procfs.MiB, 1) for _, _, value in samples[::10]],
            "requests": figures["requests"],
            "writes": figures["writes"],
            "watch_events": figures["watch_events"],
            "errors": figures["errors"],
            "operator_waits": waits,
            "bench_loop_lag": env.lag.summary(since=started),
            "bench_gc": collector.summary(),
            "bench_stalls": env.lag.stalls(since=started),
            "operator": {
                "rss_idle": idle.rss,
                "rss_peak": end.hwm,
                "rss_end": end.rss,
                "threads_peak": env.threads_peak,
                "connections_opened": cluster.connections["operator"],
            },
            "kcm_clients": kcm_clients(env.kcm),
            "kcm_workers": env.kcm.worker_stats(),
            "kcm_resyncs": env.kcm.resyncs,
            "other_clients": other_clients(cluster),
            "operator_events": dict(sorted(events.items())),
            "driver_volumes_left": len(env.driver.state.volumes),
            "pvs_left": timeline.volumes,
            "stuck_claims": [f"churn-{index:05d}" for index in stuck],
            "bench_cpu_seconds": round(procfs.cpu_seconds(os.getpid()) - bench_cpu, 2),
        }
        if growth:  # and one more look, settled: all claims gone
            growth.append(await env.operator.growth(walk=options.memory_walk))
            result["growth"] = growth
        result["targets"] = _targets(result, lab=(rate, lifetime, duration) == (20, 30, 90))
    return result


async def _wait_deleted(env: Any, uids: dict[int, str], timeout: float) -> list[int]:
    """Until every claim's PV is gone and the operator has settled; the claims whose PV is
    still there after `timeout` (stuck: reported with the run's figures, which stay good for
    the steady window, instead of losing a long run to one volume)."""
    timeline = env.cluster.timeline
    try:
        await wait_until(
            lambda: all(u in timeline.volume_deleted for u in uids.values()),
            timeout,
            f"{len(uids)} volumes to be deleted",
        )
    except BenchError:
        stuck = [i for i, uid in sorted(uids.items()) if uid not in timeline.volume_deleted]
        if len(stuck) == len(uids):
            raise
        return stuck
    await env.settle()
    return []


def _targets(result: dict[str, Any], *, lab: bool) -> list[dict[str, Any]]:
    """Issue 34's targets: CPU per volume at most 0.8 x Go's in the lab, RSS flat (the last
    third within 5 MiB of the first); at the lab's settings, p99 claim -> PV within Go's."""
    go = report.LAB_CHURN["go"]
    first, _, last = result["rss_thirds_mib"]
    targets = [
        report.target(
            "CPU per volume, create + delete", result["cpu_ms_per_volume"],
            round(report.CHURN_CPU_RATIO * go["cpu_ms"], 2), "ms/volume",
        ),
        report.target("RSS, last third minus first", round(last - first, 1), 5.0, "MiB"),
    ]  # fmt: skip
    if lab:
        p99 = result["latency_to_volume"]["p99_ms"] / 1000
        targets.append(report.target("claim -> PV, p99", p99, go["to_pv"][2], "s"))
    return targets
