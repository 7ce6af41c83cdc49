"""The figures: percentiles, request tallies, the targets, and the printed tables.

A report is a plain dict (it is also what `--json` writes); these functions build its parts
and render it. Targets come from the provisioner issue's "Done when"; the Go figures are its
"for scale" numbers, measured against a real API server on a 2-core machine.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from devtools.bench.cluster import READS, WRITES
from devtools.bench.procfs import MiB
from kopf_csi.testing.emulator import TEST_MANAGER
from kopf_csi.testing.kcm import ControllerManager

__all__ = [
    "TARGET_CPU_MS",
    "TARGET_RSS_MIB",
    "TARGET_WRITES",
    "format_attach",
    "format_churn",
    "format_claims",
    "format_scale",
    "latencies",
    "percentile",
    "requests_summary",
    "target",
    "watch_summary",
    "writes_summary",
]

TARGET_WRITES = 4.0  # API writes per provisioned volume (Go: 3, the PV and two events)
TARGET_CPU_MS = 3.0  # operator CPU per provisioned volume (Go: about 3 ms; --latency none --no-tls)
TARGET_RSS_MIB = 150.0  # operator RSS with 10,000 PVs in the cluster (Go: 68 MiB for 200)
GO_REFERENCE = (
    "Go csi-provisioner, 2 cores, real API server, 100 workers, QPS 1000: 200 PVs in about 2 s "
    "(about 100/s), about 3 ms CPU per volume, 68 MiB RSS; at its default 5 QPS: 39 s."
)


# real-apiserver.md, "Watch traffic per volume": every client's writes per volume on a real
# v1.36 server, 200 claims at once, with the four Go sidecars and the same KCM.
GO_WRITES = {
    "provision": "POST pvc 1, POST pv 1, POST events 3, PUT pvc 2, PUT pvc/status 1, "
    "PUT pv/status 1",
    "delete": "DELETE pvc 1, DELETE pv 1.55, PATCH pv 1, PUT pvc 1, PUT pv 1.35, PUT pv/status 1",
}
GO_REAL = (
    "real v1.36 server, 200 claims at once: Go sidecars 6.6 / 7.5 ms CPU per volume (create / "
    "delete), all PVs 1.61 s, first PV 0.05 s, 230 MiB RSS; kopf-csi there 13.2 / 12.9 ms, "
    "2.82 s, 1.14 s, 96 MiB; about 6 watch events per claim and 6 per PV"
)
_HTTP_VERBS = {"create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE"}
_SHORT = {"persistentvolumeclaims": "pvc", "persistentvolumes": "pv"}


def _short(resource: str) -> str:
    plural, _, sub = resource.partition("/")
    return _SHORT.get(plural, plural) + (f"/{sub}" if sub else "")


def _client(manager: str) -> str:
    """Who wrote, from the field manager: the KCM stand-in, the benchmark, else the operator."""
    if manager == ControllerManager.manager:
        return "kcm"
    return "bench" if manager == TEST_MANAGER else "operator"


def writes_summary(writes: Mapping[tuple[str, str, str], int], volumes: int) -> dict[str, Any]:
    """Every client's writes per volume, as "VERB resource" (HTTP verbs), and the operator's."""
    per = max(volumes, 1)
    every: dict[str, int] = {}
    operator: dict[str, int] = {}
    clients: dict[str, int] = {}
    for (manager, verb, resource), n in writes.items():
        if not n:
            continue
        key = f"{_HTTP_VERBS.get(verb, verb)} {_short(resource)}"
        client = _client(manager)
        every[key] = every.get(key, 0) + n
        clients[client] = clients.get(client, 0) + n
        if client == "operator":
            operator[key] = operator.get(key, 0) + n
    return {
        "all_per_volume": round(sum(every.values()) / per, 3),
        "operator_per_volume": round(sum(operator.values()) / per, 3),
        "all": {key: round(n / per, 3) for key, n in sorted(every.items())},
        "operator": {key: round(n / per, 3) for key, n in sorted(operator.items())},
        "by_client": {key: round(n / per, 3) for key, n in sorted(clients.items())},
    }


def watch_summary(
    events: Mapping[tuple[str, str], int], sizes: Mapping[str, int], volumes: int
) -> dict[str, Any]:
    """Watch events the operator received per volume by kind, and their mean size."""
    per = max(volumes, 1)
    by_kind: dict[str, int] = {}
    for (plural, _), n in events.items():
        by_kind[plural] = by_kind.get(plural, 0) + n
    return {
        "per_volume": {_short(k): round(n / per, 2) for k, n in sorted(by_kind.items()) if n},
        "bytes_per_event": {
            _short(k): round(sizes.get(k, 0) / n) for k, n in sorted(by_kind.items()) if n
        },
    }


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sequence."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def latencies(values: Sequence[float]) -> dict[str, float]:
    """p50, p90, p99 and max, in milliseconds."""
    return {
        "count": len(values),
        "p50_ms": round(percentile(values, 50) * 1000, 1),
        "p90_ms": round(percentile(values, 90) * 1000, 1),
        "p99_ms": round(percentile(values, 99) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1) if values else math.nan,
    }


def requests_summary(counts: Mapping[tuple[str, str], int], volumes: int) -> dict[str, Any]:
    """Requests by verb and by verb and resource, totals and per volume."""
    by_verb: dict[str, int] = {}
    for (verb, _), n in counts.items():
        by_verb[verb] = by_verb.get(verb, 0) + n
    reads = sum(n for verb, n in by_verb.items() if verb in READS)
    writes = sum(n for verb, n in by_verb.items() if verb in WRITES)
    per = max(volumes, 1)
    return {
        "reads": reads,
        "writes": writes,
        "reads_per_volume": round(reads / per, 3),
        "writes_per_volume": round(writes / per, 3),
        "by_verb": dict(sorted(by_verb.items())),
        "by_verb_per_volume": {verb: round(n / per, 3) for verb, n in sorted(by_verb.items())},
        "by_resource": {
            f"{verb} {resource}": n for (verb, resource), n in sorted(counts.items()) if n
        },
    }


# Issue 21, 200 claims at once on a real v1.36 server (real-apiserver.md, "Burst latency",
# medians of seven interleaved pairs): the Go sidecars' figures, and the targets against them.
BURST_CLAIMS = 200
GO_BURST_ALL_PVS_S = 1.39  # all 200 PVs exist (goal: half)
BURST_FIRST_PV_S = 0.13  # the first PV, no later than Go's
GO_BURST_CPU_MS = 9.35  # 0.82 x the four Go sidecars' 11.4 ms, create + delete
BURST_RSS_MIB = 92.8  # 0.4 x the four Go sidecars' 232 MiB
GO_BURST_WRITES = 15.9  # every client's writes per volume with Go, create + delete


def burst_targets(
    provision: Mapping[str, Any], delete: Mapping[str, Any], rss_peak: int
) -> list[dict[str, Any]]:
    """Issue 21's targets for the 200-claim burst, from the phases' figures."""
    writes = sum(provision["writes"]["all"].values()) + sum(delete["writes"]["all"].values())
    cpu = provision["cpu_ms_per_volume"] + delete["cpu_ms_per_volume"]
    return [
        target("all PVs of the burst exist", provision["seconds_to_volumes"],
               GO_BURST_ALL_PVS_S, "s"),
        target("first PV after its claim", provision["first_volume_after_its_claim"],
               BURST_FIRST_PV_S, "s"),
        target("CPU per volume, create + delete", cpu, GO_BURST_CPU_MS, "ms/volume"),
        target("peak RSS through the burst", rss_peak / MiB, BURST_RSS_MIB, "MiB"),
        target("every client's writes, create + delete", writes, GO_BURST_WRITES,
               "writes/volume"),
    ]  # fmt: skip


def target(name: str, measured: float, limit: float, unit: str) -> dict[str, Any]:
    """A target as "measured < limit" (`at most` for writes: `<=`)."""
    ok = measured <= limit if unit == "writes/volume" else measured < limit
    return {"name": name, "measured": measured, "limit": limit, "unit": unit, "ok": ok}


def _mib(value: int) -> str:
    return f"{value / MiB:.1f} MiB"


def _table(rows: Iterable[Sequence[str]]) -> str:
    rows = [list(row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        lines.append(
            "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        )
        if index == 0:
            lines.append("  " + "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def _targets(targets: Sequence[Mapping[str, Any]]) -> str:
    rows = [("target", "measured", "limit", "result")]
    for t in targets:
        comparison = "<=" if t["unit"] == "writes/volume" else "<"
        rows.append(
            (
                t["name"],
                f"{t['measured']:.2f} {t['unit']}",
                f"{comparison} {t['limit']:g}",
                "pass" if t["ok"] else "FAIL",
            )
        )
    return _table(rows)


def _per_volume(figures: Mapping[str, float]) -> str:
    return ", ".join(f"{key} {n:g}" for key, n in figures.items()) or "none"


def _first_steps(steps: dict[str, float | None]) -> str:
    names = {
        "annotated": "annotated", "provisioning_event": "Provisioning event",
        "create_volume": "CreateVolume done", "volume": "PV",
    }  # fmt: skip
    return ", ".join(
        f"{label} {steps[key]:.3f} s" for key, label in names.items() if steps.get(key) is not None
    )


def _verbs(summary: Mapping[str, Any]) -> str:
    verbs = summary["by_verb_per_volume"]
    return ", ".join(f"{verb} {n:g}" for verb, n in verbs.items()) or "none"


def format_claims(report: Mapping[str, Any]) -> str:
    config = report["config"]
    provision, delete = report["provision"], report["delete"]
    rows = [
        ("", "provision", "delete"),
        ("claims", str(provision["claims"]), str(delete["claims"])),
        (
            "claims/s",
            f"{provision['claims_per_s']:.1f} (to Bound)",
            f"{delete['claims_per_s']:.1f} (to PV gone)",
        ),
        (
            "wall time",
            f"{provision['seconds_to_bound']:.2f} s (PVs {provision['seconds_to_volumes']:.2f} s)",
            f"{delete['seconds']:.2f} s",
        ),
        (
            "latency p50 / p99",
            "PV {p50_ms:g} / {p99_ms:g} ms".format(**provision["latency_to_volume"])
            + ", Bound {p50_ms:g} / {p99_ms:g} ms".format(**provision["latency_to_bound"]),
            "PV gone {p50_ms:g} / {p99_ms:g} ms".format(**delete["latency_to_volume_gone"]),
        ),
        (
            "operator CPU",
            f"{provision['cpu_ms_per_volume']:.2f} ms/volume ({provision['cpu_seconds']:.2f} s)",
            f"{delete['cpu_ms_per_volume']:.2f} ms/volume ({delete['cpu_seconds']:.2f} s)",
        ),
        (
            "bench process CPU",
            f"{provision['bench_cpu_seconds']:.2f} s",
            f"{delete['bench_cpu_seconds']:.2f} s",
        ),
        (
            "API reads/volume",
            f"{provision['requests']['reads_per_volume']:g}",
            f"{delete['requests']['reads_per_volume']:g}",
        ),
        (
            "API writes/volume",
            f"{provision['requests']['writes_per_volume']:g}",
            f"{delete['requests']['writes_per_volume']:g}",
        ),
        ("  by verb", _verbs(provision["requests"]), _verbs(delete["requests"])),
        (
            "first PV",
            f"{provision['seconds_to_first_volume']:.3f} s after the first claim "
            f"({provision['first_volume_after_its_claim']:.3f} s after its own)",
            "",
        ),
        ("  its steps", _first_steps(provision.get("first_volume_steps") or {}), ""),
        (
            "waiting for a PV",
            f"{provision['mean_wait_for_volume'] * 1000:.0f} ms mean after the annotation "
            f"(KCM resync PATCH events: {provision['kcm_event_patches_expected']:.3f}/volume)",
            "",
        ),
        (
            "peak RSS so far",
            _mib(provision["rss_peak"]),
            _mib(delete["rss_peak"]),
        ),
    ]
    lines = [
        f"kopf-csi benchmark: {config['claims']} claims, class {config['storage_class']}, "
        f"{config['workers']} workers, QPS {config.get('kube_api_qps', 'off')} / burst "
        f"{config.get('kube_api_burst', 'off')}, driver durable={config['driver_durable']}, "
        f"latency model {config.get('latency', 'none')}"
        f"{_server_load(config)}, "
        f"write latency {config.get('write_latency', 0) * 1000:g} ms"
        f"{', TLS' if config.get('tls') else ''}",
        f"  {config['date']}, {config['cpus']} CPUs, Python {config['python']}, "
        f"revision {config['revision']}",
        _operator_line(config),
        "",
        _table(rows),
        "",
        "  requests by resource (operator only):",
    ]
    lines += _phase_details(report, ("provision", "delete"))
    lines += _claim_waits(provision)
    for phase in ("provision", "delete"):
        clients = report[phase].get("kcm_clients")
        if clients is not None:
            lines.append(f"  KCM stand-in's clients, {phase}: " + _kcm_clients(clients))
    lines += _traffic(report)
    lines += [
        f"  events posted by the operator: {report['operator_events'] or 'none'}; "
        f"driver volumes left: {report['driver_volumes_left']}",
        "  bench process: the API emulator, the KCM stand-in and the driver (one core at most)",
        "",
        _targets(report["targets"]),
        "",
        f"  for scale: {GO_REFERENCE}",
        f"  and: {GO_REAL}",
    ]
    return "\n".join(lines)


def _limiter(buckets: dict[str, Any] | None) -> str:
    if not buckets:
        return "off"
    parts = [
        f"{manager} {b['requests']} requests, {b['delayed']} waited "
        f"{b['waited_seconds']:.3f} s (max {b['max_wait_ms']:g} ms)"
        for manager, b in buckets.items()
    ]
    some = next(iter(buckets.values()))
    return f"QPS {some['qps']:g}, burst {some['burst']}: " + "; ".join(parts)


def _kcm_clients(clients: Mapping[str, Any]) -> str:
    """Each controller's client's token bucket in a phase (none: no limit set)."""
    if not clients:
        return "no limit (--kcm-api-qps)"
    some = next(iter(clients.values()))
    parts = [
        f"{name} {c['requests']:g} requests, {c['delayed']:g} waited {c['waited_seconds']:.3f} s"
        for name, c in clients.items()
    ]
    return f"QPS {some['qps']:g}, burst {some['burst']:g}: " + "; ".join(parts)


def _tally(figures: Mapping[str, Any] | None, unit: str = "") -> str:
    if not figures or not figures.get("count"):
        return "none"
    count, seconds, mean = figures["count"], figures["seconds"], figures["mean_ms"]
    text = f"{count}{unit}, {seconds:.3f} s in all, mean {mean:g} ms"
    return text + (f", max {figures['max_ms']:g} ms" if "max_ms" in figures else "")


def _yardstick(report: Mapping[str, Any]) -> str:
    """`; the operator's CPU per volume (ms) per second of it: 0.172`. The benchmark process
    emulates the same API, KCM and driver for the same claims in every run, so its CPU follows
    the machine's speed of the moment; the quotient takes that out of A/B pairs (single runs of
    one revision differed by a third; docs/benchmarks.md, "CPU per volume, fourth session")."""
    bench = report.get("bench_cpu_seconds") or 0.0
    if bench <= 0:
        return ""
    ratio = report["cpu_ms_per_volume"] / bench
    return f"; the operator's CPU per volume (ms) per second of it: {ratio:.3f}"


def _bench_gc(report: Mapping[str, Any]) -> str:
    """`; its full GC passes: 60, max 34.1 ms (heap frozen every 10 s)`: the benchmark process's
    own collections stop the emulated API (`devtools.bench.collector`); older reports: none."""
    collected = report.get("bench_gc")
    if not collected:
        return ""
    full = collected["by_generation"][2]
    every = collected["every_s"]
    frozen = f"heap frozen every {every:g} s" if every else "heap never frozen"
    return f"; its full GC passes: {full['count']}, max {full['max_ms']:g} ms ({frozen})"


def _bench_stalls(stalls: list[list[float]] | None) -> list[str]:
    """`    its loop's stalls over 250 ms (s after the first POST: ms): 12.3: 340, ...`."""
    if not stalls:
        return []
    shown = ", ".join(f"{at:g}: {ms:g}" for at, ms in stalls[:20])
    more = f" and {len(stalls) - 20} more" if len(stalls) > 20 else ""
    return [f"    its loop's stalls over 250 ms (s after the first POST: ms): {shown}{more}"]


def _opened(connections: int | None) -> str:
    """`, 23 API connections opened`: a pool that closes and opens again costs handshakes and
    leaves each connection's buffers to the allocator (an older report has no count)."""
    return "" if connections is None else f", {connections} API connections opened"


