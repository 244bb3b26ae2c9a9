"""The one command line: subcommands, each with its own --help, and the commands from before still answering."""

import subprocess
import sys

import pytest

from beam_pipeline import cli


def test_usage_lists_every_subcommand_and_an_unknown_one_is_refused(capsys):
    assert cli.run(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli.SUBCOMMANDS:
        assert f"  {name} " in out
    assert "--input_csv" in out and "(default: None)" not in out  # The job's flags, as before subcommands.
    assert cli.run(["bogus"]) == 2
    assert ("unknown subcommand 'bogus'; one of preprocess, inspect, predict, search, db, quality, ui"
            in capsys.readouterr().err)
    assert cli.run([]) == 2


@pytest.mark.parametrize("name,flag", [("preprocess", "--input_csv"), ("predict", "--model_dir"),
                                       ("search", "--key"), ("inspect", "--contact_sheet"), ("db", "--database_dir"),
                                       ("quality", "--hash_distance"), ("ui", "--input_dir")])
def test_each_subcommand_has_its_own_help(capsys, name, flag):
    with pytest.raises(SystemExit) as exit_info:
        cli.run([name, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: beam-image-pipeline {name}") and flag in out and "(default: None)" not in out


@pytest.mark.parametrize("module,flag", [("beam_pipeline", "--input_csv"), ("beam_pipeline.predict", "--model_dir"),
                                         ("beam_pipeline.search", "--key"), ("beam_pipeline.inspect", "output_dir"),
                                         ("beam_pipeline.database", "--database_dir"),
                                         ("beam_pipeline.quality", "--input_dir"), ("beam_pipeline.ui", "--input_dir")])
def test_the_commands_from_before_still_answer(module, flag):
    result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and flag in result.stdout, result.stderr
    assert result.stderr == ""  # Quiet: nothing else on stderr.


def test_a_subcommand_after_flags_is_refused_not_run_as_preprocess(capsys):
    assert cli.run(["--overwrite", "predict", "--model_dir", "m", "--input_csv", "a.csv", "--output_dir", "o"]) == 2
    assert "'predict' is a subcommand: it goes first" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["preprocess", "--input_csv", "a.csv", "--output_dir", "o", "--image_format", "png", "stray"],
    ["predict", "--model_dir", "m", "--input_csv", "a.csv", "--output_dir", "o", "--overwrite", "search"],
])
def test_a_stray_word_is_refused_instead_of_being_ignored(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        cli.run(argv)
    assert exit_info.value.code == 2 and "unexpected argument" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["preprocess", "predict", "search", "inspect", "db"])
def test_every_subcommand_accepts_verbose_and_shows_each_default_once(capsys, name):
    with pytest.raises(SystemExit):
        cli.run([name, "--help"])
    out = capsys.readouterr().out
    assert "--verbose" in out
    flowing = " ".join(out.split())  # Help lines wrap: look at the text as one line.
    assert flowing.count("(default: embedded)") <= 1 and flowing.count("(default: 8)") <= 1
