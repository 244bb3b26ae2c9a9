"""Per-image cost of the crop+resize step with each TensorFlow resize op, on one thread, against Pillow.

    .venv/bin/python scripts/resize_filters.py [IMAGE]     # default: a sample_data photo
    .venv/bin/python scripts/resize_filters.py --psnr      # the job's 224 px output against Pillow's

Issue 39: the project's resize now shrinks by less than 2x with the area filter (`ResizeArea`); `--psnr` compares
its output on every sample_data photo of at least 224 px to Pillow's BOX and BILINEAR resizes of the
same crop (measured: median 36.5 and 44.8 dB; the triangle filter before: 34.4 and 45.3 dB).

Issue 24, item 3: where the job lost to Pillow on light JPEGs. The photo is scaled to 500x375 (the
light set's size), center-cropped to 375x375 and resized to 224x224. Prints each op's median time
(7 x 50 calls) and how far its output is from the `ScaleAndTranslate` op (triangle, antialias), which
the project's resize replaced with fixed-point banded matmuls of the same filter (the first line).
"""

import os
import statistics
import sys
import time

os.environ.update(TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from PIL import Image  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tf_serving_input.preprocessing import resize_image  # noqa: E402

SIZE = 224
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PHOTO = os.path.join(REPO, "sample_data", "images", "astronaut", "astronaut_003.jpg")


def to_uint8(images):
    return tf.cast(tf.clip_by_value(tf.round(images[0]), 0.0, 255.0), tf.uint8)


def scale_and_translate(antialias):
    @tf.function
    def resize(crop):
        scale = tf.constant([SIZE / crop.shape[0], SIZE / crop.shape[1]])
        return to_uint8(tf.raw_ops.ScaleAndTranslate(
            images=tf.cast(crop[None], tf.float32), size=[SIZE, SIZE], scale=scale,
            translation=tf.zeros([2]), kernel_type="triangle", antialias=antialias))
    return resize


def image_resize(method):
    @tf.function
    def resize(crop):
        return to_uint8(tf.image.resize(crop[None], [SIZE, SIZE], method=method, antialias=False))
    return resize


def main(photo):
    image = np.asarray(Image.open(photo).convert("RGB").resize((500, 375), Image.LANCZOS))
    crop = image[:, 62:437]
    tensor = tf.constant(crop)
    ops = {
        "the project's resize (area filter when shrinking)": tf.function(lambda crop: resize_image(crop, SIZE)),
        "ScaleAndTranslate triangle+antialias (before)": scale_and_translate(True),
        "ScaleAndTranslate triangle, no antialias": scale_and_translate(False),
        "tf.image.resize area (AreaResize)": image_resize("area"),
        "tf.image.resize bilinear (ResizeBilinear)": image_resize("bilinear"),
    }
    runs = {name: (lambda op=op: op(tensor).numpy()) for name, op in ops.items()}
    for name in ("BILINEAR", "BOX"):
        runs[f"Pillow {name}"] = lambda name=name: np.asarray(Image.fromarray(crop).resize(
            (SIZE, SIZE), getattr(Image.Resampling, name)))
    for run in runs.values():
        run()
    times = {name: [] for name in runs}
    for _ in range(7):  # Interleaved: each op once per round.
        for name, run in runs.items():
            started = time.perf_counter()
            for _ in range(50):
                run()
            times[name].append((time.perf_counter() - started) / 50 * 1000)
    op = runs["ScaleAndTranslate triangle+antialias (before)"]().astype(float)
    for name, run in runs.items():
        difference = np.abs(run().astype(float) - op)
        print(f"{name}: {statistics.median(times[name]):.2f} ms per image (min {min(times[name]):.2f}); "
              f"vs the op max {difference.max():.0f}, mean {difference.mean():.3f} levels")


def psnr_against_pillow():
    """Median and minimum PSNR of the job's preprocessing against Pillow's BOX and BILINEAR on sample_data."""
    import glob

    from PIL import ImageOps

    from tf_serving_input.features import PreprocessConfig
    from tf_serving_input.preprocessing import preprocess_image

    config = PreprocessConfig(image_size=SIZE, jpeg_shrink_on_load=False)
    preprocess = tf.function(lambda data: preprocess_image(data, config),
                             input_signature=[tf.TensorSpec([], tf.string)])
    psnr = {"BOX": [], "BILINEAR": []}
    for path in sorted(glob.glob(os.path.join(REPO, "sample_data", "images", "*", "*"))):
        image = ImageOps.exif_transpose(Image.open(path)).convert("RGB")
        side = min(image.size)
        if side < SIZE:
            continue
        left, top = (int(np.round((length - side) / 2)) for length in image.size)  # The job's whole-pixel window.
        with open(path, "rb") as f:
            ours = preprocess(f.read()).numpy().astype(float)
        for name, values in psnr.items():
            reference = np.asarray(image.crop((left, top, left + side, top + side)).resize(
                (SIZE, SIZE), getattr(Image.Resampling, name)), float)
            values.append(10 * np.log10(255.0 ** 2 / max(np.mean((ours - reference) ** 2), 1e-9)))
    for name, values in psnr.items():
        print(f"job vs Pillow {name}: median {np.median(values):.1f} dB, min {min(values):.1f} ({len(values)} photos)")


if __name__ == "__main__":
    if sys.argv[1:] == ["--psnr"]:
        psnr_against_pillow()
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_PHOTO)
