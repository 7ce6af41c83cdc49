"""Claims mode (the default): N claims created in one burst, provisioned, bound, deleted; each
phase's rate, latencies, CPU and requests per volume, and issue 13's burst targets.

Part of the benchmark (`devtools.bench.running`).
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Sequence
from typing import Any

from devtools.bench import procfs, report
from devtools.bench.cluster import Timeline
from devtools.bench.environment import (
    CLASSES,
    KCM_RESYNC_PERIOD,
    NAMESPACE,
    NODE,
    BenchError,
    Body,
    Env,
    Options,
    kcm_clients,
    open_environment,
    other_clients,
    run_config,
    wait_until,
)
from devtools.bench.phases import client_burst, phase_figures, rate, status_line, take_mark
from devtools.bench.progress import Progress
from kopf_csi import heap, names
from kopf_csi.testing.kcm import PV_CONTROLLER

__all__ = ["run_claims"]


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


async def _claim_waits(env: Env, uids: Sequence[str], started: float) -> dict[str, Any]:
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

    def per_100ms(moments: dict[str, float]) -> list[int]:
        chosen = [moments[u] for u in uids if u in moments]
        counts = [0] * (int((max(chosen, default=started) - started) / 0.1) + 1)
        for moment in chosen:
            counts[int((moment - started) / 0.1)] += 1
        return counts

    made = [u for u in uids if u in timeline.create_volume]
    return {
        "pvs_per_100ms": timeline_pvs,
        "claims_per_100ms": per_100ms(timeline.created),  # the client's POSTs done
        "requests_per_100ms": per_100ms(timeline.annotated),  # KCM asked for the volume
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


async def run_claims(options: Options, progress: Progress) -> dict[str, Any]:
    n = options.claims
    if n < 1:
        raise BenchError("--claims must be at least 1")
    timeout = options.timeout or max(120.0, n / 5)
    class_name = CLASSES[options.storage_class]
    async with open_environment(options, progress, timeout) as env:
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
        mark = take_mark(env)
        wffc = options.storage_class == "wffc"

        def create(index: int, _: Any) -> None:
            claim = cluster.create("persistentvolumeclaims", _claim(index, class_name, wffc=wffc))
            uids.append(claim["metadata"]["uid"])
            claim_names.append(claim["metadata"]["name"])

        status = status_line(
            env, mark, label="provision", n=n, done=timeline.bound,
            what=lambda: f"claims {len(uids)}/{n}  PVs {len(timeline.volume_created)}  Bound",
        )  # fmt: skip
        async with progress.showing(status):
            await client_burst(env, "POST", range(n), create)
            await wait_until(lambda: len(timeline.bound) >= n, timeout, f"{n} claims to be Bound")
            await env.settle()
        provision = phase_figures(
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
        provision["claims_per_s"] = rate(n, provision["seconds_to_bound"])
        provision["volumes_per_s"] = rate(n, provision["seconds_to_volumes"])

        provision["kcm_clients"] = kcm_clients(env.kcm)

        # -- delete --
        mark = take_mark(env)
        deleted: list[str] = []

        def delete_one(_: int, name: str) -> None:
            cluster.delete("persistentvolumeclaims", NAMESPACE, name)
            deleted.append(name)

        status = status_line(
            env, mark, label="delete", n=n, done=timeline.volume_deleted,
            what=lambda: f"claims deleted {len(deleted)}/{n}  PVs gone",
        )  # fmt: skip
        async with progress.showing(status):
            await client_burst(env, "DELETE", claim_names, delete_one, name=lambda name: name)
            await wait_until(
                lambda: all(u in timeline.volume_deleted for u in uids),
                timeout,
                f"{n} volumes to be deleted",
            )
            await env.settle()
        delete = phase_figures(
            env, n, mark,
            latencies={
                "latency_to_volume_gone": [
                    timeline.volume_deleted[u] - timeline.deleted[u] for u in uids
                ],
            },
        )  # fmt: skip
        delete["seconds"] = round(max(timeline.volume_deleted[u] for u in uids) - mark.started, 3)
        delete["kcm_clients"] = kcm_clients(env.kcm, since=provision["kcm_clients"])
        delete["claims_per_s"] = rate(n, delete["seconds"])

        end = env.sample()
        events = collections.Counter(
            event.get("reason", "")
            for event in cluster.objects("events", namespace=NAMESPACE)
            if (event.get("source") or {}).get("component") != PV_CONTROLLER
        )
        result = {
            "mode": "claims",
            "config": run_config(options, env, claims=n, storage_class=options.storage_class),
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
            "other_clients": other_clients(cluster),
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
            ],
        }
        if options.latency == "none" and not options.tls:
            # Set for the emulator's old clock (microseconds, plain HTTP; Go's "about 3 ms"
            # there); with the real server's, issue 21's targets below are the comparison.
            result["targets"].append(
                report.target(
                    "operator CPU per provisioned volume",
                    provision["cpu_ms_per_volume"],
                    report.TARGET_CPU_MS,
                    "ms/volume",
                )
            )
        if n == report.BURST_CLAIMS:  # the burst measured on the real server (issue 13)
            result["targets"] += report.burst_targets(provision, delete, end.hwm)
    return result
