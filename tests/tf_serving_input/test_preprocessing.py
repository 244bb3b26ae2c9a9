"""Every preprocessing op, eagerly, inside tf.data and inside a tf.function (they can differ)."""

import functools
import io
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageOps

import imaging
from conftest import REPO_ROOT
from tf_serving_input import failures, formats
from tf_serving_input import preprocessing as pp
from tf_serving_input.features import PreprocessConfig

# Each mode runs every op; a graph's first run costs ~1-3 s of tracing and optimizing (once per op and mode a
# process, see run_op), so the tf.data mode runs with the slow tests (CI), eager and tf.function in the
# everyday subset too.
# No module fixtures, and ~150 cases: its test functions are spread over pytest-xdist's workers (tests/conftest.py).
SPREAD_OVER_WORKERS = True
MODES = ["eager", pytest.param("tf_data", marks=pytest.mark.slow), "tf_function"]
_TRACED = {}


def _in_tf_data(fn):
    """A tf.function of a scalar string that maps `fn` over a one-element dataset of it, inside tf.data."""
    def mapped(data):
        return tf.data.Dataset.from_tensors(data).map(fn).get_single_element()
    return mapped


def run_op(fn, data, mode):
    """Runs fn(data) eagerly, as a tf.data map, or in a tf.function with a scalar string input.

    Both graph modes are traced once per function (a module function once a process; a lambda made per call,
    per call): the tf.data mode's dataset is built inside a tf.function, so its map function is traced with
    it and each case only runs it. A dataset made per case traced the whole preprocessing graph anew each time
    (2-15 s a case; 317 s of CI for this file).
    """
    if mode == "eager":
        return fn(tf.constant(data)).numpy()
    if (fn, mode) not in _TRACED:
        _TRACED[fn, mode] = tf.function(_in_tf_data(fn) if mode == "tf_data" else fn,
                                        input_signature=[tf.TensorSpec([], tf.string)])
    return _TRACED[fn, mode](tf.constant(data)).numpy()


_PREPROCESS = {}


def preprocess_with(config):
    """`preprocess_image` bound to `config`, one function object per config (so traced once)."""
    return _PREPROCESS.setdefault(config, lambda data: pp.preprocess_image(data, config))


def problem_index(max_pixels):
    """The problem index `inspect_image` returns, as an op of the bytes (one per max_pixels)."""
    return _PREPROCESS.setdefault(("problem", max_pixels), lambda data: pp.inspect_image(data, max_pixels)[0])


def header_dimensions_of(format_index):
    """`header_dimensions` for one format index, as an op of the bytes (one function per index: traced once)."""
    return _PREPROCESS.setdefault(("dims", format_index),
                                  lambda data: pp.header_dimensions(data, tf.constant(format_index)))


def refusal(fn, data, mode):
    """The message of the InvalidArgumentError fn(data) raises, without TensorFlow's decoration."""
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        run_op(fn, data, mode)
    message = failures.op_error_message(caught.value)
    # Eagerly a failed Assert reads "... Summarized data: b'<message>'", in a graph "assertion failed: [<message>]".
    return message.split("Summarized data: b'")[-1].split("assertion failed: [")[-1].rstrip("]'")


BASE = imaging.quadrants()

# name -> (bytes, format index, allowed mean difference from PIL's decode of the same bytes)
FORMATS = {
    "jpeg": (imaging.encode(BASE, "JPEG", quality=95), 0, 1.0),
    "progressive jpeg": (imaging.encode(BASE, "JPEG", quality=95, progressive=True), 0, 1.0),
    "png": (imaging.encode(BASE, "PNG"), 1, 0.0),
    "gif": (imaging.encode(Image.fromarray(BASE).convert("P"), "GIF"), 2, 0.0),
    "bmp": (imaging.encode(BASE, "BMP"), 3, 0.0),
    "webp lossless": (imaging.encode(BASE, "WEBP", lossless=True), 4, 0.0),
    "webp lossy": (imaging.encode(BASE, "WEBP", quality=95), 4, 1.0),
    "palette png": (imaging.encode(Image.fromarray(BASE).convert("P"), "PNG"), 1, 0.0),
    "cmyk jpeg": (imaging.encode(Image.fromarray(BASE).convert("CMYK"), "JPEG", quality=95), 0, 1.0),
}


