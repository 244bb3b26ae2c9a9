"""The preprocessing job: `beam-image-pipeline preprocess --input_csv CSV --output_dir DIR`.

Also `python -m beam_pipeline --input_csv CSV --output_dir DIR`, the command from before subcommands.

Flags are parsed before Beam or TensorFlow is imported: `--help` and flag
errors answer at once.
"""

import sys

from beam_pipeline.common import terminal
from beam_pipeline.common.launcher import Launcher, Refused, beam_options, console_main
from beam_pipeline.preprocess import options as job_options

PROG = "beam-image-pipeline preprocess"
# The job's flags, as every subcommand's module offers them (beam_pipeline.cli.build_parser).
build_parser = job_options.build_parser


def run_fingerprint(job, csv_summary=None):
    """What makes two runs the same run: the configuration and the CSV's content.

    A CSV whose label cells the read changes (stripped, or blank: issue 55) also records that: an earlier
    version wrote such labels unstripped, so its folder is another run's (refused, or --overwrite), never
    resumed into shards that disagree; likewise a list whose split cells the read folds ('Train' is 'train')
    or discards (issue 52). Any other CSV's fingerprint is what it was, and resumes as before.
    """
    from beam_pipeline.inputs.tables import list_digest

    changed = csv_summary is not None and (csv_summary.labels_stripped or csv_summary.labels_blank)
    folded = csv_summary is not None and (csv_summary.splits_folded or csv_summary.discarded)
    return {"config": job.to_dict(), "input_csv_sha256": list_digest(job.input_csv, job.input_format),
            **({"labels": "stripped"} if changed else {}), **({"splits": "folded"} if folded else {})}


def resolved_steps(job):
    """`job` with its --image_step specs loaded, checked (TF steps traced) and recorded; Refused (exit 2) naming
    the file, the line and the reason when one cannot work."""
    import dataclasses

    from tf_serving_input import steps

    records = []
    for position, spec in enumerate(job.steps):
        try:
            record = steps.resolve(spec, position, image_size=job.preprocess.image_size)[0]
        except steps.StepRefused as error:
            raise Refused(f"--image_step {spec}: {error}") from None
        records.append(record)
    try:
        steps.check_order(records)
    except steps.StepRefused as error:
        raise Refused(f"--image_step {error}") from None
    return dataclasses.replace(job, steps=tuple(records))


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


def retry_notice(layout, finished_earlier):
    """What --retry_failed is about to fetch again, from the finished shards' statuses, in one line."""
    import collections

    from apache_beam.io.filesystems import FileSystems

    from beam_pipeline.common.shard_file import read_status
    from tf_serving_input import failures

    if not finished_earlier:
        return "--retry_failed: no finished shard here yet: every row is read"
    counts = collections.Counter()
    for metadata in FileSystems.match([layout.status_files_glob()])[0].metadata_list:
        status = read_status(metadata.path) or {}
        counts.update(entry["reason"] for entry in status.get("failed", ()) if entry["reason"] in failures.TRANSIENT)
    if not counts:
        return "--retry_failed: no row failed transiently (timeout, connection, 429, 5xx): nothing is fetched again"
    reasons = ", ".join(f"{reason} {count}" for reason, count in counts.most_common())
    total = sum(counts.values())
    return f"--retry_failed: fetching again {total} row{'' if total == 1 else 's'} that failed transiently ({reasons})"


def fetched_this_run(totals, built, shards):
    """The manifest's `fetch`: the output's URL rows (`urls`), and the URL rows requested and bytes fetched by
    THIS run (a resume or --retry_failed fetches only some), from the pipeline's counters; the statuses' totals
    (what fetched the shards, in whichever run) when the runner reported no counters."""
    from beam_pipeline.preprocess.shard_writer import fetched_in_run

    result = getattr(built[0], "result", None) if built else None
    this_run = fetched_in_run(result, shards) if result is not None else None
    if this_run is None:
        this_run = {"requested": totals["urls"], "bytes": totals["bytes"]}
    return {"urls": totals["urls"], **this_run}