def _connections(waits: Mapping[str, Any]) -> str:
    if "new_connections" in waits and waits["new_connections"] is None:
        return "in the waits (untraced: the operator's own timing, as in churn mode)"
    return _tally(waits.get("new_connections"))


def _claim_waits(provision: Mapping[str, Any]) -> list[str]:
    """The timeline of the PVs, each claim's way to its PV, and where the operator waited."""
    if "pvs_per_100ms" not in provision:
        return []
    to_create = provision["latency_arrival_to_create_volume"]
    to_volume = provision["latency_create_volume_to_volume"]
    lines = [
        "  the PVs, per 100 ms from the first claim: "
        + " ".join(str(n) for n in provision["pvs_per_100ms"]),
        "  claims created, per 100 ms: "
        + " ".join(str(n) for n in provision.get("claims_per_100ms", [])),
        "  KCM's requests (annotations), per 100 ms: "
        + " ".join(str(n) for n in provision.get("requests_per_100ms", [])),
        "  each claim, p50 / p99: arrival (annotated) -> CreateVolume done "
        f"{to_create['p50_ms']:g} / {to_create['p99_ms']:g} ms; -> its PV "
        f"{to_volume['p50_ms']:g} / {to_volume['p99_ms']:g} ms",
    ]
    waits = provision.get("operator_waits") or {}
    if not waits:
        return lines
    lag, journal = waits["loop_lag"], waits.get("journal") or {}
    lines += [
        "  where the operator's claims waited (its own measures, start-up to the last PV):",
        f"    event-loop lag: mean {lag.get('mean_ms', 0):g} ms, p99 {lag.get('p99_ms', 0):g} "
        f"ms, max {lag.get('max_ms', 0):g} ms; worst per 100 ms: "
        + " ".join(f"{v:g}" for v in waits.get("lag_by_100ms", [])),
        f"    in-flight journal: {journal.get('records')} records in "
        f"{journal.get('commits')} commits, waited {journal.get('waited_seconds')} s "
        f"in all (mean {journal.get('mean_wait_ms')} ms)",
        f"    claims queue, to a worker: {_tally(waits.get('claims_queue'))}",
        f"    CreateVolume on the driver: {_tally(waits.get('create_volume'), ' calls')}",
        f"    connection pool (limit {waits.get('pool_limit')}): waits "
        f"{_tally(waits.get('pool_wait'))}; new connections (TCP + TLS) "
        f"{_connections(waits)}",
        f"    API requests, start to end: {_tally(waits.get('api_requests'))}",
        "    garbage collector pauses by generation: "
        + "; ".join(f"{g}: {_tally(t)}" for g, t in enumerate(waits.get("gc_pauses") or [])),
        "    QPS limiter (per role): " + _limiter(waits.get("qps_limiter")),
    ]
    if waits.get("first_requests"):
        lines.append("    its first requests (start after the first claim, duration, waits):")
        lines += [f"      {_traced(r)}" for r in waits["first_requests"]]
    bench = provision.get("bench_loop_lag") or {}
    if bench.get("samples"):
        lines.append(
            f"  the benchmark process's loop (the emulated API, KCM, driver): lag mean "
            f"{bench['mean_ms']:g} ms, p99 {bench['p99_ms']:g} ms, max {bench['max_ms']:g} ms; "
            "worst per 100 ms: " + " ".join(f"{v:g}" for v in bench["by_100ms"])
        )
    return lines


