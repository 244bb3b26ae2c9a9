"""tf.train.Example serialization and TFRecord framing onto any Beam filesystem.

TensorFlow's own writer cannot reach every filesystem Beam can (s3:// among
them), so shards are framed here and written through Beam's FileSystems.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import google_crc32c

from tf_serving_input import features

if TYPE_CHECKING:
    from tf_serving_input.codecs import StorageCodec


class Readable(Protocol):
    """What `read_records` reads from: a binary file object (a Beam file, io.BytesIO, a wrapper)."""

    def read(self, size: int, /) -> bytes: ...


def example_bytes(stored: bytes, codec: StorageCodec, image_size: int, source: str, key: str, label: str) -> bytes:
    """The serialized tf.train.Example of one stored image (docs/csv-and-images.md, "Output contract").

    `stored` goes under the storage codec's feature key (`image/encoded` for JPEG and
    PNG, `image/raw` for raw pixels), its name under `image/format`.

    Written straight in protobuf's wire format, byte for byte what
    `tf.train.Example(...).SerializeToString(deterministic=True)` gives (the feature map in
    key order; the tests check it): 19 us for a 224 px raw image, against 55 to build the
    message and serialize it, the pixels copied in and out of it, of the job's ~2 ms an image.
    """
    entries = dict(_fixed_entries(codec.name, image_size))  # Every record of a run has these: encoded once.
    for name, value in ((codec.feature_key, stored), (features.IMAGE_SOURCE, source.encode("utf-8")),
                        (features.IMAGE_KEY, key.encode("ascii")), (features.LABEL_TEXT, label.encode("utf-8"))):
        entries[name] = _map_entry(name, _bytes_feature(value))
    # Deterministic serialization writes a map in key order.
    pieces = [piece for name in sorted(entries) for piece in entries[name]]
    return b"".join([_FIELD_1, _varint(_length(pieces)), *pieces])  # Example.features.


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
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length(parts: list[bytes]) -> int:
    return sum(len(part) for part in parts)


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
