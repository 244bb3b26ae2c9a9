"""A horizontal bar chart as SVG text, drawn on the server: no JavaScript, no build step, no CDN."""

from __future__ import annotations

from xml.sax.saxutils import escape

from beam_pipeline.common.terminal import escaped

BAR_HEIGHT = 22
LABEL_WIDTH = 160
BAR_WIDTH = 360


def bar_chart(counts: dict[str, int], title: str) -> str:
    """An <svg> of one bar per (name, count), largest first; names escaped for XML and their invisible characters
    shown (`terminal.escaped`: they come from the CSV)."""
    items = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    top = max((count for _, count in items), default=0) or 1
    height = BAR_HEIGHT * len(items) + 8
    width = LABEL_WIDTH + BAR_WIDTH + 60
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" class="chart"><title>{escape(title)}</title>']
    for row, (stored, count) in enumerate(items):
        name = escaped(stored)  # Bidi and zero-width characters shown as their escapes, as on every page.
        y = 4 + row * BAR_HEIGHT
        length = max(1, round(BAR_WIDTH * count / top))
        shown = escape(name if len(name) <= 24 else name[:23] + "…") or "(unlabeled)"
        parts.append(f'<text x="{LABEL_WIDTH - 6}" y="{y + 15}" text-anchor="end">{shown}</text>'
                     f'<rect x="{LABEL_WIDTH}" y="{y + 2}" width="{length}" height="{BAR_HEIGHT - 6}" '
                     f'fill="#4a78b5"><title>{escape(name)}: {count}</title></rect>'
                     f'<text x="{LABEL_WIDTH + length + 6}" y="{y + 15}">{count}</text>')
    parts.append("</svg>")
    return "".join(parts)
