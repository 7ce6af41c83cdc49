"""Durations as the Go sidecars' flags take them (time.ParseDuration), and shown back.

We test these aspects:
- Go's syntax: units from ns to h, fractions, sequences (`1m30s`), a sign; a bare number is
  seconds (the old environment variables' form);
- anything else is a ValueError saying what a duration looks like;
- the shortest Go-style text for a number of seconds, which parses back to the same number.
"""

from __future__ import annotations

import pytest

from kopf_csi.flags import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10s", 10.0), ("300ms", 0.3), ("1m", 60.0), ("1m30s", 90.0), ("1h", 3600.0),
        ("2h45m", 9900.0), ("1.5s", 1.5), (".5s", 0.5), ("1500us", 0.0015), ("1500µs", 0.0015),
        ("250000000ns", 0.25), ("-1.5h", -5400.0), ("+3s", 3.0), ("1h1m1s1ms", 3661.001),
        ("10", 10.0), ("2.5", 2.5), (" 15s ", 15.0), ("0", 0.0),
    ],
)  # fmt: skip
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    ["", "soon", "10 s", "1d", "1m30", "s", "1.2.3s", "--1s", "1sm", "5M", "1e3s", "inf", "nan"],
)
def test_not_durations(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a duration \(like 10s, 1m30s, 300ms\)"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (10.0, "10s"), (0.3, "300ms"), (60.0, "1m"), (90.0, "1m30s"), (300.0, "5m"),
        (3600.0, "1h"), (3661.5, "1h1m1.5s"), (0.0, "0s"), (1.5, "1.5s"), (-2.0, "-2s"),
    ],
)  # fmt: skip
def test_shown_go_style_and_parsed_back(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)
