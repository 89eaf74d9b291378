"""Inline SVG charts for the HTML report: stacked bars, one 100% bar, and a line chart.

No dependency and nothing fetched. Every piece of text (labels, tooltips, series names) goes
through ``markupsafe.escape`` here, so a chart is ``Markup`` that is safe to place in a page as
is. Charts scale to their container (``viewBox`` plus ``width: 100%`` in the report's style).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import msgspec
from markupsafe import Markup, escape

WIDTH = 760
HEIGHT = 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 58, 12, 24, 40


class Series(msgspec.Struct, frozen=True):
    """A named series and its colour (a CSS colour of ours, never from a trace)."""

    name: str
    color: str


def _n(x: float) -> str:
    """A coordinate, short: one decimal, no trailing zeros."""
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _num(value: float, digits: int = 1) -> str:
    """A value for a tooltip or an axis label."""
    if not math.isfinite(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round axis ticks from 0 to at least ``top``."""
    if not math.isfinite(top) or top <= 0:
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    n = math.ceil(top / step - 1e-9)
    return [i * step for i in range(n + 1)]


def tick_digits(ticks: Sequence[float]) -> int:
    """Decimals that tell adjacent ticks apart (0 for 0, 5, 10; 1 for 0.5; 2 for 0.25)."""
    if len(ticks) < 2:
        return 0
    step = abs(ticks[1] - ticks[0])
    for digits in range(7):
        if abs(round(step, digits) - step) <= step * 1e-6:
            return digits
    return 6


def _tick_label(value: float, digits: int) -> str:
    text = _num(value, digits)
    return text[1:] if text.startswith("-") and float(text.replace(",", "")) == 0 else text


def ticks_between(low: float, high: float, count: int = 6) -> list[float]:
    """Round ticks inside [low, high] (for an axis that does not start at 0)."""
    span = nice_ticks(high - low, count)
    step = span[1] - span[0] if len(span) > 1 else 1.0
    first = math.ceil(low / step - 1e-9) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _svg(body: list[str], label: str, height: int = HEIGHT) -> Markup:
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(body) + "</svg>"
    )


def _y_axis(ticks: list[float], y_of: Callable[[float], float], unit: str, digits: int
            ) -> list[str]:
    out = []
    for t in ticks:
        y = _n(y_of(t))
        out.append(f'<line class="grid" x1="{_LEFT}" x2="{WIDTH - _RIGHT}" y1="{y}" y2="{y}"/>')
        out.append(f'<text class="tick" x="{_LEFT - 6}" y="{y}" text-anchor="end" '
                   f'dominant-baseline="middle">{escape(_tick_label(t, digits))}</text>')
    out.append(f'<text class="axis" x="{_LEFT - 6}" y="{_TOP - 12}" text-anchor="end">'
               f'{escape(unit)}</text>')
    return out


def stacked_bars(labels: Sequence[str], series: Sequence[Series],
                 values: Sequence[Sequence[float]], unit: str, label: str,
                 x_title: str = "") -> Markup:
    """One bar per label, stacked from ``values[bar][series]`` (negative values count as 0)."""
    totals = [sum(max(v, 0.0) for v in row) for row in values]
    ticks = nice_ticks(max(totals, default=0.0))
    plot_h = HEIGHT - _TOP - _BOTTOM
    plot_w = WIDTH - _LEFT - _RIGHT

    def y_of(v: float) -> float:
        return _TOP + plot_h * (1 - v / ticks[-1])

    body = _y_axis(ticks, y_of, unit, tick_digits(ticks))
    n = max(len(labels), 1)
    slot = plot_w / n
    bar_w = max(slot * 0.72, 0.6)
    every = max(1, math.ceil(n / 24))  # at most ~24 x labels
    for i, (name, row) in enumerate(zip(labels, values, strict=True)):
        x = _LEFT + i * slot + (slot - bar_w) / 2
        level = 0.0
        for s, v in zip(series, row, strict=True):
            v = max(v, 0.0)
            if v <= 0:
                continue
            top, bottom = y_of(level + v), y_of(level)
            tip = f"{name}: {s.name} {_num(v, 2)} {unit}"
            body.append(f'<rect x="{_n(x)}" y="{_n(top)}" width="{_n(bar_w)}" '
                        f'height="{_n(max(bottom - top, 0.3))}" fill="{escape(s.color)}">'
                        f"<title>{escape(tip)}</title></rect>")
            level += v
        if i % every == 0:
            body.append(f'<text class="tick" x="{_n(x + bar_w / 2)}" y="{HEIGHT - _BOTTOM + 14}" '
                        f'text-anchor="middle">{escape(name)}</text>')
    if x_title:
        body.append(f'<text class="axis" x="{_n(_LEFT + plot_w / 2)}" y="{HEIGHT - 6}" '
                    f'text-anchor="middle">{escape(x_title)}</text>')
    return _svg(body, label)


