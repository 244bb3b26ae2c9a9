"""The job's baselines: bare multiprocessing loops doing the job's per-image work without Beam.

- the same TensorFlow ops as the job (read -> decode -> resize/crop -> encode), one process per core;
- the fastest CPU peer, Pillow: libjpeg-turbo decode (draft mode where the file is >= 2x the target,
  as shrink-on-load), antialiased bilinear resize of the shorter side, center crop, JPEG q90 encode.
Both use a spawned pool warmed up first (TensorFlow import and tracing are not timed).
"""

import io
import multiprocessing
import time

from PIL import Image

from benchmarks.harness import CORES, settle

SIZE = 224
PASSES = 2  # Each loop goes over the set twice: a longer window than one pass, less moment-to-moment noise.
_BARE = {}


def _bare_init(config_values):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from tf_serving_input.codecs import codec_for, to_bytes
    from tf_serving_input.features import PreprocessConfig
    from tf_serving_input.preprocessing import preprocess_image

    config = PreprocessConfig.from_dict(config_values)
    _BARE["bytes"] = to_bytes

    def work(data):
        return codec_for(config).encode(preprocess_image(data, config), config)

    _BARE["fn"] = tf.function(work, input_signature=[tf.TensorSpec([], tf.string)])


def _bare_work(path):
    with open(path, "rb") as f:
        return len(_BARE["bytes"](_BARE["fn"](f.read())))


def _pillow_work(path):
    """The job's per-image work done the fastest CPU way (see the module docstring)."""
    with open(path, "rb") as f:
        image = Image.open(io.BytesIO(f.read()))
        image.draft("RGB", (SIZE, SIZE))
        image = image.convert("RGB")
    scale = SIZE / min(image.size)
    image = image.resize((max(SIZE, round(image.width * scale)), max(SIZE, round(image.height * scale))),
                         Image.Resampling.BILINEAR)
    left, top = (image.width - SIZE) // 2, (image.height - SIZE) // 2
    out = io.BytesIO()
    image.crop((left, top, left + SIZE, top + SIZE)).save(out, "JPEG", quality=90)
    return len(out.getvalue())


def _pool_rate(paths, work, initializer=None, initargs=()):
    context = multiprocessing.get_context("spawn")
    with context.Pool(CORES, initializer=initializer, initargs=initargs) as pool:
        pool.map(work, paths[: CORES * 4], chunksize=1)  # Warm-up: imports and tracing.
        settle()
        items = paths * PASSES
        started = time.perf_counter()
        pool.map(work, items, chunksize=8)
        return len(items) / (time.perf_counter() - started)


def bare_loop_rate(paths, config_values):
    """Images/s of the job's TensorFlow ops in a plain pool, one process (one TF thread) per core."""
    return _pool_rate(paths, _bare_work, _bare_init, (config_values,))


def pillow_loop_rate(paths):
    """Images/s of `_pillow_work` in a plain pool, one process per core."""
    return _pool_rate(paths, _pillow_work)