def _traced(request: Mapping[str, Any]) -> str:
    """`+12.3 ms  PATCH configmaps  28.1 ms (new connection 9.2 ms)`."""
    waits = [
        f"{label} {request[key]:g} ms"
        for key, label in (
            ("queued_ms", "waited for a connection"),
            ("connect_ms", "new connection"),
        )
        if request.get(key)
    ]
    return f"+{request['at_ms']:g} ms  {request['request']}  {request['ms']:g} ms" + (
        f" ({', '.join(waits)})" if waits else ""
    )


def _traffic(report: Mapping[str, Any]) -> list[str]:
    """Per phase: the watch events the operator got, every client's writes, Go's writes."""
    lines = ["  traffic per volume (every client; the real server's with Go beside it):"]
    for phase in ("provision", "delete"):
        watch, writes = report[phase]["watch_events"], report[phase]["writes"]
        sizes = ", ".join(f"{k} {v} B" for k, v in watch["bytes_per_event"].items())
        lines += [
            f"    {phase}: watch events to the operator: {_per_volume(watch['per_volume'])}"
            f" (mean size {sizes or 'none'})",
            f"      writes, all clients {writes['all_per_volume']:g}: {_per_volume(writes['all'])}",
            f"      writes, the operator {writes['operator_per_volume']:g}: "
            f"{_per_volume(writes['operator'])}",
            f"      writes, real server with Go: {GO_WRITES[phase]}",
        ]
    return lines


