"""Reading a job's output folder back, for every test: shards, records, manifest, errors, comparisons.

Records are read with TensorFlow's own TFRecordDataset and `tf.train.Example`
parser (the standard consumers), not with the job's framing code.
"""

import json
import os

import tensorflow as tf

from tf_serving_input import features
from tf_serving_input.codecs import CODECS
from tf_serving_input.layout import OutputLayout, PredictionLayout

# The repository's root (tests/ is one level below it).
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Keys of manifest.json that legitimately differ between two runs of the same input.
# step_timing: each --image_step's measured time per image (beam_pipeline/preprocess/step_timing.py).
RUN_SPECIFIC_KEYS = ("runner", "wall_seconds", "images_per_second", "created", "versions", "step_timing")


def layout(out):
    return OutputLayout(str(out))


def shard_paths(out, split="*"):
    """The finished shard files of `split` (all by default), sorted."""
    return sorted(tf.io.gfile.glob(layout(out).shard_files_glob(split)))


def shard_bytes(out):
    """{shard file name: bytes} of every finished shard."""
    return {os.path.basename(path): open(path, "rb").read() for path in shard_paths(out)}


def examples(path):
    """The records of one shard file as dicts: every feature's value, plus the decoded `pixels`."""
    result = []
    for record in tf.data.TFRecordDataset(str(path)):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        values = {key: (feature[key].bytes_list.value or feature[key].int64_list.value)[0] for key in feature}
        codec = CODECS[values[features.IMAGE_FORMAT].decode()]
        size = values[features.IMAGE_HEIGHT]
        values["pixels"] = codec.decode(values[codec.feature_key], size).numpy()
        result.append(values)
    return result


def all_examples(out, split="*"):
    """Every record of `split` in shard order, as `examples` returns them."""
    return [example for path in shard_paths(out, split) for example in examples(path)]


def images_by_source(out):
    """{source path as in the CSV: [(key, uint8 image), ...]} over every shard."""
    images = {}
    for example in all_examples(out):
        images.setdefault(example[features.IMAGE_SOURCE].decode(), []).append(
            (example[features.IMAGE_KEY].decode(), example["pixels"]))
    return images


def keys_by_shard(out):
    """{shard file name: [row key, ...] in file order}."""
    return {os.path.basename(path): [e[features.IMAGE_KEY].decode() for e in examples(path)]
            for path in shard_paths(out)}


def manifest(out):
    return json.loads(open(layout(out).manifest_file, encoding="utf-8").read())


def errors(out):
    with open(layout(out).errors_file, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def reasons_by_source(out):
    """{source: reason code} of every failed row."""
    return {error["source"]: error["reason"] for error in errors(out)}


def comparable_manifest(out):
    """The manifest without what differs between two runs of the same input (timings, runner)."""
    return {key: value for key, value in manifest(out).items() if key not in RUN_SPECIFIC_KEYS}


def assert_same_output(expected_out, actual_out):
    """Two output folders hold the same shards (bytes, keys), counts, statistics and errors."""
    expected, actual = shard_bytes(expected_out), shard_bytes(actual_out)
    assert expected, f"no shards in {expected_out}"
    assert sorted(actual) == sorted(expected)
    assert keys_by_shard(actual_out) == keys_by_shard(expected_out)
    for name in expected:
        assert actual[name] == expected[name], f"shard {name} differs"
    want, got = comparable_manifest(expected_out), comparable_manifest(actual_out)
    for key in ("rows", "written", "failed", "splits", "failed_by_reason", "statistics", "shards", "config"):
        assert got[key] == want[key], key
    assert got == want
    assert errors(actual_out) == errors(expected_out)


def assert_every_shard_reads_to_its_end(out):
    """Nothing under a final name is partial: each shard file there reads to its end with CRCs checked."""
    for path in shard_paths(out):
        for _ in tf.data.TFRecordDataset(path):
            pass


def prediction_bytes(out):
    """{Parquet shard name: bytes} of a predict job's output."""
    paths = sorted(tf.io.gfile.glob(PredictionLayout(str(out)).shard_files_glob()))
    return {os.path.basename(path): open(path, "rb").read() for path in paths}


def prediction_rows(out):
    """Every Parquet row of a predict job's output, shard by shard in name order, as {column: [values]}."""
    import pyarrow.parquet as pq

    tables = [pq.read_table(path) for path in sorted(tf.io.gfile.glob(PredictionLayout(str(out)).shard_files_glob()))]
    columns = {name: [] for name in tables[0].column_names}
    for table in tables:
        for name in columns:
            columns[name] += table.column(name).to_pylist()
    return columns


def assert_same_predictions(expected_out, actual_out, same_input_dir=True):
    """Two predict outputs hold byte-identical Parquet shards and the same counts and errors.

    `same_input_dir=False`: the two runs read identical job outputs in different folders (their configs then
    differ in `input_dir` only)."""
    expected = prediction_bytes(expected_out)
    assert expected and prediction_bytes(actual_out) == expected
    for key in ("rows", "predicted", "failed", "splits", "failed_by_reason", "shards", "config", "model"):
        actual_value, expected_value = manifest(actual_out)[key], manifest(expected_out)[key]
        if key == "config" and not same_input_dir:
            actual_value, expected_value = dict(actual_value, input_dir=""), dict(expected_value, input_dir="")
        assert actual_value == expected_value, key
    assert errors(actual_out) == errors(expected_out)