def pil_rgb(data):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_decode_every_format_to_rgb(name, mode):
    data, format_index, tolerance = FORMATS[name]
    assert run_op(pp.sniff_format, data, mode) == format_index
    decoded = run_op(pp.decode_image, data, mode)
    assert decoded.dtype == np.uint8 and decoded.shape == BASE.shape
    assert np.abs(decoded.astype(int) - pil_rgb(data)).mean() <= tolerance
    assert np.abs(decoded.astype(int) - BASE).mean() < 25  # Still the same picture.


@pytest.mark.parametrize("mode", MODES)
def test_header_dimensions_without_decoding(mode):
    for name, (data, format_index, _) in FORMATS.items():
        assert run_op(header_dimensions_of(format_index), data, mode).tolist() == [48, 64], name


@pytest.mark.parametrize("mode", MODES)
def test_grayscale_sixteen_bit_and_alpha(mode):
    gray = np.arange(48 * 64, dtype=np.uint32).reshape(48, 64) % 256
    decoded = run_op(pp.decode_image, imaging.encode(gray.astype(np.uint8), "PNG"), mode)
    assert decoded.shape == (48, 64, 3) and (decoded == gray[..., None]).all()

    sixteen = (gray * 257).astype(np.uint16)
    decoded = run_op(pp.decode_image, imaging.encode(Image.fromarray(sixteen), "PNG"), mode)
    assert np.abs(decoded.astype(int) - gray[..., None]).max() <= 1

    rgba = np.dstack([BASE, np.full(BASE.shape[:2], 255, np.uint8)])
    rgba[:8, :8, 3] = 0  # Fully transparent corner becomes white.
    decoded = run_op(pp.decode_image, imaging.encode(rgba, "PNG"), mode)
    assert (decoded[:8, :8] == 255).all()
    assert (decoded[8:, 8:] == BASE[8:, 8:]).all()


@pytest.mark.parametrize("mode", MODES)
def test_animated_gif_gives_first_frame(mode):
    frames = [imaging.solid((200, 0, 0), 20, 30), imaging.solid((0, 0, 200), 20, 30)]
    decoded = run_op(pp.decode_image, imaging.animated_gif(frames), mode)
    assert decoded.shape == (20, 30, 3)
    assert decoded[..., 0].mean() > 150 and decoded[..., 2].mean() < 50


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_gives_upright_pixels(orientation, mode):
    data = imaging.exif_jpeg(BASE, orientation)
    assert run_op(pp.exif_orientation, data, mode) == orientation
    decoded = run_op(pp.decode_image, data, mode)
    assert decoded.shape == BASE.shape
    assert np.abs(decoded.astype(int) - BASE).mean() < 3.0
    # Agrees with PIL's reading of the same EXIF tag.
    upright = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    assert np.abs(decoded.astype(int) - upright).max() <= 8


OTHER_FORMATS = {  # Recognised only to name them when refusing them.
    "tiff": imaging.encode(BASE, "TIFF"),
    "ico": imaging.encode(BASE, "ICO"),
    "pdf": b"%PDF-1.7\n%\xe2\xe3\n1 0 obj",
    "svg": b'<?xml version="1.0" encoding="UTF-8"?>\n<!-- drawn -->\n<svg width="10" height="10"/>',
    "heif": b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic",
    "avif": b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1miaf",
    "psd": b"8BPS\x00\x01" + b"\x00" * 20,
}


@pytest.mark.parametrize("mode", MODES)
def test_other_formats_are_named_in_tensorflow_and_on_the_host(mode):
    for name, data in OTHER_FORMATS.items():
        assert formats.NAMES[run_op(pp.sniff_format, data, mode)] == name
        assert formats.sniff(data) == name
    for name, (data, index, _) in FORMATS.items():
        assert formats.sniff(data) == formats.NAMES[index], name
    assert run_op(pp.sniff_format, b"hello", mode) == -1 and formats.sniff(b"hello") is None


