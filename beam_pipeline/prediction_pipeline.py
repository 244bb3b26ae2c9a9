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

from beam_pipeline import source as csv_source
from beam_pipeline.inference import EMPTY_SHARD, ExportModelHandler, RowRef
from beam_pipeline.records import read_records
from beam_pipeline.row_preprocessor import read_image_bytes
from beam_pipeline.shard_file import ShardFileWriter, read_verified
from beam_pipeline.shard_writer import failure_record
from tf_serving_input import failures, features
from tf_serving_input.layout import PredictionLayout, shard_name


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What the pipeline needs to know of the export: which signature, its input, labels, embedding size."""

    signature: str
    input_name: str
    vocabulary: list
    embedding_size: int


@dataclasses.dataclass(frozen=True)
class RecordShard:
    """An input shard of the preprocessing job: its output name, split, file and record count."""

    name: str
    split: str
    path: str
    rows: int


def record_shards(job_layout, job_manifest):
    """The RecordShards of a job's output, from its manifest."""
    return [RecordShard(name=os.path.basename(shard["file"]).rsplit(".", 1)[0], split=shard["split"],
                        path=job_layout.path(shard["file"]), rows=shard["records"])
            for shard in job_manifest["shards"]]


def _batches(items, batch_size):
    for start in range(0, len(items), batch_size):
        yield items[start:start + batch_size]


def _empty_shard_batch(name, split):
    return [[(RowRef(shard=name, index=-1, total=0, split=split), EMPTY_SHARD)]]


class ReadRecordBatches(beam.DoFn):
    """RecordShard -> batches of (RowRef, serialized tf.train.Example) in the shard's order."""

    def __init__(self, output_dir, batch_size, csv_path):
        self._layout = PredictionLayout(output_dir)
        self._batch_size = batch_size
        self._csv_path = csv_path  # The job's CSV: image paths in records resolve against it.

    def process(self, shard):
        import tensorflow as tf

        if read_verified(self._layout, shard.name, shard.rows):
            return  # An earlier run finished it.
        if shard.rows == 0:
            yield from _empty_shard_batch(shard.name, shard.split)
            return
        items = []
        with FileSystems.open(shard.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            for index, record in enumerate(read_records(f)):
                feature = tf.train.Example.FromString(record).features.feature

                def text(key):
                    return feature[key].bytes_list.value[0].decode("utf-8")

                source = text(features.IMAGE_SOURCE)
                ref = RowRef(shard=shard.name, index=index, total=shard.rows, key=text(features.IMAGE_KEY),
                             source=source, path=csv_source.resolve_path(source, self._csv_path),
                             split=shard.split, label=text(features.LABEL_TEXT))
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
                                     path=row.path, split=row.split, label=row.label, line=row.line), data))
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
            raise RuntimeError(f"the runner split a shard's predictions over bundles: {incomplete}; "
                               "nothing was written for them")

    def _write(self, name, split, rows):
        from beam_pipeline import prediction_shards

        started = time.time()
        written = [(ref, outcome) for ref, outcome in rows if not isinstance(outcome, failures.RowFailure)]
        failed = [failure_record(ref, outcome) for ref, outcome in rows if isinstance(outcome, failures.RowFailure)]
        table = prediction_shards.build_table([ref for ref, _ in written], [outcome for _, outcome in written],
                                              self._vocabulary, self._embedding_size, self._embedding_dtype)
        with ShardFileWriter(self._layout, name) as shard:
            shard.write(prediction_shards.to_parquet_bytes(table), records=len(written))
            return shard.publish({"split": split, "rows": len(rows), "failed": failed,
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
                                                                   config.job_input_csv)))
    else:
        from beam_pipeline.pipeline import group_rows_by_shard

        batches = (group_rows_by_shard(pipeline, config.input_csv, config.columns, config.shard_counts)
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


class LoadShard(beam.DoFn):
    """A Parquet shard's path -> its rows upserted into the table (one connection per worker process)."""

    def __init__(self, url, table):
        self._url = url
        self._table = table
        self._connection = None

    def setup(self):
        from beam_pipeline import database

        self._connection = database.connect(self._url)

    def process(self, path):
        from beam_pipeline import database, prediction_shards

        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            table = prediction_shards.read_table(f.read())
        yield path, database.upsert_table(self._connection, self._table, table)

    def teardown(self):
        if self._connection is not None:
            self._connection.close()


def build_load_pipeline(pipeline, paths, url, table):
    """Adds the database load: every Parquet shard upserted into `table`, shards spread over the workers."""
    return (pipeline
            | "ShardPaths" >> beam.Create(paths)
            | "SpreadShards" >> beam.Reshuffle()
            # Parquet shard path
            | "Upsert" >> beam.ParDo(LoadShard(url, table)))
            # (path, rows upserted)
