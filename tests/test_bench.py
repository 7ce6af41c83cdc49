"""The benchmark harness (`nox -s bench`), small: it runs, and its report is complete and sane.

We test these aspects:
- a claims run (20 claims) provisions and deletes every claim through the operator process,
  and reports every figure: claims/s, p50/p99 latencies, operator CPU per volume, API reads
  and writes per volume by verb, RSS, and the targets with a pass/fail each;
- every HTTP request the emulated API served came from the operator process;
- the traffic per volume is the real server's (real-apiserver.md): about 6 watch events for the
  claim and 6 for its PV, and every client's writes by verb, the KCM stand-in's included;
- the progress display writes lines while it runs (not on a terminal here);
- a scale run (30 pairs) has the operator list every pair, write nothing, and report its memory;
- an attach run (20 VolumeAttachments over 10 nodes) attaches every one through the driver,
  detaches every one, and reports the same figures as a claims run;
- a churn run (claims at a steady rate, each deleted after a lifetime, some with a pod) posts,
  provisions, attaches, detaches and deletes every claim, and reports each figure: claim -> PV
  and delete -> PV gone at p50/p90/p99/max, CPU per volume, RSS per third, writes per volume
  by verb and resource, the operator's waits, the KCM stand-in's workers, the targets; it runs
  with KCM's 15 s resync, which no other mode has;
- `--server-load` scales every duration of the latency model (1 by default, every mode);
- issue 13's burst targets are computed from the phases' figures (every client's writes of
  both phases, CPU of both, the first PV after its own claim) against the Go sidecars'.
- the operator's process starts from any working directory: `devtools` is not installed, and
  the child is given the checkout on its PYTHONPATH.

No figure is compared with a target here: a loaded CI machine would make that flaky.
"""

from __future__ import annotations

import io
import math
import pathlib

from devtools.bench import Options, run_attach, run_churn, run_claims, run_scale
from devtools.bench import report as report_module
from devtools.bench.growth import Growth
from devtools.bench.looplag import LagProbe
from devtools.bench.procfs import MiB
from devtools.bench.progress import Progress
from devtools.bench.report import (
    burst_targets,
    format_attach,
    format_churn,
    format_claims,
    format_scale,
    percentile,
)
from kopf_csi.testing.latency import REAL_SERVER


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert [percentile(values, p) for p in (50, 99, 100)] == [50, 99, 100]
    assert percentile([3.0], 99) == 3.0
    assert math.isnan(percentile([], 50))


