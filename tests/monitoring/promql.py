"""Just enough PromQL lexing to find the metric names an expression selects.

Metric names are the identifiers outside label matchers, strings, ranges and grouping lists
that are neither functions (an identifier before `(`), aggregations, nor keywords. Grafana's
variables (`$job`, `$__rate_interval`) are inside matchers or ranges, so they do not count.
"""

from __future__ import annotations

import re

__all__ = ["metric_names"]

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_IDENTIFIER = re.compile(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_KEYWORDS = frozenset({
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
    "group_left", "group_right", "inf", "nan",
})  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects (`up`, `workqueue_depth`, ...), each once."""
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub("{}", text)
    text = _RANGES.sub("[]", text)
    text = _GROUPING.sub("", text)
    text = re.sub(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b", "0", text)  # numbers, 1e3 included
    return {
        name
        for name, call in _IDENTIFIER.findall(text)
        if not call and name.lower() not in _KEYWORDS
    }
