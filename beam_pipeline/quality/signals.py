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

Speed (one TF thread per worker): TensorFlow's own elementwise kernels on 224x224x3 are the slow part
(a uint8 -> float32 cast alone costs more than decoding), so the per-pixel arithmetic (gray, the
Laplacian's response) is XLA-compiled, while the reductions stay TensorFlow's (its tree reductions keep
float32 means exact to ~1e-5; XLA's CPU reductions drifted by 1e-2 on a flat image). The gray image is
made once; the 32x32 shrink is XLA block means when the side is a multiple of 32 (224 = 7 x 32: the same
values as area resizing), the DCT two matmuls with the DCT-II basis' first 8 rows, the median a top-k,
and the digest FarmHash fingerprints of the raw bytes (no per-image loop).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

HASH_SIDE = 32  # The grayscale image the hash's DCT is taken over.
HASH_BLOCK = 8  # The lowest HASH_BLOCK x HASH_BLOCK frequencies give the 64 bits.
HASH_BITS = HASH_BLOCK * HASH_BLOCK

_LUMA = (0.2989, 0.5870, 0.1140)  # ITU-R 601, the weights tf.image.rgb_to_grayscale uses.
_INT63 = (1 << 63) - 1  # Each digest half keeps 63 bits, so it stays a non-negative int64.


def _dct_rows(count: int, side: int) -> np.ndarray:
    """The first `count` rows of the orthonormal DCT-II matrix of size `side` (row k = frequency k)."""
    n = np.arange(side)
    basis = np.sqrt(2.0 / side) * np.cos(np.pi * (2 * n[None, :] + 1) * np.arange(count)[:, None] / (2 * side))
    basis[0] /= np.sqrt(2.0)
    return basis.astype(np.float32)


_DCT_LOW = _dct_rows(HASH_BLOCK, HASH_SIDE)  # [8, 32]: only the 8x8 lowest frequencies are ever read.


@tf.function(jit_compile=True)
def _gray_xla(images: tf.Tensor) -> tf.Tensor:
    """uint8 [B, H, W, 3] -> float32 [B, H, W]: the luma sum, XLA-fused with the cast (one pass)."""
    pixels = tf.cast(images, tf.float32)
    return pixels[..., 0] * _LUMA[0] + pixels[..., 1] * _LUMA[1] + pixels[..., 2] * _LUMA[2]


@tf.function(jit_compile=True)
def _laplacian_xla(gray: tf.Tensor) -> tf.Tensor:
    """float32 [B, H, W] -> [B, H-2, W-2]: the 4-neighbour Laplacian (a separate XLA call: fused with the
    gray it would recompute each gray pixel five times)."""
    return (gray[:, :-2, 1:-1] + gray[:, 2:, 1:-1] + gray[:, 1:-1, :-2] + gray[:, 1:-1, 2:]
            - 4.0 * gray[:, 1:-1, 1:-1])


def grayscale(images: tf.Tensor) -> tf.Tensor:
    """uint8 [B, H, W, 3] -> float32 [B, H, W, 1] gray levels in 0-255 (ITU-R 601 luma)."""
    return _gray_xla(images)[..., None]


@tf.function(jit_compile=True)
def _block_means_xla(gray: tf.Tensor, side: int) -> tf.Tensor:
    """float32 [B, H, W] -> [B, side, side]: the mean of each (H / side) x (W / side) block."""
    height, width = gray.shape[1], gray.shape[2]
    return tf.reduce_mean(tf.reshape(gray, [-1, side, height // side, side, width // side]), axis=[2, 4])


def shrink(gray: tf.Tensor, side: int = HASH_SIDE) -> tf.Tensor:
    """float32 [B, H, W, 1] -> [B, side, side]: area averaging (block means when the sizes divide).

    Not `tf.nn.avg_pool2d`: without oneDNN, which TensorFlow turns on only on some CPUs (off on the
    AMD EPYC of 2026-12-02's VM: `_pywrap_util_port.IsMklEnabled()` False), its Eigen kernel took
    2.56 ms an image of 224 px, 90% of the signals; the block means take 0.06 ms there.
    """
    height, width = gray.shape[1], gray.shape[2]
    if height is not None and width is not None and height % side == 0 and width % side == 0:
        return _block_means_xla(gray[..., 0], side)
    return tf.image.resize(gray, [side, side], method="area")[..., 0]


def dct_low(square: tf.Tensor) -> tf.Tensor:
    """float32 [B, 32, 32] -> the 8x8 lowest frequencies of its orthonormal 2-D DCT-II, [B, 8, 8]."""
    basis = tf.constant(_DCT_LOW)
    return tf.matmul(tf.matmul(basis[None], square), basis[None], transpose_b=True)


def perceptual_hash(gray: tf.Tensor) -> tf.Tensor:
    """float32 [B, H, W, 1] gray images -> int64 [B] 64-bit DCT hashes (the uint64 bits, two's complement)."""
    low = tf.reshape(dct_low(shrink(gray)), [-1, HASH_BITS])
    # The median of the 63 AC coefficients: the 32nd largest of them (63 is odd, so one middle value).
    median = tf.math.top_k(low[:, 1:], k=(HASH_BITS + 1) // 2, sorted=True).values[:, -1]
    bits = tf.cast(low > median[:, None], tf.int64)
    weights = tf.bitwise.left_shift(tf.ones([HASH_BITS], tf.int64), tf.range(HASH_BITS, dtype=tf.int64))
    # Distinct powers of two: the sum is their bitwise OR, bit 63 wrapping into the sign as intended.
    return tf.reduce_sum(bits * weights, axis=1)


def _fingerprint63(rows: tf.Tensor) -> tf.Tensor:
    """[N, ...] -> int64 [N]: FarmHash Fingerprint64 of each row's bytes, its low 63 bits."""
    return tf.bitwise.bitwise_and(tf.bitcast(tf.fingerprint(rows), tf.int64), _INT63)


def pixel_digest(images: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """uint8 [B, H, W, 3] -> two int64 [B] halves of a 126-bit digest of the exact pixels (and shape).

    High half: the fingerprint of the image's bytes. Low half: the fingerprint of its H rows'
    fingerprints, a second hash (the row length and count are in it, so the shape is too).
    """
    count, height = tf.shape(images)[0], tf.shape(images)[1]
    lines = tf.fingerprint(tf.reshape(images, [count * height, -1]))  # uint8 [B * H, 8]
    return _fingerprint63(images), _fingerprint63(tf.reshape(lines, [count, -1]))


def laplacian_variance(gray: tf.Tensor) -> tf.Tensor:
    """float32 [B, H, W, 1] -> float32 [B]: variance of the 4-neighbour Laplacian (edges; low when blurry)."""
    _, variance = tf.nn.moments(_laplacian_xla(gray[..., 0]), axes=[1, 2])
    return variance


def image_signals(images: tf.Tensor) -> dict[str, tf.Tensor]:
    """uint8 [B, S, S, 3] stored images -> the signals of each (see the module's docstring)."""
    gray = grayscale(images)
    high, low = pixel_digest(images)
    mean, variance = tf.nn.moments(gray, axes=[1, 2, 3])  # Two passes over gray, in TF's exact reductions.
    return {
        "phash": perceptual_hash(gray),
        "digest_hi": high,
        "digest_lo": low,
        "brightness": mean,
        "contrast": tf.sqrt(variance),
        "blur": laplacian_variance(gray),
    }


@tf.function(reduce_retracing=True)
def image_signals_graph(images: tf.Tensor) -> dict[str, tf.Tensor]:
    """`image_signals` traced once per image size (what the job calls on each batch)."""
    return image_signals(images)
