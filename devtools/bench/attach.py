"""Attach mode (`--attach N`): N volumes and PVs spread over ATTACH_NODES nodes, then N
VolumeAttachments attached in one burst and detached; each phase's rate, latencies, CPU and
requests per VolumeAttachment.

Part of the benchmark (`devtools.bench.running`).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from devtools.bench import procfs, report
from devtools.bench.environment import (
    CHUNK,
    DRIVER,
    BenchError,
    Body,
    Env,
    Options,
    open_environment,
    other_clients,
    run_config,
    wait_until,
)
from devtools.bench.phases import burst, phase_figures, rate, status_line, take_mark
from devtools.bench.progress import Progress
from kopf_csi.csi import CSIClient
from kopf_csi.csi import messages as csi
from kopf_csi.driver.config import DEFAULT_TOPOLOGY_KEY

__all__ = ["ATTACH_NODES", "run_attach"]

ATTACH_NODES = 10  # attach mode: VolumeAttachments go round-robin to node-1 .. node-10


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
    """`phase_figures`'s figures, named per VolumeAttachment."""
    phase["attachments"] = phase.pop("claims")
    phase["cpu_ms_per_attachment"] = phase.pop("cpu_ms_per_volume")
    return phase


async def _va_phase(
    env: Env,
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
    n, mark, acted = len(va_names), take_mark(env), [0]

    def counted(index: int, name: str) -> None:
        act(index, name)
        acted[0] += 1

    status = status_line(
        env, mark, label=label, n=n, done=done,
        what=lambda: f"VAs {label} {acted[0]}/{n}  {verb}",
    )  # fmt: skip
    async with progress.showing(status):
        await burst(va_names, counted)
        await wait_until(
            lambda: all(name in done for name in va_names), timeout,
            f"{n} VolumeAttachments to be {verb}",
        )  # fmt: skip
        await env.settle()
    latencies = {latency: [done[v] - since[v] for v in va_names]}
    phase = _attach_phase(phase_figures(env, n, mark, latencies=latencies))
    phase["seconds"] = round(max(done[v] for v in va_names) - mark.started, 3)
    phase["attachments_per_s"] = rate(n, phase["seconds"])
    return phase


async def run_attach(options: Options, progress: Progress) -> dict[str, Any]:
    n = options.attach or 0
    if n < 1:
        raise BenchError("--attach must be at least 1")
    timeout = options.timeout or max(120.0, n / 5)
    async with open_environment(options, progress, timeout) as env:
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
        await wait_until(
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
            "config": run_config(options, env, attachments=n, nodes=len(nodes)),
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
            "other_clients": other_clients(cluster),
            "driver_published_after_attach": published,
            "driver_published_left": sum(
                len(v.attachments) for v in env.driver.state.volumes.values()
            ),
            "bench_cpu_seconds": round(procfs.cpu_seconds(os.getpid()) - bench_cpu, 2),
        }
    return result
