"""Command-line flags of the job and how they become a JobConfig and Beam options.

Imports neither Beam nor TensorFlow, so `--help` and flag errors answer at once.
"""

import argparse
import dataclasses

from beam_pipeline.common import flags
from beam_pipeline.common.flags import DEFAULT_RUNNER, absolute_if_local, with_local_defaults
from beam_pipeline.inputs import flags as input_flags
from beam_pipeline.inputs import rows as csv_source
from beam_pipeline.inputs.cells import DEFAULT_LIST_SEPARATOR
from beam_pipeline.inputs.rows import DEFAULT_MAX_FILE_BYTES
from beam_pipeline.inputs.urls import FetchConfig
from beam_pipeline.preprocess.step_process import DEFAULT_TIMEOUT as DEFAULT_STEP_TIMEOUT
from tf_serving_input.columns import FeatureSpec
from tf_serving_input.features import IMAGE_FORMATS, RESIZE_MODES, PreprocessConfig
from tf_serving_input.layout import LAYOUT_VERSION


@dataclasses.dataclass(frozen=True)
class JobConfig:
    """Everything the job needs besides Beam's own options."""

    # The list of images (--input or --input_csv): a file, a glob or a folder (the name kept: manifests and
    # fingerprints of earlier runs hold it).
    input_csv: str
    output_dir: str
    preprocess: PreprocessConfig
    columns: csv_source.CsvColumns
    num_shards: int = 0
    max_error_rate: float = 0.01
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    overwrite: bool = False
    progress: bool = True
    fetch: FetchConfig = FetchConfig()
    retry_failed: bool = False
    # The --image_step steps, in order, as recorded (tf_serving_input.steps.StepRecord); loaded and checked by
    # the launcher before any work.
    steps: tuple = ()
    # --preview N: the steps on the first N rows in this process, a before/after sheet at `contact_sheet`, no run
    # (beam_pipeline.preprocess.preview). Neither is part of the run's configuration.
    preview: int = 0
    contact_sheet: str = ""
    # --step_timeout: seconds a Python step may take on one image (0: no limit, run in the worker). It only
    # tunes running, as the URL timeouts do: not in to_dict, so a resume may change it.
    step_timeout: float = DEFAULT_STEP_TIMEOUT
    # The kept columns (--column) and whether the label is multi-valued: what the records and features.json hold.
    features: FeatureSpec = FeatureSpec()
    list_separator: str = DEFAULT_LIST_SEPARATOR
    # The list's format for every file ('csv' for --input_csv), or '' to tell each file's by its name.
    input_format: str = ""
    # The --column flags while one has no type yet: `with_typed_columns` gives them their types from the list
    # (then `features` holds them all, and this is empty).
    column_requests: tuple = ()

    @property
    def column_reading(self) -> csv_source.ColumnReading:
        """How the rows' kept columns are read (`Row.columns`, `Row.labels`) and the list's format."""
        return csv_source.ColumnReading(self.features, self.list_separator, self.input_format)

    def with_typed_columns(self):
        """This config with its untyped --column columns typed by the list (a Parquet schema, JSON values);
        InputRefused (exit 2, one line) when the list cannot type one."""
        if not self.column_requests:
            return self
        from beam_pipeline.common.launcher import InputRefused

        try:
            features = input_flags.typed_features(self.input_csv, self.input_format, self.column_requests,
                                                  self.columns.label)
        except ValueError as error:  # ColumnError
            raise InputRefused(str(error)) from None
        return dataclasses.replace(self, features=features, column_requests=())

    def to_dict(self):
        """JSON-serializable configuration, as recorded in the manifest (and the run's fingerprint).

        The URL flags that only tune fetching are not part of it, so a rerun or `--retry_failed` may
        change them; `url_allow_private` changes which rows can be written, so it is, but only when
        set: an output made before URL rows existed still resumes.
        """
        extra = {"url_allow_private": True} if self.fetch.allow_private else {}
        if self.steps:  # Only when given: a run without steps keeps the fingerprint it always had.
            extra["image_steps"] = [step.to_dict() for step in self.steps]
        if self.input_format not in ("", "csv"):  # Likewise: a CSV list's run keeps its fingerprint.
            extra["input_format"] = self.input_format
        if self.features != FeatureSpec():  # Likewise: a run keeping no column keeps its fingerprint.
            extra["features"] = self.features.to_json()
            extra["list_separator"] = self.list_separator
        return {
            "layout_version": LAYOUT_VERSION,
            "input_csv": self.input_csv,
            "preprocess": self.preprocess.to_dict(),
            "columns": dataclasses.asdict(self.columns),
            "num_shards": self.num_shards,
            "max_error_rate": self.max_error_rate,
            "max_file_bytes": self.max_file_bytes,
            **extra,
        }


