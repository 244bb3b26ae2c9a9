"""tf.train.Example serialization and TFRecord framing onto any Beam filesystem.

TensorFlow's own writer cannot reach every filesystem Beam can (s3:// among
them), so shards are framed here and written through Beam's FileSystems.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import google_crc32c

from tf_serving_input import features
from tf_serving_input.columns import (
    BOXES,
    FLOAT,
    FLOATS,
    INT,
    LABELS,
    TEXT,
    Column,
    FeatureSpec,
    Value,
    joined_labels,
)

if TYPE_CHECKING:
    from tf_serving_input.codecs import StorageCodec


class Readable(Protocol):
    """What `read_records` reads from: a binary file object (a Beam file, io.BytesIO, a wrapper)."""

    def read(self, size: int, /) -> bytes: ...


NO_COLUMNS = FeatureSpec()


def record_label(feature: Any) -> str:
    """A parsed record's (`Example.features.feature`) label as one text: a multi-label record's labels joined
    (`columns.joined_labels`: 'cat|dog'; '' when it has none), any other's `label/text`."""
    if features.LABEL_TEXT not in feature:
        return ""
    return joined_labels(value.decode("utf-8") for value in feature[features.LABEL_TEXT].bytes_list.value)


def example_bytes(stored: bytes, codec: StorageCodec, image_size: int, source: str, key: str, label: str,
                  columns: Sequence[tuple[str, Value]] = (), labels: Sequence[str] = (),
                  spec: FeatureSpec = NO_COLUMNS) -> bytes:
    """The serialized tf.train.Example of one stored image (docs/csv-and-images.md, "Output contract").

    `stored` goes under the storage codec's feature key (`image/encoded` for JPEG and
    PNG, `image/raw` for raw pixels), its name under `image/format`.

    `columns`: the row's kept columns (`Row.columns`: (name, value), a missing value left out), each
    written under its keys in `spec` (`tf_serving_input.columns`: int64_list, float_list of float32,
    bytes_list of UTF-8) with the type the spec declares, never the value's. With `spec.multi_label`,
    `label/text` holds `labels` (`Row.labels`), one value each, and is left out when there is none;
    otherwise it holds `label`, '' included, as it always has.

    Written straight in protobuf's wire format, byte for byte what
    `tf.train.Example(...).SerializeToString(deterministic=True)` gives (the feature map in
    key order; the tests check it): 19 us for a 224 px raw image, against 55 to build the
    message and serialize it, the pixels copied in and out of it, of the job's ~2 ms an image.
    """
    entries = dict(_fixed_entries(codec.name, image_size))  # Every record of a run has these: encoded once.
    for name, value in ((codec.feature_key, stored), (features.IMAGE_SOURCE, source.encode("utf-8")),
                        (features.IMAGE_KEY, key.encode("ascii"))):
        entries[name] = _map_entry(name, _bytes_feature(value))
    if not spec.multi_label:
        entries[features.LABEL_TEXT] = _map_entry(features.LABEL_TEXT, _bytes_feature(label.encode("utf-8")))
    elif labels:  # A multi-label row without labels has no label/text: a missing value is an absent feature.
        entries[features.LABEL_TEXT] = [_entry(_LABEL_HEAD, _texts(labels))]
    if columns:
        writers = _column_writers(spec)
        for column_name, column_value in columns:
            entries.update(writers[column_name](column_value))
    # Deterministic serialization writes a map in key order (UTF-8's byte order is the code points' order).
    pieces = [piece for name in sorted(entries) for piece in entries[name]]
    return b"".join([_FIELD_1, _varint(_length(pieces)), *pieces])  # Example.features.


# A column's writer: its value -> [(feature key, [the whole map entry])]. Each entry is one bytes object, built
# from a few small ones: a list of small pieces, summed and joined per record, cost as much again.
ColumnWriter = Callable[[Any], list[tuple[str, list[bytes]]]]
_WRITERS: dict[int, tuple[FeatureSpec, dict[str, ColumnWriter]]] = {}


def _column_writers(spec: FeatureSpec) -> dict[str, ColumnWriter]:
    """Each kept column's writer, built once a run (the keys' bytes encoded here, not per record). Found by the
    spec's identity first: hashing a FeatureSpec, as a cache keyed by its value does, cost ~1 us a record."""
    found = _WRITERS.get(id(spec))
    if found is None or found[0] is not spec:
        found = (spec, {column.name: _column_writer(column) for column in spec.columns})
        if len(_WRITERS) > 16:
            _WRITERS.clear()
        _WRITERS[id(spec)] = found  # The spec is held here, so its id is not reused while it is.
    return found[1]


