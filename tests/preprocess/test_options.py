"""The job's flags: defaults, validation, absolute paths, and the local-runner defaults added to Beam's."""

import os

import pytest

from beam_pipeline.common import flags
from beam_pipeline.preprocess import options
from tf_serving_input.layout import LAYOUT_VERSION


def test_defaults_and_what_goes_to_beam(tmp_path):
    job, beam_args = options.parse_args(["--input_csv", "in.csv", "--output_dir", "out/", "--project=p"])
    assert job.input_csv == os.path.abspath("in.csv") and job.output_dir == os.path.abspath("out")
    assert (job.preprocess.image_size, job.preprocess.resize_mode, job.preprocess.image_format) == (
        224, "center_crop", "raw")
    assert job.preprocess.jpeg_shrink_on_load and job.num_shards == 0 and job.progress and not job.overwrite
    assert beam_args[0] == "--project=p" and "--runner=FnApiRunner" in beam_args
    assert f"--direct_num_workers={os.cpu_count()}" in beam_args
    assert "--direct_running_mode=multi_processing" in beam_args
    assert job.to_dict()["layout_version"] == LAYOUT_VERSION


def test_uris_pass_unchanged_and_given_runner_flags_are_kept():
    job, beam_args = options.parse_args(["--input_csv", "gs://b/in.csv", "--output_dir", "gs://b/out/",
                                         "--runner", "DataflowRunner", "--no_progress", "--image_format=png"])
    assert job.input_csv == "gs://b/in.csv" and job.output_dir == "gs://b/out"
    assert beam_args == ["--runner", "DataflowRunner"] and not job.progress
    assert not flags.is_local_runner(beam_args)
    _, beam_args = options.parse_args(["--input_csv", "a", "--output_dir", "b", "--direct_num_workers=1"])
    assert beam_args.count("--direct_num_workers=1") == 1 and flags.is_local_runner(beam_args)


@pytest.mark.parametrize("flags,message", [
    (["--image_size", "0"], "image_size must be >= 1"),
    (["--jpeg_quality", "101"], "jpeg_quality"),
    (["--num_shards", "-1"], "--num_shards must be >= 0"),
    (["--max_error_rate", "1.5"], "--max_error_rate must be between 0 and 1"),
    (["--image_format", "tiff"], "invalid choice"),
    (["--column", "score"], "--column 'score' needs a type: NAME:TYPE"),
    (["--column", "score:floaty"], "('floaty' is not one)"),
    (["--column", "a:int", "--column", "A:float"], "differ only in case"),
    (["--column", "label:text"], "only ':labels'"),
    (["--column", "path:text"], "--column 'path:text': 'path' is the list's path column"),
    (["--column", "split:int"], "--column 'split:int': 'split' is the list's split column"),
    (["--path_column", "img", "--column", "img:text"], "'img' is the list's path column (--path_column)"),
    (["--label_column", "cls", "--column", "label:text"], "'label' is the reader's name for the run's label"),
    (["--column", "b1:boxes", "--column", "b2:boxes"], "both boxes"),
    (["--box_class_column", "cls"], "--box_class_column 'cls' must also be given as --column NAME:labels"),
    (["--list_separator", "||"], "--list_separator must be one printable character"),
])
def test_bad_flags_exit_with_usage(capsys, flags, message):
    with pytest.raises(SystemExit) as caught:
        options.parse_args(["--input_csv", "a", "--output_dir", "b", *flags])
    assert caught.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("given", [["--direct_running_mode", "multi_processing"],
                                   ["--direct_running_mode=multi_processing"]])
def test_io_bound_work_runs_in_threads_whichever_way_the_mode_was_given(given):
    from beam_pipeline.common import runners

    args = runners.for_io_bound_work(["--runner=FnApiRunner", *given, "--direct_num_workers=2"])
    assert args == ["--runner=FnApiRunner", "--direct_num_workers=2", "--direct_running_mode=multi_threading"]


def test_a_csv_with_spaced_labels_is_another_run_than_one_an_earlier_version_wrote(tmp_path):
    """Labels are stripped since issue 55: an earlier version's shards of such a CSV hold them unstripped, so its
    folder is not resumed (--overwrite); a CSV without spaced labels resumes as before."""
    from beam_pipeline.common import output_dir
    from beam_pipeline.inputs import rows
    from beam_pipeline.preprocess import cli
    from tf_serving_input.layout import OutputLayout

    spaced, plain = tmp_path / "spaced.csv", tmp_path / "plain.csv"
    spaced.write_text("path,label\na.jpg, cat\nb.jpg,   \n", encoding="utf-8")
    plain.write_text("path,label\na.jpg,cat\nb.jpg,\n", encoding="utf-8")
    for csv_path, changed in ((spaced, True), (plain, False)):
        out = tmp_path / f"out-{csv_path.stem}"
        job, _ = options.parse_args(["--input_csv", str(csv_path), "--output_dir", str(out)])
        before = cli.run_fingerprint(job)  # What an earlier version recorded in run.json.
        now = cli.run_fingerprint(job, rows.summarize_csv(job.input_csv, job.columns))
        assert (now != before) == changed
        assert now == cli.run_fingerprint(job, rows.summarize_csv(job.input_csv, job.columns))
        output_dir.prepare(OutputLayout(str(out)), before, overwrite=False)  # The earlier version's folder.
        if changed:
            with pytest.raises(output_dir.OutputDirError, match="different input or configuration"):
                output_dir.prepare(OutputLayout(str(out)), now, overwrite=False)
        else:
            assert output_dir.prepare(OutputLayout(str(out)), now, overwrite=False) == 0  # Resumed.


