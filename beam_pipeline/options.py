"""Command-line flags of the job and how they become a JobConfig and Beam options.

Imports neither Beam nor TensorFlow, so `--help` and flag errors answer at once.
"""

import argparse
import dataclasses
import os

from beam_pipeline import source as csv_source
from beam_pipeline.source import DEFAULT_MAX_FILE_BYTES
from tf_serving_input.features import IMAGE_FORMATS, RESIZE_MODES, PreprocessConfig
from tf_serving_input.layout import LAYOUT_VERSION

# Beam's in-process portable runner: needs no download (DirectRunner first tries
# Prism, which fetches a binary at run time) and runs one worker per core.
DEFAULT_RUNNER = "FnApiRunner"
LOCAL_RUNNERS = ("FnApiRunner", "DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner")


@dataclasses.dataclass(frozen=True)
class JobConfig:
    """Everything the job needs besides Beam's own options."""

    input_csv: str
    output_dir: str
    preprocess: PreprocessConfig
    columns: csv_source.CsvColumns
    num_shards: int = 0
    max_error_rate: float = 0.01
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    overwrite: bool = False
    progress: bool = True

    def to_dict(self):
        """JSON-serializable configuration, as recorded in the manifest."""
        return {
            "layout_version": LAYOUT_VERSION,
            "input_csv": self.input_csv,
            "preprocess": self.preprocess.to_dict(),
            "columns": dataclasses.asdict(self.columns),
            "num_shards": self.num_shards,
            "max_error_rate": self.max_error_rate,
            "max_file_bytes": self.max_file_bytes,
        }


def build_parser():
    """The job's own flags; anything else on the command line goes to Beam."""
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline",
        description=(
            "Turn a CSV of image paths into sharded TFRecords of preprocessed images, plus the "
            "per-channel mean/std and label vocabulary computed with tensorflow-transform. "
            "Any Beam pipeline option (--runner, --direct_num_workers, --project, ...) passes "
            f"through; the default runner is {DEFAULT_RUNNER} with one worker per core."),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--input_csv", required=True,
                        help="CSV with a header row and one image per row; local path or any Beam "
                             "filesystem URI (gs://, s3://). Relative image paths resolve against "
                             "the CSV's folder.")
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
    parser.add_argument("--num_shards", type=int, default=0,
                        help="Shards per split; 0 picks one per ~%d rows (at least %d, at most one "
                             "per row)." % (csv_source.ROWS_PER_SHARD, csv_source.MIN_AUTO_SHARDS))
    parser.add_argument("--path_column", default=csv_source.CsvColumns.path,
                        help="CSV column holding the image path or URI.")
    parser.add_argument("--label_column", default=csv_source.CsvColumns.label,
                        help="CSV column holding the label (optional: unlabeled data is valid).")
    parser.add_argument("--split_column", default=csv_source.CsvColumns.split,
                        help="CSV column naming each row's split (train, validation, ...); without "
                             "it every row is 'train'. Statistics come from 'train' only.")
    parser.add_argument("--max_error_rate", type=float, default=0.01,
                        help="Fail (exit 1) when more than this fraction of rows fails; failed rows "
                             "are listed in errors.jsonl either way.")
    parser.add_argument("--max_pixels", type=int, default=PreprocessConfig.max_pixels,
                        help="Refuse images whose header claims more pixels, before decoding them.")
    parser.add_argument("--jpeg_shrink_on_load", action=argparse.BooleanOptionalAction,
                        default=PreprocessConfig.jpeg_shrink_on_load,
                        help="Decode JPEGs at least twice --image_size at 1/2, 1/4 or 1/8 scale in the "
                             "DCT domain: 1.9x faster on 2.6 MP photos at 44.7 dB PSNR against full "
                             "decode (docs/benchmarks.md); --no-jpeg_shrink_on_load decodes in full.")
    parser.add_argument("--max_file_bytes", type=int, default=DEFAULT_MAX_FILE_BYTES,
                        help="Refuse files larger than this many bytes without reading them whole.")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace the output of an earlier run in --output_dir.")
    parser.add_argument("--no_progress", dest="progress", action="store_false",
                        help="Do not print progress lines while shards complete.")
    return parser


def parse_args(argv):
    """Returns (JobConfig, list of Beam pipeline arguments); exits with usage on bad flags."""
    parser = build_parser()
    args, beam_args = parser.parse_known_args(argv)
    try:
        preprocess = PreprocessConfig(image_size=args.image_size, resize_mode=args.resize_mode,
                                      image_format=args.image_format, jpeg_quality=args.jpeg_quality,
                                      max_pixels=args.max_pixels,
                                      jpeg_shrink_on_load=args.jpeg_shrink_on_load)
    except ValueError as error:
        parser.error(str(error))
    if args.num_shards < 0:
        parser.error("--num_shards must be >= 0")
    if not 0.0 <= args.max_error_rate <= 1.0:
        parser.error("--max_error_rate must be between 0 and 1")
    job = JobConfig(
        input_csv=absolute_if_local(args.input_csv), output_dir=absolute_if_local(args.output_dir),
        preprocess=preprocess,
        columns=csv_source.CsvColumns(path=args.path_column, label=args.label_column,
                                      split=args.split_column),
        num_shards=args.num_shards, max_error_rate=args.max_error_rate,
        max_file_bytes=args.max_file_bytes, overwrite=args.overwrite, progress=args.progress)
    return job, with_local_defaults(beam_args)


def absolute_if_local(path):
    """A local path made absolute (URIs pass, without a trailing '/').

    Workers of a portable runner, a worker pool or a cluster do not share the
    launcher's working directory: a relative path would name another file there.
    """
    if "://" in path:
        return path.rstrip("/") or path
    return os.path.abspath(path)


def flag_value(beam_args, name):
    """The value of a Beam flag given as `--name=value` or `--name value`, else None."""
    for i, arg in enumerate(beam_args):
        if arg == f"--{name}" and i + 1 < len(beam_args):
            return beam_args[i + 1]
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def with_local_defaults(beam_args):
    """Adds the local-runner defaults (FnApiRunner, one process per core) unless given."""
    beam_args = list(beam_args)
    runner = flag_value(beam_args, "runner")
    if runner is None:
        beam_args.append(f"--runner={DEFAULT_RUNNER}")
        runner = DEFAULT_RUNNER
    if runner in LOCAL_RUNNERS:
        if flag_value(beam_args, "direct_num_workers") is None:
            beam_args.append(f"--direct_num_workers={os.cpu_count() or 1}")
        if flag_value(beam_args, "direct_running_mode") is None:
            beam_args.append("--direct_running_mode=multi_processing")
    return beam_args


def is_local_runner(beam_args):
    """Whether the job runs on this machine (so progress can be shown as shards land)."""
    return flag_value(beam_args, "runner") in LOCAL_RUNNERS
