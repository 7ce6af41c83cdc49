"""The benchmark: `python -m kopf_csi.bench` (or `nox -s bench`).

See `kopf_csi.bench.running` for what is measured and how, and docs/benchmarks.md for results.
"""

from kopf_csi.bench.running import (
    BenchError,
    Options,
    main,
    run,
    run_attach,
    run_claims,
    run_scale,
)

__all__ = ["BenchError", "Options", "main", "run", "run_attach", "run_claims", "run_scale"]