def format_attach(report: Mapping[str, Any]) -> str:
    config = report["config"]
    attach, detach = report["attach"], report["detach"]
    rows = [
        ("", "attach", "detach"),
        ("VolumeAttachments", str(attach["attachments"]), str(detach["attachments"])),
        (
            "VAs/s",
            f"{attach['attachments_per_s']:.1f} (to attached)",
            f"{detach['attachments_per_s']:.1f} (to VA gone)",
        ),
        ("wall time", f"{attach['seconds']:.2f} s", f"{detach['seconds']:.2f} s"),
        (
            "latency p50 / p99",
            "attached {p50_ms:g} / {p99_ms:g} ms".format(**attach["latency_to_attached"]),
            "gone {p50_ms:g} / {p99_ms:g} ms".format(**detach["latency_to_gone"]),
        ),
        (
            "operator CPU",
            f"{attach['cpu_ms_per_attachment']:.2f} ms/VA ({attach['cpu_seconds']:.2f} s)",
            f"{detach['cpu_ms_per_attachment']:.2f} ms/VA ({detach['cpu_seconds']:.2f} s)",
        ),
        (
            "bench process CPU",
            f"{attach['bench_cpu_seconds']:.2f} s",
            f"{detach['bench_cpu_seconds']:.2f} s",
        ),
        (
            "API reads/VA",
            f"{attach['requests']['reads_per_volume']:g}",
            f"{detach['requests']['reads_per_volume']:g}",
        ),
        (
            "API writes/VA",
            f"{attach['requests']['writes_per_volume']:g}",
            f"{detach['requests']['writes_per_volume']:g}",
        ),
        ("  by verb", _verbs(attach["requests"]), _verbs(detach["requests"])),
    ]
    lines = [
        f"kopf-csi benchmark: {config['attachments']} VolumeAttachments over {config['nodes']} "
        f"nodes, driver durable={config['driver_durable']}",
        f"  {config['date']}, {config['cpus']} CPUs, Python {config['python']}, "
        f"revision {config['revision']}",
        _operator_line(config),
        f"  population (driver volumes and PVs) created in {report['populate_seconds']:.1f} s",
        "",
        _table(rows),
        "",
        "  requests by resource (operator only):",
    ]
    lines += _phase_details(report, ("attach", "detach"))
    lines += [
        f"  driver: {report['driver_published_after_attach']} volumes published after attach, "
        f"{report['driver_published_left']} after detach",
        "  bench process: the API emulator, the KCM stand-in and the driver (one core at most)",
    ]
    return "\n".join(lines)


