"""Scale mode (`--scale N`): the operator's memory with N bound PV/PVC pairs in the cluster,
after it has listed them and settled, and again once kopf's idle workers have exited.

Part of the benchmark (`devtools.bench.running`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from devtools.bench import procfs, report
from devtools.bench.cluster import MeasuredCluster
from devtools.bench.environment import (
    CHUNK,
    CLASSES,
    DRIVER,
    NAMESPACE,
    NODE,
    BenchError,
    Options,
    open_environment,
    other_clients,
    run_config,
)
from devtools.bench.process import OperatorProcessError
from devtools.bench.progress import Progress
from kopf_csi import names
from kopf_csi.driver.config import DEFAULT_TOPOLOGY_KEY

__all__ = ["run_scale"]


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
    async with open_environment(options, progress, timeout) as env:
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
            "config": run_config(options, env, pairs=n),
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
            "other_clients": other_clients(cluster),
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