def build_parser(prog="beam-image-pipeline preprocess"):
    """The job's own flags; anything else on the command line goes to Beam."""
    parser = flags.new_parser(
        prog=prog,
        description=(
            "Turn a CSV of image paths into sharded TFRecords of preprocessed images, plus the "
            "per-channel mean/std and label vocabulary computed with tensorflow-transform. "
            "Any Beam pipeline option (--runner, --direct_num_workers, --project, ...) passes "
            f"through; the default runner is {DEFAULT_RUNNER} with one worker per core."))
    input_flags.add_input_flags(parser)
    parser.add_argument("--output_dir", required=True,
                        help="Folder for data/, transform_fn/, manifest.json and errors.jsonl.")
    parser.add_argument("--image_size", type=int, default=PreprocessConfig.image_size,
                        help="Side of the square output images, in pixels.")
    parser.add_argument("--resize_mode", choices=RESIZE_MODES, default=PreprocessConfig.resize_mode,
                        help="center_crop: shorter side to image_size, then crop the center; pad: "
                             "longer side to image_size, then pad with black; stretch: ignore the "
                             "aspect ratio.")
    parser.add_argument("--image_format", choices=IMAGE_FORMATS, default=PreprocessConfig.image_format,
                        help="How preprocessed images are stored in the TFRecords: raw uint8 pixels (lossless, "
                             "nothing to decode when training, ~150 KB per 224 px image), png (lossless, "
                             "~2x smaller, slow to decode) or jpeg (~7x smaller, slightly lossy).")
    parser.add_argument("--jpeg_quality", type=int, default=PreprocessConfig.jpeg_quality,
                        help="JPEG quality (1-100) when --image_format=jpeg.")
    parser.add_argument("--max_pixels", type=int, default=PreprocessConfig.max_pixels,
                        help="Refuse images whose header claims more pixels, before decoding them.")
    parser.add_argument("--jpeg_shrink_on_load", action=argparse.BooleanOptionalAction,
                        default=PreprocessConfig.jpeg_shrink_on_load,
                        help="Decode JPEGs at least twice --image_size at 1/2, 1/4 or 1/8 scale in the "
                             "DCT domain: 1.9x faster on 2.6 MP photos at 44.7 dB PSNR against full "
                             "decode (docs/benchmarks.md); --no-jpeg_shrink_on_load decodes in full.")
    parser.add_argument("--image_step", action="append", default=[], metavar="SPEC",
                        help="Your own per-image step, FILE.py:FUNCTION or package.module:FUNCTION; repeat it for "
                             "several, run in the order given, after decode and EXIF orientation and before the "
                             "resize to --image_size. A TF step takes and returns a uint8 tensor [H, W, 3], is "
                             "traced once and is served by export_serving_model too. A Python step is marked "
                             "@python_step (from beam_pipeline import python_step) and runs on NumPy arrays in "
                             "the workers. A step that cannot work is refused before any shard is written; a "
                             "changed step's run is refused without --overwrite (docs/steps.md).")
    parser.add_argument("--preview", type=int, default=None, metavar="N",
                        help="Write no run: preprocess the first N rows in this process, with the --image_step "
                             "steps and without, write a before/after contact sheet (--contact_sheet), print each "
                             "step's time per image and the rows that fail with the reason the job would record.")
    parser.add_argument("--contact_sheet", default="", metavar="PATH",
                        help="With --preview: the PNG contact sheet to write (default: preview.png in the folder "
                             "the command runs from).")
    parser.add_argument("--step_timeout", type=float, default=JobConfig.step_timeout, metavar="SECONDS",
                        help="Seconds a Python --image_step may take on one image: past it the row fails as "
                             "step_timeout and the step's process is replaced, so the shard goes on. 0: no limit, "
                             "and the Python steps run in the worker process itself (no guard; docs/steps.md).")
    input_flags.add_csv_flags(parser)
    input_flags.add_column_flags(parser)
    flags.add_run_flags(parser)
    parser.add_argument("--retry_failed", action="store_true",
                        help="Rerun a finished or killed run (the same flags) fetching again only the URL rows that "
                             "failed transiently (timeout, connection_failed, http_429, http_5xx); recovered rows "
                             "join the same shards, each key once. Not with --overwrite.")
    input_flags.add_url_flags(parser)
    return parser


def parse_args(argv, prog="beam-image-pipeline preprocess"):
    """Returns (JobConfig, list of Beam pipeline arguments); exits with usage on bad flags."""
    parser = build_parser(prog)
    args, beam_args = flags.parse_job_flags(parser, argv)
    try:
        preprocess = PreprocessConfig(image_size=args.image_size, resize_mode=args.resize_mode,
                                      image_format=args.image_format, jpeg_quality=args.jpeg_quality,
                                      max_pixels=args.max_pixels,
                                      jpeg_shrink_on_load=args.jpeg_shrink_on_load)
    except ValueError as error:
        parser.error(str(error))
    flags.check_run_flags(parser, args)
    if not args.step_timeout >= 0 or args.step_timeout == float("inf"):
        parser.error(f"--step_timeout {args.step_timeout:g}: give seconds > 0, or 0 for no limit")
    fetch = input_flags.url_config(parser, args)
    input_list, input_format = input_flags.input_list(parser, args)
    features = input_flags.feature_spec(parser, args, label_column=args.label_column,
                                        text_list=input_format == "csv")
    if args.preview is not None and args.preview < 1:
        parser.error(f"--preview {args.preview}: give a number of rows, 1 or more")
    if args.contact_sheet and not args.preview:
        parser.error("--contact_sheet is the sheet of --preview N: give --preview too")
    if args.retry_failed and args.overwrite:
        parser.error("--retry_failed adds to an earlier run's output; --overwrite would replace it: pass one")
    job = JobConfig(
        input_csv=absolute_if_local(input_list), input_format=input_format,
        output_dir=absolute_if_local(args.output_dir),
        preprocess=preprocess,
        columns=input_flags.csv_columns(args),
        num_shards=args.num_shards, max_error_rate=args.max_error_rate,
        max_file_bytes=args.max_file_bytes, overwrite=args.overwrite, progress=args.progress,
        fetch=fetch, retry_failed=args.retry_failed, steps=tuple(args.image_step), preview=args.preview or 0,
        contact_sheet=args.contact_sheet, step_timeout=args.step_timeout, features=features or FeatureSpec(),
        list_separator=args.list_separator,
        column_requests=() if features is not None else input_flags.column_requests(args))
    return job, with_local_defaults(beam_args)