def format_scale(report: Mapping[str, Any]) -> str:
    config, operator = report["config"], report["operator"]
    startup = report["startup"]
    lines = [
        f"kopf-csi benchmark: operator memory with {config['pairs']} bound PV/PVC pairs present",
        f"  {config['date']}, {config['cpus']} CPUs, Python {config['python']}, "
        f"revision {config['revision']}",
        _operator_line(config),
        "",
        f"  population created in {report['populate_seconds']:.1f} s (bench, Python-level API); "
        f"KCM stand-in writes afterwards: {report['kcm_writes']}",
        f"  operator start-up to settled: {startup['seconds']:.1f} s, "
        f"{startup['cpu_seconds']:.2f} s CPU; caches: {report['caches']}",
        f"  operator requests during start-up: {startup['requests']['by_resource'] or 'none'}",
        f"  error answers to the operator: {startup['errors'] or 'none'}",
        f"  RSS settled: {_mib(operator['rss_settled'])}; after {report['idle_wait']:g} s idle: "
        f"{_mib(operator['rss_idle'])}; peak (VmHWM): {_mib(operator['rss_peak'])}; "
        f"up to {operator['threads_peak']} threads",
        f"  after a full gc.collect() ({operator['gc']['collected']} freed, "
        f"{operator['gc']['objects']} tracked): RSS {_mib(operator['rss_after_gc'])}",
        f"  other clients' HTTP requests: {report['other_clients'] or 'none'}",
        "",
        _targets(report["targets"]),
        "",
        f"  for scale: {GO_REFERENCE}",
    ]
    memory = report.get("memory")
    if memory:
        lines += [
            "",
            f"  traced live memory {memory.get('traced_kib', 0) / 1024:.1f} MiB (peak "
            f"{memory.get('peak_kib', 0) / 1024:.1f} MiB; tracemalloc's view), top sites:",
        ]
        lines += [
            f"    {site['kib'] / 1024:7.1f} MiB  {site['blocks']:>8} blocks  {site['site']}"
            for site in memory.get("top", [])
        ]
    return "\n".join(lines)


