"""tf.train.Example building and TFRecord framing onto any Beam filesystem.

TensorFlow's own writer cannot reach every filesystem Beam can (s3:// among
them), so shards are framed here and written through Beam's FileSystems.
"""

from __future__ import annotations

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


def make_example(stored: bytes, codec: StorageCodec, image_size: int, source: str, key: str, label: str) -> Any:
    """Builds the tf.train.Example of one stored image (see README "Output contract").

    `stored` goes under the storage codec's feature key (`image/encoded` for JPEG and
    PNG, `image/raw` for raw pixels), its name under `image/format`.

    Serialize it with `SerializeToString(deterministic=True)`: the feature map is
    otherwise written in an order that changes from process to process.
    """
    import tensorflow as tf  # Only where Examples are built: framing and reading need no TensorFlow.

    def bytes_feature(value: bytes) -> Any:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def int_feature(value: int) -> Any:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    return tf.train.Example(features=tf.train.Features(feature={
        codec.feature_key: bytes_feature(stored),
        features.IMAGE_FORMAT: bytes_feature(codec.name.encode("ascii")),
        features.IMAGE_HEIGHT: int_feature(image_size),
        features.IMAGE_WIDTH: int_feature(image_size),
        features.IMAGE_CHANNELS: int_feature(3),
        features.IMAGE_SOURCE: bytes_feature(source.encode("utf-8")),
        features.IMAGE_KEY: bytes_feature(key.encode("ascii")),
        features.LABEL_TEXT: bytes_feature(label.encode("utf-8")),
    }))


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
