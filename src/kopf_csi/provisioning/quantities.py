"""Kubernetes resource quantities (`1Gi`, `500M`, `1.5e9`) as exact byte counts, and back.

The provisioner asks for exactly what the claim requests: `required_bytes` is Go's
`Quantity.Value()` of `requests.storage`, with no rounding to GiB and no limit. So the parser
here follows `resource.ParseQuantity` exactly: every suffix (`Ki`..`Ei`, `n`..`E`, `e<N>`),
fractions computed exactly, then (as Go does) rounded up to a whole byte and capped at the
largest int64. `format_binary_si` is the other direction, Go's canonical `BinarySI` string that
the PV's `spec.capacity.storage` is written with (`1Gi`, `1536Mi`, `1000000000`, `1k`).
"""

from __future__ import annotations

import fractions
import functools
import math
import re

__all__ = ["QuantityError", "format_binary_si", "parse_quantity", "quantity_bytes"]

MAX_INT64 = 2**63 - 1

_FORMAT_WRONG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_SYNTAX = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_EXPONENT = re.compile(r"[eE][+-]?[0-9]+")
_BINARY_NAMES = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
_DECIMAL_NAMES = {0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


class QuantityError(ValueError):
    """Not a Kubernetes quantity; the messages are apimachinery's."""


def parse_quantity(text: str) -> fractions.Fraction:
    """The exact value of a quantity, before any rounding."""
    return _exact(text)


@functools.lru_cache(maxsize=512)
def _exact(text: str) -> fractions.Fraction:
    """Remembered: a cluster's claims ask for a few sizes, and exact fractions cost several
    microseconds each (about 1 % of the operator's CPU under churn, docs/benchmarks.md,
    "Seventh session")."""
    match = _SYNTAX.fullmatch(text)
    if not text or match is None:
        raise QuantityError(_FORMAT_WRONG)
    sign, whole, fraction, suffix = match.groups()
    number = fractions.Fraction(int(whole or "0"))
    if fraction:
        number += fractions.Fraction(int(fraction), 10 ** len(fraction))
    if suffix in _BINARY:
        number *= 2 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        number *= fractions.Fraction(10) ** _DECIMAL[suffix]
    elif _EXPONENT.fullmatch(suffix):
        number *= fractions.Fraction(10) ** int(suffix[1:])
    else:
        raise QuantityError("unable to parse quantity's suffix")
    return -number if sign == "-" else number


def quantity_bytes(text: str) -> int:
    """`Quantity.Value()`: rounded up (away from zero) to a whole number, capped at int64."""
    return _bytes(text)


@functools.lru_cache(maxsize=512)
def _bytes(text: str) -> int:
    exact = parse_quantity(text)
    if exact < 0:
        return -min(math.ceil(-exact), MAX_INT64 + 1)  # int64 reaches one further below zero
    return min(math.ceil(exact), MAX_INT64)


def format_binary_si(value: int) -> str:
    """`resource.NewQuantity(value, BinarySI).String()`: the canonical form Go writes."""
    if value == 0:
        return "0"
    if -1024 < value < 1024:  # Go shows small values as DecimalSI "to avoid confusion"
        return _decimal_si(value)
    magnitude, power = abs(value), 0
    while magnitude % 1024 == 0 and power < len(_BINARY_NAMES) - 1:
        magnitude //= 1024
        power += 1
    return f"{'-' if value < 0 else ''}{magnitude}{_BINARY_NAMES[power]}"


def _decimal_si(value: int) -> str:
    magnitude, exponent = abs(value), 0
    while magnitude % 10 == 0:
        magnitude //= 10
        exponent += 1
    magnitude *= 10 ** (exponent % 3)  # Go keeps exponents at multiples of three
    exponent -= exponent % 3
    return f"{'-' if value < 0 else ''}{magnitude}{_DECIMAL_NAMES[exponent]}"