def _phase_details(report: Mapping[str, Any], phases: tuple[str, str]) -> list[str]:
    """Requests by resource and error answers per phase, the operator's memory and start-up."""
    operator, startup = report["operator"], report["startup"]
    lines = []
    for phase in phases:
        detail = ", ".join(f"{k} {v}" for k, v in report[phase]["requests"]["by_resource"].items())
        lines.append(f"    {phase}: {detail or 'none'}")
    for phase in phases:
        errors = ", ".join(f"{k}: {v}" for k, v in report[phase]["errors"].items())
        lines.append(f"  error answers to the operator, {phase}: {errors or 'none'}")
    return [
        *lines,
        f"  operator: RSS {_mib(operator['rss_idle'])} idle after start, peak "
        f"{_mib(operator['rss_peak'])}, {_mib(operator['rss_end'])} at the end; "
        f"up to {operator['threads_peak']} threads; start-up {startup['seconds']:.2f} s, "
        f"{startup['cpu_seconds']:.2f} s CPU",
        f"  other clients' HTTP requests: {report['other_clients'] or 'none'}",
    ]


# Issue 34: the lab's steady churn on a real v1.36.2 control plane (20 claims a second for 90 s,
# each deleted 30 s after its POST, QPS 1000 / 2000, 100 workers), kopf-csi 9dcf7ca beside the
# four Go sidecars; seconds, ms per volume, MiB.
LAB_CHURN: dict[str, dict[str, Any]] = {
    "go": {"to_pv": (2.63, 7.85, 9.90), "to_gone": (4.41, 13.46), "cpu_ms": 15.3,
           "rss": (244, 253)},
    "kopf-csi 9dcf7ca": {"to_pv": (2.69, 10.13, 11.13), "to_gone": (5.51, 14.53),
                         "cpu_ms": 16.8, "rss": (68, 72)},
}  # fmt: skip
CHURN_CPU_RATIO = 0.8  # issue 34: CPU per volume under churn at most 0.8 x Go's


def _percentiles(figures: Mapping[str, Any]) -> str:
    if not figures.get("count"):
        return "none"
    return (
        " / ".join(f"{figures[key] / 1000:.2f}" for key in ("p50_ms", "p90_ms", "p99_ms", "max_ms"))
        + f" s ({figures['count']})"
    )


