"""A list's cells made into the kept columns' typed values (`tf_serving_input.columns`), or a `bad_value` detail.

    value = cell_value(Column("score", "float"), "0.25", separator="|")   # 0.25
    cell_value(Column("score", "float"), "abc", "|")   # raises BadValue("column 'score': 'abc' is not a float")

One conversion for every list format: a CSV or TSV cell is text (`labels` split on
`--list_separator`, `floats` and `boxes` as JSON arrays or separated numbers); a
Parquet or JSON Lines cell is already a number, a string or a list. The type comes
from the column, never from the value. A blank cell and a null are a missing value
(None: the record leaves the feature out). Floats: NaN is a missing value (what
pandas writes for one); an infinity, or a magnitude float32 cannot hold (stored as
float32, so it would become one), is a bad value. Pure Python.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

from tf_serving_input.columns import BOXES, FLOAT, FLOATS, INT, LABELS, MISSING_INT, TEXT, Box, Column, Value

DEFAULT_LIST_SEPARATOR = "|"
# What a label may not hold: TFT's vocabulary file is one label per line (TFT drops such tokens silently),
# and PostgreSQL text cannot hold NUL.
LABEL_BREAKERS = {"\x00": "a NUL byte", "\n": "a line break", "\r": "a carriage return",
                  "\x0b": "a vertical tab", "\x0c": "a form feed", "\x1c": "a file separator",
                  "\x1d": "a group separator", "\x1e": "a record separator", "\x85": "a next-line character",
                  "\u2028": "a line separator", "\u2029": "a paragraph separator"}
FLOAT32_MAX = 3.4028234663852886e38
# int64's least value is the reader's mark of a missing int (`columns.MISSING_INT`): no cell may hold it.
INT64_MIN, INT64_MAX = MISSING_INT + 1, 2 ** 63 - 1
# How much of a bad cell errors.jsonl quotes.
SHOWN_CHARS = 80


class BadValue(ValueError):
    """A cell that is not a value of its column's type; the message names the column and quotes the cell, cut."""


def quoted(raw: Any) -> str:
    """The cell as a detail quotes it: repr (escapes control and quote characters), cut to SHOWN_CHARS."""
    text = repr(raw)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"


# Characters no one sees that are not whitespace to str.strip: Unicode's format characters (category Cf: zero-width
# space and joiners, word joiner, BOM, bidi marks, soft hyphen) and the letters that render as blank space.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def _invisible(char: str) -> bool:
    return char.isspace() or char in _BLANK_LETTERS or unicodedata.category(char) == "Cf"


def is_blank(text: str) -> bool:
    """Whether a text cell shows nothing: empty, or only whitespace and invisible characters (a zero-width space,
    a word joiner, a BOM, a bidi mark). Such a cell is blank wherever a blank one is: a missing value, an
    unlabeled row, the default split, an empty label in a list."""
    stripped = text.strip()
    if not stripped:
        return True
    first = stripped[0]  # Every cell comes here: most are settled by their first character, in C.
    if first.isprintable() and first not in _BLANK_LETTERS:  # Format characters are not printable.
        return False
    return all(map(_invisible, stripped))


def a_type(value: Any) -> str:
    """'an int', 'a list': the article and the name of a value's Python type, for a detail."""
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def is_missing(raw: Any) -> bool:
    """A null, a blank text cell (`is_blank`) or (in a float column's reading) a NaN: the row has no value there."""
    if raw is None:
        return True
    if isinstance(raw, str):
        return is_blank(raw)
    return isinstance(raw, float) and math.isnan(raw)


def cell_value(column: Column, raw: Any, separator: str = DEFAULT_LIST_SEPARATOR) -> Value | None:
    """The typed value of one cell of `column`, None when missing; BadValue when it is not of the type."""
    try:
        if is_missing(raw):
            return None
        value = _CONVERTERS[column.type](raw, separator)
    except BadValue as error:
        raise BadValue(f"column {column.name!r}: {quoted(raw)} {error}") from None
    if isinstance(value, float) and math.isnan(value):
        return None  # 'nan' in a CSV, as pandas writes a missing float.
    if isinstance(value, tuple) and not value:
        return None  # An empty list is no value: the feature is left out, as for a blank cell.
    return value


def _int(raw: Any, separator: str) -> int:
    if isinstance(raw, bool):
        raise BadValue("is a boolean, not an int")
    if isinstance(raw, float):
        if not raw.is_integer():
            raise BadValue("is not an int")
        raw = int(raw)
    elif isinstance(raw, str):
        try:
            raw = int(raw.strip().replace("_", "x"), 10)  # int() takes '1_000'; a list's cell should not.
        except ValueError:
            raise BadValue("is not an int") from None
    elif not isinstance(raw, int):
        raise BadValue(f"is {a_type(raw)}, not an int")
    if not INT64_MIN <= raw <= INT64_MAX:
        raise BadValue("is out of the int64 range (its least value, -2**63, marks a missing int in a batch)")
    return raw


