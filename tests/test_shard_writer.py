"""The shard DoFn on good and bad inputs, in a real Beam pipeline."""

import json
import os

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

import imaging
from beam_pipeline import shard_writer, source
from beam_pipeline.shard_writer import STATS_TAG, WriteShardFn, read_image_bytes
from tf_serving_input import features
from tf_serving_input.features import PreprocessConfig
from tf_serving_input.preprocessing import decode_stored_image


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


def parse_shard(path, image_size):
    examples = []
    for record in tf.data.TFRecordDataset(path):
        example = tf.train.Example.FromString(record.numpy())
        feature = example.features.feature
        examples.append({
            "key": feature[features.IMAGE_KEY].bytes_list.value[0].decode(),
            "source": feature[features.IMAGE_SOURCE].bytes_list.value[0].decode(),
            "label": feature[features.LABEL_TEXT].bytes_list.value[0].decode(),
            "format": feature[features.IMAGE_FORMAT].bytes_list.value[0].decode(),
            "size": (feature[features.IMAGE_HEIGHT].int64_list.value[0],
                     feature[features.IMAGE_WIDTH].int64_list.value[0],
                     feature[features.IMAGE_CHANNELS].int64_list.value[0]),
            "pixels": decode_stored_image(feature[features.IMAGE_ENCODED].bytes_list.value[0], image_size,
                                          feature[features.IMAGE_FORMAT].bytes_list.value[0].decode()).numpy(),
        })
    return examples


def run_writer(tmp_path, rows, config, max_file_bytes=10_000_000):
    out = tmp_path / "out"
    os.makedirs(out / features.DATA_DIR, exist_ok=True)
    os.makedirs(out / features.SHARD_STATUS_DIR, exist_ok=True)
    with TestPipeline(runner=FnApiRunner()) as p:
        results = (p | beam.Create([(("train", 0), rows)])
                   | beam.ParDo(WriteShardFn(str(out), config, {"train": 1}, max_file_bytes))
                   .with_outputs(STATS_TAG, main="status"))
        assert_that(results.status | beam.Map(lambda s: (s["name"], s["rows"], s["records"])),
                    equal_to([("train-00000-of-00001", len(rows), len(rows) - len(EXPECTED_FAILURES))]),
                    label="StatusCounts")
        written = len(rows) - len(EXPECTED_FAILURES)
        # One row with the shard's moment totals, then one row per written image (its label).
        assert_that(results[STATS_TAG] | "StatsRows" >> beam.Map(lambda batch: batch.num_rows)
                    | beam.CombineGlobally(sum),
                    equal_to([1 + written]), label="StatsRowCount")
        assert_that(results[STATS_TAG]
                    | beam.Map(lambda batch: tuple(sorted(batch.schema.names)))
                    | beam.Distinct(),
                    equal_to([("label", "pixel_moments")]), label="StatsSchema")
    with open(out / features.SHARD_STATUS_DIR / "train-00000-of-00001.json") as f:
        status = json.load(f)
    return out, status


EXPECTED_FAILURES = {
    "missing.jpg": "file not found",
    "empty.jpg": "empty file (0 bytes)",
    "truncated.jpg": "truncated JPEG",
    "page.jpg": "not an image (unknown file format)",
    "huge.png": "image too large: 60000x60000 (more than max_pixels=100000000)",
    "folder": "is a directory, not a file",
    "": "empty path",
    "big.bmp": "file too large: more than 100000 bytes",
}


# Rows go through TensorFlow several per call: a failed image in a call must not take its
# neighbours with it, nor reorder anything.
@pytest.mark.parametrize("rows_per_call", [1, 3, 8])
def test_good_and_bad_rows(tmp_path, sample_photos, monkeypatch, rows_per_call):
    monkeypatch.setattr(shard_writer, "ROWS_PER_CALL", rows_per_call)
    good_jpeg = imaging.encode(imaging.quadrants(60, 90), "JPEG", quality=95)
    (tmp_path / "folder").mkdir()
    files = [
        ("good.jpg", good_jpeg, "a"),
        ("missing.jpg", None, "a"),
        ("png named.jpg", imaging.encode(imaging.quadrants(), "PNG"), "b"),
        ("empty.jpg", b"", "a"),
        ("truncated.jpg", good_jpeg[: len(good_jpeg) // 2], "a"),
        ("page.jpg", b"<html><body>404</body></html>", "b"),
        ("huge.png", imaging.png_claiming_size(60000, 60000), "b"),
        ("folder", None, "b"),
        ("", None, "b"),
        ("big.bmp", imaging.encode(np.zeros((200, 200, 3), np.uint8), "BMP"), "b"),
        ("unlabeled.webp", imaging.encode(imaging.quadrants(), "WEBP"), ""),
    ]
    with open(sample_photos[0][0], "rb") as f:
        files.append(("photo.jpg", f.read(), sample_photos[0][1]))
    rows = make_rows(tmp_path, files)
    config = PreprocessConfig(image_size=32, image_format="jpeg")
    out, status = run_writer(tmp_path, rows, config, max_file_bytes=100_000)

    assert {f["source"]: f["error"] for f in status["failed"]} == EXPECTED_FAILURES
    assert [f["line"] for f in status["failed"]] == sorted(f["line"] for f in status["failed"])  # CSV order.
    assert all(f["key"] and f["line"] >= 2 for f in status["failed"])
    assert status["records"] + len(status["failed"]) == status["rows"] == len(rows)

    examples = parse_shard(str(out / features.DATA_DIR / "train-00000-of-00001.tfrecord"), 32)
    good = [r for r in rows if r.source not in EXPECTED_FAILURES]
    assert [e["source"] for e in examples] == [r.source for r in good]  # CSV order within a shard.
    assert [e["key"] for e in examples] == [r.key for r in good]
    assert [e["label"] for e in examples] == [r.label for r in good]
    assert all(e["size"] == (32, 32, 3) and e["format"] == "jpeg" for e in examples)
    assert not any(name.endswith(".incomplete") for name in os.listdir(out / features.DATA_DIR))


def test_read_image_bytes_reasons(tmp_path):
    with pytest.raises(ValueError, match="file not found"):
        read_image_bytes(str(tmp_path / "nope.jpg"))
    with pytest.raises(ValueError, match="is a directory"):
        read_image_bytes(str(tmp_path))
    (tmp_path / "a.bin").write_bytes(b"12345")
    assert read_image_bytes(str(tmp_path / "a.bin"), max_bytes=5) == b"12345"
    with pytest.raises(ValueError, match="file too large"):
        read_image_bytes(str(tmp_path / "a.bin"), max_bytes=4)
