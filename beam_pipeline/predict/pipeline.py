"""Assembles the predict pipeline: input shards -> batches -> RunInference -> Parquet shards.

    shard tasks (input_dir: the job's shards; input_csv: rows grouped by a stable hash of their key)
      -> ReadBatches (per shard, in row order; shards an earlier run finished are skipped)
      -> RunInference (our handler on prebuilt batches)
      -> WritePredictionShards (a shard's Parquet file once all its rows are in)

Only shard names and rows (paths) cross a shuffle. A shard's batches are made
by one ReadBatches call, so they and their predictions stay in one bundle of
one fused stage up to the writer: it holds one shard's predictions at a time,
never the dataset's. Were a runner to split a shard's rows over bundles, the
writer fails the bundle, naming the shard, rather than write it incomplete.
"""

import dataclasses
import os
import time

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference

from beam_pipeline.common import kept_columns
from beam_pipeline.common.job_shards import damaged_shard
from beam_pipeline.common.records import read_records, record_label
from beam_pipeline.common.shard_file import ShardFileWriter, read_verified
from beam_pipeline.inputs import rows as csv_source
from beam_pipeline.inputs.rows import failure_record, read_image_bytes
from beam_pipeline.predict.inference import EMPTY_SHARD, ExportModelHandler, RowRef
from tf_serving_input import failures, features
from tf_serving_input.columns import FeatureSpec
from tf_serving_input.layout import PredictionLayout, shard_name

