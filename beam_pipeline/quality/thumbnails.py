"""Thumbnails for the report, read from the job's stored records through CODECS (never the original files)."""

from __future__ import annotations

import base64
from collections.abc import Iterable

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.common.records import DamagedRecords, read_records_at
from tf_serving_input import features
from tf_serving_input.layout import OutputLayout

THUMBNAIL_SIDE = 96


def thumbnails(job_layout: OutputLayout, preprocess: features.PreprocessConfig,
               wanted: Iterable[tuple[str, int, int]], side: int = THUMBNAIL_SIDE) -> dict[tuple[str, int], str]:
    """(job shard stem, record index) -> a JPEG data URI of that stored image, shrunk to `side`.

    `wanted`: (shard stem, record index, byte offset of the record) each, as the signals table records them.
    Each record is read at its offset (its CRCs checked), so the report reads from each shown record on, up to
    the filesystem's read buffer (16 MiB on gs:// and s3://), not the whole shard: a scan up to the last
    wanted record read most of every shard holding one (up to the whole dataset at a million).
    """
    import tensorflow as tf

    from tf_serving_input.codecs import parse_record

    by_shard: dict[str, set[tuple[int, int]]] = {}
    for shard, index, offset in wanted:
        by_shard.setdefault(shard, set()).add((offset, index))
    out = {}
    for shard, places in sorted(by_shard.items()):
        path = job_layout.shard_file(shard)
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            for offset, index in sorted(places):
                f.seek(offset)
                try:
                    _, record = next(read_records_at(f, offset=offset))
                except (DamagedRecords, StopIteration) as error:  # StopIteration: the file ends before it.
                    raise ValueError(f"job shard {path} changed since its signals were measured (record {index} "
                                     f"at byte {offset}: {str(error) or 'the file ends before it'}): rerun with "
                                     "--overwrite to measure it again") from None
                image, _ = parse_record(tf.constant(record), preprocess)
                small = tf.cast(tf.round(tf.image.resize(image, [side, side], method="area")), tf.uint8)
                jpeg = tf.io.encode_jpeg(small, quality=80).numpy()  # ~3 KiB: 6x smaller than PNG.
                out[(shard, index)] = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
    return out
