"""Small inline SVG charts, drawn on the server from a list of numbers: the console's page needs no script
and fetches nothing (no chart library, no browser-side request)."""

from __future__ import annotations

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

WIDTH = 120
HEIGHT = 24
PAD = 2


def sparkline(
    values: list[float | None], *, label: str, width: int = WIDTH, height: int = HEIGHT
) -> SafeString:
    """A line over ``values`` (oldest first, evenly spaced); None is a gap (no figure for that minute).
    The scale runs from 0 to the largest value, so a flat line at the bottom means zero throughout."""
    known = [v for v in values if v is not None]
    top = max(known, default=0.0) or 1.0
    step = (width - 2 * PAD) / max(1, len(values) - 1)
    lines: list[list[str]] = []
    current: list[str] = []
    for i, value in enumerate(values):
        if value is None:
            if current:
                lines.append(current)
            current = []
            continue
        x = PAD + i * step
        y = height - PAD - (height - 2 * PAD) * (float(value) / top)
        current.append(f"{x:.1f},{y:.1f}")
    if current:
        lines.append(current)
    # Every coordinate is a number formatted above, never input: safe to assemble as markup.
    shapes = "".join(
        f'<polyline points="{" ".join(pts)}" fill="none" stroke="currentColor" stroke-width="1.5"/>'
        if len(pts) > 1
        else f'<circle cx="{pts[0].split(",")[0]}" cy="{pts[0].split(",")[1]}" r="1.5" fill="currentColor"/>'
        for pts in lines
    )
    baseline = f'<line x1="{PAD}" y1="{height - PAD}" x2="{width - PAD}" y2="{height - PAD}" class="base"/>'
    return format_html(
        '<svg class="spark" role="img" width="{}" height="{}" viewBox="0 0 {} {}">'
        "<title>{}</title>{}{}</svg>",
        width,
        height,
        width,
        height,
        f"{label}: max {_short(max(known, default=0.0))} over the last hour",
        mark_safe(baseline),  # noqa: S308 - numbers only (above)
        mark_safe(shapes),  # noqa: S308 - numbers only (above)
    )


def _short(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() or value >= 100 else f"{value:.2f}"
