"""Shows what a job wrote: `beam-image-pipeline inspect DIR [--contact_sheet sheet.png]`.

Prints the manifest summary and the statistics, and renders a grid of decoded
sample images with their labels, so a user can see the data, not just counts.
Reads the output through TensorFlow only (no Beam pipeline is run).
"""

import argparse
import json
import os
import sys

from beam_pipeline.common import flags, terminal
from beam_pipeline.common.contact_sheet import render_contact_sheet
from beam_pipeline.preprocess import column_report, step_timing
from tf_serving_input import features
from tf_serving_input.column_stats import read_document
from tf_serving_input.columns import joined_labels, load_feature_spec
from tf_serving_input.layout import OutputLayout


def sample_records(output_dir, manifest, count, split=None):
    """Up to `count` (image uint8 [S, S, 3], label, source) from the job's shards, in shard order."""
    import tensorflow as tf  # Only for the contact sheet: the summary needs no TensorFlow.

    from tf_serving_input.codecs import parse_record
    from tf_serving_input.features import PreprocessConfig

    config = PreprocessConfig.from_dict(manifest["config"]["preprocess"])
    layout = OutputLayout(output_dir)
    files = [layout.path(shard["file"]) for shard in manifest["shards"]
             if shard["records"] and (split is None or shard["split"] == split)]
    # label/text holds 0..n labels in a multi-label run: shown joined ('cat|dog').
    spec = {features.LABEL_TEXT: tf.io.VarLenFeature(tf.string),
            features.IMAGE_SOURCE: tf.io.FixedLenFeature([], tf.string)}
    samples = []
    for record in tf.data.TFRecordDataset(files).take(count):
        image, parsed = parse_record(record, config, **spec)
        labels = (value.decode("utf-8") for value in parsed[features.LABEL_TEXT].values.numpy().tolist())
        samples.append((image.numpy(), joined_labels(labels), parsed[features.IMAGE_SOURCE].numpy().decode("utf-8")))
    return samples


def format_report(manifest, columns=None):
    """The manifest summary and statistics as text for a terminal (labels escaped and cut: `terminal.shown`);
    `columns`: the run's column statistics (`column_stats.read_document`), a line a kept column."""
    stats = manifest["statistics"]
    lines = [
        f"rows {manifest['rows']}, written {manifest['written']}, failed {manifest['failed']}",
        "splits: " + ", ".join(f"{split} {c['written']} written / {c['failed']} failed in {c['shards']} shards"
                               for split, c in manifest["splits"].items()),
        f"pixel mean (RGB): {', '.join(f'{v:.3f}' for v in stats['pixel_mean'])}",
        f"pixel std  (RGB): {', '.join(f'{v:.3f}' for v in stats['pixel_std'])}",
        f"labels ({len(stats['label_vocabulary'])}): {terminal.shown_list(stats['label_vocabulary'])}",
        f"config: {json.dumps(manifest['config']['preprocess'])}",
        f"wall time {manifest['wall_seconds']} s, {manifest['images_per_second']} images/s, "
        f"runner {manifest['runner']}",
    ]
    for step in manifest["config"].get("image_steps", ()):  # Shown, never loaded (docs/steps.md).
        spec = terminal.shown(step["spec"], terminal.PATH_WIDTH)
        lines.append(f"image step {step['position'] + 1}: {spec} ({step['kind']}, SHA-256 {step['sha256'][:12]}...)")
    lines += [f"{name}: {value}" for name, value in column_report.summary_rows(columns)]  # Train split's.
    lines += [f"{name}: {value}" for name, value in step_timing.summary_rows(manifest)]  # Each step's time.
    for reason, count in manifest["failed_by_reason"].items():
        lines.append(f"failed: {reason}: {count}")
    return "\n".join(lines)


PROG = "beam-image-pipeline inspect"


def _contact_sheet_problem(args, manifest):
    """Why the contact sheet asked for cannot be made (one line), or None."""
    if not args.contact_sheet:
        return None
    if args.samples < 1:
        return f"--samples must be at least 1, not {args.samples}"
    if args.split is not None and args.split not in manifest["splits"]:
        return f"--split {args.split!r}: {args.output_dir} has the splits {', '.join(manifest['splits'])}"
    folder = os.path.dirname(os.path.abspath(args.contact_sheet))
    if os.path.isdir(args.contact_sheet) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        return f"--contact_sheet {args.contact_sheet}: not a writable file path (its folder must exist)"
    return None


# The manifest's fields `--format json` gives (the summary `format_report` writes as text).
SUMMARY_FIELDS = ("rows", "written", "failed", "splits", "failed_by_reason", "statistics", "wall_seconds",
                  "images_per_second", "runner")


def summary(manifest, contact_sheet=None, samples=None, columns=None):
    """The summary for programs (`--format json`): the manifest's counts and statistics, full text; with kept
    columns, `column_statistics`: column_stats.json as it is."""
    document = {name: manifest.get(name) for name in SUMMARY_FIELDS}
    if columns is not None:
        document["column_statistics"] = columns
    if step_timing.MANIFEST_KEY in manifest:  # A run with a Python step: each step's time per image.
        document[step_timing.MANIFEST_KEY] = manifest[step_timing.MANIFEST_KEY]
    document["config"] = manifest["config"]["preprocess"]
    if contact_sheet:
        document["contact_sheet"] = {"path": contact_sheet, "images": samples}
    return document


def build_parser(prog=PROG):
    """The inspect command's flags."""
    parser = flags.Parser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", help="The --output_dir of a finished job.")
    parser.add_argument("--contact_sheet", help="Write a PNG grid of sample images with their labels here.")
    parser.add_argument("--samples", type=int, default=32, help="How many images the contact sheet shows.")
    parser.add_argument("--split", default=None, help="Only sample this split (default: all).")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text: a summary for people; json: one JSON object on stdout for programs (counts, "
                             "splits, failures by reason, statistics, the kept columns' statistics, config; the "
                             "full label text).")
    flags.add_verbose_flag(parser)
    return parser


def run(argv=None, prog=PROG):
    """Prints a finished output's summary (and renders a contact sheet); returns the exit code."""
    args = flags.parse_flags(build_parser(prog), sys.argv[1:] if argv is None else argv)
    try:
        manifest = OutputLayout(args.output_dir).load_manifest()
    except (FileNotFoundError, PermissionError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    problem = _contact_sheet_problem(args, manifest)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        load_feature_spec(args.output_dir, manifest)  # Damaged or changed: one line naming it, as readers get.
        columns = read_document(args.output_dir, manifest)
    except ValueError as error:  # A damaged features.json or column_stats.json: one line naming it, no traceback.
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.format == "text":
        terminal.result(format_report(manifest, columns))
    samples = []
    if args.contact_sheet:
        samples = sample_records(args.output_dir, manifest, args.samples, args.split)
        render_contact_sheet(samples, args.contact_sheet)
    if args.format == "json":
        terminal.print_json(summary(manifest, args.contact_sheet, len(samples), columns))
    elif args.contact_sheet:
        sheet = terminal.shown(args.contact_sheet, terminal.PATH_WIDTH)
        terminal.result(f"contact sheet: {sheet} ({len(samples)} images)")
    return 0


def main():
    """Console-script entry point."""
    from beam_pipeline.common.launcher import console_main

    console_main(run)


if __name__ == "__main__":
    main()
