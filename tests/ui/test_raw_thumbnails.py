"""Thumbnails of a raw run come from the stored pixels as they are, without TensorFlow; others through CODECS."""

import io
import subprocess
import sys

import numpy as np
from PIL import Image

from beam_pipeline.common import image_index
from beam_pipeline.ui.record_index import RecordIndex
from tf_serving_input.layout import OutputLayout


def index_of(out, tmp_path):
    layout = OutputLayout(str(out))
    return RecordIndex(layout, layout.load_manifest(), cache_dir=str(tmp_path / "cache"))


def test_a_raw_thumbnail_is_the_codecs_pixels(tiny_raw_job, tmp_path):
    from tf_serving_input.codecs import parse_record

    index = index_of(tiny_raw_job, tmp_path)
    keys = index.images.column("key").to_pylist()
    assert keys
    for key in keys:
        thumbnail = np.asarray(Image.open(io.BytesIO(index.thumbnail(key))))
        expected, _ = parse_record(index.record(key), index.config)
        assert (thumbnail == expected.numpy()).all(), key


def test_raw_pixels_only_for_raw_records(tiny_job, tiny_raw_job, tmp_path):
    jpeg = index_of(tiny_job[0], tmp_path / "jpeg")
    raw = index_of(tiny_raw_job, tmp_path / "raw")
    jpeg_key, raw_key = jpeg.images.column("key")[0].as_py(), raw.images.column("key")[0].as_py()
    assert image_index.raw_pixels(jpeg.record(jpeg_key)) is None
    assert len(image_index.raw_pixels(raw.record(raw_key))) == 16 * 16 * 3


def test_a_raw_run_s_thumbnails_never_import_tensorflow(tiny_raw_job, tmp_path):
    script = f"""
import sys
from tf_serving_input.layout import OutputLayout
from beam_pipeline.ui.record_index import RecordIndex
layout = OutputLayout({str(tiny_raw_job)!r})
index = RecordIndex(layout, layout.load_manifest(), cache_dir={str(tmp_path / "cache")!r})
for key in index.images.column("key").to_pylist():
    assert index.thumbnail(key).startswith(b"\\x89PNG")
assert "tensorflow" not in sys.modules, "TensorFlow was imported"
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
