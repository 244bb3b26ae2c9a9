"""Where the time goes: images/s on one core of each stage of the job's per-image work.

Not a ratio: each stage is timed once per image set over up to 200 images, in this process, with
the job's own functions (read, decode, resize/crop, encode, write a framed record, statistics).
"""

import hashlib
import tempfile
import time

from benchmarks.storage import read_file
from benchmarks.targets import STAGES_TABLE

SIZE = 224


def stage_rates(paths, config_values, count):
    """{stage: images/s on one core} over the first `count` paths."""
    import tensorflow as tf

    from beam_pipeline.common.records import frame_record, make_example
    from beam_pipeline.preprocess.analysis import to_record_batch
    from tf_serving_input.codecs import codec_for, to_bytes
    from tf_serving_input.features import PreprocessConfig
    from tf_serving_input.normalization import pixel_moments
    from tf_serving_input.preprocessing import decode_image, resize_image

    config = PreprocessConfig.from_dict(config_values)
    paths = paths[:count]
    shrink = SIZE if config.jpeg_shrink_on_load else None
    codec = codec_for(config)
    decode = tf.function(lambda data: decode_image(data, config.max_pixels, shrink, config.resize_mode),
                         input_signature=[tf.TensorSpec([], tf.string)])
    resize = tf.function(lambda image: resize_image(image, SIZE, config.resize_mode),
                         input_signature=[tf.TensorSpec([None, None, 3], tf.uint8)])
    encode = tf.function(lambda image: codec.encode(image, config),
                         input_signature=[tf.TensorSpec([SIZE, SIZE, 3], tf.uint8)])
    moments = tf.function(pixel_moments, input_signature=[tf.TensorSpec([SIZE, SIZE, 3], tf.uint8)])
    rates = {}

    def timed(name, function, items):
        function(items[0])  # Tracing is not timed.
        started = time.perf_counter()
        outputs = [function(item) for item in items]
        rates[name] = len(items) / (time.perf_counter() - started)
        return outputs

    datas = timed("read", read_file, paths)
    decoded = timed("decode", decode, datas)
    resized = timed("resize/crop", resize, decoded)
    encoded = timed("encode", lambda image: to_bytes(encode(image)), resized)
    with tempfile.TemporaryFile() as out:
        def write(item):
            record = make_example(item, codec, SIZE, "source.jpg", "0123456789abcdef", "label")
            framed = frame_record(record.SerializeToString(deterministic=True))
            hashlib.sha256(framed).digest()
            out.write(framed)

        timed("write", write, encoded)
    moments(resized[0])
    started = time.perf_counter()  # Per-image moments, then the Arrow rows TFT gets.
    to_record_batch([moments(image).numpy() for image in resized], [b"x"] * len(resized))
    rates["statistics"] = len(resized) / (time.perf_counter() - started)
    return rates


def measure(bench, image_sets):
    """The stage table, a column per image set."""
    by_set = {image_set.title: stage_rates(image_set.paths, bench.config_values, min(200, len(image_set.images)))
              for image_set in image_sets}
    bench.results.tables[STAGES_TABLE] = format_table(by_set)
    for title, rates in by_set.items():
        bench.results.say(f"5. [{title}] images/s on one core per stage: " +
                          ", ".join(f"{stage} {rate:.0f}" for stage, rate in rates.items()))


def format_table(by_set):
    """The report's stage table from {image set title: {stage: images/s}}, a column per set."""
    stages = list(next(iter(by_set.values())))
    table = ["| stage | " + " | ".join(by_set) + " |", "|---|" + "---|" * len(by_set)]
    return table + [f"| {stage} | " + " | ".join(f"{rates[stage]:.0f}" for rates in by_set.values()) + " |"
                    for stage in stages]
