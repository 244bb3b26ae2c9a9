"""The kept columns' statistics as summary lines: the end-of-run summary and `inspect` show the same.

    column score           float: 5 (1 missing), mean 0.52, std 0.21, min 0.1, max 0.9
    column tags            labels: 5 (1 missing), 1.8 per image (1-3); 4: cat 3, dog 2, "a, b" 1, ...

From `column_stats.json` (`tf_serving_input/column_stats.py`), whose numbers are the
train split's; every name and label is someone else's text, so each is escaped and cut
(`terminal.shown`). No TensorFlow, no Beam.
"""

from __future__ import annotations

from typing import Any

from beam_pipeline.common import terminal
from tf_serving_input.columns import BOXES, FLOAT, INT, LABELS, TEXT

# A column's name in the summary's first column: "column " and at most this many characters.
NAME_WIDTH = 14
# How much of a vocabulary a line shows.
VOCABULARY_WIDTH = 100


def _number(value: Any, digits: int = 4) -> str:
    if value is None:
        return "none"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}g}"


def _spread(stats: dict[str, Any]) -> str:
    """'1.8 per image (1-3)': a mean and its range."""
    return f"{_number(stats['mean'], 3)} ({_number(stats['min'])}-{_number(stats['max'])})"


def _counts(entry: dict[str, Any]) -> str:
    return f"{entry['count']}" + (f" ({entry['missing']} missing)" if entry["missing"] else "")


def _vocabulary(entry: dict[str, Any]) -> str:
    vocabulary = entry.get("vocabulary") or []
    pairs = [(label, count) for label, count in vocabulary]
    return f"{len(vocabulary)}: {terminal.shown_counts(pairs, VOCABULARY_WIDTH)}"


def column_line(entry: dict[str, Any]) -> str:
    """One column's statistics in a line: its type, how many train images have a value, then by type."""
    kind = entry["type"]
    parts = [f"{kind}: {_counts(entry)}"]
    if not entry["count"]:
        return parts[0] + ", no value in the train split"
    if kind in (INT, FLOAT):
        parts.append(f"mean {_number(entry['mean'])}, std {_number(entry['std'])}, "
                     f"min {_number(entry['min'], 7)}, max {_number(entry['max'], 7)}")
    elif kind == TEXT:
        parts.append(f"{_spread(entry['characters'])} characters")
    elif kind == BOXES:
        classes = f"; classes in {terminal.shown(entry['classes'], NAME_WIDTH)}" if entry.get("classes") else ""
        parts.append(f"{entry['items']} boxes, {_spread(entry['per_image'])} per image{classes}")
    else:
        parts.append(f"{entry['items']} {'labels' if kind == LABELS else 'items'}, "
                     f"{_spread(entry['per_image'])} per image")
    line = ", ".join(parts)
    return line + (f"; {_vocabulary(entry)}" if kind == LABELS else "") + _unheld(entry)


def _unheld(entry: dict[str, Any]) -> str:
    """Labels a vocabulary could not hold (should one ever reach it): said, never left out silently."""
    unheld = entry.get("not_in_vocabulary")
    return f"; {unheld} labels not in the vocabulary (empty, or holding a line break)" if unheld else ""


def summary_rows(document: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The summary's lines of a run's column statistics (`column_stats.read_document`); none without."""
    if not document:
        return []
    rows = [("columns (train)", f"{document['images']} images analysed")]
    for name, entry in document["columns"].items():
        rows.append((f"column {terminal.shown(name, NAME_WIDTH)}", column_line(entry)))
    label = document.get("label")
    if label is not None:
        if document.get("multi_label"):
            without = f"; without a label: {label['missing']}" if label["missing"] else ""
            rows.append(("labels per image", f"{_spread(label['per_image'])}{without}"
                         if label["count"] else "no label in the train split"))
        rows.append(("label counts", _vocabulary(label) + _unheld(label)))
    return rows
