"""TFRecord framing written by the job reads with TensorFlow's own reader, and back."""

import dataclasses
import io
import json

import pytest
import tensorflow as tf

from beam_pipeline.common.records import DamagedRecords, example_bytes, frame_record, iter_records, read_records
from tf_serving_input import features
from tf_serving_input.codecs import CODECS
from tf_serving_input.column_parsing import parse_spec
from tf_serving_input.columns import Column, FeatureSpec


def test_framing_reads_with_tfrecorddataset(tmp_path):
    records = [b"", b"a", b"\x00" * 1000, bytes(range(256)) * 40]
    path = tmp_path / "x.tfrecord"
    path.write_bytes(b"".join(frame_record(r) for r in records))
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(path))] == records
    assert list(iter_records(path.read_bytes())) == records


def test_a_corrupted_record_fails_tensorflow_crc_check(tmp_path):
    data = bytearray(frame_record(b"hello world"))
    data[14] ^= 0xFF  # A byte of the payload.
    (tmp_path / "bad.tfrecord").write_bytes(bytes(data))
    try:
        list(tf.data.TFRecordDataset(str(tmp_path / "bad.tfrecord")))
    except tf.errors.DataLossError:
        return
    raise AssertionError("TensorFlow read a record whose CRC does not match")


@pytest.mark.parametrize("flip", [3, 9, 14, 20])  # The length, its CRC, the payload, the payload's CRC.
def test_read_records_catches_one_flipped_byte_anywhere(flip):
    data = bytearray(frame_record(b"hello world"))
    data[flip] ^= 0x01
    with pytest.raises(DamagedRecords, match="corrupt") as caught:
        list(read_records(io.BytesIO(bytes(data))))
    assert not caught.value.truncated


def test_read_records_names_a_cut_file_truncated():
    data = frame_record(b"first") + frame_record(b"second")
    assert list(read_records(io.BytesIO(data))) == [b"first", b"second"]
    for cut in (len(data) - 3, len(frame_record(b"first")) + 5):
        with pytest.raises(DamagedRecords, match="truncated") as caught:
            list(read_records(io.BytesIO(data[:cut])))
        assert caught.value.truncated


def test_read_records_at_gives_offsets_a_seek_reads_back():
    import io

    from beam_pipeline.common.records import frame_record, read_records_at

    records = [b"a", b"", b"x" * 300, b"last"]
    data = b"".join(frame_record(record) for record in records)
    found = list(read_records_at(io.BytesIO(data)))
    assert [record for _, record in found] == records
    assert [offset for offset, _ in found] == [0, 17, 33, 349]  # 12 header bytes + data + 4 CRC bytes each.
    stream = io.BytesIO(data)
    for offset, record in found:
        stream.seek(offset)
        assert next(read_records_at(stream, offset=offset)) == (offset, record)


