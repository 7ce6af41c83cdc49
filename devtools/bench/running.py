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

Churn mode (`--churn RATE --lifetime S --duration S`): claims posted at a steady rate, each
deleted `lifetime` seconds after its POST, a share of them with a pod (attached by the KCM
stand-in, detached before the claim's deletion); each claim's way to its PV and from its delete
to its PV gone, CPU per volume, RSS over time, writes per volume, the operator's waits.

The modes live in `claims`, `churn`, `scale` and `attach`; the environment they share in
`environment`, a measured phase in `phases`, the figures and their report in `report`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import pstats
import sys
from collections.abc import Sequence
from typing import Any

from devtools.bench import report
from devtools.bench.attach import run_attach
from devtools.bench.churn import run_churn
from devtools.bench.claims import run_claims
from devtools.bench.environment import CLASSES, LATENCY_MODELS, BenchError, Options
from devtools.bench.process import OperatorProcessError
from devtools.bench.progress import Progress
from devtools.bench.scale import run_scale
from kopf_csi import logs

__all__ = [
    "BenchError", "Options", "main", "run", "run_attach", "run_churn", "run_claims", "run_scale",
]  # fmt: skip

# -- entry point -------------------------------------------------------------------------------


async def run(options: Options, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress()
    try:
        if options.scale:
            return await run_scale(options, progress)
        if options.attach:
            return await run_attach(options, progress)
        if options.churn:
            return await run_churn(options, progress)
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
    parser.add_argument(
        "--churn", type=float, default=None, metavar="RATE",
        help="instead: steady churn, RATE claims posted a second, each deleted after --lifetime",
    )  # fmt: skip
    parser.add_argument(
        "--lifetime", type=float, default=Options.lifetime, metavar="S",
        help="churn mode: seconds from a claim's POST to its DELETE (default: 30)",
    )  # fmt: skip
    parser.add_argument(
        "--duration", type=float, default=Options.duration, metavar="S",
        help="churn mode: seconds of posting (default: 90; 1,800 claims at 20 a second)",
    )  # fmt: skip
    parser.add_argument(
        "--attached", type=float, default=Options.attached, metavar="SHARE",
        help="churn mode: the share of claims posted with a pod, attached (default: 0.25)",
    )  # fmt: skip
    parser.add_argument(
        "--kube-api-qps", type=float, default=Options.kube_api_qps,
        help="the operator's --kube-api-qps (default: 1000, as the real server's comparison)",
    )  # fmt: skip
    parser.add_argument(
        "--kube-api-burst", type=int, default=Options.kube_api_burst,
        help="the operator's --kube-api-burst (default: 2000)",
    )  # fmt: skip
    parser.add_argument(
        "--kcm-api-qps", type=float, default=Options.kcm_api_qps,
        help="the KCM stand-in's --kube-api-qps: a token bucket per controller's client, with "
        "a latency model (default: none; the real server's KCM ran at 200)",
    )  # fmt: skip
    parser.add_argument(
        "--kcm-api-burst", type=int, default=Options.kcm_api_burst,
        help="the KCM stand-in's --kube-api-burst (default: 400, the real server's KCM)",
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
        help="trace the operator's allocations (distorts RSS): scale mode's top sites, "
        "churn mode's --memory-every growth by traceback",
    )  # fmt: skip
    parser.add_argument(
        "--memory-every", type=float, default=0.0, metavar="S",
        help="churn mode: what grew in the operator every S seconds (objects by type, tasks, "
        "the malloc heap; by traceback with --tracemalloc); costs the operator CPU",
    )  # fmt: skip
    parser.add_argument(
        "--bench-freeze-every", type=float, default=Options.bench_freeze_every, metavar="S",
        help="churn mode: freeze the benchmark process's own heap every S seconds, so that its "
        "garbage collector does not stop the emulated API for long (default 10; 0: never)",
    )  # fmt: skip
    parser.add_argument(
        "--memory-walk", action="store_true",
        help="with --memory-every: also the containers of 256 items or more and those that "
        "grew (walks every reachable object: distorts the RSS by several MiB)",
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
    parser.add_argument(
        "--server-load", type=float, default=Options.server_load, metavar="FACTOR",
        help="every duration of the latency model times FACTOR: a server slower under "
        "sustained load (not measured; default 1, the burst's measured means)",
    )  # fmt: skip
    parser.add_argument(
        "--operator-python", metavar="PATH",
        help="the interpreter of the operator process (default: this one), e.g. another "
        "venv's python with kopf-csi installed, to weigh Python versions",
    )  # fmt: skip
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
    args = parser.parse_args(argv)
    logs.configure(level="WARNING", json=False)
    options = Options(
        claims=args.claims,
        storage_class=args.storage_class,
        workers=args.workers,
        kube_api_qps=args.kube_api_qps,
        kube_api_burst=args.kube_api_burst,
        kcm_api_qps=args.kcm_api_qps,
        kcm_api_burst=args.kcm_api_burst,
        scale=args.scale,
        attach=args.attach,
        churn=args.churn,
        lifetime=args.lifetime,
        duration=args.duration,
        attached=args.attached,
        workdir=args.dir,
        timeout=args.timeout,
        idle_wait=args.idle_wait,
        profile=args.profile,
        tracemalloc=args.tracemalloc,
        memory_every=args.memory_every,
        memory_walk=args.memory_walk,
        bench_freeze_every=args.bench_freeze_every,
        log_level=args.log_level,
        write_latency=args.write_latency,
        tls=args.tls,
        latency="none" if args.write_latency else args.latency,
        server_load=args.server_load,
        operator_python=args.operator_python,
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
        "churn": report.format_churn,
    }
    print(formatters[result["mode"]](result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.profile:
        _print_profile(args.profile)
