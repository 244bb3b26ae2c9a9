"""The kept columns of a list of images: their types, their feature keys in each record, and `features.json`.

The one owner of this contract: the job writes each kept column of a row under the
keys `Column.keys` gives and writes `features.json` beside the run (`FeatureSpec`);
the reader, the predict job, the database load and any `tf.io.parse_single_example`
user read them back from that file alone, with no flags.

A column's type is fixed by its declaration (`--column NAME:TYPE`) or by its list's
schema, never per value:

| type     | a row's value (Python)                        | record feature                       |
|----------|-----------------------------------------------|--------------------------------------|
| `int`    | int                                           | int64_list, 1 value                  |
| `float`  | float (stored as float32)                     | float_list, 1 value                  |
| `text`   | str (whole: a 10k-character caption is kept)  | bytes_list (UTF-8), 1 value          |
| `labels` | tuple of str                                  | bytes_list, one value per label      |
| `floats` | tuple of float (stored as float32)            | float_list                           |
| `boxes`  | tuple of (xmin, ymin, xmax, ymax), normalized | the TF Object Detection API's keys   |

A missing value is an absent feature (never "" or 0). Keys: `column/NAME` for every
type but `boxes`, so that no kept column can collide with the job's own `image/*`,
`label/*` keys; the run's one `boxes` column is written where detection code reads
boxes (`image/object/bbox/xmin` ...), and the `labels` column named as its boxes'
classes under `image/object/class/text`. Pure Python: no TensorFlow, no Beam.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any, Union

INT, FLOAT, TEXT, LABELS, FLOATS, BOXES = "int", "float", "text", "labels", "floats", "boxes"
COLUMN_TYPES = (INT, FLOAT, TEXT, LABELS, FLOATS, BOXES)
NUMERIC_TYPES = (INT, FLOAT)
LIST_TYPES = (LABELS, FLOATS, BOXES)

COLUMN_PREFIX = "column/"
BOX_KEYS = ("image/object/bbox/xmin", "image/object/bbox/ymin", "image/object/bbox/xmax", "image/object/bbox/ymax")
BOX_CLASS_KEY = "image/object/class/text"
FEATURES_FILE = "features.json"
FEATURES_VERSION = 1
# A column's name is at most this long: it becomes a feature key, an Arrow field, a JSON key in the database.
MAX_NAME_CHARS = 64

# An int column's missing value where a dense batch needs one (`column_parsing.integers`): int64's least value,
# so that no cell may hold it (`beam_pipeline/inputs/cells.py` refuses it as out of range).
MISSING_INT = -(2 ** 63)

Box = tuple[float, float, float, float]
Value = Union[int, float, str, tuple[str, ...], tuple[float, ...], tuple[Box, ...]]


class ColumnError(ValueError):
    """The kept columns cannot be used as declared; the message names the column and the reason."""


@dataclasses.dataclass(frozen=True)
class Column:
    """One kept column: its name in the list (case kept) and its type (one of COLUMN_TYPES).

    `box_classes` marks the `labels` column that holds the classes of the run's `boxes`
    column, one per box, in order.
    """

    name: str
    type: str
    box_classes: bool = False

    @property
    def keys(self) -> tuple[str, ...]:
        """The record's feature keys of this column: one, or four for `boxes`."""
        if self.type == BOXES:
            return BOX_KEYS
        if self.box_classes:
            return (BOX_CLASS_KEY,)
        return (COLUMN_PREFIX + self.name,)

    def to_json(self) -> dict[str, Any]:
        """This column as features.json lists it (its keys too, for a reader that knows no rules)."""
        entry: dict[str, Any] = {"name": self.name, "type": self.type, "keys": list(self.keys)}
        if self.box_classes:
            entry["box_classes"] = True
        return entry


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a kept column, or None: 1-64 printable characters, no '/', no edge spaces."""
    if not name:
        return "a column name cannot be empty"
    if len(name) > MAX_NAME_CHARS:
        return f"a column name is at most {MAX_NAME_CHARS} characters (this one has {len(name)})"
    if name != name.strip():
        return "a column name cannot start or end with a space"
    if "/" in name:
        return "a column name cannot hold '/' (it separates the parts of a feature key)"
    if not name.isprintable():
        return "a column name cannot hold control, bidi or other unprintable characters"
    return None


def check_columns(columns: Iterable[Column]) -> tuple[Column, ...]:
    """The columns, or ColumnError: a bad name or type, a duplicate (names that differ only in case
    included), more than one `boxes` column, or box classes that are not one `labels` column beside a
    `boxes` column."""
    checked = tuple(columns)
    seen: dict[str, str] = {}
    for column in checked:
        problem = name_problem(column.name)
        if problem:
            raise ColumnError(f"column {column.name!r}: {problem}")
        if column.type not in COLUMN_TYPES:
            raise ColumnError(f"column {column.name!r}: type {column.type!r} is not one of {', '.join(COLUMN_TYPES)}")
        folded = column.name.casefold()
        if folded in seen:
            raise ColumnError(f"column {column.name!r} is named twice"
                              + (f" (as {seen[folded]!r}: names may not differ only in case)"
                                 if seen[folded] != column.name else ""))
        seen[folded] = column.name
    boxes = [column for column in checked if column.type == BOXES]
    if len(boxes) > 1:
        raise ColumnError(f"columns {boxes[0].name!r} and {boxes[1].name!r} are both boxes: a record holds one "
                          f"set of boxes, under {BOX_KEYS[0].rsplit('/', 1)[0]}/*")
    classes = [column for column in checked if column.box_classes]
    if classes and (len(classes) > 1 or classes[0].type != LABELS or not boxes):
        raise ColumnError("the boxes' classes must be one labels column beside a boxes column")
    return checked


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """What features.json records: the kept columns in order, and whether the label is multi-valued.

    `multi_label`: the label column is of type `labels`, so `label/text` holds 0..n labels per record
    (else 0 or 1).
    """

    columns: tuple[Column, ...] = ()
    multi_label: bool = False

    def column(self, name: str) -> Column:
        """The kept column `name`; KeyError naming the kept ones when there is none."""
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"no kept column {name!r}; the run keeps: {', '.join(c.name for c in self.columns) or 'none'}")

    def to_json(self) -> dict[str, Any]:
        return {"version": FEATURES_VERSION, "multi_label": self.multi_label,
                "columns": [column.to_json() for column in self.columns]}

    def dumps(self) -> str:
        """features.json's text (stable: the same spec always gives the same bytes)."""
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FeatureSpec:
        """The spec features.json holds; ColumnError when it is not one this version writes (a value of the
        wrong JSON type included: a name that is not a string, a multi_label that is not true or false)."""
        if not isinstance(data, Mapping) or data.get("version") != FEATURES_VERSION:
            raise ColumnError(f"{FEATURES_FILE} is not version {FEATURES_VERSION} of the features file")
        entries, multi_label = data.get("columns", []), data.get("multi_label", False)
        if not isinstance(entries, list) or not isinstance(multi_label, bool):
            raise ColumnError(f"{FEATURES_FILE}: 'columns' must be a list and 'multi_label' true or false")
        columns = []
        for entry in entries:
            if not (isinstance(entry, Mapping) and isinstance(entry.get("name"), str)
                    and isinstance(entry.get("type"), str) and isinstance(entry.get("box_classes", False), bool)):
                raise ColumnError(f"{FEATURES_FILE}: a column entry is not an object with a string name and type")
            column = Column(entry["name"], entry["type"], entry.get("box_classes", False))
            if "keys" in entry and entry["keys"] != list(column.keys):  # What a reader that knows no rules reads.
                raise ColumnError(f"{FEATURES_FILE}: column {column.name!r} lists keys {entry['keys']!r}, not its "
                                  f"keys {list(column.keys)!r}")
            columns.append(column)
        return cls(columns=check_columns(columns), multi_label=multi_label)


