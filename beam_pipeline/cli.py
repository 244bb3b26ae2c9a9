"""The one command line: `beam-image-pipeline SUBCOMMAND [flags]`, the same as `python -m beam_pipeline SUBCOMMAND`.

Each subcommand is its job's own command line, with its own `--help`. The
commands from before keep working: `python -m beam_pipeline --input_csv ...`
(no subcommand: preprocess) and `python -m beam_pipeline.predict|search|quality|inspect|database|ui`.
Nothing heavy is imported until a subcommand is chosen.
"""

from __future__ import annotations

import argparse
import importlib
import sys

PROG = "beam-image-pipeline"
# name: (module with run(argv, prog) -> exit code, one line of help)
SUBCOMMANDS = {
    "preprocess": ("beam_pipeline.preprocess.cli",
                   "CSV of images -> sharded TFRecords + tensorflow-transform statistics"),
    "inspect": ("beam_pipeline.preprocess.inspect", "summary of a finished job output; a contact sheet"),
    "predict": ("beam_pipeline.predict.cli",
                "run a serving export over every image -> Parquet -> PostgreSQL + pgvector"),
    "search": ("beam_pipeline.search.cli", "the stored images nearest a query image or key"),
    "db": ("beam_pipeline.database.server", "the embedded PostgreSQL server: start | stop | status | psql | url"),
    "quality": ("beam_pipeline.quality.cli",
                "duplicates, cross-split leaks, label conflicts, flagged images of a job output -> report"),
    "ui": ("beam_pipeline.ui.cli", "a local web UI over a run: gallery, failures, search by upload, quality"),
}


def build_parser(name: str) -> argparse.ArgumentParser:
    """The argparse parser of subcommand `name`, from its module's build_parser (no Beam or TensorFlow imported);
    the docs' CLI reference is generated from it."""
    return importlib.import_module(SUBCOMMANDS[name][0]).build_parser(f"{PROG} {name}")


def version() -> str:
    """The installed project's version ('0.1.0'), or 'unknown' when it runs from a folder that was not installed."""
    from importlib import metadata

    try:
        return metadata.version(PROG)
    except metadata.PackageNotFoundError:
        return "unknown"


def usage() -> str:
    """The top-level help text."""
    width = max(map(len, SUBCOMMANDS))
    lines = [f"usage: {PROG} SUBCOMMAND [flags]    ({PROG} SUBCOMMAND --help for its flags)", "",
             "Turn a million images into training-ready data, serve them with the same preprocessing, and "
             "search them.", "", "subcommands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in SUBCOMMANDS.items()]
    lines += ["", f"Without a subcommand, flags go to preprocess: {PROG} --input_csv CSV --output_dir DIR.",
              f"{PROG} --version prints the version. Exit codes: 0 ok; 1 the run failed or more rows failed than "
              "--max_error_rate; 2 usage or bad input; 130 interrupted; 141 stdout closed early."]
    return "\n".join(lines)


def misplaced_subcommand(argv: list[str]) -> str | None:
    """A subcommand name that follows flags (`--overwrite predict ...`) and is no flag's value, else None."""
    from beam_pipeline.preprocess.options import build_parser

    takes_value = {option for action in build_parser()._actions if action.nargs != 0
                   for option in action.option_strings}
    for i, arg in enumerate(argv):
        if arg in SUBCOMMANDS and not (i and argv[i - 1] in takes_value):
            return arg
    return None


def run(argv: list[str] | None = None) -> int:
    """Runs a subcommand; returns its exit code (2 for an unknown one)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(usage(), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        # Also the help of `python -m beam_pipeline --input_csv ...` from before subcommands: the job's flags.
        from beam_pipeline.preprocess import options

        print(usage() + "\n\n" + options.build_parser(PROG).format_help(), end="")
        return 0
    if argv[0] == "--version":
        print(f"{PROG} {version()}")
        return 0
    if argv[0].startswith("-"):  # The command from before subcommands: the preprocessing job.
        misplaced = misplaced_subcommand(argv)
        if misplaced:
            print(f"error: {misplaced!r} is a subcommand: it goes first, and its flags after it "
                  f"({PROG} {misplaced} --flag value ...)", file=sys.stderr)
            return 2
        name, rest, prog = "preprocess", argv, PROG
    else:
        name, rest, prog = argv[0], argv[1:], f"{PROG} {argv[0]}"
    if name not in SUBCOMMANDS:
        print(f"error: unknown subcommand {name!r}; one of {', '.join(SUBCOMMANDS)} ({PROG} --help)",
              file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return module.run(rest, prog=prog)


def main() -> None:
    """Console-script entry point."""
    from beam_pipeline.common.launcher import console_main

    console_main(run)
