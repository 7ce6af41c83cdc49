"""The chaos and soak suites: `python -m devtools.chaos` (or `nox -s chaos`, `nox -s soak`).

Chaos: provision claims and attach volumes while the operator is SIGKILLed and restarted, the
driver restarts and fails or slows calls, and the API answers with conflicts, 5xx and lost
responses; then delete everything. At each checkpoint it counts what must never remain (claims
without a PV, leaked volumes, stuck attachments, finalizers on deleted objects, operations done
twice) and every count must be 0. Soak: create and delete many claims in waves and check that
the operator's CPU per claim and RSS stay flat. Results: docs/reliability.md.

Modules: `running` (the scenarios), `environment` (the world and the chaos), `observing`
(copy-free snapshots, duplicate effects), `checks` (the counts, pure), `report` (tables),
`plot` (the soak curve as SVG). Secret values are searched for with `kopf_csi.testing.secrets`.
"""

from devtools.chaos.environment import ChaosError
from devtools.chaos.running import ChaosOptions, SoakOptions, run_chaos, run_soak

__all__ = ["ChaosError", "ChaosOptions", "SoakOptions", "run_chaos", "run_soak"]
