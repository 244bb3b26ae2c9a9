"""Storage codecs: round trips, the keys records use, the format check, and standard consumers."""

import numpy as np
import pytest
import tensorflow as tf

import imaging
from beam_pipeline.common.records import example_bytes
from tf_serving_input import features
from tf_serving_input.codecs import CODECS, parse_record, parse_records, to_bytes
from tf_serving_input.features import PreprocessConfig
from tf_serving_input.preprocessing import preprocess_image

TOLERANCE = {"png": 0, "raw": 0, "jpeg": 6}


def stored_record(image_format, image, size=32):
    config = PreprocessConfig(image_size=size, image_format=image_format)
    codec = CODECS[image_format]
    stored = to_bytes(codec.encode(image, config))
    return example_bytes(stored, codec, size, "a.png", "0123456789abcdef", "cat"), stored, config


@pytest.mark.parametrize("image_format", sorted(CODECS))
def test_round_trip_one_and_batched(image_format):
    image = preprocess_image(imaging.encode(imaging.quadrants(), "PNG"), PreprocessConfig(image_size=32))
    record, stored, config = stored_record(image_format, image)
    if image_format == "raw":
        assert len(stored) == 32 * 32 * 3
    one, _ = parse_record(record, config)
    batch, _ = parse_records(tf.constant([record, record]), config)
    assert batch.shape == (2, 32, 32, 3) and np.array_equal(batch[0], one)
    assert np.abs(one.numpy().astype(int) - image.numpy()).mean() <= TOLERANCE[image_format]


@pytest.mark.parametrize("image_format", ["jpeg", "png"])
def test_encoded_records_read_with_a_standard_example_decoder(image_format):
    """What TF Model Garden's TfExampleDecoder and TFDS-style decoders do: decode_image on image/encoded."""
    image = preprocess_image(imaging.encode(imaging.quadrants(), "PNG"), PreprocessConfig(image_size=32))
    record, _, _ = stored_record(image_format, image)
    parsed = tf.io.parse_single_example(record, {
        "image/encoded": tf.io.FixedLenFeature([], tf.string), "image/format": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64), "image/width": tf.io.FixedLenFeature([], tf.int64)})
    decoded = tf.io.decode_image(parsed["image/encoded"], channels=3)
    assert decoded.shape == (parsed["image/height"], parsed["image/width"], 3)
    assert parsed["image/format"].numpy() == image_format.encode()


def test_raw_records_keep_pixels_out_of_image_encoded():
    image = tf.zeros([8, 8, 3], tf.uint8)
    record, _, _ = stored_record("raw", image, size=8)
    feature = tf.train.Example.FromString(record).features.feature
    assert features.IMAGE_ENCODED not in feature and len(feature[features.IMAGE_RAW].bytes_list.value[0]) == 192
    # A tool that looks for image/encoded gets a missing-feature error, not a failed image decode.
    with pytest.raises(tf.errors.InvalidArgumentError, match="image/encoded"):
        tf.io.parse_single_example(record, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})


def test_a_record_of_another_format_is_refused_with_a_clear_error():
    image = tf.zeros([8, 8, 3], tf.uint8)
    record, _, _ = stored_record("png", image, size=8)
    with pytest.raises(tf.errors.InvalidArgumentError, match="do not hold image/format 'jpeg'"):
        parse_records(tf.constant([record]), PreprocessConfig(image_size=8, image_format="jpeg"))


def test_raw_record_of_the_wrong_length_is_refused():
    with pytest.raises(tf.errors.InvalidArgumentError):
        CODECS["raw"].decode(b"\x00" * (32 * 32 * 3 - 1), 32)
