"""Storage codecs: how a preprocessed uint8 [S, S, 3] image is stored in a record and read back.

`CODECS` maps each `--image_format` to one `StorageCodec`: the feature key the
image goes under, its encoder, and its decoders for one record and for a
whole batch. The shard writer, the reader, the serving export and inspect use
it; nothing else in the project branches on a format name.

Encoded formats (JPEG, PNG) go under `image/encoded`, where every tool that
consumes `tf.train.Example`s looks for encoded image bytes and calls
`decode_image` (TF Model Garden's `TfExampleDecoder`, the Object Detection
API, TFDS-style decoders). Raw pixels are no encoded image, so they go under a
key of their own, `image/raw`, next to `image/height`, `image/width` and
`image/channels`: such tools then report a missing feature instead of
failing to decode pixels as an image.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import tensorflow as tf

from tf_serving_input import features

if TYPE_CHECKING:
    import numpy as np


@dataclasses.dataclass(frozen=True)
class StorageCodec:
    """One storage format of the output contract.

    Attributes:
      name: the `--image_format` value, also written to each record's `image/format`.
      feature_key: the record feature that holds the stored image.
      encode: (uint8 [S, S, 3] image, PreprocessConfig) -> what `to_bytes` turns into
        the stored bytes: a scalar string tensor, or (raw) the pixels themselves,
        since no TensorFlow op emits a tensor's bytes.
      decode: (stored bytes scalar, size) -> uint8 [S, S, 3].
      decode_batch: (stored bytes [B], size) -> uint8 [B, S, S, 3].
      batch_decodes: whether `decode_batch` is one op for the whole batch (the reader then
        batches records before decoding them; otherwise it decodes one per parallel map call).
      stores_pixels: whether `encode` returns the uint8 pixels (else a scalar string).
    """

    name: str
    feature_key: str
    encode: Callable[[tf.Tensor, features.PreprocessConfig], tf.Tensor]
    decode: Callable[[tf.Tensor | bytes, int], tf.Tensor]
    decode_batch: Callable[[tf.Tensor, int], tf.Tensor]
    batch_decodes: bool
    stores_pixels: bool = False

    def encoded_spec(self, size: int) -> tf.TensorSpec:
        """The TensorSpec of `encode`'s result for an image of side `size`."""
        if self.stores_pixels:
            return tf.TensorSpec([size, size, 3], tf.uint8)
        return tf.TensorSpec([], tf.string)


def to_bytes(encoded: tf.Tensor | np.ndarray | bytes) -> bytes:
    """The bytes to store for an evaluated `encode` result (raw: row-major HWC pixels)."""
    value = encoded.numpy() if hasattr(encoded, "numpy") else encoded
    return value if isinstance(value, bytes) else value.tobytes()


def _decode_encoded(data: tf.Tensor | bytes, size: int) -> tf.Tensor:
    image = tf.io.decode_image(data, channels=3, dtype=tf.uint8, expand_animations=False)
    image.set_shape([size, size, 3])
    return image


def _decode_encoded_batch(datas: tf.Tensor, size: int) -> tf.Tensor:
    return tf.map_fn(lambda data: _decode_encoded(data, size), datas,
                     fn_output_signature=tf.TensorSpec([size, size, 3], tf.uint8))


def _decode_raw(data: tf.Tensor | bytes, size: int) -> tf.Tensor:
    # A record of the wrong length fails the reshape, naming both sizes.
    return tf.reshape(tf.io.decode_raw(data, tf.uint8), [size, size, 3])


def _decode_raw_batch(datas: tf.Tensor, size: int) -> tf.Tensor:
    # The batch dimension from the input keeps its static size (fixed batches when the remainder
    # is dropped) and makes a record of the wrong length fail, not misalign the batch.
    shape = tf.concat([tf.shape(datas), [size, size, 3]], axis=0)
    return tf.reshape(tf.io.decode_raw(datas, tf.uint8), shape)


CODECS = {
    # Full-resolution chroma (4:4:4): ~25% more bytes than 4:2:0 at quality 95, but it halves the
    # worst train/serve pixel difference on colour edges (see README).
    "jpeg": StorageCodec(
        "jpeg", features.IMAGE_ENCODED,
        encode=lambda image, config: tf.io.encode_jpeg(image, quality=config.jpeg_quality,
                                                       chroma_downsampling=False),
        decode=_decode_encoded, decode_batch=_decode_encoded_batch, batch_decodes=False),
    "png": StorageCodec(
        "png", features.IMAGE_ENCODED, encode=lambda image, config: tf.io.encode_png(image),
        decode=_decode_encoded, decode_batch=_decode_encoded_batch, batch_decodes=False),
    "raw": StorageCodec(
        "raw", features.IMAGE_RAW, encode=lambda image, config: image,
        decode=_decode_raw, decode_batch=_decode_raw_batch, batch_decodes=True, stores_pixels=True),
}
assert set(CODECS) == set(features.IMAGE_FORMATS)


def codec_for(config: features.PreprocessConfig) -> StorageCodec:
    """The codec of a PreprocessConfig's `image_format`."""
    return CODECS[config.image_format]


def record_spec(codec: StorageCodec, **extra: tf.io.FixedLenFeature) -> dict[str, tf.io.FixedLenFeature]:
    """The `parse_example` spec of the stored image and its format, plus `extra` features."""
    return {codec.feature_key: tf.io.FixedLenFeature([], tf.string),
            features.IMAGE_FORMAT: tf.io.FixedLenFeature([], tf.string, default_value=""), **extra}


def check_format(formats: tf.Tensor, codec: StorageCodec) -> tf.Operation | None:
    """Fails with a clear error when records' `image/format` is not the codec's: returns a dependency op."""
    message = (f"records do not hold image/format '{codec.name}', the storage format the output's "
               "manifest records (were shards of different runs mixed in one folder?); they hold:")
    return tf.debugging.Assert(tf.reduce_all(tf.equal(formats, codec.name)), [message, formats], summarize=3)


def parse_records(serialized: tf.Tensor, config: features.PreprocessConfig,
                  **extra: tf.io.FixedLenFeature) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """Serialized records [B] -> (uint8 images [B, S, S, 3], parsed features), `image/format` checked.

    `extra` adds features to parse (e.g. the label); they come back in the dict.
    """
    codec = codec_for(config)
    parsed = tf.io.parse_example(serialized, record_spec(codec, **extra))
    with tf.control_dependencies([check_format(parsed[features.IMAGE_FORMAT], codec)]):
        images = codec.decode_batch(tf.identity(parsed[codec.feature_key]), config.image_size)
    return images, parsed


def parse_record(serialized: tf.Tensor | bytes, config: features.PreprocessConfig,
                 **extra: tf.io.FixedLenFeature) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """One serialized record -> (uint8 image [S, S, 3], parsed features), `image/format` checked."""
    codec = codec_for(config)
    parsed = tf.io.parse_single_example(serialized, record_spec(codec, **extra))
    with tf.control_dependencies([check_format(parsed[features.IMAGE_FORMAT], codec)]):
        image = codec.decode(tf.identity(parsed[codec.feature_key]), config.image_size)
    return image, parsed