@pytest.mark.parametrize("mode", MODES)
def test_inspect_image_reports_problems_as_numbers(mode):
    def problem(data, max_pixels=PreprocessConfig.max_pixels):
        return failures.PROBLEMS[run_op(problem_index(max_pixels), data, mode)]

    assert problem(FORMATS["png"][0]) is None
    assert problem(b"<html>not an image</html>") == failures.NOT_AN_IMAGE
    assert problem(b"") == failures.NOT_AN_IMAGE
    assert problem(OTHER_FORMATS["tiff"]) == failures.UNSUPPORTED_FORMAT
    assert problem(imaging.png_claiming_size(60000, 60000)) == failures.TOO_MANY_PIXELS
    assert problem(FORMATS["png"][0], max_pixels=48 * 64 - 1) == failures.TOO_MANY_PIXELS
    assert problem(imaging.png_claiming_size(0, 10)) == failures.CORRUPT


@pytest.mark.parametrize("mode", MODES)
def test_refusals_start_with_their_reason_code(mode):
    assert refusal(pp.decode_image, b"<html>not an image</html>", mode).startswith(
        "not_an_image: unknown file format")
    assert refusal(pp.decode_image, b"", mode).startswith("not_an_image:")
    assert refusal(pp.decode_image, OTHER_FORMATS["tiff"], mode).startswith(
        "unsupported_format: TIFF is not supported")
    assert refusal(pp.decode_image, imaging.png_claiming_size(60000, 60000), mode) == (
        "too_many_pixels: 60000x60000 is more than max_pixels=100000000")


def test_max_pixels_is_checked_before_decoding():
    data = imaging.encode(BASE, "PNG")
    assert refusal(lambda d: pp.decode_image(d, max_pixels=48 * 64 - 1), data, "eager").startswith(
        "too_many_pixels: 64x48")
    assert pp.decode_image(data, max_pixels=48 * 64).shape == (48, 64, 3)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("resize_mode", ["center_crop", "pad", "stretch"])
def test_resize_modes(resize_mode, mode):
    wide = np.zeros((40, 80, 3), np.uint8)
    wide[:, :20] = 255  # A white band on the left quarter only.
    data = imaging.encode(wide, "PNG")
    config = PreprocessConfig(image_size=20, resize_mode=resize_mode)
    out = run_op(preprocess_with(config), data, mode)
    assert out.shape == (20, 20, 3) and out.dtype == np.uint8
    if resize_mode == "center_crop":
        # The central 40x40 square holds no white; only the filter at its very edge
        # reaches the white band next to it (resize, then crop).
        assert out[:, 1:].max() == 0 and out[:, 0].max() < 64
    elif resize_mode == "pad":
        assert (out[:5] == 0).all() and (out[15:] == 0).all()  # 20x10 image padded top and bottom.
        assert out[5:15, :4].min() == 255 and out[5:15, 6:].max() == 0
    else:
        assert out[:, :4].min() == 255 and out[:, 6:].max() == 0


# Shapes whose scaled size and crop offset are whole pixels, so an integer crop of the
# reference lands exactly where the exact crop does: enlarged, with the triangle filter.
@pytest.mark.parametrize("height,width", [(8, 24), (4, 8), (8, 8), (12, 4)])
def test_center_crop_enlarges_the_shorter_side_then_crops_the_center(height, width):
    image = np.random.default_rng(height).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    out = pp.resize_image(tf.constant(image), 16, "center_crop").numpy().astype(int)
    # Reference: scale the whole image so its shorter side is 16, then take the central 16 x 16.
    scale = 16 / min(height, width)
    reference = tf.raw_ops.ScaleAndTranslate(
        images=image[None], size=[round(height * scale), round(width * scale)], scale=[scale, scale],
        translation=[0.0, 0.0], kernel_type="triangle", antialias=True)[0].numpy()
    top, left = (reference.shape[0] - 16) // 2, (reference.shape[1] - 16) // 2
    expected = np.clip(np.round(reference[top:top + 16, left:left + 16]), 0, 255)
    assert np.abs(out - expected).max() <= 1  # Same placement: only rounding differs.


def _area_weights(inputs, outputs):
    """[outputs, inputs]: how much of each input pixel each output pixel covers, per unit of its width."""
    edges = np.arange(outputs + 1) * inputs / outputs
    lows, highs = np.arange(inputs), np.arange(1, inputs + 1)
    covered = np.minimum(highs, edges[1:, None]) - np.maximum(lows, edges[:-1, None])
    return np.maximum(covered, 0.0) * outputs / inputs


@pytest.mark.parametrize("height,width,resize_mode", [(24, 40, "center_crop"), (40, 17, "center_crop"),
                                                      (31, 31, "center_crop"), (16, 20, "center_crop"),
                                                      (20, 28, "stretch")])
