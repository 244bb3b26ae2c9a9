"""Assembles the Beam pipeline: CSV rows -> shards -> TFRecords + TFT statistics."""

import apache_beam as beam

from beam_pipeline.inputs.rows import group_rows_by_shard
from beam_pipeline.preprocess.analysis import AnalyzeAndSave
from beam_pipeline.preprocess.shard_writer import STATS_TAG, WriteShardFn


def build_pipeline(pipeline, job, shard_counts, temp_dir):
    """Adds the job's steps to `pipeline`; returns the PCollection of shard status dicts.

    Pixels stay inside the WriteShards stage, which reduces each image to 7 integers for the
    statistics.
    """
    shards = group_rows_by_shard(pipeline, job.input_csv, job.columns, shard_counts,
                                 job.column_reading)
    written = shards | "WriteShards" >> beam.ParDo(
        WriteShardFn(job.output_dir, job.preprocess, shard_counts, job.max_file_bytes,
                     fetch_config=job.fetch, retry_failed=job.retry_failed, steps=job.steps,
                     step_timeout=job.step_timeout, features=job.features)
    ).with_outputs(STATS_TAG, main="status")
    # status: shard status dict; stats: RecordBatches of {'pixel_moments': int64 [7], 'label': bytes} (and, with
    # kept columns, 'images' and each column's values: normalization.raw_batch_type_specs)
    _ = written[STATS_TAG] | "Statistics" >> AnalyzeAndSave(job.output_dir, temp_dir, job.features)
    return written.status