def _reference_example(stored, codec, image_size, source, key, label):
    """The same Example through TensorFlow's protobuf classes: what example_bytes must equal, byte for byte."""
    def text(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def number(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    return tf.train.Example(features=tf.train.Features(feature={
        codec.feature_key: text(stored), features.IMAGE_FORMAT: text(codec.name.encode("ascii")),
        features.IMAGE_HEIGHT: number(image_size), features.IMAGE_WIDTH: number(image_size),
        features.IMAGE_CHANNELS: number(3), features.IMAGE_SOURCE: text(source.encode("utf-8")),
        features.IMAGE_KEY: text(key.encode("ascii")), features.LABEL_TEXT: text(label.encode("utf-8")),
    })).SerializeToString(deterministic=True)


@pytest.mark.parametrize("codec_name", sorted(CODECS))
@pytest.mark.parametrize("stored, image_size, source, label", [
    (bytes(range(256)) * 588, 224, "images/cat.jpg", "cat"),  # A 224 px raw image's size: multi-byte lengths.
    (b"", 1, "", ""),  # Empty fields are still written.
    (b"\x00\n\"'", 2**20, "a\x00b\nc,\"d\u00e9\U0001f600" + "x" * 10_000, "\u00e9t\u00e9\x00\n\"" * 50),
])
def test_example_bytes_are_what_tensorflow_serializes_and_parse_back(codec_name, stored, image_size, source, label):
    codec = CODECS[codec_name]
    record = example_bytes(stored, codec, image_size, source, "0123456789abcdef", label)
    assert record == _reference_example(stored, codec, image_size, source, "0123456789abcdef", label)
    parsed = tf.io.parse_single_example(record, {  # A standard Example decoder reads every field back.
        codec.feature_key: tf.io.FixedLenFeature([], tf.string),
        features.IMAGE_HEIGHT: tf.io.FixedLenFeature([], tf.int64),
        features.IMAGE_SOURCE: tf.io.FixedLenFeature([], tf.string),
        features.LABEL_TEXT: tf.io.FixedLenFeature([], tf.string)})
    assert parsed[codec.feature_key].numpy() == stored and parsed[features.IMAGE_HEIGHT].numpy() == image_size
    assert parsed[features.IMAGE_SOURCE].numpy().decode("utf-8") == source
    assert parsed[features.LABEL_TEXT].numpy().decode("utf-8") == label


def test_example_bytes_refuses_a_size_no_int64_holds_as_tensorflow_does():
    with pytest.raises(ValueError, match="Value out of range"):
        _reference_example(b"", CODECS["raw"], 2**63, "a.png", "0123456789abcdef", "")
    with pytest.raises(ValueError, match="Value out of range"):
        example_bytes(b"", CODECS["raw"], 2**63, "a.png", "0123456789abcdef", "")


HOSTILE = "a\x00b\nc,\"d\u00e9\u202e\U0001f600 '"
KEPT = FeatureSpec(columns=(
    Column("caption", "text"), Column("tags", "labels"), Column("score", "float"), Column("count", "int"),
    Column("emb", "floats"), Column("objects", "boxes"), Column("classes", "labels", box_classes=True),
    Column("\u00e9t\u00e9 \U0001f600", "text"), Column("Z", "int")))
MULTI = dataclasses.replace(KEPT, multi_label=True)


def _reference_with_columns(stored, codec, spec, columns, label, labels):
    """The Example of `_reference_example` plus the kept columns, built with TensorFlow's protobuf classes."""
    example = tf.train.Example.FromString(_reference_example(stored, codec, 8, "s.png", "0123456789abcdef", label))
    feature = example.features.feature
    if spec.multi_label:
        del feature[features.LABEL_TEXT]
        if labels:
            feature[features.LABEL_TEXT].bytes_list.value.extend(text.encode("utf-8") for text in labels)
    for name, value in columns:
        column = spec.column(name)
        if column.type == "boxes":
            for at, key in enumerate(column.keys):
                feature[key].float_list.value.extend(box[at] for box in value)
            continue
        (key,) = column.keys
        if column.type == "int":
            feature[key].int64_list.value.append(value)
        elif column.type == "float":
            feature[key].float_list.value.append(value)
        elif column.type == "floats":
            feature[key].float_list.value.extend(value)
        elif column.type == "text":
            feature[key].bytes_list.value.append(value.encode("utf-8"))
        else:
            feature[key].bytes_list.value.extend(text.encode("utf-8") for text in value)
    return example.SerializeToString(deterministic=True)


EVERY_TYPE = (("caption", HOSTILE + "x" * 10_000), ("tags", ("cat", HOSTILE, "\u00e9")), ("score", 0.1),
              ("count", -(2**63)), ("emb", (1e-40, -0.0, 3.4e38, 1 / 3)),
              ("objects", ((0.1, 0.2, 0.5, 0.6), (0, 0, 1, 1))),
              ("classes", ("cat", "dog")), ("\u00e9t\u00e9 \U0001f600", HOSTILE), ("Z", 2**63 - 1))


@pytest.mark.parametrize("spec", [KEPT, MULTI], ids=["one-label", "multi-label"])
@pytest.mark.parametrize("columns, labels", [
    (EVERY_TYPE, ("cat", HOSTILE)),
    (EVERY_TYPE[2:5], ("x",)),  # Some columns missing: left out of the record.
    ((), ()),  # Every column missing, no label: no column/* key, and no label/text in a multi-label run.
    ((("score", 16777217.0),), ()),  # float64 -> float32 rounds to nearest (16777216).
])
def test_records_with_columns_are_what_tensorflow_serializes(spec, columns, labels):
    codec = CODECS["raw"]
    record = example_bytes(b"\x01\x02", codec, 8, "s.png", "0123456789abcdef", "one", columns=columns,
                           labels=labels, spec=spec)
    assert record == _reference_with_columns(b"\x01\x02", codec, spec, columns, "one", labels)
    keys = set(tf.train.Example.FromString(record).features.feature)
    written = {key for name, _ in columns for key in spec.column(name).keys}
    assert {key for key in keys if key.startswith(("column/", "image/object/"))} == written
    assert (features.LABEL_TEXT in keys) == (not spec.multi_label or bool(labels))


def test_a_standard_decoder_reads_every_column_with_the_spec_of_features_json_alone():
    spec = FeatureSpec.from_json(json.loads(MULTI.dumps()))  # What a user has: the file.
    record = example_bytes(b"", CODECS["raw"], 8, "s.png", "0123456789abcdef", "", columns=EVERY_TYPE,
                           labels=("cat", HOSTILE), spec=spec)
    parsed = tf.io.parse_single_example(record, parse_spec(spec))
    values = {key: tf.sparse.to_dense(value).numpy().tolist() for key, value in parsed.items()}
    assert values[features.LABEL_TEXT] == [b"cat", HOSTILE.encode("utf-8")]
    assert values["column/caption"] == [(HOSTILE + "x" * 10_000).encode("utf-8")]
    assert values["column/count"] == [-(2**63)] and values["column/Z"] == [2**63 - 1]
    assert values["column/score"] == [pytest.approx(0.1, rel=1e-7)]
    assert values["image/object/bbox/xmax"] == [0.5, 1.0] and values["image/object/class/text"] == [b"cat", b"dog"]
    assert values["column/emb"][2] == pytest.approx(3.4e38, rel=1e-7) and values["column/emb"][0] > 0


def test_a_record_s_label_text_is_its_labels_joined_or_empty():
    from beam_pipeline.common.records import record_label

    def label_of(record):
        return record_label(tf.train.Example.FromString(record).features.feature)

    assert label_of(example_bytes(b"", CODECS["raw"], 8, "s", "0123456789abcdef", "cat")) == "cat"
    assert label_of(example_bytes(b"", CODECS["raw"], 8, "s", "0123456789abcdef", "")) == ""
    for labels, text in ((("cat", "dog"), "cat|dog"), ((), "")):
        assert label_of(example_bytes(b"", CODECS["raw"], 8, "s", "0123456789abcdef", "", labels=labels,
                                      spec=MULTI)) == text
