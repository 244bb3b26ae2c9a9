"""The quality job: `beam-image-pipeline quality --input_dir JOB_OUTPUT --output_dir QUALITY_OUT`.

Reads a finished preprocessing job's records, computes per-image signals in TensorFlow (a DCT perceptual
hash, an exact pixel digest, brightness, contrast, blur), finds exact and near-duplicate groups without
comparing all pairs (banded hashing on a GroupByKey), and writes duplicate_groups.parquet,
image_flags.parquet, summary.json, clean_split.csv and report.html (README "Quality"). Same run-folder
guarantees as the other jobs; every Beam option passes through.

Flags are parsed before Beam or TensorFlow is imported: `--help` answers at once.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from beam_pipeline.common import flags

PROG = "beam-image-pipeline quality"


@dataclasses.dataclass(frozen=True)
class QualityConfig:
    """Everything the quality job needs besides Beam's own options (the thresholds are recorded in summary.json)."""

    input_dir: str
    output_dir: str
    predictions_dir: str | None = None
    embedding_distance: float | None = None  # None: calibrated from the embeddings (README "Quality").
    label_error_distance: float = 0.15
    embedding_hash_distance: int = 16
    hash_distance: int = 10
    hash_band_bits: int = 14
    hash_band_step: int = 5
    max_bucket: int = 2000
    near_constant_contrast: float = 4.0
    dark_brightness: float = 30.0
    bright_brightness: float = 225.0
    blur_variance: float = 30.0
    max_group_share: float = 0.1
    max_split_moved: float = 0.25
    force_clean_split: bool = False
    report_top: int = 20
    report_images: int = 8
    overwrite: bool = False
    progress: bool = True
    # How the summary is printed at the end (text or json): not part of the run's identity (`to_dict`).
    summary_format: str = "text"
    max_error_rate: float = 0.01

    def thresholds(self) -> dict[str, Any]:
        """The thresholds, as summary.json records them."""
        names = ("hash_distance", "hash_band_bits", "hash_band_step", "max_bucket", "near_constant_contrast",
                 "dark_brightness", "bright_brightness", "blur_variance", "max_group_share", "max_split_moved",
                 "force_clean_split")
        values = {name: getattr(self, name) for name in names}
        if self.predictions_dir:
            values.update(embedding_distance="auto" if self.embedding_distance is None else self.embedding_distance,
                          label_error_distance=self.label_error_distance,
                          embedding_hash_distance=self.embedding_hash_distance)
        return values

    def to_dict(self) -> dict[str, Any]:
        """What makes two runs the same run (run.json): the input and every threshold."""
        from tf_serving_input.layout import LAYOUT_VERSION

        return {"layout_version": LAYOUT_VERSION, "input_dir": self.input_dir, "predictions_dir": self.predictions_dir,
                **self.thresholds(),
                "report_top": self.report_top, "report_images": self.report_images}


def build_parser(prog: str = PROG) -> Any:
    """The quality job's own flags; anything else goes to Beam."""
    parser = flags.new_parser(
        prog=prog,
        description=(
            "Find exact and near-duplicate images, cross-split leaks, label conflicts and broken-looking images "
            "in a finished preprocessing job's output, from its stored records. Writes duplicate_groups.parquet, "
            "image_flags.parquet, summary.json, clean_split.csv (the job's CSV with splits moved so that no "
            "duplicate group spans two) and report.html. Any Beam pipeline option passes through; the default "
            f"runner is {flags.DEFAULT_RUNNER} with one worker per core."))
    parser.add_argument("--input_dir", required=True, help="A finished preprocessing job's --output_dir.")
    parser.add_argument("--output_dir", required=True, help="Folder for the quality outputs (QUALITY_OUT).")
    parser.add_argument("--predictions_dir", default=None,
                        help="The predict job's --output_dir for this job output: its embeddings add near-duplicate "
                             "pairs by cosine distance and find suspected label errors.")
    parser.add_argument("--embedding_distance", type=_auto_or_float, default="auto",
                        help="With --predictions_dir: images whose embeddings are within this cosine distance are "
                             "near-duplicates. auto: half the distance within which the closest 5%% "
                             "of images have a neighbour of another label (pictures the hash calls the same left "
                             "out), at most 0.05; 0.05 when fewer than 20 labelled images have such a neighbour.")
    parser.add_argument("--label_error_distance", type=float, default=0.15,
                        help="With --predictions_dir: embeddings within this cosine distance are neighbours; an image "
                             "whose labelled neighbours (3 or more) mostly carry one other label is a suspected "
                             "label error.")
    parser.add_argument("--embedding_hash_distance", type=int, default=16,
                        help="With --predictions_dir: candidate pairs are proposed when their 64-bit random-"
                             "hyperplane signatures differ in at most this many bits (about 64 x angle / pi), then "
                             "verified by the real cosine.")
    parser.add_argument("--hash_distance", type=int, default=10,
                        help="Two images are near-duplicates when their 64-bit perceptual hashes differ in at most "
                             "this many bits.")
    parser.add_argument("--hash_band_bits", type=int, default=14,
                        help="Bits of each band of the hash that pairs are looked for in (1-32): images meet when "
                             "one band of theirs is equal. Narrower bands find more pairs far apart, at up to "
                             "quadratic work at a million images (README \"Quality\").")
    parser.add_argument("--hash_band_step", type=int, default=5,
                        help="A band starts every this many bits (overlapping bands when below --hash_band_bits). "
                             "Pairs within (non-overlapping bands - 1) bits are found for certain: 3 with the "
                             "defaults; further pairs when one band is untouched (measured, README).")
    parser.add_argument("--max_bucket", type=int, default=2000,
                        help="A band bucket with more distinct hashes than this pairs only identical hashes (no "
                             "all-pairs comparison); summary.json counts such buckets.")
    parser.add_argument("--near_constant_contrast", type=float, default=4.0,
                        help="Flag 'near_constant' below this standard deviation of the gray level (0-255); "
                             "such images are left out of the near-duplicate search (they all hash alike).")
    parser.add_argument("--dark_brightness", type=float, default=30.0,
                        help="Flag 'dark' below this mean gray level (0-255).")
    parser.add_argument("--bright_brightness", type=float, default=225.0,
                        help="Flag 'bright' above this mean gray level (0-255).")
    parser.add_argument("--blur_variance", type=float, default=30.0,
                        help="Flag 'blurry' below this variance of the Laplacian of the stored gray image.")
    parser.add_argument("--max_group_share", type=float, default=0.1,
                        help="A duplicate group of 10 or more images holding more than this share of the images "
                             "is reported as a likely chain (single linkage: A near B near C); when the embedding "
                             "pairs make one, or mostly join different labels, they are left out of the groups and "
                             "the clean split (the hash pairs still count).")
    parser.add_argument("--max_split_moved", type=float, default=0.25,
                        help="clean_split.csv is not written when it would move more than this share of a split's "
                             "images out of it, or empty a split; the summary and report.html say why.")
    parser.add_argument("--force_clean_split", action="store_true",
                        help="Write clean_split.csv even when it empties a split or moves more than "
                             "--max_split_moved of one.")
    parser.add_argument("--report_top", type=int, default=20,
                        help="Groups or images report.html shows per section (the Parquet files list all).")
    parser.add_argument("--report_images", type=int, default=8, help="Thumbnails report.html shows per group.")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="The summary printed at the end: text for people, or json (one object on stdout: "
                             "summary.json's figures) for programs. Progress and notices go to stderr either way.")
    flags.add_run_flags(parser)
    return parser


