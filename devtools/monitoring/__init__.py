"""Day-2 monitoring, generated: alert rules (`alerts`) and a Grafana dashboard (`dashboard`).

`python -m devtools.monitoring` writes them into manifests/monitoring/ (`files`): the rules as a
plain Prometheus rules file and as prometheus-operator's PrometheusRule, the dashboard as JSON.
A development tool, not installed: the operator does not need it to run, and the generated
files are checked in (tests/monitoring fails when they are stale). docs/runbooks.md has a
section per alert.
"""