async def test_claims_run_reports_every_figure(tmp_path: pathlib.Path) -> None:
    stream = io.StringIO()
    progress = Progress(stream, tty=False, interval=0.05)
    report = await run_claims(Options(claims=20, workdir=tmp_path / "bench"), progress)

    provision, delete = report["provision"], report["delete"]
    assert provision["claims"] == delete["claims"] == 20
    for phase, latencies in ((provision, ("latency_to_volume", "latency_to_bound")),
                             (delete, ("latency_to_volume_gone",))):  # fmt: skip
        assert phase["claims_per_s"] > 0
        assert phase["cpu_seconds"] >= 0
        for name in latencies:
            figures = phase[name]
            assert figures["count"] == 20
            assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"] < 60_000
        requests = phase["requests"]
        assert requests["writes"] > 0
        assert requests["writes_per_volume"] == round(requests["writes"] / 20, 3)
        assert set(requests["by_verb"]) <= {"get", "list", "watch", "create", "patch", "delete",
                                            "update", "discovery"}  # fmt: skip
    assert provision["latency_to_volume"]["p50_ms"] <= provision["latency_to_bound"]["p50_ms"]
    assert 0 < provision["first_volume_after_its_claim"] <= provision["seconds_to_first_volume"]
    assert provision["seconds_to_first_volume"] <= provision["seconds_to_volumes"]
    steps = provision["first_volume_steps"]  # where the first PV's wait went, in order
    assert 0 < steps["annotated"] <= steps["volume"] == provision["first_volume_after_its_claim"]
    assert steps["provisioning_event"] is not None
    assert 0 < provision["mean_wait_for_volume"] < provision["seconds_to_volumes"]
    assert provision["kcm_event_patches_expected"] == round(
        provision["mean_wait_for_volume"] / 15, 4
    )
    assert 0 < provision["rss_peak"] <= delete["rss_peak"]
    # The timeline and each claim's way: arrival -> CreateVolume -> its PV, for every claim.
    assert sum(provision["pvs_per_100ms"]) == 20
    assert sum(provision["requests_per_100ms"]) == 20  # KCM asked for every one
    assert sum(provision["claims_per_100ms"]) == 20
    for name in ("latency_arrival_to_create_volume", "latency_create_volume_to_volume"):
        assert provision[name]["count"] == 20
        assert 0 < provision[name]["p50_ms"] <= provision[name]["p99_ms"]
    assert steps["annotated"] <= steps["create_volume"] <= steps["volume"]
    waits = provision["operator_waits"]  # measured inside the operator
    assert waits["loop_lag"]["samples"] > 0
    assert waits["journal"]["records"] >= 20
    assert waits["journal"]["commits"] >= 1
    assert waits["create_volume"]["count"] >= 20
    assert waits["api_requests"]["count"] >= 60  # 20 PVs, 40 events at least
    limiter = waits["qps_limiter"]  # one bucket per role, at the real comparison's 1000/2000
    assert limiter["csi-provisioner"]["requests"] >= 60
    assert {bucket["qps"] for bucket in limiter.values()} == {1000.0}
    assert report["config"]["kube_api_qps"] == 1000.0
    assert len(waits["gc_pauses"]) == 3
    first = waits["first_requests"]  # the operator's own requests after the first claim, in order
    assert len(first) == 40
    assert [r["at_ms"] for r in first] == sorted(r["at_ms"] for r in first)
    assert first[0]["at_ms"] >= 0
    assert all(r["ms"] > 0 and r["ms"] >= r["queued_ms"] + r["connect_ms"] for r in first)
    made = {r["request"] for r in first}  # the journal's record, the events, the PVs
    assert {"POST events", "POST persistentvolumes"} <= made
    assert made & {"POST configmaps", "PATCH configmaps"}
    assert provision["bench_loop_lag"]["samples"] > 0
    assert report["config"]["tls"]
    assert report["config"]["latency"] == "real"
    watched = [phase["watch_events"]["per_volume"] for phase in (provision, delete)]
    assert sum(w.get("pvc", 0) for w in watched) == 6  # ADDED, 3 KCM updates, delete, gone
    assert sum(w.get("pv", 0) for w in watched) == 6  # + Bound, Released, 2 finalizers off
    assert provision["watch_events"]["bytes_per_event"]["pv"] > 1000  # managedFields and all
    every = provision["writes"]["all"]
    for write, n in {"POST pvc": 1, "POST pv": 1, "POST events": 3, "PUT pvc": 2,
                     "PUT pvc/status": 1, "PUT pv/status": 1}.items():  # fmt: skip
        assert every[write] == n, write
    every = delete["writes"]["all"]
    for write, n in {"DELETE pvc": 1, "PUT pvc": 1, "PUT pv/status": 1, "DELETE pv": 1}.items():
        assert every[write] == n, write
    assert provision["writes"]["by_client"]["kcm"] == 5  # 2 claim, 2 status, 1 event
    assert delete["writes"]["operator"]["DELETE pv"] == 1
    assert "PATCH events" not in provision["writes"]["operator"]  # no event posted twice
    assert provision["cpu_seconds"] + delete["cpu_seconds"] > 0
    # Every volume needs its PV created; the Go sidecar's 3 writes are the floor to beat.
    assert 1 <= provision["requests"]["by_verb"]["create"] / 20 <= 10
    assert 1 <= delete["requests"]["writes_per_volume"] <= 10

    operator = report["operator"]
    assert 20 * MiB < operator["rss_idle"] <= operator["rss_peak"] < 2048 * MiB
    assert report["other_clients"] == {}  # the bench and the KCM stand-in use no HTTP
    assert report["driver_volumes_left"] == 0
    assert report["operator_events"].get("ProvisioningSucceeded") == 20
    # The old "< 3 ms per volume" is judged on the old clock only (`--latency none --no-tls`).
    assert [t["name"] for t in report["targets"]] == ["API writes per provisioned volume"]
    assert all(isinstance(t["ok"], bool) for t in report["targets"])

    text = format_claims(report)
    for label in ("claims/s", "latency p50 / p99", "operator CPU", "API writes/volume", "RSS",
                  "first PV", "watch events to the operator", "writes, all clients",
                  "per 100 ms", "event-loop lag", "in-flight journal", "connection pool",
                  "QPS limiter", "its first requests", "ms  POST persistentvolumes  "):  # fmt: skip
        assert label in text
    lines = stream.getvalue().splitlines()
    assert any(line.startswith("provision") for line in lines)
    assert any(line.startswith("delete") for line in lines)
    assert (tmp_path / "bench" / "operator.log").exists()


