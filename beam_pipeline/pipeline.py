"""Assembles the Beam pipeline: CSV rows -> shards -> TFRecords + TFT statistics."""

import apache_beam as beam

from beam_pipeline import source as csv_source
from beam_pipeline.analysis import AnalyzeAndSave
from beam_pipeline.shard_writer import STATS_TAG, WriteShardFn


def assign_shard(row, shard_counts):
    """Row -> ((split, shard_index), Row), by a stable hash of the row's key."""
    return (row.split, csv_source.shard_of(row.key, shard_counts[row.split])), row


def all_shard_keys(shard_counts):
    """Every (split, shard_index) the output must contain, so empty shards are written too."""
    return [(split, index) for split, count in sorted(shard_counts.items()) for index in range(count)]


def _drop_placeholders(element):
    shard, rows = element
    return shard, [row for row in rows if row is not None]


def group_rows_by_shard(pipeline, input_csv, columns, shard_counts):
    """The CSV's rows grouped by shard, every shard present (empty ones too): ((split, index), [Row]).

    Only rows (paths and labels) cross the shuffle, never pixels.
    """
    rows = (pipeline
            | "CsvPath" >> beam.Create([input_csv])
            | "ReadCsv" >> beam.FlatMap(csv_source.iter_rows, columns)
            # Row
            | "AssignShard" >> beam.Map(assign_shard, shard_counts))
            # ((split, shard_index), Row)
    placeholders = (pipeline
                    | "ShardKeys" >> beam.Create([(key, None) for key in all_shard_keys(shard_counts)]))
                    # ((split, shard_index), None)
    return ((rows, placeholders)
            | "MergeShardKeys" >> beam.Flatten()
            | "GroupShards" >> beam.GroupByKey()
            # ((split, shard_index), [Row | None])
            | "DropPlaceholders" >> beam.Map(_drop_placeholders))
            # ((split, shard_index), [Row])


def build_pipeline(pipeline, job, shard_counts, temp_dir):
    """Adds the job's steps to `pipeline`; returns the PCollection of shard status dicts.

    Pixels stay inside the WriteShards stage, which reduces each image to 7 integers for the
    statistics.
    """
    shards = group_rows_by_shard(pipeline, job.input_csv, job.columns, shard_counts)
    written = shards | "WriteShards" >> beam.ParDo(
        WriteShardFn(job.output_dir, job.preprocess, shard_counts, job.max_file_bytes)
    ).with_outputs(STATS_TAG, main="status")
    # status: shard status dict; stats: RecordBatches of {'pixel_moments': int64 [7], 'label': bytes}
    _ = written[STATS_TAG] | "Statistics" >> AnalyzeAndSave(job.output_dir, temp_dir)
    return written.status
