"""Stored text on the UI's pages: what a reader cannot see is shown escaped, on every page, by one rule.

Labels, sources, keys, reasons and details come from someone else's CSV and files. A right-to-left
override (U+202E) makes `cat.jpg` read `gpj.tac`; a zero-width space (U+200B) makes two different labels
look the same. `install` makes every `{{ value }}` of every template pass through `visible`, so no page
can forget it: each character a terminal would escape (`terminal.escaped`: controls, bidi overrides and
isolates, zero-width characters) is written as its escape (`\\u202e`) before the HTML escaping. A form's
value must stay the stored text (a filter is checked against the run's own labels): `{{ value|as_value }}`
keeps it as it is, HTML-escaped only.
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup, escape

from beam_pipeline.common.terminal import escaped


def visible(value: Any) -> Any:
    """A template expression's value as a page shows it: text with its invisible characters escaped; markup
    (a macro's output, `|safe`, `|as_value`) and other values as they are."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return escaped(value)
    return value


NOT_MEASURED = "\u2014"  # An em dash: what a figure reads as when it is None (the run did not measure it).


def readable(value: Any) -> str:
    """A figure of a summary (summary.json's, any shape) as text for people, not Python's repr:
    `{"rows": 20, "rows_moved": 1}` reads `rows 20, rows moved 1`, None an em dash, True `yes`, 100000
    `100,000`; a list is its items joined by commas, and a container inside another is in parentheses.
    Fields this page does not know yet read the same way."""
    if value is None:
        return NOT_MEASURED
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return ", ".join(f"{label(key)} {_inner(item)}" for key, item in value.items()) or "none"
    if isinstance(value, list | tuple):
        return ", ".join(_inner(item) for item in value) or "none"
    return str(value)


def _inner(value: Any) -> str:
    """A value inside a list or dict: in parentheses when it is a non-empty container itself."""
    text = readable(value)
    return f"({text})" if isinstance(value, dict | list | tuple) and value else text


def label(name: Any) -> str:
    """A summary field's name as a heading: `rows_moved` reads `rows moved`."""
    return str(name).replace("_", " ")


def install(environment: Any) -> None:
    """Makes `visible` the finalizer of every expression of `environment`'s templates, and adds `as_value`,
    `readable` and `label`."""
    environment.finalize = visible
    environment.filters["as_value"] = escape
    environment.filters["readable"] = readable
    environment.filters["label"] = label
