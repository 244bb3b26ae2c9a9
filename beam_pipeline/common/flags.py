"""Flags every job shares, and how Beam's own arguments get the local-runner defaults.

Imports neither Beam nor TensorFlow, so `--help` and flag errors answer at once.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
from typing import NoReturn

from beam_pipeline.common import spark

# Beam's in-process portable runner: needs no download (DirectRunner first tries
# Prism, which fetches a binary at run time) and runs one worker per core.
DEFAULT_RUNNER = "FnApiRunner"
LOCAL_RUNNERS = ("FnApiRunner", "DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default, except where there is none to show (None, or an off switch)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """The commands' parser: a usage error is one line naming the flag (exit 2), and flags are never abbreviated.

    argparse would take `--hash_distanc` for `--hash_distance`, and a flag added later would make an
    abbreviation that worked ambiguous; Beam's own parser turns abbreviations off too.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        """One line on stderr, then exit 2 (argparse prints its whole usage block first)."""
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the flags)\n")


def new_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A Parser with the jobs' help format."""
    return Parser(prog=prog, description=description, formatter_class=HelpFormatter)






def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of a run into an output folder: error budget, overwrite, progress, verbosity."""
    parser.add_argument("--max_error_rate", type=float, default=0.01,
                        help="Fail (exit 1) when more than this fraction of rows fails; failed rows are listed in "
                             "errors.jsonl either way.")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace the output of an earlier run in --output_dir.")
    parser.add_argument("--no_progress", dest="progress", action="store_false",
                        help="Do not print progress lines while shards complete.")
    add_verbose_flag(parser)


def add_verbose_flag(parser: argparse.ArgumentParser) -> None:
    """--verbose: let TensorFlow's start-up lines through (they are dropped by default)."""
    parser.add_argument("--verbose", action="store_true",
                        help="Show TensorFlow's start-up lines, which are hidden by default.")


def check_run_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exits with usage when a shared flag's value is out of range."""
    if getattr(args, "num_shards", 0) < 0:
        parser.error("--num_shards must be >= 0")
    if not 0.0 <= args.max_error_rate <= 1.0:
        parser.error("--max_error_rate must be between 0 and 1")


def stray_words(beam_args: list[str]) -> list[str]:
    """The words among the arguments left for Beam that no flag takes as its value.

    Beam ignores them silently, so a misplaced subcommand (`--overwrite predict ...`) or a stray
    word would run a job the user did not ask for: the jobs refuse them instead.
    """
    def is_value(i: int) -> bool:  # The word after a `--flag` given without '='.
        return i > 0 and beam_args[i - 1].startswith("--") and "=" not in beam_args[i - 1]

    return [arg for i, arg in enumerate(beam_args) if not arg.startswith("-") and not is_value(i)]


def refuse_stray_words(parser: argparse.ArgumentParser, beam_args: list[str]) -> None:
    """Exits with usage naming the first stray word (see `stray_words`)."""
    stray = stray_words(beam_args)
    if stray:
        parser.error(f"unexpected argument {stray[0]!r}: a subcommand goes first and every flag after it "
                     "(beam-image-pipeline SUBCOMMAND --flag value ...); any other word belongs to a flag")


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag a parser knows (`--image_size`, `-h`, ...)."""
    return [option for action in parser._actions for option in action.option_strings]


def beam_option_strings() -> set[str]:
    """Every pipeline option Beam knows, as its runners parse them (Beam is imported: ~1 s, only when needed)."""
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    # What PipelineOptions.get_all_options adds, so the flags accepted here are the ones Beam reads.
    for cls in {str(cls): cls for cls in PipelineOptions.__subclasses__()}.values():
        cls._add_argparse_args(parser)
    return set(option_strings(parser))


def unknown_flag_message(flag: str, known: list[str]) -> str:
    """'unknown flag --imag_size (did you mean --image_size?)': the suggestion only when one is close."""
    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
    return f"unknown flag {flag}" + (f" (did you mean {close[0]}?)" if close else "")


_NUMBER = re.compile(r"^-\d+(\.\d*)?([eE][-+]?\d+)?$|^-\.\d+$")


def refuse_unknown_flags(parser: argparse.ArgumentParser, argv: list[str], beam: bool) -> None:
    """Exits 2 on the first flag in `argv` that is neither the parser's nor (`beam`) one of Beam's pipeline
    options, with the closest known flag.

    Beam would drop an unknown flag with a log line nobody sees (a misspelt `--imag_size 64` ran at
    224 px). Checked before argparse reads `argv`: argparse would first complain of a required flag the
    typo hid (`--input_cs`), or take the typo's value for a stray word (`-i 32`).
    """
    ours = set(option_strings(parser))
    known_to_beam: set[str] | None = None
    for arg in argv:
        if arg == "--":
            parser.error("unexpected argument '--': every argument is a flag or a flag's value")
        if not arg.startswith("-") or _NUMBER.match(arg):
            continue
        flag = arg.split("=", 1)[0]
        if flag in ours:
            continue
        if beam:
            known_to_beam = beam_option_strings() if known_to_beam is None else known_to_beam
            if flag in known_to_beam:
                continue
        parser.error(unknown_flag_message(flag, sorted(ours | (known_to_beam or set()))))


def refuse_leftover(parser: argparse.ArgumentParser, leftover: list[str], beam: bool) -> None:
    """Exits 2 on what argparse left over that no flag takes: a job hands Beam its options and their values
    (a stray word is refused: `refuse_stray_words`); a command without Beam takes nothing more."""
    if beam:
        refuse_stray_words(parser, leftover)
    elif leftover:
        first = leftover[0]
        parser.error(unknown_flag_message(first.split("=", 1)[0], option_strings(parser)) if first.startswith("-")
                     else f"unexpected argument {first!r}: every value belongs to a flag")


def parse_job_flags(parser: argparse.ArgumentParser,
                    argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(the job's flags, Beam's pipeline options): any other argument exits 2 with usage and a suggestion."""
    refuse_unknown_flags(parser, argv, beam=True)
    args, beam_args = parser.parse_known_args(argv)
    refuse_leftover(parser, beam_args, beam=True)
    return args, beam_args


def parse_flags(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """A command's flags (no Beam pipeline): any other argument exits 2 with usage and a suggestion."""
    refuse_unknown_flags(parser, argv, beam=False)
    args, leftover = parser.parse_known_args(argv)
    refuse_leftover(parser, leftover, beam=False)
    return args


def absolute_if_local(path: str) -> str:
    """A local path made absolute (URIs pass, without a trailing '/').

    Workers of a portable runner, a worker pool or a cluster do not share the
    launcher's working directory: a relative path would name another file there.
    """
    if "://" in path:
        return path.rstrip("/") or path
    return os.path.abspath(path)


def flag_value(beam_args: list[str], name: str) -> str | None:
    """The value of a Beam flag given as `--name=value` or `--name value`, else None."""
    for i, arg in enumerate(beam_args):
        if arg == f"--{name}" and i + 1 < len(beam_args):
            return beam_args[i + 1]
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def with_local_defaults(beam_args: list[str]) -> list[str]:
    """Adds the local-runner defaults (FnApiRunner, one process per core) unless given, and what a run on
    Spark needs (`spark.with_defaults`)."""
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
    return spark.with_defaults(beam_args)


def is_local_runner(beam_args: list[str]) -> bool:
    """Whether the job runs on this machine (so progress can be shown as shards land)."""
    return flag_value(beam_args, "runner") in LOCAL_RUNNERS
