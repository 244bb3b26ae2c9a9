"""A large image's resize builds its band of rows a block at a time: the same bytes, a few bytes a pixel."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import imaging
from tf_serving_input import preprocessing


@pytest.mark.parametrize("mode", ["center_crop", "pad", "stretch"])
def test_the_band_made_a_block_at_a_time_gives_the_same_bytes(monkeypatch, mode):
    rng = np.random.default_rng(3)
    image = rng.integers(0, 256, size=(301, 517, 3), dtype=np.uint8)
    at_once = preprocessing.resize_image(image, 24, mode).numpy()
    monkeypatch.setattr(preprocessing, "_BAND_BYTES_AT_ONCE", 0)  # Every band a block at a time.
    assert np.array_equal(preprocessing.resize_image(image, 24, mode).numpy(), at_once)


@pytest.mark.slow
def test_a_large_png_costs_a_worker_a_few_bytes_a_pixel(tmp_path):
    # Issue 55: a 9999x9999 PNG took 2.87 GiB in a worker (about 20 bytes a pixel over a warm process).
    # In a fresh interpreter: the peak RSS (a high-water mark) of this process says nothing.
    png = tmp_path / "large.png"
    y, x = np.mgrid[0:3000, 0:4000]
    smooth = np.stack([x * 255 // 4000, y * 255 // 3000, (x + y) * 127 // 7000], -1).astype(np.uint8)
    png.write_bytes(imaging.encode(smooth, "PNG"))  # Small as a file: what is measured is the decode's.
    script = textwrap.dedent(f"""
        import tensorflow as tf
        from beam_pipeline.preprocess.row_preprocessor import RowPreprocessor
        from tf_serving_input.features import PreprocessConfig
        call = RowPreprocessor(PreprocessConfig(image_size=224))._preprocess_datas  # The job's TensorFlow call.
        call([tf.io.encode_png(tf.zeros([64, 64, 3], tf.uint8)).numpy()])  # Warm: traced, pools made.
        data = open({str(png)!r}, "rb").read()
        def kib(field):
            return int(next(line for line in open("/proc/self/status") if line.startswith(field)).split()[1])
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # Resets the peak (VmHWM) to the RSS now: TensorFlow's import peaked higher.
        before = kib("VmRSS:")
        assert isinstance(call([data])[0], tuple)
        print((kib("VmHWM:") - before) * 1024)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    grown = int(result.stdout.split()[-1])
    # The decoded image, its square crop and a block of the band: ~6 here; the whole band made ~20.
    assert grown < 10 * 3000 * 4000, f"{grown / 3000 / 4000:.1f} bytes a pixel"
