"""Rows -> records without Beam: good and bad rows, their reason codes, order, and batching."""

import os

import numpy as np
import pytest
import tensorflow as tf

import imaging
from beam_pipeline.inputs import rows as source
from beam_pipeline.preprocess.row_preprocessor import RowPreprocessor, Written, read_image_bytes
from tf_serving_input import failures, features
from tf_serving_input.codecs import CODECS, parse_record
from tf_serving_input.features import PreprocessConfig
from tf_serving_input.normalization import pixel_moments
from tf_serving_input.preprocessing import preprocess_image


def make_rows(tmp_path, files):
    """files: list of (name, bytes or None for 'do not create', label) -> Rows in CSV order."""
    rows = []
    for index, (name, data, label) in enumerate(files):
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        rows.append(source.Row(index=index, line=index + 2, source=name, path=str(path) if name else "",
                               label=label, split="train", key=source.row_key(index, name)))
    return rows


GOOD_JPEG = imaging.encode(imaging.quadrants(60, 90), "JPEG", quality=95)
EXPECTED_FAILURES = {
    "missing.jpg": failures.FILE_NOT_FOUND,
    "empty.jpg": failures.EMPTY_FILE,
    "truncated.jpg": failures.TRUNCATED,
    "page.jpg": failures.NOT_AN_IMAGE,
    "huge.png": failures.TOO_MANY_PIXELS,
    "scan.tif": failures.UNSUPPORTED_FORMAT,
    "folder": failures.IS_A_DIRECTORY,
    "": failures.FILE_NOT_FOUND,
    "big.bmp": failures.TOO_LARGE_FILE,
    "cut, end marker put back.jpg": failures.TRUNCATED,
    "claims 5000x5000.jpg": failures.TRUNCATED,
}


