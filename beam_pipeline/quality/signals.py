"""Per-image quality signals in TensorFlow ops: the one implementation, on a batch of stored images.

    signals = image_signals(images)   # uint8 [B, S, S, 3] as CODECS decodes them
    signals["phash"]       int64 [B]: 64-bit DCT perceptual hash (bit i = coefficient i > median)
    signals["digest_hi"], signals["digest_lo"]   int64 [B]: 126-bit digest of the exact pixels
    signals["brightness"]  float32 [B]: mean gray level, 0-255
    signals["contrast"]    float32 [B]: standard deviation of the gray level
    signals["blur"]        float32 [B]: variance of the Laplacian of the gray image (low = blurry)

The hash is the classic pHash: the image in grayscale, shrunk to 32x32 (area
averaging, so JPEG noise and resizing mostly cancel), its 2-D DCT-II, the 8x8
lowest frequencies, each bit set when its coefficient is above the median of the
63 coefficients without the DC term (brightness and contrast shifts move all
coefficients together, so the signs against the median stay).
"""

from __future__ import annotations

import tensorflow as tf

HASH_SIDE = 32  # The grayscale image the hash's DCT is taken over.
HASH_BLOCK = 8  # The lowest HASH_BLOCK x HASH_BLOCK frequencies give the 64 bits.
HASH_BITS = HASH_BLOCK * HASH_BLOCK

# SipHash keys of the two halves of the exact-content digest (any fixed pair: stable across runs).
_DIGEST_KEYS = ([0x62656D2D696D6167, 0x652D7069706C696E], [0x71756C69747964, 0x6469676573742D32])
_INT63 = (1 << 63) - 1
_LAPLACIAN = tf.constant([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], shape=[3, 3, 1, 1])


def grayscale(images: tf.Tensor) -> tf.Tensor:
    """uint8 [B, H, W, 3] -> float32 [B, H, W, 1] gray levels in 0-255 (ITU-R 601 luma)."""
    return tf.image.rgb_to_grayscale(tf.cast(images, tf.float32))


def dct_2d(square: tf.Tensor) -> tf.Tensor:
    """float32 [B, N, N] -> its orthonormal 2-D DCT-II, [B, N, N] (rows then columns)."""
    rows = tf.signal.dct(square, type=2, norm="ortho")
    return tf.linalg.matrix_transpose(tf.signal.dct(tf.linalg.matrix_transpose(rows), type=2, norm="ortho"))


def perceptual_hash(gray: tf.Tensor) -> tf.Tensor:
    """float32 [B, H, W, 1] gray images -> int64 [B] 64-bit DCT hashes (the uint64 bits, two's complement)."""
    small = tf.image.resize(gray, [HASH_SIDE, HASH_SIDE], method="area")[..., 0]
    low = tf.reshape(dct_2d(small)[:, :HASH_BLOCK, :HASH_BLOCK], [-1, HASH_BITS])
    # The median of the 63 AC coefficients: the 32nd of them sorted (63 is odd, so one middle value).
    median = tf.sort(low[:, 1:], axis=1)[:, (HASH_BITS - 1) // 2]
    bits = tf.cast(low > median[:, None], tf.int64)
    weights = tf.bitwise.left_shift(tf.ones([HASH_BITS], tf.int64), tf.range(HASH_BITS, dtype=tf.int64))
    # Distinct powers of two: the sum is their bitwise OR, bit 63 wrapping into the sign as intended.
    return tf.reduce_sum(bits * weights, axis=1)


def pixel_digest(images: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """uint8 [B, H, W, 3] -> two int64 [B] halves of a 126-bit keyed hash of the exact pixels (and shape)."""
    serialized = tf.map_fn(tf.io.serialize_tensor, images, fn_output_signature=tf.string)
    high, low = (tf.strings.to_hash_bucket_strong(serialized, _INT63, key) for key in _DIGEST_KEYS)
    return high, low


def laplacian_variance(gray: tf.Tensor) -> tf.Tensor:
    """float32 [B, H, W, 1] -> float32 [B]: variance of the 4-neighbour Laplacian (edges; low when blurry)."""
    response = tf.nn.conv2d(gray, _LAPLACIAN, strides=1, padding="VALID")
    return tf.math.reduce_variance(response, axis=[1, 2, 3])


def image_signals(images: tf.Tensor) -> dict[str, tf.Tensor]:
    """uint8 [B, S, S, 3] stored images -> the signals of each (see the module's docstring)."""
    gray = grayscale(images)
    high, low = pixel_digest(images)
    return {
        "phash": perceptual_hash(gray),
        "digest_hi": high,
        "digest_lo": low,
        "brightness": tf.reduce_mean(gray, axis=[1, 2, 3]),
        "contrast": tf.math.reduce_std(gray, axis=[1, 2, 3]),
        "blur": laplacian_variance(gray),
    }


@tf.function(reduce_retracing=True)
def image_signals_graph(images: tf.Tensor) -> dict[str, tf.Tensor]:
    """`image_signals` traced once per image size (what the job calls on each batch)."""
    return image_signals(images)
