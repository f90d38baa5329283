"""Small inline SVG charts for the HTML report, returned as ``markupsafe.Markup``: every text that goes
into the SVG (titles, labels, legends, tooltips) is passed through ``markupsafe.escape``.
"""

from __future__ import annotations

from typing import Sequence

from markupsafe import Markup, escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#7f7f7f")
FONT = 'font-family="sans-serif"'


def _fmt(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".") if v != int(v) else str(int(v))


def _text(x: float, y: float, s: str, *, anchor: str = "middle", size: int = 12, extra: str = "") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" {FONT}{extra}>'
        f"{escape(s)}</text>"
    )


def _frame(width: int, height: int, title: str, left: float, pw: float, ymax: float, sy) -> list[str]:
    """A chart's opening lines: the svg element, its background and title, the grid and y ticks."""
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
        _text(width / 2, 18, title, size=13, extra=' font-weight="bold"'),
    ]
    for i in range(6):
        yv = ymax * i / 5
        y = sy(yv)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(_text(left - 6, y + 4, _fmt(round(yv, 2)), anchor="end", size=11))
    return out


def _ylabel(top: float, ph: float, ylabel: str) -> str:
    return (f'<text x="14" y="{top + ph / 2:.1f}" text-anchor="middle" font-size="12" {FONT} '
            f'transform="rotate(-90 14 {top + ph / 2:.1f})">{escape(ylabel)}</text>')


def line_chart(
    series: Sequence[tuple[str, Sequence[float], Sequence[float | None]]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    ymax: float = 100.0,
    width: int = 440,
    height: int = 310,
) -> Markup:
    """A line chart with markers; ``series`` is [(label, xs, ys)], ys may hold None (gap); the y axis
    runs from 0 to ``ymax``."""
    left, right, top, bottom = 58, 16, 34, 52
    pw, ph = width - left - right, height - top - bottom
    xs_all = [float(x) for _, xs, _ in series for x in xs]
    xmin, xmax = (min(xs_all), max(xs_all)) if xs_all else (0.0, 1.0)
    if xmax == xmin:
        xmin, xmax = xmin - 1, xmax + 1

    def sx(x: float) -> float:
        return left + (x - xmin) / (xmax - xmin) * pw

    def sy(y: float) -> float:
        return top + ph - y / ymax * ph

    out = _frame(width, height, title, left, pw, ymax, sy)
    # x ticks at the distinct x values
    for xv in sorted(set(xs_all)):
        x = sx(xv)
        out.append(f'<line x1="{x:.1f}" y1="{top + ph}" x2="{x:.1f}" y2="{top + ph + 5}" stroke="#333"/>')
        out.append(_text(x, top + ph + 18, _fmt(xv), size=11))
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    out.append(_text(left + pw / 2, height - 10, xlabel))
    out.append(_ylabel(top, ph, ylabel))
    for idx, (label, xs, ys) in enumerate(series):
        color = PALETTE[idx % len(PALETTE)]
        pts = [(float(x), float(y)) for x, y in zip(xs, ys) if y is not None]
        if len(pts) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in pts:
            out.append(
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="{color}">'
                f"<title>{escape(label)}: K={escape(_fmt(x))}, {escape(f'{y:.1f}')}</title></circle>"
            )
        # legend, bottom right inside the plot
        ly = top + ph - 12 - 16 * (len(series) - 1 - idx)
        lx = left + pw - 120
        out.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 18}" y2="{ly - 4}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<circle cx="{lx + 9}" cy="{ly - 4}" r="3.5" fill="{color}"/>')
        out.append(_text(lx + 24, ly, label, anchor="start", size=11))
    out.append("</svg>")
    return Markup("\n".join(out))


def bar_chart(
    categories: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    *,
    title: str,
    ylabel: str,
    ymax: float = 100.0,
    width: int = 560,
    height: int = 300,
) -> Markup:
    """Grouped bars: one group per category, one bar per series; None leaves a gap."""
    left, right, top, bottom = 58, 16, 34, 70
    pw, ph = width - left - right, height - top - bottom
    ncat, nser = max(len(categories), 1), max(len(series), 1)
    group_w = pw / ncat
    bar_w = group_w * 0.8 / nser

    def sy(y: float) -> float:
        return top + ph - min(max(y, 0.0), ymax) / ymax * ph

    out = _frame(width, height, title, left, pw, ymax, sy)
    for ci, cat in enumerate(categories):
        gx = left + ci * group_w + group_w * 0.1
        for si, (label, values) in enumerate(series):
            v = values[ci] if ci < len(values) else None
            if v is None:
                continue
            color = PALETTE[si % len(PALETTE)]
            x = gx + si * bar_w
            y = sy(float(v))
            out.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w * 0.92:.1f}" height="{top + ph - y:.1f}" '
                f'fill="{color}"><title>{escape(label)}, {escape(cat)}: {escape(f"{float(v):.1f}")}</title></rect>'
            )
        out.append(_text(left + ci * group_w + group_w / 2, top + ph + 16, cat, size=11))
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    out.append(_ylabel(top, ph, ylabel))
    # legend below the axis
    lx = left
    for si, (label, _) in enumerate(series):
        color = PALETTE[si % len(PALETTE)]
        ly = top + ph + 38
        out.append(f'<rect x="{lx:.1f}" y="{ly - 10}" width="12" height="12" fill="{color}"/>')
        out.append(_text(lx + 16, ly, label, anchor="start", size=11))
        lx += 24 + 7 * len(label)
    out.append("</svg>")
    return Markup("\n".join(out))