def list_summary_rows(csv_summary, manifest):
    """The closing summary's lines on the list: rows per format read, rows failed as bad_value (the manifest's
    count: the pipeline types the cells, the launcher's check does not), discarded and blank-split rows (each only
    when there is one)."""
    formats = ", ".join(f"{fmt} {rows}" for fmt, rows in csv_summary.rows_per_format.items())
    lines = [("list rows", f"{csv_summary.rows + csv_summary.discarded} read ({formats})")]
    bad_values = manifest.get("failed_by_reason", {}).get("bad_value", 0)
    if bad_values:
        lines.append(("bad values", f"{bad_values} rows failed as bad_value (errors.jsonl names the cell)"))
    if csv_summary.discarded:
        lines.append(("discarded", f"{csv_summary.discarded} rows of the split 'discard', not written"))
    if csv_summary.blank_splits:
        lines.append(("blank splits", f"{csv_summary.blank_splits} rows with a blank split cell, put in 'train'"))
    return lines


def write_column_statistics(job, layout, transform_output=None):
    """A run that keeps columns: their statistics read from the transform graph into column_stats.json (before
    the manifest, which comes last); returns them. None for a run that keeps none (no file)."""
    from beam_pipeline.common.files import write_json
    from tf_serving_input.columns import FeatureSpec

    if job.features == FeatureSpec():
        return None
    from tf_serving_input.normalization import read_column_statistics

    document = read_column_statistics(job.output_dir, job.features, transform_output)
    write_json(layout.column_stats_file, document)
    return document


def _tft_temp_dir(layout, pipeline_options):
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    temp_location = pipeline_options.view_as(GoogleCloudOptions).temp_location
    if temp_location:
        return f"{temp_location.rstrip('/')}/beam-image-pipeline-tft"
    return layout.tft_temp_dir