def test_shrinking_by_less_than_half_averages_the_area_each_output_covers(height, width, resize_mode):
    """Shrinking by less than 2x is the area (box) filter on the central whole-pixel window."""
    image = np.random.default_rng(height + width).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    out = pp.resize_image(tf.constant(image), 16, resize_mode).numpy().astype(int)
    if resize_mode == "center_crop":
        side = min(height, width)
        top, left = round((height - side) / 2), round((width - side) / 2)  # Half pixels round to even.
        image = image[top:top + side, left:left + side]
    expected = np.einsum("yi,ijc,xj->yxc", _area_weights(image.shape[0], 16), image.astype(np.float64),
                         _area_weights(image.shape[1], 16))
    assert np.abs(out - np.round(expected)).max() <= 1  # Float rounding can only move a tie.
    assert (out == np.round(expected)).mean() > 0.99


def test_the_area_filter_follows_the_original_size_not_the_shrunk_one():
    """A 2x-or-more shrink keeps the triangle filter; so does its shrink-on-load decode, though smaller."""
    assert bool(pp.area_filter_applies(tf.constant([375, 500]), 224, "center_crop"))
    assert not bool(pp.area_filter_applies(tf.constant([448, 600]), 224, "center_crop"))  # Exactly 2x.
    assert not bool(pp.area_filter_applies(tf.constant([200, 500]), 224, "center_crop"))  # Enlarged.
    assert not bool(pp.area_filter_applies(tf.constant([300, 500]), 224, "stretch"))  # One side 2x or more.
    assert not bool(pp.area_filter_applies(tf.constant([300, 300]), 224, "pad"))


@pytest.mark.slow  # ~7 s of random sizes up to 700 px: the full suite's (the goldens hold the resize every day).
def test_the_banded_resampling_is_scale_and_translate_within_one_level():
    """The resize computes ScaleAndTranslate's antialiased triangle filter in its own ops (banded matmuls).

    Random sizes from 1 to 700 pixels, shrinking (down to 1/700) and enlarging (up to 300x), with
    sub-pixel translations that move samples off the image's edges: every output pixel within one
    level of the op's (only the fixed-point rounding differs), and almost all of them equal.
    """
    rng = np.random.default_rng(24)
    # Traced once, for any size (as the job's images are: their sizes are known only at run time).
    resample = tf.function(pp._scale_and_translate, input_signature=[
        tf.TensorSpec([None, None, 3], tf.uint8), tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int32),
        tf.TensorSpec([2], tf.float32), tf.TensorSpec([2], tf.float32)])
    differing = []
    for _ in range(40):
        height, width = (int(side) for side in rng.integers(1, 700, 2))
        out_height, out_width = (int(side) for side in rng.integers(1, 300, 2))
        scale = np.array([out_height / height, out_width / width], np.float32) * rng.uniform(0.8, 1.25, 2).astype(
            np.float32)
        translation = rng.uniform(-20, 20, 2).astype(np.float32)
        image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        expected = tf.raw_ops.ScaleAndTranslate(
            images=tf.cast(image[None], tf.float32), size=[out_height, out_width], scale=scale,
            translation=translation, kernel_type="triangle", antialias=True)[0].numpy()
        expected = np.clip(np.round(expected), 0, 255)
        out = resample(tf.constant(image), tf.constant(out_height), tf.constant(out_width), tf.constant(scale),
                       tf.constant(translation))
        assert out.shape == expected.shape and out.dtype == tf.uint8
        difference = np.abs(out.numpy().astype(float) - expected)
        assert difference.max() <= 1, (height, width, out_height, out_width, scale, translation)
        differing.append((difference > 0).mean())
    assert np.mean(differing) < 0.05  # Fixed-point weights (see _scale_and_translate): 2-3% measured.