def _growth(looks: Sequence[Mapping[str, Any]]) -> list[str]:
    """`--memory-every`'s looks: the heap at each, and what grew most from the first to the
    last but one (the last is after the run has settled)."""
    if not looks:
        return []
    lines = ["  the operator's heap, look by look (`--memory-every`):"]
    for look in looks:
        lines.append(
            f"    {look['at']:>6g} s: {look['objects']} objects, {look.get('tasks')} tasks, "
            f"{look['py_blocks']} blocks"
            + (
                f" in {look['py_arenas']} pymalloc arenas ({look['py_block_bytes'] // 1024} KiB"
                f" used, {look.get('py_arenas_freed', 0)} freed so far)"
                if "py_arenas" in look and "py_block_bytes" in look
                else ""
            )
            + f", malloc used {look.get('malloc_used_kib')} / free "
            f"{look.get('malloc_free_kib')} / mapped {look.get('malloc_mmap_kib')} KiB"
            + (
                f", RSS anonymous {look['rss_anon_kib']} / files {look['rss_file_kib']} KiB"
                if "rss_anon_kib" in look and "rss_file_kib" in look
                else ""
            )
            + (f", traced {look['traced_kib']} KiB" if "traced_kib" in look else "")
            + (f" (over 512 B: {look['big_kib']} KiB)" if "big_kib" in look else "")
            + (f", threads {look['threads']}" if "threads" in look else "")
            + (f", API connections {look['connections']}" if "connections" in look else "")
        )
    for look in looks[1:]:
        types = ", ".join(f"{name} +{n}" for name, n in look.get("types", [])[:6])
        lines.append(f"    grown by {look['at']:g} s: {types or 'nothing'}")
        for grown in look.get("grown", [])[:4]:
            lines.append(f"      +{grown['kib']} KiB {grown['blocks']:+d}: {grown['where'][-1]}")
        for grown in look.get("big_grown", [])[:4]:
            lines.append(
                f"      over 512 B: +{grown['kib']} KiB {grown['blocks']:+d}: {grown['where'][-1]}"
            )
        for grown in look.get("containers_grown", [])[:4]:
            lines.append(f"      container +{grown['by']} to {grown['len']}: {grown['what']}")
    return lines


