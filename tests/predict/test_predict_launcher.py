"""The predict launcher in-process: where its workers run, and refusals before any work (exit 2, one line)."""

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

import imaging
from beam_pipeline.predict import cli
from beam_pipeline.predict.launcher import PredictLauncher, workers_on_this_machine
from tf_serving_input.layout import PredictionLayout


@pytest.mark.parametrize("beam_args,local", [
    (["--runner=FnApiRunner"], True),
    (["--runner=DirectRunner"], True),
    (["--runner=FlinkRunner"], True),  # [auto]: an embedded cluster on this machine.
    (["--runner=FlinkRunner", "--flink_master=localhost:8081"], True),
    (["--runner=FlinkRunner", "--flink_master=flink.example.com:8081"], False),
    (["--runner=PortableRunner", "--job_endpoint=embed"], True),
    (["--runner=PortableRunner", "--job_endpoint=jobs.example.com:8099"], False),
    (["--runner=FnApiRunner", "--environment_type=DOCKER"], False),
    (["--runner=DataflowRunner"], False),
])
def test_workers_on_this_machine(beam_args, local):
    assert workers_on_this_machine(beam_args) is local


def launcher(argv):
    config, beam_args = cli.parse_args(argv)
    return PredictLauncher(config, beam_args, PipelineOptions(beam_args), PredictionLayout(config.output_dir))


def test_a_missing_export_is_refused_in_one_line_before_any_work(tmp_path, capsys):
    csv_path = imaging.small_dataset(tmp_path, count=2)
    job = launcher(["--model_dir", str(tmp_path / "no_export"), "--output_dir", str(tmp_path / "pred"),
                    "--input_csv", str(csv_path), "--database", "none"])
    assert job.execute() == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert line.startswith("error: ") and str(tmp_path / "no_export") in line
    assert not (tmp_path / "pred").exists()



@pytest.mark.parametrize("flags, message", [
    (["--hnsw_m", "1"], "--hnsw_m must be from 2 to 100"),
    (["--hnsw_m", "40"], "must be at least twice --hnsw_m (40)"),
    (["--hnsw_ef_construction", "2000"], "--hnsw_ef_construction must be from 4 to 1000"),
    (["--index_build_memory", "lots"], "--index_build_memory: 'lots' is not a size"),
    (["--index_build_memory", "512kB"], "--index_build_memory must be from 1MB to 2047GB"),
    (["--index_build_memory", "3000GB"], "--index_build_memory must be from 1MB to 2047GB"),
])
def test_bad_index_settings_are_refused_before_any_work(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_:
        cli.parse_args(["--model_dir", str(tmp_path), "--output_dir", str(tmp_path / "p"), "--load_only", *flags])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_index_settings_reach_the_config(tmp_path):
    config, _ = cli.parse_args(["--model_dir", str(tmp_path), "--output_dir", str(tmp_path / "p"), "--load_only",
                                "--hnsw_m", "24", "--hnsw_ef_construction", "96", "--index_build_memory", "2GB",
                                "--rebuild_index"])
    assert (config.index.m, config.index.ef_construction, config.index.build_memory, config.index.rebuild) == (
        24, 96, 2 << 30, True)
    config, _ = cli.parse_args(["--model_dir", str(tmp_path), "--output_dir", str(tmp_path / "p"), "--load_only"])
    assert (config.index.m, config.index.ef_construction, config.index.build_memory, config.index.rebuild) == (
        16, 64, None, False)


def test_input_takes_any_list_format_and_a_csv_run_keeps_its_identity(tmp_path):
    """predict --input (issue 52): a Parquet list read as the job reads it; --input_csv and --input of one CSV
    are one run."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from beam_pipeline.inputs import rows

    base = ["--model_dir", str(tmp_path), "--output_dir", str(tmp_path / "p"), "--database", "none"]
    old, _ = cli.parse_args([*base, "--input_csv", str(tmp_path / "a.csv")])
    new, _ = cli.parse_args([*base, "--input", str(tmp_path / "a.csv")])
    assert old.to_dict() == new.to_dict() and "input_format" not in old.to_dict()
    pq.write_table(pa.table({"path": ["x.jpg", "y.jpg"], "split": ["Test", "discard"]}), tmp_path / "l.parquet")
    config, _ = cli.parse_args([*base, "--input", str(tmp_path / "l.parquet")])
    summary = rows.summarize_csv(config.input_csv, config.columns, config.column_reading)
    assert summary.rows_per_split == {"test": 1} and summary.discarded == 1
    with pytest.raises(SystemExit):
        cli.parse_args([*base, "--input_csv", "a.csv", "--input_format", "tsv"])
