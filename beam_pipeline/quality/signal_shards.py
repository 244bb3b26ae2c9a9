"""One Parquet file of signals per job shard: read the shard's records, decode them through CODECS, compute.

    signals/{job shard stem}.parquet  (SCHEMA; one row per record, in the shard's order) + shards/{stem}.json

The shard is verified as it is read, in one pass (record CRCs, size, count and framing digest against the
job's manifest: `common/job_shards.py`):
a damaged one gets no signals, and each of its rows is listed in errors.jsonl. A shard an earlier run finished is kept
(unless its file lacks a column of SCHEMA, written by an earlier version: it is measured again).
"""

from __future__ import annotations

import functools
import io
import itertools
import os
import time
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.common.job_shards import RecordShard, verified_batches
from beam_pipeline.common.records import framed_length
from beam_pipeline.common.shard_file import ShardFileWriter, read_verified
from tf_serving_input import failures, features
from tf_serving_input.columns import LABELS_JOINED_BY
from tf_serving_input.layout import QualityLayout

# Records decoded and measured per TensorFlow call. Small enough that a batch's pixels (16 x 150 KiB at 224 px,
# and their gray levels) stay in a core's cache between the signals' passes: 0.37-0.45 ms an image at 16
# against 0.60-0.68 at 64 (one core, 2-core VM, 2026-12-02); the per-call overhead (~0.3 ms) is still small.
BATCH = 16

SCHEMA = pa.schema([
    ("key", pa.string()), ("source", pa.string()), ("split", pa.string()), ("label", pa.string()),
    # Where the stored image is, for the report's thumbnails: its shard, place, and the byte offset of its
    # record (read there directly, never by scanning the shard up to it).
    ("shard", pa.string()), ("index", pa.int32()), ("offset", pa.int64()),
    ("phash", pa.int64()),  # The 64 hash bits as a signed integer.
    ("digest_hi", pa.int64()), ("digest_lo", pa.int64()),
    ("brightness", pa.float32()), ("contrast", pa.float32()), ("blur", pa.float32()),
])
TEXT = {"key": features.IMAGE_KEY, "source": features.IMAGE_SOURCE, "label": features.LABEL_TEXT}
NUMBERS = ("phash", "digest_hi", "digest_lo", "brightness", "contrast", "blur")


def empty_columns() -> dict[str, list[Any]]:
    """The columns `measure_into` appends to, with no row yet ("bytes": each record's length)."""
    return {name: [] for name in (*TEXT, *NUMBERS, "bytes")}


def record_offsets(columns: dict[str, list[Any]]) -> list[int]:
    """Each measured record's byte offset in its shard (records follow each other from the file's start)."""
    return list(itertools.accumulate(map(framed_length, columns["bytes"]), initial=0))[:-1]


def measure_into(columns: dict[str, list[Any]], batch: list[bytes], preprocess: features.PreprocessConfig) -> None:
    """Appends the text features and signals of at most BATCH serialized records to `columns`."""
    import tensorflow as tf

    # Every call gets BATCH records (the last batch padded with copies of its last record, results
    # dropped): XLA compiles once per shape, and a shard's own remainder size cost 0.1-0.4 s a shard to compile.
    texts, signals = _parse_and_measure(tf.constant(batch + batch[-1:] * (BATCH - len(batch))), preprocess)
    columns["bytes"] += map(len, batch)
    for name, feature in TEXT.items():
        columns[name] += [value.decode("utf-8") for value in texts[feature].numpy()[:len(batch)].tolist()]
    for name in NUMBERS:
        columns[name] += signals[name].numpy()[:len(batch)].tolist()


