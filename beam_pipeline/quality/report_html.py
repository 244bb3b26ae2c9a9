"""report.html: one static page (no script, no network: thumbnails are data URIs), small at any size.

Each section shows its count and only its top N entries; the Parquet files hold the full lists.
Every text from the data (sources, labels, splits) is escaped, control characters shown as \\xNN.
"""

from __future__ import annotations

import dataclasses
import html
import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

_STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{margin:0 0 4px}h2{margin:28px 0 6px;border-bottom:1px solid #ccc}
table.summary td{padding:2px 12px 2px 0}.count{color:#666;font-weight:normal}
.entry{background:#fff;border:1px solid #ddd;border-radius:6px;margin:8px 0;padding:8px}
.entry h3{font-size:13px;margin:0 0 6px}.tag{display:inline-block;border-radius:3px;padding:0 5px;margin-right:4px;
font-size:11px;background:#eee}.leak{background:#fdd}.conflict{background:#ffd8a8}.exact{background:#d3f9d8}
.warnings li{background:#fdd;border-radius:4px;padding:4px 8px;margin:4px 0;list-style:none}
figure{display:inline-block;margin:4px;width:112px;vertical-align:top}figure img{width:96px;height:96px;
image-rendering:auto;border:1px solid #ccc}figcaption{font-size:11px;word-break:break-all}.more{color:#666}
"""


def text(value: Any) -> str:
    """HTML-escaped text, control characters (NUL, line breaks) made visible as \\xNN."""
    escaped = html.escape(str(value), quote=True)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", escaped).replace("\n", "\\n")


@dataclasses.dataclass(frozen=True)
class Figure:
    """One image shown: its thumbnail (data URI or None), caption lines."""

    thumbnail: str | None
    caption: list[str]


@dataclasses.dataclass(frozen=True)
class Entry:
    """One group or image shown in a section: a heading, tags, figures, and how many members are not shown."""

    heading: str
    tags: list[tuple[str, str]]  # (css class, text)
    figures: list[Figure]
    hidden: int = 0


@dataclasses.dataclass(frozen=True)
class Section:
    """A section: id, title, the full count, what the count counts, and its top entries."""

    id: str
    title: str
    count: int
    unit: str
    entries: list[Entry]
    note: str = ""


def _figure(figure: Figure) -> str:
    image = (f'<img src="{figure.thumbnail}" alt="">' if figure.thumbnail
             else '<span class="more">(no thumbnail)</span>')
    lines = "<br>".join(text(line) for line in figure.caption)
    return f"<figure>{image}<figcaption>{lines}</figcaption></figure>"


def _entry(entry: Entry) -> str:
    tags = "".join(f'<span class="tag {cls}">{text(label)}</span>' for cls, label in entry.tags)
    hidden = f'<span class="more">… and {entry.hidden} more</span>' if entry.hidden else ""
    return (f'<div class="entry"><h3>{text(entry.heading)} {tags}</h3>'
            f'{"".join(_figure(f) for f in entry.figures)}{hidden}</div>')


def render(title: str, summary_rows: list[tuple[str, Any]], sections: list[Section],
           warnings: list[str] = ()) -> str:
    """The whole page; `warnings` (one line each) stand first, above the summary."""
    rows = "".join(f"<tr><td>{text(name)}</td><td>{text(value)}</td></tr>" for name, value in summary_rows)
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{text(title)}</title>"
             f"<style>{_STYLE}</style></head><body><h1>{text(title)}</h1>",
             *([f'<section id="warnings" data-count="{len(warnings)}"><h2>Warnings</h2><ul class="warnings">'
                + "".join(f"<li>{text(w)}</li>" for w in warnings) + "</ul></section>"] if warnings else []),
             f'<section id="summary"><h2>Summary</h2><table class="summary">{rows}</table></section>']
    for section in sections:
        shown = len(section.entries)
        more = f" (top {shown} shown)" if shown < section.count else ""
        note = f"<p>{text(section.note)}</p>" if section.note else ""
        body = "".join(_entry(e) for e in section.entries) or "<p>None.</p>"
        parts.append(f'<section id="{text(section.id)}" data-count="{section.count}"><h2>{text(section.title)} '
                     f'<span class="count">{section.count} {text(section.unit)}{more}</span></h2>{note}{body}'
                     "</section>")
    parts.append("</body></html>\n")
    return "".join(parts)