def load_feature_spec(output_dir: str, manifest: Mapping[str, Any] | None = None) -> FeatureSpec:
    """The run's kept columns, from its features.json, checked against its manifest; no TensorFlow.

    A run written before features.json existed keeps no columns: its spec is the manifest's (none, single
    label). A features.json that is damaged (not JSON, a value of the wrong type) or says anything else than
    the manifest's configuration records (what the run's fingerprint and a resume trust; compared in full, so
    that one changed byte of a key is caught too) is refused with a ColumnError naming the file, in one line.
    """
    from tf_serving_input.layout import OutputLayout, exists, read_text  # layout imports this module.

    layout = OutputLayout(output_dir)
    manifest = layout.load_manifest() if manifest is None else manifest
    recorded = manifest.get("config", {}).get("features")
    expected = FeatureSpec() if recorded is None else FeatureSpec.from_json(recorded)
    path = layout.features_file
    if not exists(path):
        return expected
    try:
        data = json.loads(read_text(path))
    except ValueError as error:  # A flipped byte, a cut copy, bytes that are not UTF-8.
        raise ColumnError(f"{path} is not valid JSON ({_first_line(error)}): the run's features file is damaged; "
                          f"its content is the manifest's config.features") from None
    try:
        found = FeatureSpec.from_json(data)
    except ColumnError as error:
        raise ColumnError(f"{path}: {str(error).removeprefix(FEATURES_FILE + ': ')}") from None
    if found != expected or data != expected.to_json():
        raise ColumnError(f"{path} does not match the run's manifest (config.features): damaged, or changed by hand?")
    return found


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else type(error).__name__


# A multi-label record's labels as one text, where one text is all a consumer holds (the quality job's signals,
# the predictions' `label`, inspect's contact sheet): joined by this, '' when there is none.
LABELS_JOINED_BY = "|"


def joined_labels(labels: Iterable[str]) -> str:
    """A record's labels (`label/text`'s values) as one text: 'cat|dog', 'cat', or '' (none)."""
    return LABELS_JOINED_BY.join(labels)
