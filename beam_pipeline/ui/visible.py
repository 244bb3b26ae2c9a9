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


def install(environment: Any) -> None:
    """Makes `visible` the finalizer of every expression of `environment`'s templates, and adds `as_value`."""
    environment.finalize = visible
    environment.filters["as_value"] = escape
