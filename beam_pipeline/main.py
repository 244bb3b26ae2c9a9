"""Command-line entry point: `python -m beam_pipeline --input_csv CSV --output_dir DIR`."""

import os

# Quiet TensorFlow's C++ start-up chatter (no GPU, CPU features) in this process
# and in the worker processes it starts, which inherit the environment. Real
# failures still reach the user as Python exceptions with their messages.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import logging  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import apache_beam as beam  # noqa: E402
from apache_beam.io.filesystem import CompressionTypes  # noqa: E402
from apache_beam.io.filesystems import FileSystems  # noqa: E402
from apache_beam.options.pipeline_options import (  # noqa: E402
    DirectOptions, GoogleCloudOptions, PipelineOptions, StandardOptions)

from beam_pipeline import options as job_options  # noqa: E402
from beam_pipeline import report  # noqa: E402
from beam_pipeline import source as csv_source  # noqa: E402
from beam_pipeline.pipeline import all_shard_keys, build_pipeline  # noqa: E402
from beam_pipeline.progress import ShardProgress  # noqa: E402
from tf_serving_input import features  # noqa: E402

# What a run writes into its output folder; --overwrite removes exactly these.
_OUTPUT_ENTRIES = (features.DATA_DIR, features.SHARD_STATUS_DIR, "transform_fn", "transformed_metadata",
                   "metadata", features.MANIFEST_FILE, features.ERRORS_FILE, features.RUN_FILE, ".tmp")
# What a resumed run keeps: finished shards and their status files (verified before reuse).
_KEPT_ON_RESUME = (features.DATA_DIR, features.SHARD_STATUS_DIR, features.RUN_FILE)


class OutputDirError(RuntimeError):
    """The output folder cannot be used as asked."""


def _file_digest(path):
    digest = hashlib.sha256()
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run_fingerprint(job):
    """What makes two runs the same run: the configuration and the CSV's content."""
    return {"config": job.to_dict(), "input_csv_sha256": _file_digest(job.input_csv)}


def _read_json(path):
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            return json.loads(f.read())
    except Exception:
        return None


def prepare_output_dir(job):
    """Makes --output_dir ready; returns how many finished shards an earlier identical run left.

    An earlier run of the same input and configuration is resumed: its finished
    shards stay (each is verified against its checksum before reuse), stale
    temporary files and the end-of-run outputs go. Output of a different input
    or configuration is refused, untouched, unless --overwrite.
    """
    join = FileSystems.join
    existing = [name for name in _OUTPUT_ENTRIES if FileSystems.exists(join(job.output_dir, name))]
    fingerprint = run_fingerprint(job)
    resumable = bool(existing) and not job.overwrite
    if resumable and _read_json(join(job.output_dir, features.RUN_FILE)) != fingerprint:
        raise OutputDirError(
            f"{job.output_dir} already holds output of a different input or configuration "
            f"({', '.join(existing)}); pass --overwrite to replace it, or choose another --output_dir")
    stale = [join(job.output_dir, name) for name in existing if not (resumable and name in _KEPT_ON_RESUME)]
    if resumable:  # Files a killed run was still writing.
        patterns = [join(job.output_dir, folder, "*.incomplete")
                    for folder in (features.DATA_DIR, features.SHARD_STATUS_DIR)]
        stale += [m.path for result in FileSystems.match(patterns) for m in result.metadata_list]
    if stale:
        FileSystems.delete(stale)
    for name in (features.DATA_DIR, features.SHARD_STATUS_DIR):
        try:
            FileSystems.mkdirs(join(job.output_dir, name))
        except Exception:  # Object stores have no folders; an existing one is fine too.
            pass
    with FileSystems.create(join(job.output_dir, features.RUN_FILE),
                            compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(json.dumps(fingerprint, indent=1).encode("utf-8"))
    if not resumable:
        return 0
    return len(FileSystems.match([join(job.output_dir, features.SHARD_STATUS_DIR, "*.json")])[0].metadata_list)


def _temp_dir(job, pipeline_options):
    temp_location = pipeline_options.view_as(GoogleCloudOptions).temp_location
    if temp_location:
        return FileSystems.join(temp_location, "beam-image-pipeline-tft")
    return FileSystems.join(job.output_dir, ".tmp")


def tensorflow_unwritable(path):
    """Why tensorflow-transform cannot write under `path`, or None when it can.

    TFT writes transform_fn/ (and its temporary files) with TensorFlow's own file
    system layer, not Beam's: a scheme Beam reads and writes (s3://) can still be
    one TensorFlow lacks, and the run would only fail at its very end.
    """
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


def _local_runner(pipeline_options):
    """The FnApiRunner, set up to hand the pipeline options to its worker processes; None otherwise.

    Beam's FnApiRunner starts its multi_processing workers with empty pipeline
    options, so Beam's filesystems there would not see --s3_endpoint_url, S3
    credentials and the like: workers could not read the images. This gives
    them the options, as a portable job service does.
    """
    if pipeline_options.view_as(StandardOptions).runner != job_options.DEFAULT_RUNNER:
        return None
    # One TensorFlow thread per worker process, as there is one worker per core. WriteShardFn.setup
    # asks for that too, but only takes effect where nothing has started TF's runtime yet; a worker
    # that had (measured: one of two) ran with default pools, oversubscribing the cores. TF reads
    # these variables when its runtime starts; the workers inherit them.
    # Only for worker processes: in-process modes keep TF's default pools.
    if pipeline_options.view_as(DirectOptions).direct_running_mode == "multi_processing":
        for variable in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
            os.environ.setdefault(variable, "1")
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(
        pipeline_options.get_all_options(retain_unknown_options=True))
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(retrieval_token="unused-retrieval-token",
                                             pipeline_options=encoded)))


