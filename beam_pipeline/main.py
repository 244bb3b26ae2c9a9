"""Command-line entry point: `python -m beam_pipeline --input_csv CSV --output_dir DIR`.

Flags are parsed before Beam or TensorFlow is imported: `--help` and flag
errors answer at once.
"""

import os
import sys

# Quiet TensorFlow's C++ start-up chatter (no GPU, CPU features) in this process
# and in the worker processes it starts, which inherit the environment. Real
# failures still reach the user as Python exceptions with their messages.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from beam_pipeline import options as job_options  # noqa: E402


def run_fingerprint(job):
    """What makes two runs the same run: the configuration and the CSV's content."""
    from beam_pipeline.output_dir import file_digest

    return {"config": job.to_dict(), "input_csv_sha256": file_digest(job.input_csv)}


def tensorflow_unwritable(path):
    """Why tensorflow-transform cannot write under `path`, or None when it can.

    TFT writes transform_fn/ (and its temporary files) with TensorFlow's own file
    system layer, not Beam's: a scheme Beam reads and writes (s3://) can still be
    one TensorFlow lacks, and the run would only fail at its very end.
    """
    from apache_beam.io.filesystems import FileSystems

    scheme = FileSystems.get_scheme(path)
    if scheme is None or scheme == "file":
        return None
    import tensorflow as tf

    supported = sorted(s for s in tf.io.gfile.get_registered_schemes() if s and s not in ("file", "ram"))
    if scheme in supported:
        return None
    return (f"{path}: tensorflow-transform writes its output with TensorFlow's file system, which "
            f"cannot write {scheme}:// here (it can write local paths"
            f"{''.join(', ' + s + '://' for s in supported)}); use one of those")


def shard_counts_for(job, csv_summary):
    """Shards per split: --num_shards for each, or a count from the split's size."""
    from beam_pipeline import source as csv_source

    return {split: job.num_shards or csv_source.auto_num_shards(rows)
            for split, rows in csv_summary.rows_per_split.items()}


def _tft_temp_dir(layout, pipeline_options):
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    temp_location = pipeline_options.view_as(GoogleCloudOptions).temp_location
    if temp_location:
        return f"{temp_location.rstrip('/')}/beam-image-pipeline-tft"
    return layout.tft_temp_dir


def run(argv=None):
    """Runs the job; returns the process exit code (0 ok, 1 failed, 2 refused before any work)."""
    job, beam_args = job_options.parse_args(sys.argv[1:] if argv is None else argv)

    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

    from beam_pipeline import output_dir, run_errors, runners
    from beam_pipeline import source as csv_source
    from beam_pipeline.run_lock import LockHeld, OutputLock
    from tf_serving_input.layout import OutputLayout

    runners.quiet_library_logs()
    layout = OutputLayout(job.output_dir)
    pipeline_options = PipelineOptions(beam_args)
    # The launcher reads the CSV and prepares --output_dir through Beam's filesystems
    # before any pipeline exists: s3:// (endpoint, credentials) needs the options now.
    FileSystems.set_options(pipeline_options)
    temp_location = pipeline_options.view_as(GoogleCloudOptions).temp_location
    for flag, path in (("--output_dir", job.output_dir), ("--temp_location", temp_location)):
        reason = path and tensorflow_unwritable(path)
        if reason:
            print(f"error: {flag} {reason}", file=sys.stderr)
            return 2
    step = run_errors.Step(f"reading the CSV {job.input_csv}")
    run_log = run_errors.RunLog(layout.log_dir)
    try:
        csv_summary = csv_source.summarize_csv(job.input_csv, job.columns)
        step.now(f"preparing the output folder {job.output_dir}")
        with OutputLock(layout.lock_file) as lock:
            if lock.notice:
                print(f"notice: {lock.notice}", flush=True)
            finished_earlier = output_dir.prepare(layout, run_fingerprint(job), job.overwrite)
            return _run_locked(job, beam_args, pipeline_options, layout, csv_summary, finished_earlier, step,
                               run_log)
    except (csv_source.CsvError, output_dir.OutputDirError, LockHeld) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - the run itself failed: one line, the traceback in a log.
        print(run_errors.one_line(error, step.doing, run_log.write(error)), file=sys.stderr)
        return 1


def _run_locked(job, beam_args, pipeline_options, layout, csv_summary, finished_earlier, step, run_log):
    """The run, once the output folder is locked and prepared; returns the exit code."""
    import time

    import apache_beam as beam
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import StandardOptions

    from beam_pipeline import report, runners
    from beam_pipeline.pipeline import all_shard_keys, build_pipeline
    from beam_pipeline.progress import ShardProgress
    from tf_serving_input.layout import shard_name

    shard_counts = shard_counts_for(job, csv_summary)
    names = [shard_name(split, index, shard_counts[split]) for split, index in all_shard_keys(shard_counts)]
    splits = ", ".join(f"{split} {rows}" for split, rows in csv_summary.rows_per_split.items())
    print(f"Reading {job.input_csv}: {csv_summary.rows} rows ({splits}); "
          f"writing {len(names)} shards to {job.output_dir}", flush=True)
    if finished_earlier:
        print(f"Resuming: {finished_earlier} shard(s) finished by an earlier run of this input and "
              "configuration are checked: kept when they verify, rewritten otherwise", flush=True)

    runner = pipeline_options.view_as(StandardOptions).runner
    monitor = None
    if job.progress and job_options.is_local_runner(beam_args):
        monitor = ShardProgress(layout, len(names), csv_summary.rows)
        monitor.start()
    started = time.time()
    step.now(f"writing shards to {layout.data_dir}")
    try:
        with run_log.capture(), beam.Pipeline(runner=runners.local_runner(pipeline_options),
                                              options=pipeline_options) as pipeline:
            build_pipeline(pipeline, job, shard_counts, _tft_temp_dir(layout, pipeline_options))
    finally:
        if monitor:
            monitor.stop()
    wall_seconds = time.time() - started

    from tf_serving_input.normalization import read_statistics  # TF loads after Beam's workers start.

    step.now(f"checking the shards in {layout.data_dir}")
    statuses = report.read_shard_statuses(layout, names)
    problems = report.shard_file_problems(layout, statuses)
    if problems:
        print(f"error: {len(problems)} shard file(s) are missing or damaged after the run: "
              f"{', '.join(problems[:10])}{' ...' if len(problems) > 10 else ''}; run the same command again "
              "to rewrite them", file=sys.stderr)
        return 1
    step.now(f"writing the manifest to {layout.root}")
    statistics = read_statistics(job.output_dir)
    manifest, failures = report.build_manifest(job, statuses, statistics, wall_seconds, runner)
    report.write_outputs(layout, manifest, failures)
    if FileSystems.exists(layout.tft_temp_dir):
        FileSystems.delete([layout.tft_temp_dir])
    print(report.format_summary(manifest, layout), flush=True)

    failed_fraction = manifest["failed"] / manifest["rows"]
    if failed_fraction > job.max_error_rate:
        reasons = "; ".join(f"{reason}: {count}" for reason, count in
                            list(manifest["failed_by_reason"].items())[:5])
        print(f"error: {manifest['failed']} of {manifest['rows']} rows failed ({failed_fraction:.1%}), more "
              f"than --max_error_rate={job.max_error_rate:g}. Top reasons: {reasons}. Every failed row "
              f"is listed in {layout.errors_file}", file=sys.stderr)
        return 1
    return 0


def main():
    """Console-script entry point."""
    sys.exit(run())
