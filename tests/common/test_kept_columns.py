"""A record's kept columns read back without TensorFlow (beam_pipeline/common/kept_columns.py), as JSON."""

import json

import pytest

from beam_pipeline.common import kept_columns
from tf_serving_input.columns import Column, FeatureSpec

SPEC = FeatureSpec((Column("n", "int"), Column("score", "float"), Column("tags", "labels"), Column("cap", "text"),
                    Column("e", "floats"), Column("b", "boxes"), Column("gone", "int")))


def test_a_records_columns_read_back_without_tensorflow_equal_what_tensorflow_wrote():
    tf = pytest.importorskip("tensorflow")
    feature = tf.train.Feature
    boxes = [(0.1, 0.2), (0.1, 0.25), (0.5, 0.6), (0.5, 0.7)]
    example = tf.train.Example(features=tf.train.Features(feature={
        "column/n": feature(int64_list=tf.train.Int64List(value=[-(2 ** 63)])),
        "column/score": feature(float_list=tf.train.FloatList(value=[0.1])),
        "column/tags": feature(bytes_list=tf.train.BytesList(value=[b"a", "猫".encode()])),
        "column/cap": feature(bytes_list=tf.train.BytesList(value=["x\x00\n\u202e🐕".encode()])),
        "column/e": feature(float_list=tf.train.FloatList(value=[1.5, 2.5])),
        **{key: feature(float_list=tf.train.FloatList(value=side)) for key, side in zip(SPEC.columns[5].keys, boxes)},
        "image/raw": feature(bytes_list=tf.train.BytesList(value=[b"\x00" * 100])),
    }))
    values = kept_columns.from_record(example.SerializeToString(deterministic=True), SPEC)
    assert values == {"n": -(2 ** 63), "score": 0.1, "tags": ["a", "猫"], "cap": "x\x00\n\u202e🐕", "e": [1.5, 2.5],
                      "b": [[0.1, 0.1, 0.5, 0.5], [0.2, 0.25, 0.6, 0.7]]}
    assert kept_columns.holds_nul(values) and not kept_columns.holds_nul({"a": ["b"], "c": 1})
    text = kept_columns.to_json(values)
    assert json.loads(text) == values and "\n" not in text


def test_a_rows_values_give_the_json_its_record_would():
    row = (("score", 0.1), ("b", ((0.1, 0.2, 0.3, 0.4),)), ("e", (1.0, 0.1)), ("tags", ("x",)), ("n", 2))
    assert kept_columns.to_json(kept_columns.from_row(row)) == \
        '{"b":[[0.1,0.2,0.3,0.4]],"e":[1.0,0.1],"n":2,"score":0.1,"tags":["x"]}'
    assert kept_columns.to_json({}) == "{}" and kept_columns.from_record(b"", FeatureSpec()) == {}


def test_a_record_that_does_not_parse_is_a_value_error():
    with pytest.raises(ValueError):
        kept_columns.feature_lists(b"\x0a\xff\xff\xff", ["column/n"])
