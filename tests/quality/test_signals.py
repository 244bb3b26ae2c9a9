"""The per-image signals: known values, eagerly and inside tf.function (one implementation, two modes)."""

import numpy as np
import pytest
import tensorflow as tf

from beam_pipeline.quality import signals
from beam_pipeline.quality.pairs import as_unsigned, hamming


def photo(seed=0, size=64):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size]
    base = np.stack([x * 4, y * 4, (x + y) * 2], -1) + 40 * np.sin(x / (3 + seed))[..., None]
    return np.clip(base + rng.normal(0, 4, base.shape), 0, 255).astype(np.uint8)


def batch(*images):
    return tf.constant(np.stack(images))


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
def test_signals_know_flat_images(mode):
    compute = signals.image_signals if mode == "eager" else signals.image_signals_graph
    flat = np.full((32, 32, 3), 100, np.uint8)
    out = compute(batch(flat, np.zeros((32, 32, 3), np.uint8)))
    np.testing.assert_allclose(out["brightness"].numpy(), [100, 0], atol=0.02)  # Luma weights sum to 0.9999.
    np.testing.assert_allclose(out["contrast"].numpy(), [0, 0], atol=1e-3)
    np.testing.assert_allclose(out["blur"].numpy(), [0, 0], atol=1e-3)


def test_eager_and_graph_agree_exactly():
    images = batch(photo(0), photo(1), photo(2))
    eager, graph = signals.image_signals(images), signals.image_signals_graph(images)
    for name in eager:
        np.testing.assert_array_equal(eager[name].numpy(), graph[name].numpy(), err_msg=name)


def test_the_signals_use_no_average_pool_kernel():
    """TensorFlow's AvgPool runs oneDNN's kernel only where TensorFlow enables oneDNN (some CPUs); elsewhere
    its Eigen kernel took 2.56 ms an image of 224 px, 90% of the signals (the AMD EPYC VM of 2026-12-02)."""
    spec = tf.TensorSpec([None, 224, 224, 3], tf.uint8)
    graph = signals.image_signals_graph.get_concrete_function(spec).graph
    kinds = {op.type for op in graph.get_operations()}
    for function in graph.as_graph_def().library.function:  # The XLA-compiled parts are called functions.
        kinds |= {node.op for node in function.node_def}
    assert "Mean" in kinds and not {kind for kind in kinds if "Pool" in kind}


def test_the_digest_is_the_exact_pixels():
    image = photo(3)
    changed = image.copy()
    changed[10, 10, 0] ^= 1  # One bit of one pixel.
    out = signals.image_signals(batch(image, image.copy(), changed))
    digests = list(zip(out["digest_hi"].numpy().tolist(), out["digest_lo"].numpy().tolist(), strict=True))
    assert digests[0] == digests[1] != digests[2]


def test_the_hash_survives_brightness_and_noise_but_not_another_picture(sample_photos):
    from PIL import Image

    image = np.asarray(Image.open(sample_photos[0][0]).convert("RGB").resize((128, 128))).astype(np.int32)
    brighter = np.clip(image * 1.08 + 4, 0, 255).astype(np.uint8)
    noisy = np.clip(image + np.random.default_rng(9).normal(0, 3, image.shape), 0, 255).astype(np.uint8)
    other = np.ascontiguousarray(np.rot90(image.astype(np.uint8)))
    hashes = as_unsigned(signals.image_signals(batch(image.astype(np.uint8), brighter, noisy, other))["phash"])
    distances = hamming(hashes[0], hashes).tolist()
    assert distances[1] <= 4 and distances[2] <= 4
    assert distances[3] >= 16


def test_blur_lowers_the_laplacian_variance():
    image = photo(5)
    blurred = tf.image.resize(tf.image.resize(image[None], [16, 16], method="area"), [64, 64]).numpy()[0]
    out = signals.image_signals(batch(image, np.clip(blurred, 0, 255).astype(np.uint8)))
    sharp, soft = out["blur"].numpy().tolist()
    assert soft < sharp / 4


def test_hash_bits_follow_the_dct_against_the_median():
    # The hash of one image, recomputed with the DCT-II matrix in NumPy: bit i is coefficient i above the AC median.
    image = photo(6)
    gray = signals.grayscale(tf.constant(image[None]))
    small = tf.image.resize(gray, [32, 32], method="area").numpy()[0, ..., 0]
    n = np.arange(32)
    basis = np.sqrt(2 / 32) * np.cos(np.pi * (2 * n[None, :] + 1) * n[:, None] / 64)
    basis[0] /= np.sqrt(2)
    low = (basis @ small @ basis.T)[:8, :8].reshape(-1)
    bits = low > np.sort(low[1:])[31]
    expected = sum(1 << i for i, bit in enumerate(bits) if bit)
    got = int(as_unsigned(signals.perceptual_hash(gray))[0])
    assert got == expected
