"""The rules with Prometheus' own tool: `promtool check rules` and `promtool test rules`.

We test these aspects:
- `promtool check rules` accepts every rules file we ship: the plain file and the
  PrometheusRule's groups (the same rules, as prometheus-operator hands them to Prometheus);
- `promtool test rules` passes tests/monitoring/alerts.test.yaml: each alert fires on the
  series that should page and stays silent on a healthy operator and on a burst that drains;
- every alert has its unit tests there: a case where it fires and one where it must not;
- the unit tests can fail: with every condition made impossible, or replaced by its bare
  signal (which "fires" on healthy series too), promtool fails for every alert.
"""

from __future__ import annotations

import pathlib
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from devtools.monitoring import alerts

from .conftest import PROMETHEUS_RULE, RULES, write_yaml

UNIT_TESTS = pathlib.Path(__file__).parent / "alerts.test.yaml"


def _promtool(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60)


def test_promtool_checks_the_plain_rules_file(promtool: str) -> None:
    done = _promtool(promtool, "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts.ALERTS)} rules found" in done.stdout


def test_promtool_checks_the_prometheus_rule(promtool: str, tmp_path: pathlib.Path) -> None:
    spec = yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]
    path = write_yaml(tmp_path / "prometheusrule-groups.yaml", spec)
    done = _promtool(promtool, "check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert spec == yaml.safe_load(RULES.read_text()), "the two files carry different rules"


Mutation = Callable[[alerts.Alert], dict[str, str]]


def _unit_tests(
    promtool: str, workdir: pathlib.Path, mutation: Mutation | None = None
) -> subprocess.CompletedProcess[str]:
    """promtool test rules on the shipped rules, their annotations off (see alerts.test.yaml),
    each rule changed by `mutation` if given."""
    rules = yaml.safe_load(RULES.read_text())
    by_name = {alert.name: alert for alert in alerts.ALERTS}
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations")
            if mutation is not None:
                rule.update(mutation(by_name[rule["alert"]]))
    write_yaml(workdir / "kopf-csi.rules.yaml", rules)
    (workdir / UNIT_TESTS.name).write_text(UNIT_TESTS.read_text())
    return _promtool(promtool, "test", "rules", str(workdir / UNIT_TESTS.name))


def test_every_alert_passes_its_unit_tests(promtool: str, tmp_path: pathlib.Path) -> None:
    done = _unit_tests(promtool, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_unit_tests_that_fire_and_stay_silent() -> None:
    cases: dict[str, list[list[Any]]] = {}
    for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for case in test["alert_rule_test"]:
            cases.setdefault(case["alertname"], []).append(case["exp_alerts"])
    assert set(cases) == {alert.name for alert in alerts.ALERTS}
    for name, expected in cases.items():
        assert any(expected), f"{name}: no case where it fires"
        assert any(not alerts_ for alerts_ in expected), f"{name}: no case where it is silent"


@pytest.mark.parametrize(
    "mutation",
    [
        pytest.param(lambda alert: {"expr": "vector(1) > 2"}, id="never-fires"),
        pytest.param(lambda alert: {"expr": alert.signals[0], "for": "0s"}, id="bare-signal"),
    ],
)
def test_the_unit_tests_fail_for_every_broken_alert(
    promtool: str, tmp_path: pathlib.Path, mutation: Mutation
) -> None:
    done = _unit_tests(promtool, tmp_path, mutation)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    unnoticed = [a.name for a in alerts.ALERTS if f"alertname: {a.name}," not in output]
    assert not unnoticed, f"the unit tests did not notice a broken {unnoticed}"