async def test_scale_run_lists_every_pair(tmp_path: pathlib.Path) -> None:
    options = Options(scale=30, idle_wait=0.0, workdir=tmp_path / "bench")
    report = await run_scale(options, Progress(enabled=False))
    assert report["kcm_writes"] == 0  # the pairs are exactly what the KCM stand-in expects
    requests = report["startup"]["requests"]
    assert requests["by_resource"]["list persistentvolumes"] >= 1
    assert requests["by_resource"]["list persistentvolumeclaims"] >= 1
    assert requests["writes"] == 0  # nothing to do for bound volumes
    assert isinstance(report["caches"], dict)  # what the operator chose to keep: reported
    assert report["other_clients"] == {}
    operator = report["operator"]
    assert 20 * MiB < operator["rss_settled"] <= operator["rss_peak"] < 2048 * MiB
    assert "RSS settled" in format_scale(report)


async def test_attach_run_attaches_and_detaches_every_attachment(tmp_path: pathlib.Path) -> None:
    stream = io.StringIO()
    progress = Progress(stream, tty=False, interval=0.05)
    report = await run_attach(Options(attach=20, workdir=tmp_path / "bench"), progress)

    attach, detach = report["attach"], report["detach"]
    assert attach["attachments"] == detach["attachments"] == 20
    for phase, name in ((attach, "latency_to_attached"), (detach, "latency_to_gone")):
        assert phase["attachments_per_s"] > 0
        assert phase["cpu_seconds"] >= 0
        figures = phase[name]
        assert figures["count"] == 20
        assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"] < 60_000
        requests = phase["requests"]
        assert requests["writes_per_volume"] == round(requests["writes"] / 20, 3)
        assert phase["errors"] == {}
    # At least the finalizer and status.attached; the finalizer's removal on detach.
    assert 2 <= attach["requests"]["writes_per_volume"] <= 10
    assert 1 <= detach["requests"]["writes_per_volume"] <= 10
    assert report["driver_published_after_attach"] == 20
    assert report["driver_published_left"] == 0
    assert report["other_clients"] == {}
    operator = report["operator"]
    assert 20 * MiB < operator["rss_idle"] <= operator["rss_peak"] < 2048 * MiB

    text = format_attach(report)
    for label in ("VAs/s", "latency p50 / p99", "operator CPU", "API writes/VA", "RSS"):
        assert label in text
    lines = stream.getvalue().splitlines()
    assert any(line.startswith("attach") for line in lines)
    assert any(line.startswith("detach") for line in lines)


