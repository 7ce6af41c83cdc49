"""A tiny SVG line chart for the soak run: no plotting library, one function, plain markup.

`soak_svg(points)` draws two panels over "claims created and deleted so far": the operator's
RSS (MiB) after each wave, and its CPU per claim (ms, one create and one delete) in each wave.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from xml.sax.saxutils import escape

__all__ = ["soak_svg"]

WIDTH, PANEL_HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 36, 40


def _nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5 or 5 times 10^k at or above `value` (an axis end)."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if step * 10**exponent >= value:
            return float(step * 10**exponent)
    return 10.0 ** (exponent + 1)


def _label(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.2g}"


def _panel(
    xs: Sequence[float], ys: Sequence[float], *, top: float, title: str, unit: str, color: str
) -> list[str]:
    x_max = _nice_max(max(xs, default=1.0))
    y_max = _nice_max(max(ys, default=1.0) * 1.1)
    inner_w = WIDTH - LEFT - RIGHT
    inner_h = PANEL_HEIGHT - TOP - BOTTOM
    y0 = top + TOP + inner_h

    def px(x: float) -> float:
        return LEFT + inner_w * x / x_max

    def py(y: float) -> float:
        return y0 - inner_h * y / y_max

    parts = [
        f'<text x="{LEFT}" y="{top + 22}" font-size="14" font-weight="bold">{escape(title)}</text>',
        f'<line x1="{LEFT}" y1="{y0}" x2="{WIDTH - RIGHT}" y2="{y0}" stroke="#333"/>',
        f'<line x1="{LEFT}" y1="{top + TOP}" x2="{LEFT}" y2="{y0}" stroke="#333"/>',
    ]
    for i in range(5):
        y = y_max * i / 4
        parts.append(
            f'<line x1="{LEFT}" y1="{py(y):.1f}" x2="{WIDTH - RIGHT}" y2="{py(y):.1f}" '
            f'stroke="#ddd"/><text x="{LEFT - 6}" y="{py(y) + 4:.1f}" font-size="11" '
            f'text-anchor="end">{_label(y)}</text>'
        )
        x = x_max * i / 4
        parts.append(
            f'<text x="{px(x):.1f}" y="{y0 + 16}" font-size="11" text-anchor="middle">'
            f"{_label(x)}</text>"
        )
    parts.append(
        f'<text x="14" y="{top + TOP + inner_h / 2:.1f}" font-size="11" '
        f'transform="rotate(-90 14 {top + TOP + inner_h / 2:.1f})" text-anchor="middle">'
        f"{escape(unit)}</text>"
    )
    points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True))
    parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}"/>')
    parts.extend(
        f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{color}"/>'
        for x, y in zip(xs, ys, strict=True)
    )
    return parts


def soak_svg(points: Sequence[Mapping[str, float]], *, caption: str = "") -> str:
    """Points: one per wave, with `claims` (done so far), `rss_mib` and `cpu_ms_per_claim`."""
    xs = [float(p["claims"]) for p in points]
    height = 2 * PANEL_HEIGHT + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        *_panel(xs, [float(p["rss_mib"]) for p in points], top=0,
                title="Operator RSS after each wave", unit="MiB", color="#1f77b4"),
        *_panel(xs, [float(p["cpu_ms_per_claim"]) for p in points], top=PANEL_HEIGHT,
                title="Operator CPU per claim (create + delete), per wave", unit="ms",
                color="#d62728"),
        f'<text x="{WIDTH / 2}" y="{height - 8}" font-size="12" text-anchor="middle">'
        f"claims created and deleted so far{escape(caption)}</text>",
        "</svg>",
    ]  # fmt: skip
    return "\n".join(parts) + "\n"
