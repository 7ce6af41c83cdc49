"""The generated files are current, and the pieces around them fit together.

We test these aspects:
- the rules files and the dashboard JSON checked in under manifests/monitoring/ are exactly what
  `python -m devtools.monitoring` generates (regenerate them after changing the code);
- every alert has a severity, a `for`, a runbook URL into docs/runbooks.md, a one-line reason,
  and a section there that explains it, says how to confirm it (PromQL and `kopf-csi explain`)
  and what to do; the README's Monitoring section names every alert;
- the dashboard has its five rows, the driver and namespace variables, and every query selects
  the operator's job, namespace and replicas (so several drivers share one Prometheus);
- `kubectl kustomize manifests/monitoring` renders the metrics Service, the ServiceMonitor, the
  PrometheusRule and the dashboard's ConfigMap; the Service selects the operator's pods and its
  port, the ServiceMonitor selects the Service, and the job label is the alerts' job.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from devtools.monitoring import alerts, dashboard, files
from kopf_csi.endpoints import parse_endpoint

from ..manifests.rendering import MANIFESTS, find, kubectl, kustomize
from .conftest import DASHBOARD

RUNBOOKS = files.ROOT / "docs" / "runbooks.md"
README = files.ROOT / "README.md"


def test_the_checked_in_files_are_what_the_code_generates() -> None:
    assert files.stale() == [], "regenerate: python -m devtools.monitoring"


def test_the_generator_notices_a_changed_file(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "monitoring"
    for name in files.FILES:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text((files.MONITORING / name).read_text())
    monkeypatch.setattr(files, "MONITORING", copy)
    assert files.stale() == []
    (copy / "component" / "dashboard.json").write_text(DASHBOARD.read_text().replace("p99", "p95"))
    assert files.stale() == ["component/dashboard.json"]


def test_check_mode_exits_0_on_current_files() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "devtools.monitoring", "--check"],
        cwd=files.ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("alert", alerts.ALERTS, ids=lambda alert: alert.name)
def test_every_alert_is_complete(alert: alerts.Alert) -> None:
    rule = alert.rule()
    assert rule["labels"]["severity"] in ("critical", "warning")
    assert re.fullmatch(r"\d+[smh]", rule["for"])
    assert rule["annotations"]["runbook_url"] == f"{alerts.RUNBOOKS}#{alert.name.lower()}"
    assert alert.reason
    assert "\n" not in alert.reason
    assert alert.signals


def _sections() -> dict[str, str]:
    text = RUNBOOKS.read_text()
    parts = re.split(r"^## (\S+)\n", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize("alert", alerts.ALERTS, ids=lambda alert: alert.name)
def test_every_alert_has_a_runbook_section(alert: alerts.Alert) -> None:
    section = _sections().get(alert.name)
    assert section, f"docs/runbooks.md has no '## {alert.name}'"
    for part in ("**Meaning.**", "**Threshold.**", "**Confirm.**", "**Do.**"):
        assert part in section, f"{alert.name}: no {part}"
    assert "```promql" in section, f"{alert.name}: no PromQL to confirm it"
    for metric in re.findall(r"[a-z_]+(?=\{job=)", alert.expr):
        assert metric in section, f"{alert.name}: the runbook does not query {metric}"
    # The index table names the alert with its severity and duration.
    index = RUNBOOKS.read_text().split("\n## ", 1)[0]
    (row,) = [line for line in index.splitlines() if f"[{alert.name}]" in line]
    assert f"| {alert.severity} |" in row
    assert row.rstrip().endswith(f"| {alert.for_} |")


def test_the_runbooks_explain_with_kopf_csi_explain() -> None:
    sections = _sections()
    assert set(sections) == {alert.name for alert in alerts.ALERTS}
    without = [name for name, text in sections.items() if "kopf-csi explain" not in text]
    assert not without, f"no `kopf-csi explain` to confirm {without}"


def test_the_readme_names_every_alert() -> None:
    readme = README.read_text()
    section = readme.split("\n## Monitoring\n", 1)[1].split("\n## ", 1)[0]
    for alert in alerts.ALERTS:
        assert f"`{alert.name}`" in section
    assert "kubectl apply -k manifests/monitoring" in section
    assert "prometheus/kopf-csi.rules.yaml" in section or "kopf-csi.rules.yaml" in section


def test_the_dashboard_has_its_rows_and_variables() -> None:
    document = json.loads(DASHBOARD.read_text())
    rows = [panel["title"] for panel in document["panels"] if panel["type"] == "row"]
    assert rows == [
        "Operations: CSI calls", "Provisioning and deletion", "Queues", "Kubernetes API",
        "Operator",
    ]  # fmt: skip
    variables = {v["name"]: v for v in document["templating"]["list"]}
    assert {"datasource", "job", "namespace", "driver", "instance"} <= set(variables)
    assert variables["driver"]["multi"]
    assert variables["namespace"]["multi"]
    assert variables["instance"]["hide"] == 2  # derived from the drivers, not picked
    ids = [panel["id"] for panel in document["panels"]]
    assert len(ids) == len(set(ids))


def test_every_dashboard_query_selects_the_chosen_operators() -> None:
    document = json.loads(DASHBOARD.read_text())
    queries = dashboard.queries(document)
    assert len(queries) >= 25
    for title, expr in queries:
        selectors = re.findall(r"\{([^}]*)\}", expr)
        assert selectors, (title, expr)
        for selector in selectors:
            assert dashboard.SELECTOR in selector, (title, expr)
        if "csi_sidecar_operations_seconds" in expr:
            assert 'driver_name=~"$driver"' in expr, (title, expr)


needs_kubectl = pytest.mark.skipif(kubectl() is None, reason="kubectl is not installed")


@needs_kubectl
def test_the_kustomization_renders_the_monitoring_objects() -> None:
    objects = kustomize(MANIFESTS / "monitoring")
    kinds = sorted(obj["kind"] for obj in objects)
    assert kinds == ["ConfigMap", "PrometheusRule", "Service", "ServiceMonitor"]
    assert {obj["metadata"]["namespace"] for obj in objects} == {"kopf-csi"}

    (rule,) = find(objects, "PrometheusRule")
    plain = yaml.safe_load((files.MONITORING / "prometheus" / "kopf-csi.rules.yaml").read_text())
    assert rule["spec"] == plain
    (config_map,) = find(objects, "ConfigMap", "kopf-csi-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["kopf-csi.json"]) == json.loads(DASHBOARD.read_text())

    (service,) = find(objects, "Service", alerts.JOB)  # the ServiceMonitor's job label
    (monitor,) = find(objects, "ServiceMonitor")
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["endpoints"]
    (port,) = service["spec"]["ports"]
    assert endpoint["port"] == port["name"]
    assert endpoint["path"] == "/metrics"

    (deployment,) = find(kustomize(MANIFESTS), "Deployment", "kopf-csi")
    template = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    (operator,) = [c for c in template["spec"]["containers"] if c["name"] == "kopf-csi"]
    ports = {p["name"]: p["containerPort"] for p in operator["ports"]}
    endpoint_flag = next(a for a in operator["args"] if a.startswith("--http-endpoint="))
    assert ports[port["targetPort"]] == parse_endpoint(endpoint_flag.partition("=")[2])[1]