class PreprocessLauncher(Launcher):
    """CSV -> shards + statistics: what the preprocessing job adds to the shared run."""

    def __init__(self, job, beam_args, pipeline_options, layout):
        super().__init__(layout, beam_args, pipeline_options, job)
        self.job = job
        self.csv_summary = None

    def first_step(self):
        return f"reading the list {self.job.input_csv}"

    def check(self, step):
        from apache_beam.options.pipeline_options import GoogleCloudOptions

        from beam_pipeline.inputs import rows as csv_rows

        temp_location = self.pipeline_options.view_as(GoogleCloudOptions).temp_location
        for flag, path in (("--output_dir", self.job.output_dir), ("--temp_location", temp_location)):
            reason = path and tensorflow_unwritable(path)
            if reason:
                raise Refused(f"{flag} {reason}")
        self.job = self.job.with_typed_columns()
        self.csv_summary = csv_rows.summarize_csv(self.job.input_csv, self.job.columns,
                                                    self.job.column_reading)
        if self.job.steps:
            step.now("loading and tracing the --image_step steps")
            self.job = resolved_steps(self.job)

    def fingerprint(self):
        return run_fingerprint(self.job, self.csv_summary)

    def failure_line(self, error, run_log):
        """A Python step that ended its process: one line naming it; the finished shards are kept."""
        from beam_pipeline.preprocess.step_process import crash_line

        current, depth = error, 0
        while current is not None and depth < 20:  # The error and its causes (a runner may wrap it).
            found = crash_line(str(current))
            if found is not None:
                return (f"error: {found}; the finished shards are kept: fix the step and run the same command "
                        f"again to resume (details: {run_log.write(error)})")
            current, depth = current.__cause__ or current.__context__, depth + 1
        return None

    def run(self, finished_earlier, step, run_log):
        from apache_beam.options.pipeline_options import StandardOptions

        from beam_pipeline.common import report
        from beam_pipeline.common.files import delete_tree
        from beam_pipeline.inputs.rows import all_shard_keys, shard_counts_for
        from beam_pipeline.preprocess import column_report, step_timing
        from beam_pipeline.preprocess.pipeline import build_pipeline
        from tf_serving_input.layout import shard_name

        job, layout, csv_summary = self.job, self.layout, self.csv_summary
        shard_counts = shard_counts_for(job.num_shards, csv_summary)
        names = [shard_name(split, index, shard_counts[split]) for split, index in all_shard_keys(shard_counts)]
        splits = ", ".join(f"{split} {rows}" for split, rows in csv_summary.rows_per_split.items())
        self.announce(f"Reading {job.input_csv}: {csv_summary.rows} rows ({splits}); "
                      f"writing {len(names)} shards to {job.output_dir}", finished_earlier)
        if job.retry_failed:
            terminal.notice(retry_notice(layout, finished_earlier))
        temp_dir = _tft_temp_dir(layout, self.pipeline_options)
        built = []  # The pipeline, for its result's counters once it has run.

        def build(pipeline):
            built.append(pipeline)
            build_pipeline(pipeline, job, shard_counts, temp_dir)

        wall_seconds = self.run_pipeline(step, run_log, f"writing shards to {layout.data_dir}", build, len(names),
                                         csv_summary.rows)

        from tf_serving_input.normalization import read_statistics  # TF loads after Beam's workers start.

        statuses = self.verified_statuses(step, names)
        if statuses is None:
            return 1
        step.now(f"writing the manifest to {layout.root}")
        import tensorflow_transform as tft

        transform_output = tft.TFTransformOutput(job.output_dir)  # Loaded once, for both.
        statistics = read_statistics(job.output_dir, transform_output)
        columns = write_column_statistics(job, layout, transform_output)
        runner = self.pipeline_options.view_as(StandardOptions).runner
        label_cells = {"stripped": csv_summary.labels_stripped, "blank": csv_summary.labels_blank}
        manifest, failures = report.build_manifest(job, statuses, statistics, wall_seconds, runner, label_cells)
        if columns is not None:  # Every reader checks column_stats.json against it, as shards are checked.
            from beam_pipeline.common.files import file_digest
            from tf_serving_input.column_stats import MANIFEST_KEY

            manifest[MANIFEST_KEY] = file_digest(layout.column_stats_file)
        timing = step_timing.summarize(statuses, job.steps) if job.steps else None
        if timing is not None:
            manifest[step_timing.MANIFEST_KEY] = timing
        if "fetch" in manifest:
            manifest["fetch"] = fetched_this_run(manifest["fetch"], built, len(names))
        # features.json before the manifest: a finished run (one with a manifest) always has it. Written for a run
        # keeping no column too, so that a reader of any new run needs no guess (docs/columns.md).
        report.write_text(layout.features_file, job.features.dumps())
        report.write_outputs(layout, manifest, failures)
        delete_tree([layout.tft_temp_dir])  # A folder: on gs:// only a prefix, which FileSystems.exists misses.
        terminal.result(report.format_summary(manifest, layout, list_summary_rows(csv_summary, manifest)
                                              + column_report.summary_rows(columns)
                                              + step_timing.summary_rows(manifest)))
        return self.error_budget_code(manifest)


def run(argv=None, prog=PROG):
    """Runs the job; returns the process exit code (0 ok, 1 failed, 2 refused before any work)."""
    job, beam_args = job_options.parse_args(sys.argv[1:] if argv is None else argv, prog)
    if job.preview:  # No run: the steps on the first rows, in this process (docs/steps.md).
        from beam_pipeline.preprocess.preview import run_preview

        return run_preview(job, job.contact_sheet)

    from tf_serving_input.layout import OutputLayout

    return PreprocessLauncher(job, beam_args, beam_options(beam_args), OutputLayout(job.output_dir)).execute()


def main():
    """Console-script entry point."""
    console_main(run)
