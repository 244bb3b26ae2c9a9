"""The output folder contract: one join, every name and glob, manifest loading; no TensorFlow or Beam needed."""

import json
import subprocess
import sys

import pytest

from tf_serving_input import layout
from tf_serving_input.layout import OutputLayout, PredictionLayout


@pytest.mark.parametrize("base,parts,expected", [
    ("out", ("data", "x.tfrecord"), "out/data/x.tfrecord"),
    ("out/", ("data",), "out/data"),
    ("/abs/out", ("shards", "a.json"), "/abs/out/shards/a.json"),
    ("gs://bucket", ("data",), "gs://bucket/data"),
    ("gs://bucket/run/", ("manifest.json",), "gs://bucket/run/manifest.json"),
    ("gs://", ("bucket", "x"), "gs://bucket/x"),
    ("/", ("tmp",), "/tmp"),
])
def test_join(base, parts, expected):
    assert layout.join(base, *parts) == expected


def test_job_output_paths_and_names():
    out = OutputLayout("gs://b/run")
    assert layout.shard_name("train", 3, 16) == "train-00003-of-00016"
    assert out.shard_file("train-00003-of-00016") == "gs://b/run/data/train-00003-of-00016.tfrecord"
    assert out.relative_shard_file("train-00003-of-00016") == "data/train-00003-of-00016.tfrecord"
    assert out.status_file("train-00003-of-00016") == "gs://b/run/shards/train-00003-of-00016.json"
    assert out.shard_files_glob("validation") == "gs://b/run/data/validation-*-of-*.tfrecord"
    assert out.manifest_file == "gs://b/run/manifest.json" and out.errors_file == "gs://b/run/errors.jsonl"
    assert out.raw_metadata_dir == "gs://b/run/metadata" and out.tft_temp_dir == "gs://b/run/.tmp"
    assert set(out.kept_on_resume()) < set(out.entries())
    assert layout.temp_path(out.shard_file("a"), "x1") == "gs://b/run/data/a.tfrecord.x1.incomplete"
    assert out.temp_files_globs() == ["gs://b/run/data/*.incomplete", "gs://b/run/shards/*.incomplete"]


def test_prediction_output_paths():
    out = PredictionLayout("pred")
    assert out.shard_file("train-00000-of-00008") == "pred/predictions/train-00000-of-00008.parquet"
    assert out.status_file("train-00000-of-00008") == "pred/shards/train-00000-of-00008.json"
    assert out.manifest_file == "pred/manifest.json"


def test_load_manifest_or_a_helpful_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="finished run"):
        OutputLayout(str(tmp_path)).load_manifest()
    (tmp_path / "manifest.json").write_text(json.dumps({"rows": 3}))
    assert OutputLayout(str(tmp_path)).load_manifest() == {"rows": 3}


def test_importing_the_layout_and_options_loads_neither_tensorflow_nor_beam():
    code = ("import sys, tf_serving_input.layout, beam_pipeline.preprocess.options, beam_pipeline.preprocess.inspect; "
            "print(sorted(m for m in ('tensorflow', 'apache_beam', 'tensorflow_transform') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr


def test_shard_stem_inverts_the_manifest_file_name():
    from tf_serving_input.layout import OutputLayout, PredictionLayout, shard_stem

    for folder in (OutputLayout("gs://b/run"), PredictionLayout("pred")):
        assert shard_stem(folder.relative_shard_file("train-00003-of-00016")) == "train-00003-of-00016"
