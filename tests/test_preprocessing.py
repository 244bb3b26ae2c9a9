"""Every preprocessing op, eagerly, inside tf.data and inside a tf.function (they can differ)."""

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageOps

import imaging
from tf_serving_input import preprocessing as pp
from tf_serving_input.features import PreprocessConfig

MODES = ["eager", "tf_data", "tf_function"]


def run_op(fn, data, mode):
    """Runs fn(data) eagerly, as a tf.data map, or in a tf.function with a scalar string input."""
    if mode == "eager":
        return fn(tf.constant(data)).numpy()
    if mode == "tf_data":
        dataset = tf.data.Dataset.from_tensors(tf.constant(data)).map(fn)
        return next(iter(dataset)).numpy()
    traced = tf.function(fn, input_signature=[tf.TensorSpec([], tf.string)])
    return traced(tf.constant(data)).numpy()


def reason_of(fn, data, mode):
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        run_op(fn, data, mode)
    return pp.error_reason(caught.value)


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
        def dims(d, index=format_index):
            return pp.header_dimensions(d, tf.constant(index))
        assert run_op(dims, data, mode).tolist() == [48, 64], name


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


@pytest.mark.parametrize("mode", MODES)
def test_refusals_carry_readable_reasons(mode):
    assert reason_of(pp.decode_image, b"<html>not an image</html>", mode).startswith("not an image")
    assert reason_of(pp.decode_image, b"", mode).startswith("not an image")
    reason = reason_of(pp.decode_image, imaging.png_claiming_size(60000, 60000), mode)
    assert reason.startswith("image too large: 60000x60000")


def test_max_pixels_is_checked_before_decoding():
    data = imaging.encode(BASE, "PNG")
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        pp.decode_image(data, max_pixels=48 * 64 - 1)
    assert pp.error_reason(caught.value).startswith("image too large: 64x48")
    assert pp.decode_image(data, max_pixels=48 * 64).shape == (48, 64, 3)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("resize_mode", ["center_crop", "pad", "stretch"])
def test_resize_modes(resize_mode, mode):
    wide = np.zeros((40, 80, 3), np.uint8)
    wide[:, :20] = 255  # A white band on the left quarter only.
    data = imaging.encode(wide, "PNG")
    config = PreprocessConfig(image_size=20, resize_mode=resize_mode)
    out = run_op(lambda d: pp.preprocess_image(d, config), data, mode)
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
# reference lands exactly where the exact crop does.
@pytest.mark.parametrize("height,width", [(90, 30), (32, 80), (20, 60), (64, 64)])
def test_center_crop_is_resize_shorter_side_then_crop_center(height, width):
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


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("resize_mode", ["center_crop", "pad", "stretch"])
def test_shrink_on_load_matches_full_decode(resize_mode, mode):
    rng = np.random.default_rng(4)
    y, x = np.mgrid[0:1203, 0:1621]
    photo = np.stack([x * 255 // 1621, y * 255 // 1203, (x + y) % 256], -1) + rng.integers(-4, 5, (1203, 1621, 3))
    for orientation in (1, 6):  # Rotated files too: the kept side is measured upright.
        data = imaging.exif_jpeg(np.clip(photo, 0, 255).astype(np.uint8), orientation, quality=92)
        full = PreprocessConfig(image_size=64, resize_mode=resize_mode)
        shrunk = PreprocessConfig(image_size=64, resize_mode=resize_mode, jpeg_shrink_on_load=True)
        a = run_op(lambda d: pp.preprocess_image(d, full), data, mode).astype(float)
        b = run_op(lambda d: pp.preprocess_image(d, shrunk), data, mode).astype(float)
        psnr = 10 * np.log10(255.0 ** 2 / np.mean((a - b) ** 2))
        assert psnr >= 38.0, (orientation, psnr)


def test_shrink_index_keeps_the_needed_side():
    def index(height, width, mode):
        return int(pp.jpeg_shrink_index(tf.constant([height, width], tf.int64), 224, mode))
    assert index(2000, 3000, "center_crop") == 3  # 2000 / 8 = 250 >= 224.
    assert index(1000, 3000, "center_crop") == 2  # 1000 / 4 = 250; / 8 = 125 is too small.
    assert index(1000, 3000, "pad") == 3          # Pad keeps the longer side: 3000 / 8 = 375.
    assert index(300, 400, "stretch") == 0


@pytest.mark.parametrize("image_format,tolerance", [("png", 0), ("jpeg", 6), ("raw", 0)])
def test_encode_and_decode_stored_round_trip(image_format, tolerance):
    config = PreprocessConfig(image_size=32, image_format=image_format)
    image = pp.preprocess_image(imaging.encode(BASE, "PNG"), config)
    stored = pp.stored_bytes(pp.encode_image(image, config))
    assert isinstance(stored, bytes)
    if image_format == "raw":
        assert len(stored) == 32 * 32 * 3
    else:
        assert pp.sniff_format(stored).numpy() == (0 if image_format == "jpeg" else 1)
    restored = pp.decode_stored_image(stored, 32, image_format).numpy()
    assert np.abs(restored.astype(int) - image.numpy()).mean() <= tolerance


def test_raw_record_of_the_wrong_length_is_refused():
    with pytest.raises(tf.errors.InvalidArgumentError):
        pp.decode_stored_image(b"\x00" * (32 * 32 * 3 - 1), 32, "raw")


def test_real_photos_decode_upright(sample_photos):
    for path, _ in sample_photos:
        with open(path, "rb") as f:
            data = f.read()
        decoded = pp.decode_image(data).numpy()
        reference = np.asarray(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))
        assert decoded.shape == reference.shape, path
        assert np.abs(decoded.astype(int) - reference).mean() < 2.0, path


def test_error_reason_strips_tensorflow_noise():
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        tf.io.decode_png(b"\x89PNG\r\n\x1a\n garbage")
    reason = pp.error_reason(caught.value)
    assert "function_node" not in reason and "[Op:" not in reason and reason