def format_churn(report: Mapping[str, Any]) -> str:
    config, waits = report["config"], report.get("operator_waits") or {}
    go = LAB_CHURN["go"]
    requests, writes = report["requests"], report["writes"]
    thirds = report["rss_thirds_mib"]
    lag, journal = waits.get("loop_lag") or {}, waits.get("journal") or {}
    bench = report["bench_loop_lag"]
    lines = [
        f"kopf-csi benchmark: churn, {config['churn']:g} claims/s for {config['duration']:g} s, "
        f"each deleted {config['lifetime']:g} s after its POST ({report['claims']} claims, "
        f"{report['attached']} with a pod), {config['workers']} workers, QPS "
        f"{config['kube_api_qps']:g} / burst {config['kube_api_burst']}, latency model "
        f"{config['latency']}{_server_load(config)}{', TLS' if config.get('tls') else ''}, "
        f"KCM resync {config.get('kcm_resync_seconds') or 'off'}",
        f"  {config['date']}, {config['cpus']} CPUs, Python {config['python']}, "
        f"revision {config['revision']}",
        _operator_line(config),
        "",
        _table(
            [
                ("", "here", "lab: Go sidecars", "lab: kopf-csi 9dcf7ca"),
                (
                    "claim -> PV, p50 / p90 / p99 / max",
                    _percentiles(report["latency_to_volume"]),
                    "2.63 / 7.85 / 9.90 s",
                    "2.69 / 10.13 / 11.13 s",
                ),
                (
                    "delete -> PV gone, same",
                    _percentiles(report["latency_to_volume_gone"]),
                    "4.41 / - / 13.46 s",
                    "5.51 / - / 14.53 s",
                ),
                ("claim -> Bound, same", _percentiles(report["latency_to_bound"]), "", ""),
                (
                    "VA created -> attached, same",
                    _percentiles(report["latency_to_attached"]),
                    "",
                    "",
                ),
                (
                    "CPU per volume (create + delete)",
                    f"{report['cpu_ms_per_volume']:.2f} ms ({report['cpu_seconds']:.1f} s)",
                    f"{go['cpu_ms']} ms",
                    "16.8 ms (1.10x)",
                ),
                (
                    "RSS, thirds of the steady window",
                    " -> ".join(f"{v:g}" for v in thirds) + " MiB",
                    "244 -> 253 MiB",
                    "68 -> 72 MiB",
                ),
                (
                    "left behind (PVs, driver volumes)",
                    f"{report['pvs_left']}, {report['driver_volumes_left']}",
                    "0",
                    "0",
                ),
            ]
        ),
        "",
        f"  run: {report['seconds']:.1f} s from the first POST to the last PV gone; operator "
        f"CPU per second (ms): " + " ".join(f"{v:g}" for v in report["cpu_ms_per_second"]),
        f"  API requests per volume (operator): reads {requests['reads_per_volume']:g}, writes "
        f"{requests['writes_per_volume']:g}; by verb: {_verbs(requests)}",
        "    by resource: "
        + ", ".join(
            f"{key} {n / max(report['claims'], 1):.3g}"
            for key, n in requests["by_resource"].items()
        ),
        f"  writes per volume, all clients {writes['all_per_volume']:g}: "
        f"{_per_volume(writes['all'])}",
        f"  writes per volume, the operator {writes['operator_per_volume']:g}: "
        f"{_per_volume(writes['operator'])}",
        f"  watch events to the operator per volume: "
        f"{_per_volume(report['watch_events']['per_volume'])}",
        f"  error answers to the operator: "
        f"{', '.join(f'{k}: {v}' for k, v in report['errors'].items()) or 'none'}",
        "  where the operator's time went (its own measures, the whole run):",
        f"    event-loop lag: mean {lag.get('mean_ms', 0):g} ms, p99 {lag.get('p99_ms', 0):g} "
        f"ms, max {lag.get('max_ms', 0):g} ms",
        f"    in-flight journal: {journal.get('records')} records in "
        f"{journal.get('commits')} commits, waited {journal.get('waited_seconds')} s "
        f"in all (mean {journal.get('mean_wait_ms')} ms)",
        f"    claims queue, to a worker: {_tally(waits.get('claims_queue'))}",
        f"    CreateVolume on the driver: {_tally(waits.get('create_volume'), ' calls')}",
        f"    connection pool (limit {waits.get('pool_limit')}): waits "
        f"{_tally(waits.get('pool_wait'))}; new connections (TCP + TLS) "
        f"{_connections(waits)}",
        f"    API requests, start to end: {_tally(waits.get('api_requests'))}",
        "    garbage collector pauses by generation: "
        + "; ".join(f"{g}: {_tally(t)}" for g, t in enumerate(waits.get("gc_pauses") or [])),
        "    QPS limiter (per role): " + _limiter(waits.get("qps_limiter")),
        f"  the benchmark process's loop: lag mean {bench.get('mean_ms', 0):g} ms, p99 "
        f"{bench.get('p99_ms', 0):g} ms, max {bench.get('max_ms', 0):g} ms; its CPU "
        f"{report['bench_cpu_seconds']:.1f} s" + _yardstick(report) + _bench_gc(report),
        *_bench_stalls(report.get("bench_stalls")),
        f"  operator: RSS {_mib(report['operator']['rss_idle'])} idle after start, peak "
        f"{_mib(report['operator']['rss_peak'])}, {_mib(report['operator']['rss_end'])} at the "
        f"end; up to {report['operator']['threads_peak']} threads"
        + _opened(report["operator"].get("connections_opened")),
        "  RSS every 10 s (MiB): " + " ".join(f"{v:g}" for v in report.get("rss_mib_by_10s", [])),
        *_growth(report.get("growth") or []),
        *(
            [f"  STUCK, their PV never went: {', '.join(report['stuck_claims'])}"]
            if report.get("stuck_claims")
            else []
        ),
        f"  events posted by the operator: {report['operator_events'] or 'none'}",
        f"  KCM stand-in's clients: {_kcm_clients(report.get('kcm_clients') or {})}",
        f"  KCM stand-in's workers ({report.get('kcm_resyncs', 0)} resyncs): "
        + _kcm_workers(report.get("kcm_workers") or {}, report["seconds"]),
        f"  other clients' HTTP requests: {report['other_clients'] or 'none'}",
        "",
        _targets(report.get("targets") or []),
    ]
    return "\n".join(lines)


def _operator_line(config: Mapping[str, Any]) -> str:
    """The operator's modules, event loop and interpreter (older reports: the bench's)."""
    return (
        f"  operator modules: {', '.join(config['operator_modules'])}; event loop "
        f"{config.get('operator_event_loop', 'asyncio')}, Python "
        f"{config.get('operator_python') or config['python']}"
    )


def _server_load(config: Mapping[str, Any]) -> str:
    """The latency model's factor (`--server-load`), where it is not 1."""
    factor = config.get("server_load", 1.0)
    return "" if factor == 1.0 else f" x {factor:g} (--server-load)"


def _kcm_workers(workers: Mapping[str, Mapping[str, float]], seconds: float) -> str:
    """Each worker's busy share of the run, keys synced, their mean and longest queue wait."""
    parts = []
    for name, stats in workers.items():
        synced = stats.get("synced", 0) or 1
        busy = stats.get("busy_seconds", 0) / seconds if seconds else 0.0
        parts.append(
            f"{name} busy {busy:.0%} ({stats.get('synced', 0):g} synced; "
            f"{stats.get('requests', 0):g} requests, drawn {stats.get('model_seconds', 0):.1f} s, "
            f"taken {stats.get('request_seconds', 0):.1f} s, lag given back "
            f"{stats.get('credited_seconds', 0):.1f} s; queued mean "
            f"{stats.get('waited_seconds', 0) / synced * 1000:.0f} ms, max "
            f"{stats.get('max_wait_seconds', 0):.2f} s, depth max {stats.get('max_depth', 0):g})"
        )
    return "; ".join(parts) or "none (no latency model)"
