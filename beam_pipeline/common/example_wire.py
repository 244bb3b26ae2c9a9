"""Protobuf's wire format, read without protobuf or TensorFlow: what walks a serialized tf.train.Example.

    for name, start, end in feature_entries(record, 0, len(record)):   # each feature of an Example
        ...

One walker for the image index (`image_index.py`: a record's key, source and label, the image skipped by its
length) and the kept columns (`kept_columns.py`: a feature's bytes, floats or ints).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def varint(data: Any, pos: int) -> tuple[int, int]:
    """(value, position after it) of a protobuf varint at `pos`."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")


def fields(data: Any, start: int, end: int, scalars: bool = False) -> Iterator[tuple[int, Any, Any]]:
    """(field number, start, end) of each length-delimited field in data[start:end]; other wire types are
    skipped, or with `scalars` also given: (number, value, None) for a varint, (number, start, start + 4) for a
    fixed32. ValueError when a field runs past its message or has an unknown wire type."""
    pos = start
    while pos < end:
        tag, pos = varint(data, pos)
        wire = tag & 7
        if wire == 2:
            length, pos = varint(data, pos)
            if pos + length > end:
                raise ValueError("a field runs past its message")
            yield tag >> 3, pos, pos + length
            pos += length
        elif wire == 0:
            value, pos = varint(data, pos)
            if scalars:
                yield tag >> 3, value, None
        elif wire == 1:
            pos += 8
        elif wire == 5:
            if scalars:
                yield tag >> 3, pos, pos + 4
            pos += 4
        else:
            raise ValueError(f"wire type {wire}")


def feature_entries(data: Any, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """(name, start, end) of each entry of the `features` map of the tf.train.Example in data[start:end]: the
    feature's name and where its Feature message lies. An entry without a name or a Feature is skipped."""
    for number, features_start, features_end in fields(data, start, end):
        if number != 1:  # Example.features
            continue
        for entry_number, entry_start, entry_end in fields(data, features_start, features_end):
            if entry_number != 1:  # Features.feature: map<string, Feature> entries
                continue
            name, feature = None, None
            for field, field_start, field_end in fields(data, entry_start, entry_end):
                if field == 1:
                    name = bytes(data[field_start:field_end])
                elif field == 2:
                    feature = (field_start, field_end)
            if name is not None and feature is not None:
                yield name, feature[0], feature[1]