def _parse_and_measure(batch: Any, preprocess: features.PreprocessConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """A batch of serialized records -> (its text features, its signals), in one traced TensorFlow call.

    Traced, not eager: parsing eagerly cost ~6x the traced parse (op dispatch per batch), more than the signals.
    """
    return _measure_batch(preprocess)(batch)


@functools.cache
def _measure_batch(preprocess: features.PreprocessConfig) -> Any:
    """`_traced_measure`'s concrete function for a batch of BATCH records (the only shape it is called with).

    Called directly: the tf.function's own dispatch (its trace cache, argument binding) cost ~0.6 ms of a
    batch's ~4.9 (309 -> 273 us an image for parsing and measuring, 2-core VM, 2026-12-02).
    """
    import tensorflow as tf

    return _traced_measure(preprocess).get_concrete_function(tf.TensorSpec([BATCH], tf.string))


@functools.cache
def _traced_measure(preprocess: features.PreprocessConfig) -> Any:
    """The tf.function of `_parse_and_measure` for one preprocessing (made on first use: TensorFlow is
    imported in the workers only).

    Cached by the config's value and closed over it: a config passed as an argument is traced by its
    object's identity, and each shard builds its own from the job's manifest, so every shard retraced
    (~0.24 s a shard, a quarter of a 1,000-image shard's time).
    """
    import tensorflow as tf

    from beam_pipeline.quality.signals import image_signals
    from tf_serving_input.codecs import parse_records

    @tf.function(reduce_retracing=True)
    def parse_and_measure(batch: tf.Tensor) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]:
        extra: dict[str, Any] = {name: tf.io.FixedLenFeature([], tf.string, default_value="")
                                 for name in TEXT.values()}
        # label/text holds 0..n labels in a multi-label run: joined into one text ('cat|dog', '' when none).
        extra[features.LABEL_TEXT] = tf.io.VarLenFeature(tf.string)
        images, parsed = parse_records(batch, preprocess, **extra)
        texts = {feature: parsed[feature] for feature in TEXT.values()}
        texts[features.LABEL_TEXT] = tf.strings.reduce_join(tf.RaggedTensor.from_sparse(
            parsed[features.LABEL_TEXT]), axis=1, separator=LABELS_JOINED_BY)
        return texts, image_signals(images)

    return parse_and_measure


def signals_table(shard: RecordShard, columns: dict[str, list[Any]]) -> pa.Table:
    """The Parquet table of one shard's signals (SCHEMA)."""
    count = len(columns["key"])
    return pa.table({**{name: columns[name] for name in (*TEXT, *NUMBERS)},
                     "split": [shard.split] * count, "shard": [shard.name] * count,
                     "index": list(range(count)), "offset": record_offsets(columns)}).select(SCHEMA.names).cast(SCHEMA)


def to_parquet_bytes(table: pa.Table) -> bytes:
    """A table's Parquet bytes (zstd; the same bytes for the same table)."""
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd")
    return out.getvalue()


def read_table(path: str, columns: list[str] | None = None) -> pa.Table:
    """A signals file read back (any Beam filesystem)."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return pq.read_table(io.BytesIO(f.read()), columns=columns)


def input_was_damaged(status: dict[str, Any]) -> bool:
    """Whether a finished signals shard found its job shard damaged: a rerun checks that shard again (it may be
    repaired since, by the preprocessing job's same command, as the failure's detail says to do)."""
    return any(row.get("reason") == failures.INPUT_SHARD_DAMAGED for row in status.get("failed", ()))


class ComputeShardSignals(beam.DoFn):
    """RecordShard -> its signals file and status (published together); the status dict."""

    def __init__(self, output_dir: str, preprocess: dict[str, Any]) -> None:
        self._layout = QualityLayout(output_dir)
        self._preprocess = preprocess

    def setup(self) -> None:
        from beam_pipeline.common.fast_exit import skip_final_collection

        skip_final_collection()

    def process(self, shard: RecordShard) -> Iterator[dict[str, Any]]:
        from beam_pipeline.inputs.rows import failure_record

        started = time.time()
        finished = read_verified(self._layout, shard.name, shard.rows)
        if (finished and pq.read_schema(io.BytesIO(finished[1])).names == SCHEMA.names
                and not input_was_damaged(finished[0])):
            yield finished[0]
            return  # (A file of an earlier version, without a column of SCHEMA, is measured again.)
        failed: list[dict[str, Any]] = []
        preprocess = features.PreprocessConfig.from_dict(self._preprocess)
        columns = empty_columns()
        # One read of the file: verified, and measured a batch at a time as it is read.
        damage = verified_batches(shard, BATCH, lambda batch: measure_into(columns, batch, preprocess))
        if damage is not None:  # Nothing measured counts: the shard's rows are failed instead.
            failed = [failure_record(_ShardRow(shard, index), damage) for index in range(shard.rows)]
            columns = empty_columns()
        with ShardFileWriter(self._layout, shard.name) as out:
            out.write(to_parquet_bytes(signals_table(shard, columns)), records=len(columns["key"]))
            yield out.publish({"split": shard.split, "rows": shard.rows, "failed": failed,
                               "started": round(started, 3), "seconds": round(time.time() - started, 3),
                               "worker_pid": os.getpid()})


class _ShardRow:
    """What errors.jsonl names of a row of a damaged shard: the shard and the record's place in it."""

    def __init__(self, shard: RecordShard, index: int) -> None:
        self.source = f"{shard.file or shard.path}#{index}"
        self.key = ""
        self.line = 0
        self.split = shard.split