def _column_writer(column: Column) -> ColumnWriter:
    if column.type == BOXES:
        heads = [(key, _key_head(key)) for key in column.keys]

        def boxes(value: Any) -> list[tuple[str, list[bytes]]]:
            # Four float lists, one per coordinate, the boxes in order (the OD API's layout): packed at once.
            count = len(value)
            packed = struct.pack(f"<{4 * count}f", *[box[at] for at in range(4) for box in value])
            size = 4 * count
            return [(key, [_entry(head, _delimited(_FIELD_2, _delimited(_FIELD_1, packed[at * size:(at + 1) * size])))])
                    for at, (key, head) in enumerate(heads)]
        return boxes
    (key,) = column.keys
    head = _key_head(key)
    encoders: dict[str, Callable[[Any], bytes]] = {
        INT: lambda value: b"".join(_int64_feature(value)), FLOAT: _float,
        TEXT: lambda value: _delimited(_FIELD_1, _delimited(_FIELD_1, value.encode("utf-8"))), LABELS: _texts,
        FLOATS: _floats}
    encode = encoders[column.type]

    def one(value: Any) -> list[tuple[str, list[bytes]]]:
        return [(key, [_entry(head, encode(value))])]
    return one


def _key_head(name: str) -> bytes:
    """A map entry's key field and its Feature's field tag: encoded once a run, not per record."""
    name_bytes = name.encode("utf-8")
    return b"".join([_FIELD_1, _varint(len(name_bytes)), name_bytes, _FIELD_2])


def _entry(head: bytes, feature: bytes) -> bytes:
    """The map entry `_map_entry` gives, as one bytes object, from its `_key_head` and its Feature."""
    inner = head + _varint(len(feature)) + feature
    return _FIELD_1 + _varint(len(inner)) + inner


def _delimited(tag: bytes, data: bytes) -> bytes:
    return tag + _varint(len(data)) + data


def _texts(values: Sequence[str]) -> bytes:
    """Feature{bytes_list: BytesList{value: values}} (each UTF-8)."""
    return _delimited(_FIELD_1, b"".join([_delimited(_FIELD_1, value.encode("utf-8")) for value in values]))


def _float(value: float) -> bytes:
    """Feature{float_list: FloatList{value: [value]}}: 9 bytes, one float32 (`_floats` of one value)."""
    return b"\x12\x06\x0a\x04" + struct.pack("<f", value)


def _floats(values: Sequence[float]) -> bytes:
    """Feature{float_list: FloatList{value: values}}: packed float32, each rounded to the nearest float32, as
    protobuf stores a Python float in a float field."""
    return _delimited(_FIELD_2, _delimited(_FIELD_1, struct.pack(f"<{len(values)}f", *values)))


@functools.lru_cache(maxsize=16)
def _fixed_entries(codec_name: str, image_size: int) -> tuple[tuple[str, list[bytes]], ...]:
    """(name, the map entry's wire-format bytes) of the features every record of a run shares."""
    fixed = {features.IMAGE_FORMAT: _bytes_feature(codec_name.encode("ascii")),
             features.IMAGE_HEIGHT: _int64_feature(image_size), features.IMAGE_WIDTH: _int64_feature(image_size),
             features.IMAGE_CHANNELS: _int64_feature(3)}
    return tuple((name, [b"".join(_map_entry(name, feature))]) for name, feature in fixed.items())


def _map_entry(name: str, feature: list[bytes]) -> list[bytes]:
    """One Features.feature map entry (key, then the Feature) as wire-format pieces."""
    name_bytes = name.encode("utf-8")
    entry = [_FIELD_1, _varint(len(name_bytes)), name_bytes, _FIELD_2, _varint(_length(feature)), *feature]
    return [_FIELD_1, _varint(_length(entry)), *entry]


# Protobuf wire format: a field's key is (number << 3) | wire type; 2 is length-delimited.
_FIELD_1, _FIELD_2, _FIELD_3 = b"\x0a", b"\x12", b"\x1a"


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL_VARINTS[value]  # Most lengths: a third of a record's columns' time went here.
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_VARINTS = [bytes((value,)) for value in range(0x80)]
_LABEL_HEAD = _key_head(features.LABEL_TEXT)


def _length(parts: list[bytes]) -> int:
    return sum(map(len, parts))


def _bytes_feature(value: bytes) -> list[bytes]:
    """Feature{bytes_list: BytesList{value: [value]}} as wire-format pieces."""
    listed = [_FIELD_1, _varint(len(value)), value]
    return [_FIELD_1, _varint(_length(listed)), *listed]