async def test_churn_run_posts_and_deletes_every_claim(tmp_path: pathlib.Path) -> None:
    options = Options(
        churn=8, lifetime=1.5, duration=2, attached=0.5, memory_every=1.0,
        bench_freeze_every=0.5, workdir=tmp_path / "bench",
    )  # fmt: skip
    report = await run_churn(options, Progress(enabled=False))

    assert report["claims"] == 16
    assert report["attached"] == 8  # every other claim had a pod
    for name in ("latency_to_volume", "latency_to_volume_gone", "latency_to_bound"):
        figures = report[name]
        assert figures["count"] == 16, name
        assert 0 < figures["p50_ms"] <= figures["p90_ms"] <= figures["p99_ms"] <= figures["max_ms"]
    assert report["latency_to_attached"]["count"] == 8  # made by the KCM stand-in, attached
    assert report["pvs_left"] == report["driver_volumes_left"] == 0
    # Both are rounded from the same CPU time: cpu_seconds to 10 ms, so 0.005 s / 16 apart at most
    per_volume = report["cpu_seconds"] * 1000 / 16
    assert abs(report["cpu_ms_per_volume"] - per_volume) <= 5 / 16 + 0.005
    assert len(report["rss_thirds_mib"]) == 3
    assert report["rss_samples"] >= 3
    assert report["cpu_ms_per_second"]
    requests = report["requests"]
    assert requests["by_resource"]["create persistentvolumes"] == 16
    assert requests["by_resource"]["delete persistentvolumes"] == 16
    every = report["writes"]["all"]
    for write, n in {"POST pvc": 1, "DELETE pvc": 1, "POST pv": 1, "POST pods": 0.5,
                     "DELETE pods": 0.5, "POST volumeattachments": 0.5}.items():  # fmt: skip
        assert every[write] == n, write
    waits = report["operator_waits"]
    assert waits["journal"]["records"] >= 16
    assert waits["claims_queue"]["count"] >= 16
    assert waits["loop_lag"]["samples"] > 0
    assert "first_requests" not in waits  # a long run: summaries only
    assert report["other_clients"] == {}
    # the operator's own connections (warmed at its start, and any opened for more at once)
    assert report["operator"]["connections_opened"] >= 1
    assert "API connections opened" in format_churn(report)
    assert "per second of it" in format_churn(report)  # the machine-speed yardstick for pairs
    # the benchmark's own heap, frozen every 0.5 s: a full collection before each freeze
    assert report["bench_gc"]["every_s"] == 0.5
    assert report["bench_gc"]["by_generation"][2]["count"] >= 2
    assert "its full GC passes: " in format_churn(report)
    assert "(heap frozen every 0.5 s)" in format_churn(report)
    assert report["operator_events"].get("ProvisioningSucceeded") == 16
    config = report["config"]  # the churn's defaults: the model as measured, KCM's resync
    assert (config["server_load"], config["kcm_resync_seconds"]) == (1.0, 15.0)
    workers = report["kcm_workers"]
    assert set(workers) == {"claims", "volumes", "claim-protection", "volume-protection", "pods"}
    assert workers["claims"]["synced"] >= 16  # each claim at least once
    assert 0 < workers["claims"]["busy_seconds"] < report["seconds"]
    assert [t["name"] for t in report["targets"]] == [
        "CPU per volume, create + delete", "RSS, last third minus first",
    ]  # fmt: skip
    looks = report["growth"]  # `--memory-every`: the first look, one a second, the settled one
    assert len(looks) >= 3
    for look in looks:
        assert look["objects"] > 0
        assert 0 < look["rss_file_kib"] < look["rss_anon_kib"]  # the RSS's parts, on Linux
        # kopf on the main thread, as `kopf-csi run` runs it; the parent's commands beside it
        assert look["threads"]["python"].get("MainThread") == 1
        assert look["threads"]["python"].get("bench-commands") == 1
        assert "kopf-operator" not in look["threads"]["python"]
        assert look["connections"]["acquired"] + look["connections"]["idle"] >= 1
        assert "containers" not in look  # no walk unless asked: it takes MiBs for a moment
    text = format_churn(report)
    for label in ("claim -> PV, p50 / p90 / p99 / max", "delete -> PV gone", "CPU per volume",
                  "RSS, thirds", "by resource", "writes per volume, all clients",
                  "event-loop lag", "in-flight journal", "claims queue", "connection pool",
                  "lab: Go sidecars", "KCM stand-in's workers", "claims busy",
                  "look by look"):  # fmt: skip
        assert label in text, label


def test_the_server_load_factor_scales_the_latency_model() -> None:
    """`--server-load`: every duration of the latency model times the factor; 1 by default
    in every mode (the burst's measured means: no fitted factor is the default)."""
    assert Options(claims=200).server_load == Options(churn=20).server_load == 1.0
    assert Options(churn=20).latency_model == REAL_SERVER
    doubled = Options(claims=200, server_load=2.0).latency_model
    assert doubled is not None
    assert doubled.mean("POST", "persistentvolumes") == 2 * REAL_SERVER.mean(
        "POST", "persistentvolumes"
    )
    assert Options(churn=20, latency="none").latency_model is None


_GROWING: dict[str, str] = {}


def test_a_walk_finds_the_containers_that_grew() -> None:
    growth = Growth(None)
    first = growth.look()
    assert "containers" not in first
    # pymalloc's arenas (read from its C-level stats): what Python's small objects hold
    assert first["py_arenas"] >= 1
    assert 0 < first["py_block_bytes"] <= first["py_arenas"] * 1024 * 1024
    growth.look(walk=True)
    _GROWING.update((f"uid-{i}", f"name-{i}") for i in range(1000))  # atoms: gc does not track
    look = growth.look(walk=True)
    grown = [c for c in look["containers_grown"] if c["what"].endswith("['_GROWING']")]
    assert [(c["by"], c["len"]) for c in grown] == [(1000, 1000)]
    assert id(growth._types) not in growth._containers  # not its own state (a Counter of types)
    assert all(c["len"] >= 256 for c in look["containers"])
    _GROWING.clear()