def share_bar(items: Sequence[tuple[Series, float]], label: str) -> Markup:
    """One horizontal bar split into shares (percent, expected to add up to about 100)."""
    height = 34
    total = sum(max(p, 0.0) for _, p in items) or 1.0
    scale = (WIDTH - 2) / max(total, 100.0)
    body, x = [], 1.0
    for s, pct in items:
        w = max(pct, 0.0) * scale
        if w <= 0:
            continue
        tip = f"{s.name}: {_num(pct)}%"
        body.append(f'<rect x="{_n(x)}" y="4" width="{_n(w)}" height="26" '
                    f'fill="{escape(s.color)}"><title>{escape(tip)}</title></rect>')
        if w > 70:
            ink = "#1d2230" if _light(s.color) else "#ffffff"
            body.append(f'<text class="inbar" fill="{ink}" x="{_n(x + w / 2)}" y="17" text-anchor="middle" '
                        f'dominant-baseline="middle">{escape(tip)}</text>')
        x += w
    return _svg(body, label, height)


def _light(color: str) -> bool:
    """Whether a #rrggbb colour is light enough to need dark text on it."""
    if not (color.startswith("#") and len(color) == 7):
        return False
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return 0.299 * r + 0.587 * g + 0.114 * b > 170


class Line(msgspec.Struct, frozen=True):
    """A series of a line chart: its look and its y values (same length as the x values)."""

    series: Series
    ys: Sequence[float]


def line_chart(xs: Sequence[float], lines: Sequence[Line], x_unit: str, y_unit: str,
               label: str, peak: tuple[float, float, str] | None = None,
               marks: Sequence[tuple[float, float, str, str]] = ()) -> Markup:
    """Lines over a shared x axis; ``peak`` = (x, y, text) adds a marked, labelled point, and
    each of ``marks`` = (x, y, tooltip, our colour) a dot."""
    finite = [y for ln in lines for y in ln.ys if math.isfinite(y)]
    ticks = nice_ticks(max(finite, default=0.0))
    x0, x1 = (min(xs), max(xs)) if len(xs) else (0.0, 1.0)
    x1 = x1 if x1 > x0 else x0 + 1.0
    plot_h = HEIGHT - _TOP - _BOTTOM
    plot_w = WIDTH - _LEFT - _RIGHT

    def x_of(x: float) -> float:
        return _LEFT + plot_w * (x - x0) / (x1 - x0)

    def y_of(v: float) -> float:
        return _TOP + plot_h * (1 - max(v, 0.0) / ticks[-1])

    body = _y_axis(ticks, y_of, y_unit, tick_digits(ticks))
    x_ticks = ticks_between(x0, x1)
    for t in x_ticks:
        body.append(f'<text class="tick" x="{_n(x_of(t))}" y="{HEIGHT - _BOTTOM + 14}" '
                    f'text-anchor="middle">{escape(_tick_label(t, tick_digits(x_ticks)))}</text>')
    body.append(f'<text class="axis" x="{_n(_LEFT + plot_w / 2)}" y="{HEIGHT - 6}" '
                f'text-anchor="middle">{escape(x_unit)}</text>')
    for ln in lines:
        pts = " ".join(f"{_n(x_of(x))},{_n(y_of(y))}"
                       for x, y in zip(xs, ln.ys, strict=True) if math.isfinite(y))
        body.append(f'<polyline fill="none" stroke="{escape(ln.series.color)}" '
                    f'stroke-width="1.5" points="{pts}"><title>{escape(ln.series.name)}'
                    "</title></polyline>")
    for mx, my, tip, color in marks:
        body.append(f'<circle cx="{_n(x_of(mx))}" cy="{_n(y_of(my))}" r="5" '
                    f'fill="{escape(color)}"><title>{escape(tip)}</title></circle>')
    if peak is not None:
        px, py, text = peak
        cx, cy = x_of(px), y_of(py)
        anchor = "end" if cx > WIDTH * 0.7 else "start"
        dx = -8 if anchor == "end" else 8
        body.append(f'<circle class="peak" cx="{_n(cx)}" cy="{_n(cy)}" r="4">'
                    f"<title>{escape(text)}</title></circle>")
        body.append(f'<text class="peak-label" x="{_n(cx + dx)}" y="{_n(max(cy, _TOP + 10))}" '
                    f'text-anchor="{anchor}">{escape(text)}</text>')
    return _svg(body, label)


def legend(series: Sequence[Series]) -> Markup:
    """The colour key of a chart, as HTML."""
    items = "".join(f'<span class="key"><i style="background:{escape(s.color)}"></i>'
                    f"{escape(s.name)}</span>" for s in series)
    return Markup(f'<div class="legend">{items}</div>')
