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
    assert "unknown subcommand 'bogus'; one of preprocess, inspect, predict, search, db" in capsys.readouterr().err
    assert cli.run([]) == 2


@pytest.mark.parametrize("name,flag", [("preprocess", "--input_csv"), ("predict", "--model_dir"),
                                       ("search", "--key"), ("inspect", "--contact_sheet"), ("db", "--database_dir")])
def test_each_subcommand_has_its_own_help(capsys, name, flag):
    with pytest.raises(SystemExit) as exit_info:
        cli.run([name, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: beam-image-pipeline {name}") and flag in out and "(default: None)" not in out


@pytest.mark.parametrize("module,flag", [("beam_pipeline", "--input_csv"), ("beam_pipeline.predict", "--model_dir"),
                                         ("beam_pipeline.search", "--key"), ("beam_pipeline.inspect", "output_dir"),
                                         ("beam_pipeline.database", "--database_dir")])
def test_the_commands_from_before_still_answer(module, flag):
    result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and flag in result.stdout, result.stderr
    assert result.stderr == ""  # Quiet: nothing else on stderr.