def shard_counts_for(job, csv_summary):
    """Shards per split: --num_shards for each, or a count from the split's size."""
    return {split: job.num_shards or csv_source.auto_num_shards(rows)
            for split, rows in csv_summary.rows_per_split.items()}


def _quiet_library_logs():
    """Keeps Beam's relayed worker notices and TFT's advice out of the user's terminal."""
    for name in ("apache_beam.runners.portability", "apache_beam.runners.worker", "absl"):
        logging.getLogger(name).setLevel(logging.ERROR)


def run(argv=None):
    """Runs the job; returns the process exit code (0 ok, 1 too many failures, 2 refused)."""
    _quiet_library_logs()
    job, beam_args = job_options.parse_args(sys.argv[1:] if argv is None else argv)
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
    try:
        csv_summary = csv_source.summarize_csv(job.input_csv, job.columns)
        finished_earlier = prepare_output_dir(job)
    except (csv_source.CsvError, OutputDirError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    shard_counts = shard_counts_for(job, csv_summary)
    names = [csv_source.shard_name(split, index, shard_counts[split])
             for split, index in all_shard_keys(shard_counts)]
    splits = ", ".join(f"{split} {rows}" for split, rows in csv_summary.rows_per_split.items())
    print(f"Reading {job.input_csv}: {csv_summary.rows} rows ({splits}); "
          f"writing {len(names)} shards to {job.output_dir}", flush=True)
    if finished_earlier:
        print(f"Resuming: {finished_earlier} shard(s) finished by an earlier run of this input and "
              "configuration are verified and kept", flush=True)

    runner = pipeline_options.view_as(StandardOptions).runner
    monitor = None
    if job.progress and job_options.is_local_runner(beam_args):
        monitor = ShardProgress(job.output_dir, len(names), csv_summary.rows)
        monitor.start()
    started = time.time()
    try:
        with beam.Pipeline(runner=_local_runner(pipeline_options), options=pipeline_options) as pipeline:
            build_pipeline(pipeline, job, shard_counts, _temp_dir(job, pipeline_options))
    finally:
        if monitor:
            monitor.stop()
    wall_seconds = time.time() - started

    from tf_serving_input.normalization import read_statistics  # TF loads after Beam's workers start.

    statuses = report.read_shard_statuses(job.output_dir, names)
    statistics = read_statistics(job.output_dir)
    manifest, failures = report.build_manifest(job, statuses, statistics, wall_seconds, runner)
    report.write_outputs(job.output_dir, manifest, failures)
    local_temp = FileSystems.join(job.output_dir, ".tmp")
    if FileSystems.exists(local_temp):
        FileSystems.delete([local_temp])
    print(report.format_summary(manifest, job.output_dir), flush=True)

    failed_fraction = manifest["failed"] / manifest["rows"]
    if failed_fraction > job.max_error_rate:
        reasons = "; ".join(f"{reason}: {count}" for reason, count in
                            list(manifest["failed_by_reason"].items())[:5])
        print(f"error: {manifest['failed']} of {manifest['rows']} rows failed ({failed_fraction:.1%}), more "
              f"than --max_error_rate={job.max_error_rate:g}. Top reasons: {reasons}. Every failed row "
              f"is listed in {FileSystems.join(job.output_dir, features.ERRORS_FILE)}", file=sys.stderr)
        return 1
    return 0


def main():
    """Console-script entry point."""
    sys.exit(run())
