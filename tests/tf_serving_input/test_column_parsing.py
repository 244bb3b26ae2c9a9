"""The kept columns read back: a batch's sparse values as model inputs, and features.json trusted only as recorded."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from tf_serving_input import column_parsing
from tf_serving_input.columns import Column, ColumnError, FeatureSpec


def sparse(rows, dtype):
    """A [B, N] SparseTensor from a list of rows' values (a row may have none)."""
    indices = [[i, j] for i, row in enumerate(rows) for j in range(len(row))]
    values = [value for row in rows for value in row]
    width = max((len(row) for row in rows), default=0)
    return tf.SparseTensor(tf.constant(indices, tf.int64, [len(indices), 2]), tf.constant(values, dtype, [len(values)]),
                           [len(rows), width])


def test_labels_are_multi_hot_in_vocabulary_order_unknown_and_repeated_ones_once():
    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(["cat", "dog", "bird"], [0, 1, 2],
                                                                          value_dtype=tf.int64), -1)
    hot = column_parsing.multi_hot(sparse([["dog", "cat"], [], ["owl", "bird", "bird"]], tf.string), table, 3)
    assert hot.dtype == tf.float32
    assert hot.numpy().tolist() == [[1, 1, 0], [0, 0, 0], [0, 0, 1]]


def test_numbers_and_texts_mark_a_missing_value_even_when_the_whole_batch_misses_it():
    numbers = column_parsing.numbers(sparse([[3], [], [-(2**40)]], tf.int64))
    assert numbers.dtype == tf.float32 and math.isnan(numbers.numpy()[1])
    assert numbers.numpy()[[0, 2]].tolist() == [3.0, -(2.0**40)]
    assert np.isnan(column_parsing.numbers(sparse([[], []], tf.float32)).numpy()).all()
    assert column_parsing.texts(sparse([[], ["a\x00b"]], tf.string)).numpy().tolist() == [b"", b"a\x00b"]
    assert column_parsing.texts(sparse([[]], tf.string)).numpy().tolist() == [b""]


def test_an_int_column_comes_back_as_exact_int64_its_missing_value_marked():
    """The hostile trial: int columns came back float32, so an id over 2**24 was another id."""
    values = column_parsing.integers(sparse([[2**53 + 1], [], [-7]], tf.int64))
    assert values.dtype == tf.int64
    assert values.numpy().tolist() == [2**53 + 1, column_parsing.MISSING_INT, -7]
    assert column_parsing.integers(sparse([[], []], tf.int64)).numpy().tolist() == [column_parsing.MISSING_INT] * 2


def test_boxes_are_ragged_by_image_and_zscore_leaves_a_constant_column_unscaled():
    corners = [sparse([[0.1, 0.2], [], [0.3]], tf.float32) for _ in range(3)] + [sparse([[1, 2], [], [3]],
                                                                                       tf.float32)]
    boxes = column_parsing.boxes(*corners)
    assert boxes.shape.as_list() == [3, None, 4]
    assert boxes.row_lengths().numpy().tolist() == [2, 0, 1]
    np.testing.assert_allclose(boxes.flat_values.numpy(), [[0.1, 0.1, 0.1, 1], [0.2, 0.2, 0.2, 2], [0.3, 0.3, 0.3, 3]])
    assert column_parsing.ragged(sparse([[1.5], []], tf.float32)).to_list() == [[1.5], []]
    values = tf.constant([1.0, 3.0, math.nan])
    assert column_parsing.zscore(values, 2.0, 0.5).numpy()[:2].tolist() == [-2.0, 2.0]
    assert column_parsing.zscore(values, 2.0, 0.0).numpy()[:2].tolist() == [-1.0, 1.0]
    assert math.isnan(column_parsing.zscore(values, 2.0, 0.5).numpy()[2])


def test_parse_spec_has_every_key_and_the_label_of_a_multi_label_run():
    spec = FeatureSpec((Column("n", "int"), Column("b", "boxes"), Column("c", "labels", box_classes=True)), True)
    parsed = column_parsing.parse_spec(spec)
    assert sorted(parsed) == ["column/n", "image/object/bbox/xmax", "image/object/bbox/xmin",
                              "image/object/bbox/ymax", "image/object/bbox/ymin", "image/object/class/text",
                              "label/text"]
    assert parsed["column/n"].dtype == tf.int64 and parsed["image/object/bbox/xmin"].dtype == tf.float32
    assert "label/text" not in column_parsing.parse_spec(FeatureSpec((Column("n", "int"),)))


def _run(tmp_path, recorded, written):
    tmp_path.mkdir()
    (tmp_path / "manifest.json").write_text(json.dumps({"config": {} if recorded is None else
                                                        {"features": recorded.to_json()}}))
    if written is not None:
        (tmp_path / "features.json").write_text(written)
    return str(tmp_path)


def test_features_json_is_trusted_only_as_the_manifest_records_it(tmp_path):
    spec = FeatureSpec((Column("score", "float"),))
    assert column_parsing.load_feature_spec(_run(tmp_path / "a", spec, spec.dumps())) == spec
    # An earlier version's run: no features.json, no columns.
    assert column_parsing.load_feature_spec(_run(tmp_path / "b", None, None)) == FeatureSpec()
    changed = FeatureSpec((Column("score", "int"),)).dumps()
    with pytest.raises(ColumnError, match="features.json does not match the run's manifest"):
        column_parsing.load_feature_spec(_run(tmp_path / "c", spec, changed))
    with pytest.raises(ColumnError, match="features.json is not valid JSON"):
        column_parsing.load_feature_spec(_run(tmp_path / "d", spec, "{"))


def test_the_job_writes_features_json_beside_its_run(tiny_job, tiny_raw_job):
    from tf_serving_input.layout import OutputLayout

    for out in (tiny_job[0], tiny_raw_job):
        layout = OutputLayout(out)
        spec = FeatureSpec.from_json(layout.load_manifest()["config"]["features"])
        assert open(layout.features_file, encoding="utf-8").read() == spec.dumps()
    assert column_parsing.load_feature_spec(tiny_raw_job).multi_label