# A prediction shard's status says so when its input shard failed verification: it is redone on resume.
INPUT_DAMAGED = "input_damaged"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What the pipeline needs to know of the export: which signature, its input, labels, embedding size."""

    signature: str
    input_name: str
    vocabulary: list
    embedding_size: int


def _batches(items, batch_size):
    for start in range(0, len(items), batch_size):
        yield items[start:start + batch_size]


def _empty_shard_batch(name, split):
    return [[(RowRef(shard=name, index=-1, total=0, split=split), EMPTY_SHARD)]]


class ReadRecordBatches(beam.DoFn):
    """RecordShard -> batches of (RowRef, serialized tf.train.Example) in the shard's order."""

    def __init__(self, output_dir, batch_size, csv_path, features=None):
        self._layout = PredictionLayout(output_dir)
        # The job's kept columns, read back from each record into the predictions' `columns` cell.
        self._features = FeatureSpec.from_json(features) if features else FeatureSpec()
        self._batch_size = batch_size
        self._csv_path = csv_path  # The job's CSV: image paths in records resolve against it.

    def process(self, shard):
        import tensorflow as tf

        finished = read_verified(self._layout, shard.name, shard.rows)
        if finished and not finished[0].get(INPUT_DAMAGED):
            return  # An earlier run finished it.
        if shard.rows == 0:
            yield from _empty_shard_batch(shard.name, shard.split)
            return
        damage = damaged_shard(shard)
        if damage is not None:  # Not predicted: each of its rows is reported as failed, with why.
            refs = [RowRef(shard=shard.name, index=index, total=shard.rows, source=shard.file or shard.path,
                           split=shard.split) for index in range(shard.rows)]
            for batch in _batches(refs, self._batch_size):
                yield [(ref, damage) for ref in batch]
            return
        items = []
        with FileSystems.open(shard.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            for index, record in enumerate(read_records(f)):
                feature = tf.train.Example.FromString(record).features.feature

                def text(key, feature=feature):
                    return feature[key].bytes_list.value[0].decode("utf-8")

                source = text(features.IMAGE_SOURCE)
                labels = [value.decode("utf-8") for value in feature[features.LABEL_TEXT].bytes_list.value]
                multi = self._features.multi_label
                ref = RowRef(shard=shard.name, index=index, total=shard.rows, key=text(features.IMAGE_KEY),
                             source=source, path=csv_source.resolve_path(source, self._csv_path),
                             split=shard.split, label=record_label(feature),
                             labels=tuple(labels) if multi else (),
                             columns=kept_columns.to_json(kept_columns.from_record(record, self._features)))
                items.append((ref, record))
                if len(items) == self._batch_size:
                    yield items
                    items = []
        if items:
            yield items


class ReadImageBatches(beam.DoFn):
    """((split, shard index), [Row]) -> batches of (RowRef, image file bytes or RowFailure), CSV order."""

    def __init__(self, output_dir, batch_size, shard_counts, max_file_bytes):
        self._layout = PredictionLayout(output_dir)
        self._batch_size = batch_size
        self._shard_counts = dict(shard_counts)
        self._max_file_bytes = max_file_bytes

    def process(self, element):
        (split, index), rows = element
        rows = sorted(rows, key=lambda row: row.index)
        name = shard_name(split, index, self._shard_counts[split])
        if read_verified(self._layout, name, len(rows)):
            return
        if not rows:
            yield from _empty_shard_batch(name, split)
            return
        for batch in _batches(list(enumerate(rows)), self._batch_size):
            items = []
            for position, row in batch:
                try:
                    data = read_image_bytes(row.path, self._max_file_bytes)
                except failures.RowFailure as failure:
                    data = failure
                items.append((RowRef(shard=name, index=position, total=len(rows), key=row.key, source=row.source,
                                     path=row.path, split=row.split, label=row.label, line=row.line,
                                     labels=row.labels,
                                     columns=kept_columns.to_json(kept_columns.from_row(row.columns))), data))
            yield items


class WritePredictionShards(beam.DoFn):
    """(RowRef, PredictionResult) -> one Parquet shard (and its status) as soon as all its rows are in."""

    def __init__(self, output_dir, vocabulary, embedding_size, embedding_dtype):
        self._layout = PredictionLayout(output_dir)
        self._vocabulary = list(vocabulary)
        self._embedding_size = embedding_size
        self._embedding_dtype = embedding_dtype
        self._pending = {}

    def start_bundle(self):
        self._pending = {}

    def process(self, element):
        ref, result = element
        rows = self._pending.setdefault(ref.shard, [])
        if ref.index >= 0:
            rows.append((ref, result.inference))
        if len(rows) == ref.total:
            del self._pending[ref.shard]
            yield self._write(ref.shard, ref.split, sorted(rows, key=lambda row: row[0].index))

    def finish_bundle(self):
        if self._pending:
            incomplete = ", ".join(f"{name} ({len(rows)} of {rows[0][0].total} rows)"
                                   for name, rows in sorted(self._pending.items()))
            raise RuntimeError(f"a shard's predictions ended incomplete: {incomplete}; nothing was written for "
                               "them (the runner split the shard over bundles, or its input changed while it was "
                               "read): run the same command again")

    def _write(self, name, split, rows):
        from beam_pipeline.predict import shards as prediction_shards

        started = time.time()
        written = [(ref, outcome) for ref, outcome in rows if not isinstance(outcome, failures.RowFailure)]
        failed = [failure_record(ref, outcome) for ref, outcome in rows if isinstance(outcome, failures.RowFailure)]
        table = prediction_shards.build_table([ref for ref, _ in written], [outcome for _, outcome in written],
                                              self._vocabulary, self._embedding_size, self._embedding_dtype)
        damaged = any(record["reason"] == failures.INPUT_SHARD_DAMAGED for record in failed)
        with ShardFileWriter(self._layout, name) as shard:
            shard.write(prediction_shards.to_parquet_bytes(table), records=len(written))
            return shard.publish({"split": split, "rows": len(rows), "failed": failed, INPUT_DAMAGED: damaged,
                                  "started": round(started, 3), "seconds": round(time.time() - started, 3),
                                  "worker_pid": os.getpid()})


def build_predict_pipeline(pipeline, config, model, shards):
    """Adds the predict job's steps; `shards` is a list of RecordShards (input_dir) or None (input_csv)."""
    if shards is not None:
        batches = (pipeline
                   | "ShardTasks" >> beam.Create(shards)
                   | "SpreadShards" >> beam.Reshuffle()
                   # RecordShard
                   | "ReadBatches" >> beam.ParDo(ReadRecordBatches(config.output_dir, config.batch_size,
                                                                   config.job_input_csv, config.job_features)))
    else:
        from beam_pipeline.inputs.rows import group_rows_by_shard

        batches = (group_rows_by_shard(pipeline, config.input_csv, config.columns, config.shard_counts,
                                           config.column_reading)
                   # ((split, shard_index), [Row | None])
                   | "ReadBatches" >> beam.ParDo(ReadImageBatches(config.output_dir, config.batch_size,
                                                                  config.shard_counts, config.max_file_bytes)))
    # [(RowRef, bytes | RowFailure | EMPTY_SHARD)]: one batch of one shard, in row order
    handler = ExportModelHandler(config.model_dir, model.signature, model.input_name, config.top_k,
                                 config.embedding_dtype, large_model=config.large_model)
    return (batches
            | "RunInference" >> RunInference(KeyedModelHandler(handler).with_no_batching())
            # (RowRef, PredictionResult(None, Prediction | RowFailure | EMPTY_SHARD))
            | "WriteShards" >> beam.ParDo(WritePredictionShards(config.output_dir, model.vocabulary,
                                                                model.embedding_size, config.embedding_dtype)))
            # shard status dict
