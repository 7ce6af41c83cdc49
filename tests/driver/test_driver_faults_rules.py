"""Fault rules without a server: what `Faults.plan()` decides, and how the file is read.

We test these aspects:
- latency adds up; errors fire for the next N calls, then stop; globs match methods;
- fractions are reproducible with a seed and fire about as often as asked;
- the first deciding rule wins and later ones keep their counts;
- the file: parsed, re-read when it changes, ignored (with a warning) when invalid, forgotten
  when removed; in-process rules are independent of it;
- readiness and abnormal volumes from both sources.
"""

from __future__ import annotations

import json
import os
import pathlib

import pytest
import structlog

from kopf_csi.csi.codes import Code
from kopf_csi.driver.faults import FaultRule, Faults, parse_faults


def write(path: pathlib.Path, data: object) -> None:
    """Atomically, as the documentation asks, and with a new mtime every time."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def test_no_rules_no_faults() -> None:
    plan = Faults().plan("CreateVolume")
    assert (plan.latency, plan.code, plan.hang) == (0.0, None, False)


def test_errors_for_the_next_n_calls() -> None:
    faults = Faults()
    faults.fail("CreateVolume", Code.UNAVAILABLE, times=2, message="busy")
    codes = [faults.plan("CreateVolume").code for _ in range(3)]
    assert codes == [Code.UNAVAILABLE, Code.UNAVAILABLE, None]
    assert faults.plan("DeleteVolume").code is None
    assert faults.rules == []


def test_latency_adds_up_and_globs_match() -> None:
    faults = Faults()
    faults.delay(seconds=0.1)
    faults.delay("Node*", seconds=0.2)
    assert faults.plan("NodeStageVolume").latency == pytest.approx(0.3)
    assert faults.plan("CreateVolume").latency == pytest.approx(0.1)


def test_first_deciding_rule_wins_and_others_keep_their_times() -> None:
    faults = Faults()
    faults.fail("*", Code.INTERNAL, times=1)
    second = faults.fail("CreateVolume", Code.ABORTED, times=1)
    assert faults.plan("CreateVolume").code is Code.INTERNAL
    assert second.times == 1
    assert faults.plan("CreateVolume").code is Code.ABORTED


def test_hang_rule() -> None:
    faults = Faults()
    faults.hang("Probe", times=1)
    assert faults.plan("Probe").hang
    assert not faults.plan("Probe").hang


def test_fractions_are_seeded_and_roughly_right() -> None:
    def run(seed: int) -> list[Code | None]:
        faults = Faults(seed=seed)
        faults.fail("*", Code.UNAVAILABLE, fraction=0.25)
        return [faults.plan("CreateVolume").code for _ in range(400)]

    first = run(7)
    assert first == run(7)
    assert 60 < first.count(Code.UNAVAILABLE) < 140


def test_invalid_rules_are_refused() -> None:
    for bad in [{"latency": -1}, {"fraction": 1.5}, {"times": 0}, {"code": Code.OK}]:
        with pytest.raises(ValueError):  # noqa: PT011 - the message varies per field
            FaultRule(**bad)  # type: ignore[arg-type]


def test_parse_faults_file_content() -> None:
    parsed = parse_faults(
        {
            "rules": [
                {"method": "CreateVolume", "code": "resource_exhausted", "times": 2},
                {"method": "*", "code": 14, "fraction": 0.5},
                {"hang": True},
                {"latency": 0.5},
            ],
            "ready": False,
            "abnormal": {"vol-1": "disk on fire"},
        }
    )
    assert [r.code for r in parsed.rules] == [Code.RESOURCE_EXHAUSTED, Code.UNAVAILABLE, None, None]
    assert parsed.rules[2].hang
    assert parsed.rules[3].latency == 0.5
    assert not parsed.ready
    assert parsed.abnormal == {"vol-1": "disk on fire"}
    for bad in [[], {"rule": []}, {"rules": [{"cod": 1}]}, {"rules": [{"code": "NOPE"}]}]:
        with pytest.raises((ValueError, TypeError)):
            parse_faults(bad)


def test_file_is_reread_when_it_changes(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "faults.json"
    faults = Faults(path=path)
    assert faults.plan("CreateVolume").code is None

    write(path, {"rules": [{"method": "CreateVolume", "code": "ABORTED", "times": 1}]})
    assert faults.plan("CreateVolume").code is Code.ABORTED
    assert faults.plan("CreateVolume").code is None  # spent, and the file did not change

    write(path, {"rules": [{"method": "CreateVolume", "code": "INTERNAL", "times": 1}]})
    assert faults.plan("CreateVolume").code is Code.INTERNAL

    write(path, {"rules": [{"method": "*", "code": "INTERNAL"}]})
    path.unlink()
    assert faults.plan("CreateVolume").code is None


def test_invalid_file_keeps_the_previous_rules(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "faults.json"
    write(path, {"rules": [{"method": "*", "code": "UNAVAILABLE"}]})
    faults = Faults(path=path)
    with structlog.testing.capture_logs() as logs:
        path.write_text("{not json")
        assert faults.plan("CreateVolume").code is Code.UNAVAILABLE
        assert faults.plan("CreateVolume").code is Code.UNAVAILABLE
    assert [e["event"] for e in logs] == ["faults_file_invalid"]  # once, not once per call


def test_in_process_rules_are_independent_of_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "faults.json"
    faults = Faults(path=path)
    faults.delay(seconds=1.0)
    write(path, {"rules": [{"latency": 2.0}]})
    assert faults.plan("Probe").latency == pytest.approx(3.0)
    faults.clear()
    assert faults.plan("Probe").latency == pytest.approx(2.0)


def test_readiness_and_conditions_from_both_sources(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "faults.json"
    faults = Faults(path=path)
    assert faults.ready
    faults.set_ready(False)
    assert not faults.ready
    faults.set_ready(True)
    write(path, {"ready": False, "abnormal": {"v2": "from the file"}})
    assert not faults.ready
    faults.mark_abnormal("v1", "in process")
    assert faults.abnormal("v1") == "in process"
    assert faults.abnormal("v2") == "from the file"
    faults.mark_normal("v1")
    assert faults.abnormal("v1") is None
