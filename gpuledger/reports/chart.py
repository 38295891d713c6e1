"""Small deterministic SVG bar charts for the HTML statement: inline markup, no script, no fonts
to fetch, the same bytes for the same figures (numbers printed with fixed decimals)."""

from __future__ import annotations

from html import escape

PALETTE = ("#2f6db5", "#b5b5b5", "#d9822b", "#5a9e4b", "#8e5ba8", "#c44e52")


def _fmt(x: float) -> str:
    return f"{x:.1f}"


def stacked_bars(title: str, categories: list[str], series: list[tuple[str, list[float]]], *, unit: str,
                 width: int = 760, bar_h: int = 22) -> str:
    """Horizontal stacked bars: one bar per category, one segment per series (label, values).
    Values below zero are drawn as zero (corrections are listed in the tables, not drawn)."""
    label_w, pad, legend_h = 170, 8, 22
    plot_w = width - label_w - 150  # room for the total printed after the bar
    totals = [sum(max(v[i], 0.0) for _, v in series) for i in range(len(categories))]
    peak = max(totals, default=0.0) or 1.0
    height = 30 + legend_h + len(categories) * (bar_h + pad) + pad
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
              f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, sans-serif" font-size="12">'),
             f"<title>{escape(title)}</title>",
             f'<text x="0" y="16" font-size="14" font-weight="bold">{escape(title)}</text>']
    x = 0
    for k, (name, _) in enumerate(series):
        color = PALETTE[k % len(PALETTE)]
        parts.append(f'<rect x="{x}" y="26" width="12" height="12" fill="{color}"/>'
                     f'<text x="{x + 16}" y="36">{escape(name)}</text>')
        x += 24 + 8 * len(name)
    y = 30 + legend_h
    for i, cat in enumerate(categories):
        parts.append(f'<text x="{label_w - 6}" y="{y + bar_h - 6}" text-anchor="end">{escape(cat)}</text>')
        left = float(label_w)
        for k, (name, values) in enumerate(series):
            w = max(values[i], 0.0) / peak * plot_w
            if w > 0:
                parts.append(f'<rect x="{_fmt(left)}" y="{y}" width="{_fmt(w)}" height="{bar_h}" '
                             f'fill="{PALETTE[k % len(PALETTE)]}"><title>{escape(cat)} {escape(name)}: '
                             f'{values[i]:,.2f} {escape(unit)}</title></rect>')
            left += w
        parts.append(f'<text x="{_fmt(left + 4)}" y="{y + bar_h - 6}">{totals[i]:,.2f} {escape(unit)}</text>')
        y += bar_h + pad
    parts.append("</svg>")
    return "".join(parts)