def _int64_feature(value: int) -> list[bytes]:
    """Feature{int64_list: Int64List{value: [value]}} (packed, as proto3 writes it) as wire-format pieces."""
    if not -2**63 <= value < 2**63:
        raise ValueError(f"Value out of range: {value}")  # As TensorFlow's Int64List says it.
    number = _varint(value & 0xFFFFFFFFFFFFFFFF)  # Negative int64s are ten-byte varints.
    listed = [_FIELD_1, _varint(len(number)), number]
    return [_FIELD_3, _varint(_length(listed)), *listed]


def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def framed_length(record_length: int) -> int:
    """The bytes a record of `record_length` takes in a TFRecord file: length, its CRC, data, data CRC."""
    return 12 + record_length + 4


def frame_record(record: bytes) -> bytes:
    """Returns `record` framed as TFRecord bytes: length, its CRC, data, data CRC."""
    length = struct.pack("<Q", len(record))
    return b"".join([length, struct.pack("<I", _masked_crc(length)),
                     record, struct.pack("<I", _masked_crc(record))])


def new_framing_digest() -> Any:
    """A SHA-256 over a TFRecord file's framing alone: each record's 12-byte header, then its 4-byte data CRC.

    The job's manifest records it for each shard (`framing_sha256`). A reader that checks every record's
    CRCs and this digest has checked each record's length and content CRC against what the job wrote, in
    order: a changed, added, dropped or reordered record, or another shard of the same size, fails it, and
    it costs 16 bytes a record instead of hashing every byte of the file again (~100 us a 150 KiB record,
    a quarter of the quality job's per-image time). Only a change crafted to keep every CRC32C passes
    it, and whoever can craft that in the job's folder can rewrite the manifest's SHA-256 as well.
    """
    return hashlib.sha256()


def framing_of(framed: bytes) -> tuple[bytes, bytes]:
    """(header, data CRC) of one framed record, as `new_framing_digest` takes them."""
    return framed[:12], framed[-4:]


class DamagedRecords(ValueError):
    """A TFRecord file whose framing or CRCs do not hold: truncated (ends early) or corrupt."""

    def __init__(self, message: str, truncated: bool) -> None:
        super().__init__(message)
        self.truncated = truncated


def read_records(stream: Readable, verify: bool = True, framing: Any = None) -> Iterator[bytes]:
    """Yields the records of a TFRecord file object, reading one record at a time.

    With `verify` (the default) the length's and the data's masked CRC32C are checked, so a
    changed byte anywhere is caught; DamagedRecords says where (and whether the file ends early).
    `framing` (from `new_framing_digest`), when given, is updated with each record's framing as it is read.
    """
    for _, record in read_records_at(stream, verify=verify, framing=framing):
        yield record


def read_records_at(stream: Readable, verify: bool = True, offset: int = 0,
                    framing: Any = None) -> Iterator[tuple[int, bytes]]:
    """Yields (byte offset of its header, record) for each record of a TFRecord file object, as `read_records`.

    `offset` is where the stream stands (a caller that seeked to a record's header passes its offset),
    so the offsets yielded can be handed back to `seek` to read one record again without a scan.
    """
    while True:
        header = stream.read(12)
        if not header:
            return
        if len(header) < 12:
            raise DamagedRecords(f"truncated: the file ends inside a record header at byte {offset}", True)
        (length,) = struct.unpack_from("<Q", header, 0)
        if verify and struct.unpack_from("<I", header, 8)[0] != _masked_crc(header[:8]):
            raise DamagedRecords(f"corrupt: the record length at byte {offset} fails its CRC", False)
        # The data and its CRC in two reads: one read of both cost two copies of the data (the slice
        # checked and the slice yielded), ~10 us a 150 KiB record.
        record, footer = stream.read(length), stream.read(4)
        if len(record) < length or len(footer) < 4:
            raise DamagedRecords(f"truncated: the file ends inside the record at byte {offset}", True)
        if verify and struct.unpack("<I", footer)[0] != _masked_crc(record):
            raise DamagedRecords(f"corrupt: the record at byte {offset} fails its CRC", False)
        if framing is not None:
            framing.update(header)
            framing.update(footer)
        yield offset, record
        offset += framed_length(length)


def iter_records(data: bytes) -> Iterator[bytes]:
    """Yields the records of TFRecord file bytes already checked by their SHA-256 (no CRCs recomputed)."""
    import io

    return read_records(io.BytesIO(data), verify=False)


def parse_example(record: bytes) -> Any:
    """Parses one serialized tf.train.Example."""
    import tensorflow as tf

    return tf.train.Example.FromString(record)
