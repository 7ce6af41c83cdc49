"""The chaos and soak suites (`nox -s chaos`, `nox -s soak`), short: they run, and count right.

We test these aspects:
- a short chaos run (40 claims, all attached): the operator SIGKILLed and restarted at least
  once per phase, the driver restarted once per phase, the API server restarted (drained,
  gone, back) and etcd stopped once per phase, driver errors and latency, API errors and lost
  responses; then everything deleted. No operator lost a task's exception, and each outage
  was told once when it began and once when it ended. Every count is 0 at every checkpoint, no
  secret value is in any operator log, object or event, and no operator exited by itself;
- a short soak run (3 waves of 20 claims) reports one point per wave and ends with nothing left;
- the counts themselves, on hand-made snapshots: each one sees what it is meant to see;
- the soak plot is well-formed SVG with one point per wave.

Assertions are counts and structure only, never timings: the machine may be loaded.
"""

from __future__ import annotations

import pathlib
import xml.etree.ElementTree as ET
from typing import Any

from devtools.bench.progress import Progress
from devtools.chaos import ChaosOptions, SoakOptions, run_chaos, run_soak
from devtools.chaos.checks import COUNTS, World, count
from devtools.chaos.plot import soak_svg
from devtools.chaos.report import format_chaos, format_soak

DRIVER = "hostpath.csi.kopf.dev"


async def test_a_short_chaos_run_leaves_every_count_at_zero(tmp_path: pathlib.Path) -> None:
    options = ChaosOptions(
        claims=40, attach=40, seed=7, kills=1, driver_restarts=1, workdir=tmp_path / "chaos",
        outage=(0.5, 0.3),  # short, as the run is: the restarts' shape is what counts here
    )  # fmt: skip
    result = await run_chaos(options, Progress(enabled=False))
    text = format_chaos(result)

    assert [c["label"] for c in result["checkpoints"]] == ["provision", "attach", "delete"], text
    for checkpoint in result["checkpoints"]:
        assert checkpoint["goal"], text
        assert checkpoint["counts"] == dict.fromkeys(COUNTS, 0), text
    assert result["duplicates"] == [], text
    assert result["secret_exposures"] == [], text
    assert result["operator_crashes"] == [], text
    tally = result["chaos"]
    assert tally["operator_kills"] >= 3, text
    assert tally["driver_restarts"] == 3, text
    assert tally["phases_timed_out"] == 0, text
    assert tally["api_errors"] + tally["lost_responses"] > 0, text
    assert tally["apiserver_restarts"] == 3, text
    assert tally["etcd_stops"] == 3, text
    assert tally["requests_refused_503"] + tally["requests_reset"] > 0, text
    assert result["lost_task_exceptions"] == 0, text
    # Told, at least once each way: an outage within a minute of the last one is counted but
    # not told again (`reachability.QUIET_AGAIN`), and a killed operator may miss a return.
    warned = result["outage_warnings"]
    assert warned["api_unreachable"] >= 1, text
    assert warned["api_reachable"] >= 1, text
    assert result["operator_incarnations"] >= 4, text
    calls = result["driver_calls"]
    assert calls["CreateVolume created"] == 40, text
    assert calls["DeleteVolume deleted"] == 40, text
    assert calls["ControllerPublishVolume published"] == 40, text
    assert calls["ControllerUnpublishVolume unpublished"] == 40, text
    assert result["secrets_searched"]["bytes"] > 0
    assert result["ok"] is True
    assert "PASS" in text


async def test_a_short_soak_run_reports_each_wave(tmp_path: pathlib.Path) -> None:
    options = SoakOptions(total=60, wave=20, workdir=tmp_path / "soak")
    result = await run_soak(options, Progress(enabled=False))
    assert [p["claims"] for p in result["points"]] == [0, 20, 40, 60]
    assert all(p["rss_mib"] > 0 for p in result["points"])
    assert result["counts"] == dict.fromkeys(COUNTS, 0)
    assert result["duplicates"] == []
    assert "flatness" in result
    assert "CPU ms/claim" in format_soak(result)


def _pv(name: str, handle: str, claim_uid: str | None = None, **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"csi": {"driver": DRIVER, "volumeHandle": handle}}
    if claim_uid:
        spec["claimRef"] = {"namespace": "ns", "name": f"c-{claim_uid}", "uid": claim_uid}
    return {"kind": "PersistentVolume", "metadata": {"name": name, **meta}, "spec": spec}


def _claim(uid: str, phase: str = "Bound") -> dict[str, Any]:
    return {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"c-{uid}", "namespace": "ns", "uid": uid},
        "spec": {"storageClassName": "sc"},
        "status": {"phase": phase},
    }


def _va(name: str, pv: str, node: str, *, attached: bool, **meta: Any) -> dict[str, Any]:
    return {
        "kind": "VolumeAttachment",
        "metadata": {"name": name, **meta},
        "spec": {"attacher": DRIVER, "nodeName": node, "source": {"persistentVolumeName": pv}},
        "status": {"attached": attached},
    }


def _world(**fields: Any) -> World:
    base: dict[str, Any] = {
        "driver": DRIVER, "storage_classes": frozenset({"sc"}), "claims": [], "volumes": [],
        "attachments": [], "deleting": [], "backend": {},
    }  # fmt: skip
    return World(**{**base, **fields})


def test_a_converged_world_counts_nothing() -> None:
    world = _world(
        claims=[_claim("u1")],
        volumes=[_pv("pv1", "h1", "u1")],
        attachments=[_va("va1", "pv1", "n1", attached=True)],
        backend={"h1": frozenset({"n1"})},
        wanted_attachments=frozenset({("pv1", "n1")}),
    )
    assert count(world).total == 0


def test_each_count_sees_its_own_problem() -> None:
    deleting = {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["f"]}
    world = _world(
        claims=[_claim("u1"), _claim("u2", phase="Pending")],
        volumes=[_pv("pv1", "h1", "u1"), _pv("pv3", "gone", "u3")],
        attachments=[
            _va("va1", "pv1", "n1", attached=False),  # wanted, not attached
            _va("va2", "pv1", "n2", attached=True),  # attached, not wanted
        ],
        deleting=[_pv("pv9", "h9", **deleting)],
        backend={"h1": frozenset({"n1", "n3"}), "leaked": frozenset()},
        wanted_attachments=frozenset({("pv1", "n1")}),
    )
    counts = count(world, done_twice=["CreateVolume twice"], expect_empty=True)
    assert counts.as_dict() == {
        "claims_without_pv": 1,  # u2
        "pvs_without_volume": 1,  # pv3
        "volumes_without_pv": 1,  # leaked
        "attachments_stuck": 4,  # va1, va2; h1 published to n1 and n3 without an attached VA
        "finalizers_left": 1,  # pv9
        "done_twice": 1,
        "objects_left": 6,
    }
    assert counts.details["volumes_without_pv"] == ["leaked"]


def test_the_soak_plot_is_svg_with_a_point_per_wave() -> None:
    points = [
        {"claims": 500 * i, "rss_mib": 120.0 + i, "cpu_ms_per_claim": 4.0} for i in range(1, 5)
    ]
    svg = soak_svg(points, caption=" (test)")
    root = ET.fromstring(svg)
    circles = root.findall("{http://www.w3.org/2000/svg}circle")
    assert len(circles) == 2 * len(points)  # two panels
    assert "claims created and deleted so far (test)" in svg