def _float(raw: Any, separator: str = DEFAULT_LIST_SEPARATOR) -> float:
    # A box's four numbers come here one by one: text first and no more calls than needed (a third of a row's
    # typing went here).
    if type(raw) is str:
        if "_" in raw:  # float() takes '1_000.5'; a list's cell should not.
            raise BadValue("is not a float")
        try:
            value = float(raw)  # Surrounding whitespace is float()'s to skip.
        except ValueError:
            raise BadValue("is not a float") from None
    elif isinstance(raw, bool):
        raise BadValue("is a boolean, not a float")
    elif isinstance(raw, (int, float)):
        value = float(raw)
    else:
        raise BadValue(f"is {a_type(raw)}, not a float")
    if not -FLOAT32_MAX <= value <= FLOAT32_MAX and value == value:  # NaN (value != value) is a missing value.
        raise BadValue("is infinite or beyond float32's range (stored as float32)")
    return value


def _text(raw: Any, separator: str) -> str:
    if not isinstance(raw, str):
        raise BadValue(f"is {a_type(raw)}, not text")
    return raw  # Kept whole: a 10k-character caption is stored as it is; only terminals cut it.


def _items(raw: Any, separator: str) -> list[Any]:
    """A list cell's items: a list as it is, JSON array text parsed, other text split on the separator."""
    if isinstance(raw, (list, tuple)):
        return list(raw)
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("["):
            try:
                parsed = json.loads(text)
            except ValueError:
                raise BadValue("is not a JSON array") from None
            if not isinstance(parsed, list):
                raise BadValue("is not a JSON array")
            return parsed
        return text.split(separator)
    raise BadValue(f"is {a_type(raw)}, not a list")


def _labels(raw: Any, separator: str) -> tuple[str, ...]:
    items = raw.split(separator) if isinstance(raw, str) else _items(raw, separator)
    labels = []
    for item in items:
        if not isinstance(item, str):
            raise BadValue(f"holds {a_type(item)}, not a label")
        label = item.strip()
        if is_blank(label):
            raise BadValue("holds an empty label (a separator at an edge or twice in a row)")
        bad = next((char for char in label if char in LABEL_BREAKERS), None)
        if bad is not None:
            raise BadValue(f"holds {LABEL_BREAKERS[bad]} in a label, which a label cannot hold")
        labels.append(label)
    return tuple(labels)


def _floats(raw: Any, separator: str) -> tuple[float, ...]:
    values = []
    for item in _items(raw, separator):
        try:
            value = _float(item)
        except BadValue as error:
            raise BadValue(f"holds an item that {error}") from None
        if math.isnan(value):
            raise BadValue("holds a NaN item (a list has no missing items)")
        values.append(value)
    return tuple(values)


def _boxes(raw: Any, separator: str) -> tuple[Box, ...]:
    """`[[xmin, ymin, xmax, ymax], ...]` (JSON or a list), one flat box, or boxes of 4 numbers (split on spaces
    or commas) separated by the separator; each normalized: 0 <= min <= max <= 1."""
    if isinstance(raw, str) and not raw.strip().startswith("["):
        groups: list[Sequence[Any]] = [part.replace(",", " ").split() for part in raw.split(separator)]
    else:
        items = _items(raw, separator)
        groups = [items] if len(items) == 4 and not any(isinstance(i, (list, tuple)) for i in items) else items
    boxes = []
    for group in groups:
        if not isinstance(group, (list, tuple)) or len(group) != 4:
            raise BadValue("holds a box that is not 4 numbers [xmin, ymin, xmax, ymax]")
        try:
            xmin, ymin, xmax, ymax = (_float(value) for value in group)
        except BadValue as error:
            raise BadValue(f"holds a box whose number {error}") from None
        if not (0.0 <= xmin <= xmax <= 1.0 and 0.0 <= ymin <= ymax <= 1.0):
            raise BadValue("holds a box that is not normalized (0 <= xmin <= xmax <= 1, 0 <= ymin <= ymax <= 1)")
        boxes.append((xmin, ymin, xmax, ymax))
    return tuple(boxes)


_CONVERTERS: dict[str, Callable[[Any, str], Value]] = {
    INT: _int, FLOAT: _float, TEXT: _text, LABELS: _labels, FLOATS: _floats, BOXES: _boxes}