# flag: (lowest, highest) it may take; every value must also be a finite number.
_RANGES = {
    "hash_distance": (0, 64), "hash_band_bits": (1, 32), "hash_band_step": (1, 64), "max_bucket": (2, None),
    "report_top": (0, None), "report_images": (1, None), "embedding_distance": (0.0, 2.0),
    "max_group_share": (0.0, 1.0), "max_split_moved": (0.0, 1.0),
    "label_error_distance": (0.0, 2.0), "embedding_hash_distance": (0, 64), "near_constant_contrast": (0.0, 255.0),
    "dark_brightness": (0.0, 255.0), "bright_brightness": (0.0, 255.0), "blur_variance": (0.0, None),
}


def _auto_or_float(text: str) -> str | float:
    """`auto`, or the number (its range is checked with the other thresholds')."""
    return "auto" if text.strip().lower() == "auto" else float(text)


def threshold_problem(args: Any) -> str | None:
    """The first threshold flag out of its range (one line), or None."""
    import math

    for name, (lowest, highest) in _RANGES.items():
        value = getattr(args, name)
        if value == "auto":
            continue
        if not math.isfinite(value) or value < lowest or (highest is not None and value > highest):
            bounds = f"from {lowest} to {highest}" if highest is not None else f"at least {lowest}"
            return f"--{name} must be a number {bounds}, not {value}"
    if args.dark_brightness >= args.bright_brightness:
        return (f"--dark_brightness ({args.dark_brightness}) must be below --bright_brightness "
                f"({args.bright_brightness})")
    return None


def parse_args(argv: list[str], prog: str = PROG) -> tuple[QualityConfig, list[str]]:
    """Returns (QualityConfig, Beam arguments); exits with usage on bad flags."""
    parser = build_parser(prog)
    args, beam_args = flags.parse_job_flags(parser, argv)
    flags.check_run_flags(parser, args)
    problem = threshold_problem(args)
    if problem:
        parser.error(problem)
    local = flags.absolute_if_local
    config = QualityConfig(
        input_dir=local(args.input_dir), output_dir=local(args.output_dir),
        predictions_dir=args.predictions_dir and local(args.predictions_dir),
        embedding_distance=None if args.embedding_distance == "auto" else args.embedding_distance,
        label_error_distance=args.label_error_distance,
        embedding_hash_distance=args.embedding_hash_distance, hash_distance=args.hash_distance,
        hash_band_bits=args.hash_band_bits, hash_band_step=args.hash_band_step, max_bucket=args.max_bucket,
        near_constant_contrast=args.near_constant_contrast,
        dark_brightness=args.dark_brightness, bright_brightness=args.bright_brightness,
        blur_variance=args.blur_variance, max_group_share=args.max_group_share,
        max_split_moved=args.max_split_moved, force_clean_split=args.force_clean_split,
        report_top=args.report_top, report_images=args.report_images,
        overwrite=args.overwrite, progress=args.progress, max_error_rate=args.max_error_rate,
        summary_format=args.format)
    return config, flags.with_local_defaults(beam_args)


def run(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Runs the quality job; returns the exit code (0 ok, 1 failed, 2 refused before any work)."""
    config, beam_args = parse_args(sys.argv[1:] if argv is None else argv, prog)

    from beam_pipeline.common.launcher import beam_options
    from beam_pipeline.quality.launcher import QualityLauncher
    from tf_serving_input.layout import QualityLayout

    return QualityLauncher(config, beam_args, beam_options(beam_args), QualityLayout(config.output_dir)).execute()


def main() -> None:
    """Console-script entry point."""
    from beam_pipeline.common.launcher import console_main

    console_main(run)
