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

