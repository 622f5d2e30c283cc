"""Inline SVG charts for the HTML quote (memory bars, roofline, scaling curve), drawn without JavaScript."""

from __future__ import annotations

import math
from typing import Callable

from markupsafe import Markup, escape

WIDTH = 640
Number = Callable[[float], str]     # how the quote writes a number (Messages.number)


def _svg(height: int, title: str, body: list[str], css_class: str) -> Markup:
    return Markup(
        f'<svg class="chart {css_class}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        f'<title>{escape(title)}</title>{"".join(body)}</svg>')


def _text(x: float, y: float, text: str, anchor: str = "start", cls: str = "") -> str:
    css = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{css}>{escape(text)}</text>'


def _log_axis(lo: float, hi: float, start: float, end: float, base: float = 10):
    """Map [lo, hi] on a log scale to pixels [start, end]."""
    span = math.log(hi, base) - math.log(lo, base)
    return lambda v: start + (math.log(v, base) - math.log(lo, base)) / span * (end - start)


def memory_bars(rows: list[tuple[str, float, str, bool]], capacity: tuple[str, float, str] | None,
                title: str) -> Markup:
    """Horizontal bars (label, GB, text, is_total) with a line at the GPU's memory (label, GB, text)."""
    if not rows:
        return Markup("")
    left, right, row_h, top = 200, WIDTH - 90, 28, 50
    most = max([r[1] for r in rows] + ([capacity[1]] if capacity else [])) or 1
    scale = (right - left) / (most * 1.05)
    height = top + row_h * len(rows) + 16
    body, values = [_text(0, 18, title, cls="title")], []
    for i, (label, gb, text, total) in enumerate(rows):
        y = top + i * row_h
        over = total and capacity is not None and gb > capacity[1]
        cls = "bar total over" if over else "bar total" if total else "bar"
        body.append(_text(left - 8, y + 17, label, "end"))
        body.append(f'<rect class="{cls}" x="{left}" y="{y + 4}" width="{max(gb * scale, 1):.1f}" '
                    f'height="{row_h - 8}"/>')
        values.append(_text(left + gb * scale + 6, y + 17, text, cls="value"))
    if capacity:
        x = left + capacity[1] * scale
        body.append(f'<line class="limit" x1="{x:.1f}" x2="{x:.1f}" y1="{top - 6}" '
                    f'y2="{height - 8}"/>')
        body.append(_text(x, top - 10, f"{capacity[0]} {capacity[2]}", "middle", "limit-label"))
    return _svg(height, title, body + values, "memory")     # figures drawn over the line


def roofline(peak: float, ridge: float, intensity: float, attainable: float, number: Number,
             labels: dict[str, str]) -> Markup:
    """Log-log roofline: the bandwidth slope up to the ridge point, the flat compute roof, and the workload."""
    if not all(isinstance(v, (int, float)) and v > 0 and math.isfinite(v)
               for v in (peak, ridge, intensity, attainable)):
        return Markup("")
    bandwidth = peak / ridge                  # TFLOPS ÷ (FLOP/byte) = TB/s
    x_lo = 10 ** math.floor(math.log10(min(intensity, ridge)) - 1)
    x_hi = 10 ** math.ceil(math.log10(max(intensity, ridge)) + 1)
    y_lo = min(bandwidth * x_lo, attainable) / 2
    y_hi = peak * 2
    left, right, top, bottom, height = 70, WIDTH - 20, 56, 310, 350
    fx, fy = _log_axis(x_lo, x_hi, left, right), _log_axis(y_lo, y_hi, bottom, top)
    body = [_text(0, 18, labels["title"], cls="title"),
            f'<line class="axis" x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>',
            f'<line class="axis" x1="{left}" y1="{bottom}" x2="{left}" y2="{top}"/>']
    for k in range(round(math.log10(x_lo)), round(math.log10(x_hi)) + 1):
        body.append(_text(fx(10 ** k), bottom + 16, number(10 ** k), "middle", "tick"))
    for k in range(math.ceil(math.log10(y_lo)), math.floor(math.log10(y_hi)) + 1):
        body.append(_text(left - 6, fy(10 ** k) + 4, number(10 ** k), "end", "tick"))
    body.append(_text((left + right) / 2, height - 6, labels["x"], "middle", "axis-label"))
    body.append(_text(left - 6, top - 14, labels["y"], cls="axis-label"))
    roof = [(x_lo, bandwidth * x_lo), (ridge, peak), (x_hi, peak)]
    body.append('<polyline class="roof" points="'
                + " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in roof) + '"/>')
    body.append(f'<line class="ridge" x1="{fx(ridge):.1f}" x2="{fx(ridge):.1f}" y1="{fy(peak):.1f}" '
                f'y2="{bottom}"/>')
    body.append(_text(fx(ridge) + 4, bottom - 8, f"{labels['ridge']} {number(ridge)}", cls="tick"))
    px, py = fx(intensity), fy(attainable)
    body.append(f'<circle class="point" cx="{px:.1f}" cy="{py:.1f}" r="6"/>')
    # above-left or below-right of the point: both sides stay clear of the rising roof
    left_half = px > (left + right) / 2
    body.append(_text(px - 10 if left_half else px + 10, py - 10 if left_half else py + 20,
                      f"{labels['point']}: {number(attainable)} TFLOPS",
                      "end" if left_half else "start", "point-label"))
    return _svg(height, labels["title"], body, "roofline")


def scaling_curve(counts: list[int], speedups: list[float], chosen: int, number: Number,
                  labels: dict[str, str]) -> Markup:
    """Speedup against GPU count on log-log axes, beside the ideal (linear) diagonal."""
    points = [(n, s) for n, s in zip(counts, speedups) if n > 0 and s and s > 0]
    if len(points) < 2:
        return Markup("")
    n_lo, n_hi = points[0][0], points[-1][0]
    s_lo = min(min(s for _, s in points), n_lo)
    s_hi = max(max(s for _, s in points), n_hi)
    left, right, top, bottom, height = 60, WIDTH - 30, 56, 290, 330
    fx = _log_axis(n_lo, n_hi * 1.0001, left, right, 2)
    fy = _log_axis(s_lo / 1.2, s_hi * 1.2, bottom, top, 2)
    body = [_text(0, 18, labels["title"], cls="title"),
            f'<line class="axis" x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>',
            f'<line class="axis" x1="{left}" y1="{bottom}" x2="{left}" y2="{top}"/>',
            f'<line class="ideal" x1="{fx(n_lo):.1f}" y1="{fy(n_lo):.1f}" x2="{fx(n_hi):.1f}" '
            f'y2="{fy(n_hi):.1f}"/>',
            '<polyline class="actual" points="'
            + " ".join(f"{fx(n):.1f},{fy(s):.1f}" for n, s in points) + '"/>']
    exponents = range(math.ceil(math.log2(s_lo / 1.2)), math.floor(math.log2(s_hi * 1.2)) + 1)
    for k in exponents[::max(1, math.ceil(len(exponents) / 8))]:
        body.append(_text(left - 6, fy(2 ** k) + 4, number(2 ** k), "end", "tick"))
    for n, s in points:
        body.append(_text(fx(n), bottom + 16, number(n), "middle", "tick"))
        cls = "point chosen" if n == chosen else "point"
        body.append(f'<circle class="{cls}" cx="{fx(n):.1f}" cy="{fy(s):.1f}" '
                    f'r="{6 if n == chosen else 3.5}"/>')
    body.append(_text(left - 6, top - 14, labels["y"], cls="axis-label"))
    body.append(_text((left + right) / 2, height - 6, labels["x"], "middle", "axis-label"))
    # a legend in the empty top-left corner, so no label sits on a line
    x, y = left + 16, top + 6
    body += [f'<line class="actual" x1="{x}" y1="{y}" x2="{x + 24}" y2="{y}"/>',
             _text(x + 30, y + 4, labels["y"], cls="tick"),
             f'<line class="ideal" x1="{x}" y1="{y + 18}" x2="{x + 24}" y2="{y + 18}"/>',
             _text(x + 30, y + 22, labels["ideal"], cls="tick")]
    quoted = next((s for n, s in points if n == chosen), None)
    if quoted is not None:
        body += [f'<circle class="point chosen" cx="{x + 12}" cy="{y + 36}" r="5"/>',
                 _text(x + 30, y + 40, f"{labels['chosen']}: {number(chosen)} → {number(quoted)}×",
                       cls="point-label")]
    return _svg(height, labels["title"], body, "scaling")