def hostile_rows(tmp_path, sample_photos):
    (tmp_path / "folder").mkdir()
    files = [
        ("good.jpg", GOOD_JPEG, "a"),
        ("missing.jpg", None, "a"),
        ("png named.jpg", imaging.encode(imaging.quadrants(), "PNG"), "b"),
        ("empty.jpg", b"", "a"),
        ("truncated.jpg", GOOD_JPEG[: len(GOOD_JPEG) // 2], "a"),
        ("page.jpg", b"<html><body>404</body></html>", "b"),
        ("huge.png", imaging.png_claiming_size(60000, 60000), "b"),
        ("scan.tif", imaging.encode(imaging.quadrants(), "TIFF"), "b"),
        ("folder", None, "b"),
        ("", None, "b"),
        ("big.bmp", imaging.encode(np.zeros((200, 200, 3), np.uint8), "BMP"), "b"),
        ("unlabeled.webp", imaging.encode(imaging.quadrants(), "WEBP"), ""),
        # libjpeg decodes these two with a grey rest (only a warning); a whole image with grey there is kept.
        ("cut, end marker put back.jpg", imaging.cut_jpeg(GOOD_JPEG, len(GOOD_JPEG) // 2), "a"),
        ("claims 5000x5000.jpg", imaging.jpeg_claiming_size(GOOD_JPEG, 5000, 5000), "a"),
        ("grey band.jpg", imaging.encode(np.vstack([imaging.quadrants(40, 90), imaging.solid(128, 20, 90)]), "JPEG"),
         "b"),
    ]
    with open(sample_photos[0][0], "rb") as f:
        files.append(("photo.jpg", f.read(), sample_photos[0][1]))
    return make_rows(tmp_path, files)


# Rows go through TensorFlow several per call: a failed image in a call must not take its
# neighbours with it, nor reorder anything.
@pytest.mark.parametrize("rows_per_call", [1, 3, 8])
def test_good_and_bad_rows_in_order_with_reason_codes(tmp_path, sample_photos, rows_per_call):
    rows = hostile_rows(tmp_path, sample_photos)
    config = PreprocessConfig(image_size=32, image_format="jpeg")
    outcomes = list(RowPreprocessor(config, max_file_bytes=100_000, rows_per_call=rows_per_call)(rows))

    assert [row for row, _ in outcomes] == rows  # Every row, in CSV order.
    failed = {row.source: outcome for row, outcome in outcomes if isinstance(outcome, failures.RowFailure)}
    assert {source: failure.reason for source, failure in failed.items()} == EXPECTED_FAILURES
    assert failed["scan.tif"].detail.startswith("TIFF is not supported")
    assert failed["huge.png"].detail == "60000x60000 is more than max_pixels=100000000"
    assert failed["truncated.jpg"].detail.startswith("JPEG data could not be decoded")
    assert failed["cut, end marker put back.jpg"].detail.startswith("JPEG scan data ends before the image does")
    for row, outcome in outcomes:
        if isinstance(outcome, Written):
            image, parsed = parse_record(outcome.record, config, **{
                key: tf.io.FixedLenFeature([], tf.string) for key in (features.IMAGE_KEY, features.LABEL_TEXT,
                                                                     features.IMAGE_SOURCE)})
            assert parsed[features.IMAGE_KEY].numpy().decode() == row.key
            assert parsed[features.LABEL_TEXT].numpy().decode() == row.label
            assert parsed[features.IMAGE_SOURCE].numpy().decode() == row.source
            # Moments of the stored image before encoding: what the serving path computes.
            expected = preprocess_image(open(row.path, "rb").read(), config)
            assert outcome.moments.tolist() == pixel_moments(expected).numpy().tolist()
            assert np.abs(image.numpy().astype(int) - expected.numpy()).mean() < 3


def test_record_bytes_do_not_depend_on_batching(tmp_path, sample_photos):
    rows = hostile_rows(tmp_path, sample_photos)
    config = PreprocessConfig(image_size=24)
    one, eight = (list(RowPreprocessor(config, max_file_bytes=100_000, rows_per_call=n)(rows)) for n in (1, 8))
    assert [outcome for _, outcome in one if isinstance(outcome, failures.RowFailure)] == \
           [outcome for _, outcome in eight if isinstance(outcome, failures.RowFailure)]
    assert [(o.record, o.moments.tolist()) for _, o in one if isinstance(o, Written)] == \
           [(o.record, o.moments.tolist()) for _, o in eight if isinstance(o, Written)]


@pytest.mark.parametrize("size,resize_mode", [(8, "stretch"), (8, "pad"), (7, "center_crop"), (224, "center_crop")])
def test_stored_pixels_are_exactly_what_preprocess_image_gives_eagerly(tmp_path, size, resize_mode):
    """Train/serve parity to the byte: the job's traced, batched call and an eager call (serving, tests).

    They run the resize's matmuls with different kernels (oneDNN traced, Eigen eagerly) and threads;
    only its fixed point (every sum exact) made them agree: float weights differed here in 5 values.
    """
    rng = np.random.default_rng(7)
    files = [(f"{i}.png", imaging.encode(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8), "PNG"), "a")
             for i in range(8)]
    files.append(("photo.jpg", imaging.encode(rng.integers(0, 256, (375, 500, 3), dtype=np.uint8), "JPEG"), "a"))
    rows = make_rows(tmp_path, files)
    config = PreprocessConfig(image_size=size, resize_mode=resize_mode)
    for row, outcome in RowPreprocessor(config)(rows):
        image, _ = parse_record(outcome.record, config)
        expected = preprocess_image(open(row.path, "rb").read(), config).numpy()
        assert image.numpy().tobytes() == expected.tobytes(), row.source


@pytest.mark.parametrize("image_format", sorted(CODECS))
def test_each_storage_format_goes_under_its_key(tmp_path, image_format):
    rows = make_rows(tmp_path, [("a.png", imaging.encode(imaging.quadrants(), "PNG"), "x")])
    config = PreprocessConfig(image_size=16, image_format=image_format)
    (_, outcome), = RowPreprocessor(config)(rows)
    feature = tf.train.Example.FromString(outcome.record).features.feature
    codec = CODECS[image_format]
    assert set(feature) == {codec.feature_key, features.IMAGE_FORMAT, features.IMAGE_HEIGHT, features.IMAGE_WIDTH,
                            features.IMAGE_CHANNELS, features.IMAGE_SOURCE, features.IMAGE_KEY, features.LABEL_TEXT}
    assert feature[features.IMAGE_FORMAT].bytes_list.value == [image_format.encode()]


def test_read_image_bytes_reasons(tmp_path):
    def reason(path, **kwargs):
        with pytest.raises(failures.RowFailure) as caught:
            read_image_bytes(path, **kwargs)
        return caught.value.reason

    assert reason(str(tmp_path / "nope.jpg")) == failures.FILE_NOT_FOUND
    assert reason(str(tmp_path)) == failures.IS_A_DIRECTORY
    assert reason("") == failures.FILE_NOT_FOUND
    (tmp_path / "a.bin").write_bytes(b"12345")
    assert read_image_bytes(str(tmp_path / "a.bin"), max_bytes=5) == b"12345"
    assert reason(str(tmp_path / "a.bin"), max_bytes=4) == failures.TOO_LARGE_FILE
    (tmp_path / "zero.bin").write_bytes(b"")
    assert reason(str(tmp_path / "zero.bin")) == failures.EMPTY_FILE


def test_a_fifo_or_device_fails_its_row_instead_of_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe.jpg")  # Opening it for reading would wait for a writer forever.
    for path in (str(tmp_path / "pipe.jpg"), "/dev/zero"):
        with pytest.raises(failures.RowFailure, match="not a regular file") as caught:
            read_image_bytes(path)
        assert caught.value.reason == failures.READ_ERROR
