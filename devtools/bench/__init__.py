"""The benchmark: `python -m devtools.bench` (or `nox -s bench`).

See `devtools.bench.running` for what is measured and how, and docs/benchmarks.md for results.

The names below are imported when first used: the operator's process (`devtools.bench.operator`)
imports this package too, and needs none of the benchmark's side, which may not even import
against another revision's operator (`process.OPERATOR_PATH_ENV`).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "BenchError", "Options", "main", "run", "run_attach", "run_churn", "run_claims", "run_scale",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("devtools.bench.running"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
