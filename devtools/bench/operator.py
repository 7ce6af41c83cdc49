"""`python -m devtools.bench.operator`: the operator alone in a process, for the benchmark.

The benchmark reads this process's CPU time and memory from /proc, so nothing else runs in it:
the emulated cluster, the KCM stand-in and the driver stay in the benchmark's process. It runs
the default handler modules in kopf as the tests and the sandbox do (`OperatorThread`), but on
the main thread, as `kopf-csi run` does (`run_here`; the commands below on a thread), logs
as `kopf-csi run` does in a pod (JSON lines on stderr, at INFO unless `--log-level` says
otherwise), and talks to its parent over stdin and stdout, one JSON line each way:

- once kopf has started and scanned the API, it prints ``{"ready": true, ...}``;
- ``stats`` on stdin: it prints the cache sizes and the work queues' state;
- ``gc``: a full garbage collection, and how many objects it freed and tracks;
- ``memory`` (with ``--tracemalloc``): the top allocation sites of live memory;
- ``growth``: what grew since the previous ``growth`` (`devtools.bench.growth`); ``growth
  walk``: the containers too;
- ``waits SINCE UNTIL`` (perf_counter seconds): where claims waited (`devtools.bench.waits`),
  the event loop's lag among them, and its worst lag per 100 ms between the two moments;
- ``stop``, or the end of stdin (the parent is gone): it stops kopf and exits.

``--profile PATH`` (or ``KOPF_CSI_BENCH_PROFILE=PATH``) runs cProfile in every thread (kopf's
loop and the executor threads that run sync handlers) and writes the merged stats to PATH.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import inspect
import json
import os
import pathlib
import platform
import pstats
import sys
import threading
import time
import tracemalloc
from collections.abc import Sequence
from typing import Any

from devtools.bench.growth import Growth
from devtools.bench.waits import TRACE_LIMIT, Waits
from kopf_csi import logs
from kopf_csi.queueing import WorkQueue
from kopf_csi.settings import CSISettings, KubeSettings, Settings, WorkerSettings
from kopf_csi.testing.operator import DEFAULT_MODULES, OperatorThread

__all__ = ["main"]

PROFILE_ENV = "KOPF_CSI_BENCH_PROFILE"
MODULES_ENV = "KOPF_CSI_BENCH_MODULES"  # comma-separated handler modules instead of the defaults


class _Profiler:
    """One cProfile.Profile per thread started from now on, merged at the end.

    Each counts its thread's CPU time (`time.thread_time`), not wall time: the idle waits of
    the event loop and of executor threads would swamp everything else.
    """

    def __init__(self) -> None:
        self._profiles: list[cProfile.Profile] = []
        self._lock = threading.Lock()

    def install(self) -> None:
        main = cProfile.Profile(time.thread_time)
        self._profiles.append(main)
        threading.setprofile(self._start)
        main.enable()

    def _start(self, *_: Any) -> None:
        # Called once, in each new thread, as its first profiled event: swap in a profiler.
        sys.setprofile(None)
        profile = cProfile.Profile(time.thread_time)
        with self._lock:
            self._profiles.append(profile)
        profile.enable()

    def dump(self, path: str) -> None:
        threading.setprofile(None)
        with self._lock:
            profiles = list(self._profiles)
        for profile in profiles:
            profile.disable()
        stats = pstats.Stats(profiles[0])
        for profile in profiles[1:]:
            with_calls = pstats.Stats(profile)
            if with_calls.stats:  # type: ignore[attr-defined]
                stats.add(with_calls)
        stats.dump_stats(path)


def _say(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _stats(operator: OperatorThread) -> dict[str, Any]:
    memo = operator.memo
    caches = getattr(memo, "caches", None)
    stats: dict[str, Any] = {"alive": operator.alive, "threads": threading.active_count()}
    if caches is not None:
        stats["caches"] = {
            name: len(getattr(caches, name))
            for name in ("claims", "volumes", "storage_classes", "attachments", "csinodes", "nodes")
        }
    stats["queues"] = {
        queue.name: {
            "depth": queue.depth,
            "in_flight": queue.in_flight,
            "pending_delayed": queue.pending_delayed,
        }
        for queue in list(memo.values())
        if isinstance(queue, WorkQueue)
    }
    provisioner = getattr(memo, "provisioner", None)
    if provisioner is not None:
        stats["in_progress"] = len(provisioner.in_progress)
    stats["csi_streams"] = _csi_streams(memo)
    return stats


def _csi_streams(memo: Any) -> dict[str, int] | None:
    """The CSI connection's HTTP/2 streams kept by h2, by state, and the closed ones it
    remembers (each new stream walks the former: they should stay few)."""
    try:
        h2 = memo.csi._channel._protocol.processor.connection._connection
    except AttributeError:
        return None
    states: dict[str, int] = {}
    for stream in list(h2.streams.values()):
        state = stream.state_machine.state.name
        states[state] = states.get(state, 0) + 1
    return {**states, "remembered_closed": len(h2._closed_streams)}


def _connections(memo: Any) -> dict[str, int] | None:
    """The API client's pools: connections in use and idle (each holds TLS buffers), the plain
    requests' (`httppool`) and the watches' (aiohttp's connector)."""
    try:
        connector = memo.api._api.rest_client.pool_manager.connector
    except AttributeError:
        return None
    idle = sum(len(conns) for conns in list(connector._conns.values()))
    found = {"watches_acquired": len(connector._acquired), "watches_idle": idle}
    pool = getattr(memo.api, "_pool", None)  # none before the eighth session
    if pool is not None:
        found.update(acquired=pool.busy, idle=pool.idle)
    return found


def _memory(limit: int = 25) -> dict[str, Any]:
    """Live memory by allocation site (file:line, traced frames only), largest first."""
    if not tracemalloc.is_tracing():
        return {"error": "start the operator with --tracemalloc"}
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    stats = snapshot.statistics("lineno")
    total = sum(stat.size for stat in stats)
    top = [
        {"site": f"{stat.traceback[0].filename}:{stat.traceback[0].lineno}",
         "kib": stat.size // 1024, "blocks": stat.count}
        for stat in stats[:limit]
    ]  # fmt: skip
    _, peak = tracemalloc.get_traced_memory()
    return {"traced_kib": total // 1024, "peak_kib": peak // 1024, "top": top}


async def _on_loop(function: Any) -> None:
    function()


def _serve(args: argparse.Namespace) -> int:
    """kopf on this (the main) thread, as `kopf-csi run` runs it; the commands on another."""
    settings = Settings(
        csi=CSISettings(address=args.csi_address, timeout=args.csi_timeout),
        kube=KubeSettings(
            kubeconfig=pathlib.Path(args.kubeconfig),
            qps=args.kube_api_qps,
            burst=args.kube_api_burst,
        ),
        workers=WorkerSettings(provisioner=args.workers),
    )
    chosen = os.environ.get(MODULES_ENV, "")  # experiments: which modules cost what
    modules = tuple(m.strip() for m in chosen.split(",") if m.strip()) or DEFAULT_MODULES
    # The same variable as `kopf-csi run`'s `--event-loop` (pairs: `KOPF_CSI_EVENT_LOOP=asyncio`);
    # an older revision's operator (`KOPF_CSI_BENCH_OPERATOR_PATH`) has asyncio's loop only.
    options: dict[str, Any] = {}
    if "event_loop" in inspect.signature(OperatorThread).parameters:
        options["event_loop"] = os.environ.get("KOPF_CSI_EVENT_LOOP", "").lower() or "auto"
    operator = OperatorThread(settings=settings, modules=modules, **options)
    codes: list[int] = []
    control = threading.Thread(
        target=lambda: codes.append(asyncio.run(_commands(operator, args))),
        name="bench-commands", daemon=True,
    )  # fmt: skip
    control.start()
    if hasattr(operator, "run_here"):
        operator.run_here()
    else:  # an older revision's kit: the same, by hand
        operator.load()
        operator._thread = threading.current_thread()
        operator._run()
    control.join(30.0)
    code = codes[0] if codes else 1
    return code if operator.error is None else 1


async def _started(operator: OperatorThread, timeout: float = 60.0) -> None:
    """Wait until the operator on the main thread is ready (an older kit: kopf's flag only)."""
    if hasattr(operator, "wait_started"):
        await operator.wait_started()
        return
    if not await asyncio.to_thread(operator._ready.wait, timeout) or operator.error is not None:
        raise RuntimeError(f"the operator did not start: {operator.error!r}")


async def _commands(operator: OperatorThread, args: argparse.Namespace) -> int:
    """Answer the parent's commands until `stop` or the end of stdin; then stop kopf."""
    try:
        try:
            await _started(operator)
        except (TimeoutError, RuntimeError) as exc:
            _say({"ready": False, "error": repr(exc)})
            return 1
        waits = Waits(operator.memo, trace_limit=args.trace_requests)
        loop = operator._loop  # the operator's own loop, on the main thread
        assert loop is not None
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_on_loop(waits.install), loop))
        growth = Growth(loop, extra=lambda: {"connections": _connections(operator.memo)})
        _say(
            {
                "ready": True, "pid": os.getpid(), "modules": list(operator.modules),
                "event_loop": type(loop).__module__.split(".")[0],  # uvloop, or asyncio's
                "python": platform.python_version(),
            }
        )  # fmt: skip
        while True:
            line = await asyncio.to_thread(sys.stdin.readline)
            command = line.strip()
            if not line or command == "stop":
                return 0
            _say(_answer(command, operator, waits, growth))
    finally:
        operator.request_stop("the benchmark is done")


def _answer(command: str, operator: OperatorThread, waits: Waits, growth: Growth) -> dict[str, Any]:
    if command == "stats":
        return _stats(operator)
    if command == "gc":
        return {"collected": gc.collect(), "objects": len(gc.get_objects())}
    if command == "memory":
        return _memory()
    if command in ("growth", "growth walk"):
        return growth.look(walk=command == "growth walk")
    if command.startswith("waits"):
        since, until = (float(word) for word in command.split()[1:3])
        return {
            **waits.summary(since=since),
            "lag_by_100ms": waits.lag_timeline(since=since, until=until),
            "first_requests": waits.first_requests(since=since),
        }
    return {"error": f"unknown command {command!r}"}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devtools.bench.operator", description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--csi-address", required=True)
    parser.add_argument("--csi-timeout", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=WorkerSettings.provisioner)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--kube-api-qps", type=float, default=KubeSettings.qps)
    parser.add_argument("--kube-api-burst", type=int, default=KubeSettings.burst)
    parser.add_argument("--profile", default=os.environ.get(PROFILE_ENV) or None)
    parser.add_argument(
        "--tracemalloc", type=int, default=0, metavar="FRAMES",
        help="trace allocations, keeping FRAMES frames each (for `memory`)",
    )  # fmt: skip
    parser.add_argument(
        "--trace-requests", type=int, default=TRACE_LIMIT, metavar="N",
        help="keep the steps of the first N requests (`waits`' first requests; 0: none)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.tracemalloc:
        tracemalloc.start(args.tracemalloc)
    logs.configure(level=args.log_level, json=True)  # as `kopf-csi run` off a terminal
    profiler = _Profiler() if args.profile else None
    if profiler is not None:
        profiler.install()
    try:
        code = _serve(args)
    finally:
        if profiler is not None:
            profiler.dump(args.profile)
    sys.exit(code)


if __name__ == "__main__":
    main()
