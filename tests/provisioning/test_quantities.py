"""Kubernetes quantities to exact bytes and back, as apimachinery's `resource.Quantity` does.

We test these aspects:
- every binary (Ki..Ei), decimal (n..E) and exponent (e/E) suffix, signs and fractions;
- `Value()`'s rounding: fractions of a byte round up, away from zero, and int64 caps;
- malformed quantities and unknown suffixes fail with apimachinery's messages;
- the canonical BinarySI string of a byte count (what a PV's capacity shows).
"""

from __future__ import annotations

import fractions

import pytest

from kopf_csi.provisioning.quantities import (
    QuantityError,
    format_binary_si,
    parse_quantity,
    quantity_bytes,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0", 0, id="zero -> 0"),
        pytest.param("1", 1, id="plain integer -> itself"),
        pytest.param("1Ki", 1024, id="Ki -> 2**10"),
        pytest.param("1Mi", 2**20, id="Mi -> 2**20"),
        pytest.param("1Gi", 2**30, id="Gi -> 2**30"),
        pytest.param("3Ti", 3 * 2**40, id="Ti -> 2**40"),
        pytest.param("1Pi", 2**50, id="Pi -> 2**50"),
        pytest.param("2Ei", 2**61, id="Ei -> 2**60"),
        pytest.param("1k", 1000, id="k -> 10**3"),
        pytest.param("5M", 5 * 10**6, id="M -> 10**6"),
        pytest.param("1G", 10**9, id="G -> 10**9"),
        pytest.param("2T", 2 * 10**12, id="T -> 10**12"),
        pytest.param("1P", 10**15, id="P -> 10**15"),
        pytest.param("1E", 10**18, id="E alone -> exa, not an exponent"),
        pytest.param("1e3", 1000, id="e3 -> decimal exponent"),
        pytest.param("1E3", 1000, id="E3 -> decimal exponent"),
        pytest.param("1e+3", 1000, id="e+3 -> signed exponent"),
        pytest.param("1500e-3", 2, id="e-3 fraction -> rounded up"),
        pytest.param("1.5Gi", 1610612736, id="fractional Gi -> exact bytes"),
        pytest.param("0.5Ki", 512, id="leading zero fraction -> exact"),
        pytest.param(".5Ki", 512, id="no integer part -> exact"),
        pytest.param("1.Gi", 2**30, id="empty fraction (Go allows 1.G) -> integer part"),
        pytest.param("+1Mi", 2**20, id="explicit plus -> positive"),
        pytest.param("500m", 1, id="milli of a byte -> rounded up to 1"),
        pytest.param("1001m", 2, id="just over one byte -> 2"),
        pytest.param("1000m", 1, id="exactly one byte in milli -> 1"),
        pytest.param("100n", 1, id="nano -> rounded up"),
        pytest.param("100u", 1, id="micro -> rounded up"),
        pytest.param("-1500m", -2, id="negative fraction -> away from zero"),
        pytest.param("00012", 12, id="leading zeros -> ignored"),
        pytest.param("16Ei", 2**63 - 1, id="beyond int64 -> capped"),
        pytest.param("+", 0, id="lone sign -> zero, as Go parses it"),
    ],
)
def test_quantity_bytes(text: str, expected: int) -> None:
    assert quantity_bytes(text) == expected


def test_exact_value_keeps_fractions() -> None:
    assert parse_quantity("1500m") == fractions.Fraction(3, 2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "quantities must match the regular expression", id="empty -> format"),
        pytest.param("abc", "quantities must match", id="letters only -> format"),
        pytest.param("1.2.3", "quantities must match", id="two dots -> format"),
        pytest.param("1 Gi", "quantities must match", id="space -> format"),
        pytest.param("1K", "unable to parse quantity's suffix", id="upper K -> bad suffix"),
        pytest.param("1Gb", "quantities must match", id="Gb -> format"),
        pytest.param("1KiB", "quantities must match", id="KiB -> format"),
        pytest.param("1e", "unable to parse quantity's suffix", id="bare e -> bad suffix"),
        pytest.param("1Ki5", "unable to parse quantity's suffix", id="digits after Ki -> bad"),
        pytest.param("1-", "unable to parse quantity's suffix", id="trailing sign -> bad"),
    ],
)
def test_malformed_quantities_fail(text: str, message: str) -> None:
    with pytest.raises(QuantityError, match=message.replace("(", r"\(")):
        quantity_bytes(text)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(0, "0", id="zero -> 0"),
        pytest.param(1, "1", id="one byte -> 1"),
        pytest.param(500, "500", id="small -> plain decimal"),
        pytest.param(1000, "1k", id="small round thousand -> decimal SI"),
        pytest.param(1023, "1023", id="just under 1Ki -> plain"),
        pytest.param(1024, "1Ki", id="1024 -> Ki"),
        pytest.param(2**30, "1Gi", id="GiB -> Gi"),
        pytest.param(1536 * 2**20, "1536Mi", id="1.5GiB -> Mi, never fractions"),
        pytest.param(10**9, "1000000000", id="decimal GB -> plain bytes"),
        pytest.param(2**60, "1Ei", id="EiB -> Ei"),
        pytest.param(2**62, "4Ei", id="4EiB -> Ei with a multiplier"),
        pytest.param(1025, "1025", id="not a multiple of 1024 -> bytes"),
        pytest.param(-2048, "-2Ki", id="negative -> signed"),
    ],
)
def test_format_binary_si(value: int, expected: str) -> None:
    assert format_binary_si(value) == expected