def test_the_lag_probe_holds_its_memory_from_the_start() -> None:
    """It runs in the operator's process, whose RSS churn mode watches for growth."""
    probe = LagProbe(interval=0.01, keep=1000)
    held = probe._dues.buffer_info(), probe._lags.buffer_info()
    assert held[0][1] == held[1][1] == 1000
    for _ in range(1500):  # more samples than it keeps
        probe._tick(_NoLoop())
    assert (probe._dues.buffer_info(), probe._lags.buffer_info()) == held  # nothing grew
    assert len(probe.samples) == 1000
    assert probe.summary()["samples"] == 1000


def test_the_lag_probe_tells_when_the_loop_stalled() -> None:
    probe = LagProbe(interval=0.01, keep=100)
    for due, lag in ((10.0, 0.001), (10.5, 0.3), (11.0, 0.2), (12.3, 1.85)):
        probe._dues[probe._count], probe._lags[probe._count] = due, lag
        probe._count += 1
    assert probe.stalls(since=10.0) == [(0.5, 300.0), (2.3, 1850.0)]
    assert probe.stalls(since=11.0, over=0.1) == [(0.0, 200.0), (1.3, 1850.0)]
    report = {"bench_stalls": probe.stalls(since=10.0)}
    assert report_module._bench_stalls(report["bench_stalls"]) == [
        "    its loop's stalls over 250 ms (s after the first POST: ms): 0.5: 300, 2.3: 1850"
    ]
    assert report_module._bench_stalls([]) == []


class _NoLoop:
    def call_later(self, *_: object) -> None:
        return None


def test_burst_targets_are_judged_against_the_go_sidecars() -> None:
    provision = {
        "seconds_to_volumes": 0.6, "first_volume_after_its_claim": 0.12,
        "cpu_ms_per_volume": 3.0, "writes": {"all": {"POST pv": 1.0, "PUT pvc": 8.2}},
    }  # fmt: skip
    delete = {"cpu_ms_per_volume": 2.5, "writes": {"all": {"DELETE pv": 1.0, "PUT pv": 5.0}}}
    judged = {t["name"]: t for t in burst_targets(provision, delete, rss_peak=70 * MiB)}
    assert {name: (t["measured"], t["limit"], t["ok"]) for name, t in judged.items()} == {
        "all PVs of the burst exist": (0.6, 1.39, True),
        "first PV after its claim": (0.12, 0.13, True),
        "CPU per volume, create + delete": (5.5, 9.35, True),
        "peak RSS through the burst": (70.0, 92.8, True),
        "every client's writes, create + delete": (15.2, 15.9, True),
    }


def test_a_socket_that_is_gone_belongs_to_nobody() -> None:
    import os
    import socket

    from devtools.bench.procfs import socket_owners

    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        local = client.getsockname()[1]
        pids = {"me": os.getpid()}
        assert socket_owners([(local, port)], pids) == {(local, port): "me"}
        client.close()
        accepted.close()
    assert socket_owners([(local, port)], pids) == {(local, port): "unknown"}


def test_the_operator_process_starts_outside_the_checkout(tmp_path: pathlib.Path) -> None:
    """`devtools` is not installed: the child finds it from any working directory nox uses."""
    import os
    import subprocess

    from devtools.bench.process import CHECKOUT, OperatorProcess, child_environment

    assert (CHECKOUT / "devtools" / "bench" / "operator.py").is_file()
    process = OperatorProcess(
        kubeconfig=tmp_path / "kubeconfig", csi_address="unix:///nowhere.sock", workers=1,
        log_path=tmp_path / "operator.log",
    )  # fmt: skip
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [*process.argv[:3], "--help"], cwd=tmp_path, env=child_environment(environ),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "python -m devtools.bench.operator" in done.stdout
    bare = subprocess.run(
        [*process.argv[:3], "--help"], cwd=tmp_path, env=environ,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "No module named 'devtools'" in bare.stderr  # what the environment is there for


def test_another_revisions_operator_comes_first_on_the_operators_path_only() -> None:
    """`KOPF_CSI_BENCH_OPERATOR_PATH`: an older revision's `src` and root before the checkout
    (how f871e19 was measured under this benchmark), for the operator's process alone."""
    from devtools.bench.process import CHECKOUT, OPERATOR_PATH_ENV, child_environment

    environ = {OPERATOR_PATH_ENV: "/old/src:/old", "PYTHONPATH": "/extra"}
    assert child_environment(environ)["PYTHONPATH"] == f"/old/src:/old:{CHECKOUT}:/extra"
    assert child_environment({})["PYTHONPATH"] == str(CHECKOUT)
