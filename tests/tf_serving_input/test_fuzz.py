"""Property-based fuzzing of the decode path: random and mutated bytes never crash, hang or blow up.

Every input must give an RGB uint8 [S, S, 3] image or a tf.errors.InvalidArgumentError;
`max_pixels` bounds what any header may make the decoder allocate.
"""

import numpy as np
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

import imaging
from tf_serving_input.features import PreprocessConfig
from tf_serving_input.preprocessing import preprocess_image

CONFIG = PreprocessConfig(image_size=16, max_pixels=1 << 20)  # Decoding never exceeds ~3 MB.
SEEDS = [
    imaging.encode(imaging.quadrants(), "JPEG", quality=80),
    imaging.encode(imaging.quadrants(), "JPEG", progressive=True),
    imaging.exif_jpeg(imaging.quadrants(), 6),
    imaging.encode(imaging.quadrants(), "PNG"),
    imaging.encode(Image.fromarray(imaging.quadrants()).convert("P"), "PNG"),
    imaging.animated_gif([imaging.quadrants(), imaging.quadrants()[::-1]]),
    imaging.encode(imaging.quadrants(), "BMP"),
    imaging.encode(imaging.quadrants(), "WEBP"),
    imaging.encode(imaging.quadrants(), "WEBP", lossless=True),
]
FUZZ = settings(max_examples=250, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@tf.function(input_signature=[tf.TensorSpec([], tf.string)])
def preprocess(data):
    return preprocess_image(data, CONFIG)


def check(data):
    try:
        image = preprocess(tf.constant(data)).numpy()
    except tf.errors.InvalidArgumentError:
        return  # A clear refusal is a correct answer.
    assert image.shape == (16, 16, 3) and image.dtype == np.uint8


@FUZZ
@given(st.binary(max_size=4096))
def test_random_bytes(data):
    check(data)


@FUZZ
@given(st.sampled_from(SEEDS), st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=12),
       st.integers(0, 1 << 16), st.booleans())
def test_mutated_images(seed, flips, cut, truncate):
    data = bytearray(seed)
    for position, value in flips:
        data[position % len(data)] = value
    if truncate:
        data = data[: cut % (len(data) + 1)]
    check(bytes(data))


@FUZZ
@given(st.sampled_from(SEEDS), st.integers(0, 40), st.integers(1, 0xFFFF), st.integers(1, 0xFFFF))
def test_headers_claiming_other_sizes(seed, offset, width, height):
    data = bytearray(seed)
    position = offset % max(1, len(data) - 4)
    data[position:position + 4] = width.to_bytes(2, "big") + height.to_bytes(2, "big")
    check(bytes(data))
