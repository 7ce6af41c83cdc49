"""The benchmark: `python -m devtools.bench` (or `nox -s bench`).

See `devtools.bench.running` for what is measured and how, and docs/benchmarks.md for results.
"""

from devtools.bench.running import (
    BenchError,
    Options,
    main,
    run,
    run_attach,
    run_claims,
    run_scale,
)

__all__ = ["BenchError", "Options", "main", "run", "run_attach", "run_claims", "run_scale"]
