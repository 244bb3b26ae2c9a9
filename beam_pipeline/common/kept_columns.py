"""A record's kept columns read back (`tf_serving_input.columns` keys) as JSON: what the predictions keep.

    values = from_record(record, spec)   # {"score": 0.5, "tags": ["a", "b"], ...}: a serialized Example
    text = to_json(values)               # the predictions' `columns` cell

The predictions' Parquet and the database keep a run's kept columns as one JSON
object per image (a `columns` text column, `jsonb` in PostgreSQL), by column name:
whatever names and how many columns a run keeps, the predictions' schema and the
table stay the same, and no column name ever becomes SQL. Numbers are JSON numbers
(float32 values written as their shortest float32 decimal: 0.1, not
0.10000000149011612), `labels` and `floats` arrays, `boxes` arrays of
[xmin, ymin, xmax, ymax]. A missing value has no key. Pure Python and NumPy.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from beam_pipeline.common import example_wire
from tf_serving_input.columns import BOXES, FLOAT, FLOATS, INT, LABELS, TEXT, FeatureSpec, Value

EMPTY = "{}"


def _float32(value: float) -> float:
    """A float32 value as the shortest decimal that float32 reads back the same."""
    return float(str(np.float32(value)))


def from_record(record: bytes, spec: FeatureSpec) -> dict[str, Any]:
    """{column name: JSON value} of one serialized tf.train.Example (no TensorFlow: the UI reads it too)."""
    if not spec.columns:
        return {}
    wanted = {key for column in spec.columns for key in column.keys}
    return from_lists(feature_lists(record, wanted), spec)


def from_lists(lists: Mapping[str, list[Any]], spec: FeatureSpec) -> dict[str, Any]:
    """{column name: JSON value} from {feature key: its values} (bytes, floats or ints)."""
    values: dict[str, Any] = {}
    for column in spec.columns:
        found = [lists.get(key) or [] for key in column.keys]
        if not all(found):
            continue  # A missing value: the record has no such feature.
        first = found[0]
        if column.type == BOXES:
            values[column.name] = [[_float32(side) for side in box] for box in zip(*found)]
        elif column.type == INT:
            values[column.name] = int(first[0])
        elif column.type == FLOAT:
            values[column.name] = _float32(first[0])
        elif column.type == FLOATS:
            values[column.name] = [_float32(value) for value in first]
        elif column.type == TEXT:
            values[column.name] = first[0].decode("utf-8")
        elif column.type == LABELS:
            values[column.name] = [value.decode("utf-8") for value in first]
    return values


def feature_lists(record: bytes, wanted: Iterable[str]) -> dict[str, list[Any]]:
    """{key: values} of the `wanted` features of a serialized tf.train.Example: a BytesList's bytes, a
    FloatList's floats, an Int64List's ints (packed or not). ValueError when the record does not parse."""
    try:
        return _feature_lists(record, set(wanted))
    except IndexError:
        raise ValueError("the record ends inside a field") from None


def _feature_lists(record: bytes, wanted: set[str]) -> dict[str, list[Any]]:
    lists: dict[str, list[Any]] = {}
    for raw_name, feature_start, feature_end in example_wire.feature_entries(record, 0, len(record)):
        name = raw_name.decode("utf-8", "replace")
        if name in wanted:
            lists[name] = _feature_values(record, feature_start, feature_end)
    return lists


def _feature_values(data: bytes, start: int, end: int) -> list[Any]:
    """The values of one Feature message (its one list)."""
    values: list[Any] = []
    for kind, list_start, list_end in example_wire.fields(data, start, end):
        for number, value_start, value_end in example_wire.fields(data, list_start, list_end, scalars=True):
            if number != 1:
                continue
            if kind == 1:  # BytesList.value
                values.append(bytes(data[value_start:value_end]))
            elif kind == 2:  # FloatList.value: packed (length-delimited) or one fixed32
                chunk = data[value_start:value_end]
                values.extend(struct.unpack(f"<{len(chunk) // 4}f", chunk))
            elif kind == 3:  # Int64List.value: packed varints, or one varint (its value in value_start)
                if value_end is None:
                    values.append(_signed(value_start))
                else:
                    pos = value_start
                    while pos < value_end:
                        value, pos = example_wire.varint(data, pos)
                        values.append(_signed(value))
    return values


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def from_row(columns: Iterable[tuple[str, Value]]) -> dict[str, Any]:
    """{column name: JSON value} of a Row's typed values (`Row.columns`), as a record would give them back."""
    values: dict[str, Any] = {}
    for name, value in columns:
        if isinstance(value, float):
            values[name] = _float32(value)
        elif isinstance(value, tuple):
            values[name] = [[_float32(side) for side in item] if isinstance(item, tuple)
                            else _float32(item) if isinstance(item, float) else item for item in value]
        else:
            values[name] = value
    return values


def to_json(values: Mapping[str, Any]) -> str:
    """The `columns` cell: compact JSON, keys sorted, UTF-8 kept (never NaN: the job stores none)."""
    return json.dumps(values, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False) \
        if values else EMPTY


def holds_nul(value: Any) -> bool:
    """Whether a JSON value holds a NUL character anywhere (in a key or a string): PostgreSQL cannot store it."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(holds_nul(key) or holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(holds_nul(item) for item in value)
    return False
