"""Tools for developing kopf-csi, not for running it: never installed with the package.

`bench` (`nox -s bench`) measures the operator in a process of its own; `chaos` (`nox -s chaos`,
`nox -s soak`) kills, restarts and faults it and counts what is left wrong; `monitoring`
(`python -m devtools.monitoring`) writes the alert rules and the Grafana dashboard. Run them
from a checkout (`python -m devtools.bench`, `python -m devtools.chaos`): the wheel holds only the
operator, the reference driver, the testing kit and the sandbox (tests/test_wheel.py).
"""