def test_kept_columns_are_typed_the_label_column_as_labels_is_multi_label_and_part_of_the_run():
    job, _ = options.parse_args(["--input_csv", "a", "--output_dir", "b", "--column", "a:b:INT",
                                 "--column", "label:labels", "--column", "objects:boxes", "--column", "cls:labels",
                                 "--box_class_column", "cls"])
    assert [(c.name, c.type, c.box_classes) for c in job.features.columns] == [
        ("a:b", "int", False), ("objects", "boxes", False), ("cls", "labels", True)]
    assert job.features.multi_label and job.to_dict()["features"]["multi_label"] is True
    plain, _ = options.parse_args(["--input_csv", "a", "--output_dir", "b"])
    assert "features" not in plain.to_dict()  # A run keeping no column keeps the fingerprint it had.


def test_input_names_any_list_and_a_csv_run_keeps_its_fingerprint(tmp_path):
    """--input_csv and --input of the same CSV are one run, recorded as before issue 52 (no format, the file's
    own SHA-256); another format given by flag is part of the run; --input_csv reads a CSV only."""
    from beam_pipeline.common.files import file_digest
    from beam_pipeline.preprocess import cli

    csv_path = tmp_path / "in.csv"
    csv_path.write_text("path,split\na.jpg,train\n")
    old, _ = options.parse_args(["--input_csv", str(csv_path), "--output_dir", "b"])
    new, _ = options.parse_args(["--input", str(csv_path), "--output_dir", "b"])
    assert old.to_dict() == new.to_dict() and "input_format" not in old.to_dict()
    assert cli.run_fingerprint(old)["input_csv_sha256"] == file_digest(str(csv_path))
    tsv, _ = options.parse_args(["--input", "list.txt", "--input_format", "tsv", "--output_dir", "b"])
    assert tsv.to_dict()["input_format"] == "tsv"
    with pytest.raises(SystemExit):
        options.parse_args(["--input_csv", "a.csv", "--input_format", "parquet", "--output_dir", "b"])
    with pytest.raises(SystemExit):
        options.parse_args(["--input_csv", "a.csv", "--input", "b.csv", "--output_dir", "b"])


def test_a_column_without_a_type_takes_the_parquet_schemas(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"path": ["a"], "label": [["x", "y"]], "score": [0.5], "tags": [["t"]]}), path)
    job, _ = options.parse_args(["--input", str(path), "--output_dir", "b", "--column", "score",
                                 "--column", "label", "--column", "tags:labels"])
    assert job.features.columns == () and job.column_requests
    typed = job.with_typed_columns()
    assert [(c.name, c.type) for c in typed.features.columns] == [("score", "float"), ("tags", "labels")]
    assert typed.features.multi_label and not typed.column_requests
    from beam_pipeline.common.launcher import InputRefused

    pq.write_table(pa.table({"path": ["a"], "label": ["x"]}), path)  # A label column of text, not labels.
    single, _ = options.parse_args(["--input", str(path), "--output_dir", "b", "--column", "label"])
    with pytest.raises(InputRefused, match="the label column is kept as the label; only ':labels'"):
        single.with_typed_columns()


def test_a_list_whose_splits_are_folded_or_discarded_is_another_run_than_before():
    """'Train' was its own split before issue 52 and 'discard' was written: such a list's earlier output is not
    resumed into shards that disagree; a list with plain splits keeps its fingerprint."""
    import tempfile

    from beam_pipeline.inputs import rows
    from beam_pipeline.preprocess import cli

    with tempfile.TemporaryDirectory() as folder:
        for text, marked in (("path,split\na,Train\n", True), ("path,split\na,train\nb,DISCARD\n", True),
                             ("path,split\na,train\nb,\n", False)):
            path = os.path.join(folder, "in.csv")
            with open(path, "w") as f:
                f.write(text)
            job, _ = options.parse_args(["--input_csv", path, "--output_dir", "b"])
            now = cli.run_fingerprint(job, rows.summarize_csv(job.input_csv, job.columns))
            assert (now.get("splits") == "folded") is marked and (now == cli.run_fingerprint(job)) is not marked
