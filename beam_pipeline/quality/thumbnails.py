"""Thumbnails for the report, read from the job's stored records through CODECS (never the original files)."""

from __future__ import annotations

import base64
from collections.abc import Iterable

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.common.records import read_records
from tf_serving_input import features
from tf_serving_input.layout import OutputLayout

THUMBNAIL_SIDE = 96


def thumbnails(job_layout: OutputLayout, preprocess: features.PreprocessConfig,
               wanted: Iterable[tuple[str, int]], side: int = THUMBNAIL_SIDE) -> dict[tuple[str, int], str]:
    """(job shard stem, record index) -> a JPEG data URI of that stored image, shrunk to `side`.

    Each needed shard is read once, front to back, stopping after its last wanted record.
    """
    import tensorflow as tf

    from tf_serving_input.codecs import parse_record

    by_shard: dict[str, set[int]] = {}
    for shard, index in wanted:
        by_shard.setdefault(shard, set()).add(index)
    out = {}
    for shard, indexes in sorted(by_shard.items()):
        last = max(indexes)
        path = job_layout.shard_file(shard)
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            for index, record in enumerate(read_records(f)):
                if index in indexes:
                    image, _ = parse_record(tf.constant(record), preprocess)
                    small = tf.cast(tf.round(tf.image.resize(image, [side, side], method="area")), tf.uint8)
                    jpeg = tf.io.encode_jpeg(small, quality=80).numpy()  # ~3 KiB: 6x smaller than PNG.
                    out[(shard, index)] = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
                if index >= last:
                    break
    return out
