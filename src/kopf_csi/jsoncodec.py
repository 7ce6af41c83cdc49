"""JSON through orjson: the one module that touches it.

orjson decodes the API server's answers and watch events and encodes request bodies about
three times as fast as the stdlib's json (docs/decisions.md, "The event loop (uvloop) and the
JSON codec (orjson)"), and renders the JSON log lines (`kopf_csi.logs`). Its output is compact
(no spaces) and UTF-8.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["dumps", "line", "loads", "stored"]

loads: Callable[[bytes | bytearray | memoryview | str], Any] = orjson.loads
"""A JSON document's value (`ValueError` for what is not JSON)."""


def dumps(value: Any) -> bytes:
    """A request body: JSON, as UTF-8 bytes (`TypeError` for what JSON cannot hold)."""
    return orjson.dumps(value)


def stored(value: Any) -> str:
    """Compact JSON text with sorted keys, for a record kept in an object (the in-flight
    journal's): the standard library's `json.dumps(value, separators=(",", ":"),
    sort_keys=True)` but for text beyond ASCII, written as UTF-8 rather than escaped (the same
    JSON to any reader); the standard library's for what orjson refuses."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value, separators=(",", ":"), sort_keys=True)


def line(value: Any, *, default: Callable[[Any], Any]) -> str:
    """One line of JSON for a log: `default(x)` for any `x` JSON has no form for; the stdlib's
    json, escaped, for what orjson refuses (integers beyond 64 bits, text that is not UTF-8)."""
    try:
        return orjson.dumps(value, default=default, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value, default=default, separators=(",", ":"))
