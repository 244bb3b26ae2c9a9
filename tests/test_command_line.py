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


# A typo of one of our flags, in every subcommand and in both spellings, and the flag it meant.
TYPOS = [
    (["preprocess", "--input_csv", "a.csv", "--output_dir", "o", "--imag_size", "64"], "--imag_size", "--image_size"),
    (["preprocess", "--input_csv", "a.csv", "--output_dir", "o", "--imag_size=64"], "--imag_size", "--image_size"),
    (["--input_csv", "a.csv", "--output_dir", "o", "--resize_mod", "pad"], "--resize_mod", "--resize_mode"),
    (["predict", "--model_dir", "m", "--input_csv", "a.csv", "--output_dir", "o", "--batchsize=4"], "--batchsize",
     "--batch_size"),
    # An abbreviation argparse would have taken for --hash_distance: never abbreviated (a later flag could
    # make it ambiguous).
    (["quality", "--input_dir", "j", "--output_dir", "q", "--hash_distanc", "3"], "--hash_distanc",
     "--hash_distance"),
    (["search", "--key", "k", "--frmat", "json"], "--frmat", "--format"),
    (["inspect", "out", "--formt=json"], "--formt", "--format"),
    (["db", "status", "--databse_dir", "d"], "--databse_dir", "--database_dir"),
    (["ui", "--input_dir", "j", "--prot", "8000"], "--prot", "--port"),
    # A typo of a required flag: named as the typo, not as the required flag it hid.
    (["preprocess", "--input_cs", "a.csv", "--output_dir", "o"], "--input_cs", "--input_csv"),
    (["predict", "--model_dir", "m", "--input_cvs", "a.csv", "--output_dir", "o"], "--input_cvs", "--input_csv"),
    (["db", "--databse_dir", "d", "status"], "--databse_dir", "--database_dir"),
    # A misspelt Beam option is refused too, with Beam's own name.
    (["preprocess", "--input_csv", "a.csv", "--output_dir", "o", "--direct_num_worker", "1"], "--direct_num_worker",
     "--direct_num_workers"),
]


@pytest.mark.parametrize("argv,typo,meant", TYPOS)
def test_an_unknown_flag_is_refused_in_one_line_with_the_flag_it_meant(capsys, argv, typo, meant):
    with pytest.raises(SystemExit) as exit_info:
        cli.run(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"error: unknown flag {typo} (did you mean {meant}?)" in err
    assert len(err.strip().splitlines()) == 1, err  # One line, not argparse's usage block.


def test_an_unknown_flag_nothing_is_close_to_gets_no_suggestion(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.run(["preprocess", "--input_csv", "a.csv", "--output_dir", "o", "--zzqqx", "1"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "unknown flag --zzqqx (beam-image-pipeline preprocess --help" in err
    assert "did you mean" not in err


@pytest.mark.parametrize("beam_args", [
    ["--direct_num_workers", "1"],
    ["--direct_num_workers=1", "--direct_running_mode=in_memory"],
    ["--runner", "FlinkRunner", "--flink_master", "localhost:8081", "--environment_type=LOOPBACK",
     "--parallelism", "2", "--flink_version=1.19"],
    ["--runner=DataflowRunner", "--project", "p", "--region", "europe-west1", "--temp_location", "gs://b/t",
     "--setup_file", "./setup.py", "--save_main_session", "--experiments=use_runner_v2"],
])
def test_beam_pipeline_options_still_pass_through_to_the_runner(beam_args):
    from beam_pipeline.predict.cli import parse_args as predict_args
    from beam_pipeline.preprocess.options import parse_args as preprocess_args
    from beam_pipeline.quality.cli import parse_args as quality_args

    for parse, ours in ((preprocess_args, ["--input_csv", "a.csv", "--output_dir", "o", "--image_size=64"]),
                        (predict_args, ["--model_dir", "m", "--input_dir", "j", "--output_dir", "o",
                                        "--database", "none"]),
                        (quality_args, ["--input_dir", "j", "--output_dir", "q"])):
        _, passed = parse(ours + beam_args)
        assert passed[:len(beam_args)] == beam_args, parse


def test_psql_still_takes_its_own_arguments_and_the_other_db_commands_refuse_them(capsys):
    from beam_pipeline.database import server

    parser = server.build_parser()
    args, rest = parser.parse_known_args(["psql", "-c", "SELECT 1"])
    assert args.command == "psql" and rest == ["-c", "SELECT 1"]
    with pytest.raises(SystemExit) as exit_info:
        cli.run(["db", "status", "-c", "SELECT 1"])
    assert exit_info.value.code == 2 and "unknown flag -c" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        cli.run(["db", "url", "--format", "json"])
    assert exit_info.value.code == 2 and "--format json is for status" in capsys.readouterr().err


def test_version(capsys):
    from importlib import metadata

    assert cli.run(["--version"]) == 0
    assert capsys.readouterr().out == f"beam-image-pipeline {metadata.version('beam-image-pipeline')}\n"


@pytest.mark.parametrize("argv,message", [
    # An unknown short flag is named, not its value taken for a stray word.
    (["preprocess", "--input_csv", "a.csv", "--output_dir", "o", "-i", "32"], "unknown flag -i ("),
    # After `--` nothing is a flag: refused as such, not as an unknown --image_size (did you mean --image_size?).
    (["preprocess", "--input_csv", "a.csv", "--output_dir", "o", "--", "--image_size", "32"],
     "unexpected argument '--'"),
    (["-V"], "unknown flag -V ("),
])
def test_short_flags_and_the_separator_are_named_as_they_are(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        cli.run(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and "did you mean --image_size" not in err, err


def test_a_negative_number_is_a_value_not_a_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.run(["preprocess", "--input_csv", "a.csv", "--output_dir", "o", "--max_error_rate", "-0.5"])
    assert exit_info.value.code == 2 and "--max_error_rate must be between 0 and 1" in capsys.readouterr().err
