"""Bar charts as inline SVG, drawn on the server: no chart library, no build step, and
the page shows the numbers even with JavaScript off. Each bar has a ``<title>`` (its
time and value) for a tooltip and for screen readers."""

from __future__ import annotations

from datetime import UTC, datetime

from markupsafe import Markup, escape

WIDTH, HEIGHT = 480, 90


def bars(values: list[float], start: float, step: float, label: str, unit: str = "") -> Markup:
    """``values[i]`` covers ``start + i*step`` seconds (epoch) onwards."""
    top = max(values, default=0.0) or 1.0
    width = WIDTH / max(len(values), 1)
    parts = []
    for index, value in enumerate(values):
        height = 0.0 if value <= 0 else max(HEIGHT * value / top, 1.0)
        at = datetime.fromtimestamp(start + index * step, UTC).strftime("%H:%M")
        shown = f"{value:.4f}".rstrip("0").rstrip(".") if value % 1 else f"{int(value)}"
        x, y, w = index * width, HEIGHT - height, max(width - 1, 1)
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{height:.1f}">'
            f"<title>{at} UTC: {escape(shown)}{escape(unit)}</title></rect>"
        )
    peak = f"{top:g}" if any(values) else "0"
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img"'
        f' aria-label="{escape(label)}" preserveAspectRatio="none">{"".join(parts)}</svg>'
        f'<div class="axis"><span>{escape(label)}</span><span>peak {escape(peak)}</span></div>'
    )