@pytest.mark.parametrize("side,size", [(20_000, 1), (40_000, 4), (10_000, 1)])
def test_a_shrink_by_thousands_averages_like_the_op(side, size):
    """A 1/20,000 shrink: each weight is below one unit of the fixed point (hostile trial).

    Weights rounded one by one all became 0 and the output was the first input pixel (0 where
    the op gives 127); rounded as running totals they still average.
    """
    ramp = (np.arange(side) * 255 // (side - 1)).astype(np.uint8)
    image = np.broadcast_to(ramp[None, :, None], (4, side, 3)).copy()
    out = pp.resize_image(tf.constant(image), size, "stretch").numpy().astype(int)
    expected = tf.raw_ops.ScaleAndTranslate(
        images=tf.cast(image[None], tf.float32), size=[size, size], scale=[size / 4, size / side],
        translation=[0.0, 0.0], kernel_type="triangle", antialias=True)[0].numpy()
    assert np.abs(out - np.clip(np.round(expected), 0, 255)).max() <= 1


_THIN_IMAGE_PEAK = """
import resource
import tensorflow as tf
from tf_serving_input import preprocessing as pp
image = tf.zeros([1, 10_000_000, 3], tf.uint8) + 7
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
pp.resize_image(image, 224, "pad").numpy()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.slow  # A fresh interpreter importing TensorFlow, to measure its peak RSS (~8 s).
def test_a_very_thin_image_resizes_in_bounded_memory():
    """A 1 x 10,000,000 picture (a tenth of max_pixels) in pad mode, in a process of its own (peak RSS).

    Blocks of 16 output rows made its weights 16 x 10 M numbers: the resize took 3.7 GB (the
    ScaleAndTranslate op before it 0.34 GB). Blocks shrink with the row's length: 0.5 GB.
    """
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _THIN_IMAGE_PEAK], env=env, capture_output=True, text=True,
                          check=True, cwd=REPO_ROOT)
    assert int(done.stdout.split()[-1]) * 1024 < 1.2 * 2**30  # ru_maxrss is in KiB.


@functools.cache
def _large_jpegs():
    """orientation -> a 1621x1203 JPEG (upright, and turned by EXIF 6), made once for the nine cases."""
    rng = np.random.default_rng(4)
    y, x = np.mgrid[0:1203, 0:1621]
    photo = np.stack([x * 255 // 1621, y * 255 // 1203, (x + y) % 256], -1) + rng.integers(-4, 5, (1203, 1621, 3))
    return {orientation: imaging.exif_jpeg(np.clip(photo, 0, 255).astype(np.uint8), orientation, quality=92)
            for orientation in (1, 6)}


@pytest.mark.parametrize("mode", MODES)
# Two 2 MP photos decoded twice per case (~5 s each): the everyday lane keeps center_crop, the full suite all three.
@pytest.mark.parametrize("resize_mode", ["center_crop", pytest.param("pad", marks=pytest.mark.slow),
                                         pytest.param("stretch", marks=pytest.mark.slow)])
def test_shrink_on_load_matches_full_decode(resize_mode, mode):
    for orientation, data in _large_jpegs().items():  # Rotated files too: the kept side is measured upright.
        full = PreprocessConfig(image_size=64, resize_mode=resize_mode, jpeg_shrink_on_load=False)
        shrunk = PreprocessConfig(image_size=64, resize_mode=resize_mode, jpeg_shrink_on_load=True)
        a = run_op(preprocess_with(full), data, mode).astype(float)
        b = run_op(preprocess_with(shrunk), data, mode).astype(float)
        psnr = 10 * np.log10(255.0 ** 2 / np.mean((a - b) ** 2))
        assert psnr >= 38.0, (orientation, psnr)


def test_shrink_index_keeps_the_needed_side():
    def index(height, width, mode):
        return int(pp.jpeg_shrink_index(tf.constant([height, width], tf.int64), 224, mode))
    assert index(2000, 3000, "center_crop") == 3  # 2000 / 8 = 250 >= 224.
    assert index(1000, 3000, "center_crop") == 2  # 1000 / 4 = 250; / 8 = 125 is too small.
    assert index(1000, 3000, "pad") == 3          # Pad keeps the longer side: 3000 / 8 = 375.
    assert index(300, 400, "stretch") == 0


def test_real_photos_decode_upright(sample_photos):
    for path, _ in sample_photos:
        with open(path, "rb") as f:
            data = f.read()
        decoded = pp.decode_image(data).numpy()
        reference = np.asarray(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))
        assert decoded.shape == reference.shape, path
        assert np.abs(decoded.astype(int) - reference).mean() < 2.0, path


@pytest.mark.parametrize("mode", MODES)
def test_decode_failures_are_told_apart_truncated_from_corrupt(mode):
    jpeg = imaging.encode(imaging.quadrants(120, 160), "JPEG", quality=90)
    png = imaging.encode(imaging.quadrants(120, 160), "PNG")
    cases = {
        "truncated jpeg": (jpeg[: len(jpeg) // 2], failures.TRUNCATED),
        "truncated png": (png[: len(png) // 2], failures.TRUNCATED),
        "corrupt png": (png[:60] + b"x" * 40 + png[100:], failures.CORRUPT),
    }
    for name, (data, reason) in cases.items():
        with pytest.raises(tf.errors.InvalidArgumentError) as caught:
            run_op(pp.decode_image, data, mode)
        failure = failures.describe_decode_failure(data, caught.value)
        assert failure.reason == reason, name
        detail = failure.detail
        assert detail.startswith(name.split()[1].upper()) and "function_node" not in detail, detail
        assert "[Op:" not in detail and "Traceback" not in detail and "[[" not in detail, detail


@pytest.mark.parametrize("height,width", [(224, 224), (33_026, 1), (1, 70_000)])
def test_pixel_moments_are_exact_int64_sums(height, width):
    """Sums, sums of squares and count, exact at any size (a column of 33,026 squares of 255 overflows int32)."""
    from tf_serving_input.normalization import pixel_moments

    image = np.random.default_rng(height).integers(200, 256, (height, width, 3), dtype=np.uint8)
    pixels = image.reshape(-1, 3).astype(np.int64)
    expected = [*pixels.sum(0), *(pixels * pixels).sum(0), height * width]
    assert pixel_moments(tf.constant(image)).numpy().tolist() == expected


def _scan_cut_short_jpegs():
    """name -> JPEG bytes whose scan ends early: libjpeg decodes each with a grey rest, and only a warning."""
    photo = imaging.photo_like(np.random.default_rng(5), 96, 128)
    baseline = imaging.encode(photo, "JPEG", quality=90)
    progressive = imaging.encode(photo, "JPEG", quality=90, progressive=True)
    first_scan, second_scan = imaging.scan_starts(progressive)[:2]
    restarts = imaging.encode(photo, "JPEG", quality=90, restart_marker_blocks=2)
    after_marker = max(restarts.rfind(bytes([0xFF, marker]), 0, len(restarts) // 2) for marker in range(0xD0, 0xD8))
    gray = imaging.encode(photo[..., 0], "JPEG", quality=90)
    full_chroma = imaging.encode(photo, "JPEG", quality=90, subsampling=0)
    turned = imaging.exif_jpeg(photo, 6, quality=90)
    small = imaging.encode(photo[:32, :32], "JPEG", quality=90)
    return {
        "baseline cut at half": imaging.cut_jpeg(baseline, len(baseline) // 2),
        "progressive cut in its first scan": imaging.cut_jpeg(progressive, (first_scan + second_scan) // 2),
        "restart markers, cut at half": imaging.cut_jpeg(restarts, len(restarts) // 2),
        "restart markers, cut just after one": imaging.cut_jpeg(restarts, after_marker + 2),
        "grayscale cut at half": imaging.cut_jpeg(gray, len(gray) // 2),
        "4:4:4 cut at 90%": imaging.cut_jpeg(full_chroma, len(full_chroma) * 9 // 10),
        "EXIF-turned cut at half": imaging.cut_jpeg(turned, len(turned) // 2),
        "header claiming 5000x5000": imaging.jpeg_claiming_size(small, 5000, 5000),
        "header claiming 12000x8000": imaging.jpeg_claiming_size(small, 8000, 12000),
        # A progressive decode holds every coefficient whatever the scale: 2000x3000 keeps it small.
        "progressive, header claiming 3000x2000": imaging.jpeg_claiming_size(
            imaging.encode(photo[:32, :32], "JPEG", quality=90, progressive=True), 2000, 3000),
    }


SCAN_CUT_SHORT = _scan_cut_short_jpegs()
# test_resize_modes' config (traced once for both): 96x128 photos shrink on load to 1/4, the large claims to 1/8.
SHRINKING = PreprocessConfig(image_size=20, resize_mode="center_crop")


def _everyday_or_slow(names, everyday, in_tf_data):
    """(name, mode) parameters: every case eagerly and in a tf.function (those not in `everyday` with the
    slow tests), and the cases in `in_tf_data` inside tf.data too (with the slow tests, as MODES says).
    Graph mode, which tf.data adds over eager, is what the tf.function mode runs. (A dataset made per case
    traced the whole preprocessing graph anew each time, 5-15 s a case on a busy 2-core machine, until
    run_op traced the tf.data mode once per function too.)"""
    params = []
    for name in sorted(names):
        for mode in ("eager", "tf_data", "tf_function"):
            if mode == "tf_data":
                if name not in in_tf_data:
                    continue
                marks = [pytest.mark.slow]
            elif name in everyday:
                marks = []
            else:
                marks = [pytest.mark.slow]
            params.append(pytest.param(name, mode, marks=marks, id=f"{name}-{mode}"))
    return params


@pytest.mark.parametrize("name, mode", _everyday_or_slow(SCAN_CUT_SHORT, {
    "baseline cut at half", "progressive cut in its first scan", "restart markers, cut just after one",
    "header claiming 12000x8000"}, in_tf_data={"baseline cut at half", "header claiming 12000x8000"}))
def test_a_jpeg_whose_scan_ends_early_is_refused_as_truncated_not_decoded_grey(name, mode):
    data = SCAN_CUT_SHORT[name]
    # The premise: the plain decode op accepts the bytes and fills the rest with grey.
    assert (tf.io.decode_jpeg(data, channels=3, ratio=8)[-1, -1].numpy() == 128).all()
    large = "claiming" in name  # Decoded shrunk on load only (a full decode would be 75-288 MB of grey).
    functions = [preprocess_with(SHRINKING)] + ([] if large else [pp.decode_image])
    for fn in functions:
        with pytest.raises(tf.errors.InvalidArgumentError) as caught:
            run_op(fn, data, mode)
        # The job's decode-failure path and the serving path name it alike.
        for failure in (failures.describe_decode_failure(data, caught.value),
                        failures.from_serving_error(data, caught.value)):
            assert failure.reason == failures.TRUNCATED, (name, failure)
            assert failure.detail.startswith("JPEG scan data ends before the image does"), (name, failure)


def _grey_but_whole_jpegs():
    """name -> whole JPEGs whose last pixels are exactly grey (128, 128, 128): they must decode as they are."""
    banded = imaging.photo_like(np.random.default_rng(6), 96, 128)
    banded[64:] = 128
    return {
        "a 128 band at the bottom": imaging.encode(banded, "JPEG", quality=90),
        "progressive, a 128 band": imaging.encode(banded, "JPEG", quality=90, progressive=True),
        "restart markers, a 128 band": imaging.encode(banded, "JPEG", quality=90, restart_marker_blocks=2),
        "4:4:4, a 128 band": imaging.encode(banded, "JPEG", quality=90, subsampling=0),
        "grayscale, a 128 band": imaging.encode(banded[..., 0], "JPEG", quality=90),
        "EXIF-turned, a 128 band": imaging.exif_jpeg(banded, 6, quality=90),
        "one grey pixel": imaging.encode(imaging.solid(128, 1, 1), "JPEG"),
        "flat grey 16x16": imaging.encode(imaging.solid(128, 16, 16), "JPEG"),
        "flat grey 17x9, progressive": imaging.encode(imaging.solid(128, 17, 9), "JPEG", progressive=True),
        "flat grey 8x8 grayscale": imaging.encode(imaging.solid(128, 8, 8)[..., 0], "JPEG"),
    }


GREY_BUT_WHOLE = _grey_but_whole_jpegs()


@pytest.mark.parametrize("name, mode", _everyday_or_slow(GREY_BUT_WHOLE, {
    "a 128 band at the bottom", "progressive, a 128 band", "one grey pixel"}, in_tf_data={"a 128 band at the bottom"}))
def test_a_whole_jpeg_with_exact_grey_is_decoded_as_it_is(name, mode):
    data = GREY_BUT_WHOLE[name]
    stored = tf.io.decode_jpeg(data, channels=3).numpy()
    assert (stored[-1, -1] == 128).all()  # The check looks at these: it must let them through.
    decoded = run_op(pp.decode_image, data, mode)
    if "EXIF" not in name:
        assert decoded.tobytes() == stored.tobytes(), name
    assert run_op(preprocess_with(SHRINKING), data, mode).shape == (20, 20, 3)
