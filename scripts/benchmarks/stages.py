"""Where the time goes: milliseconds per image on one core of each part of the job's per-image work.

Not a ratio: each part is timed once per image set over up to 200 images, in this process, with the
job's own functions, in batches of the job's size
(`row_preprocessor.ROWS_PER_CALL`) where the job batches: read the file; inspect (magic bytes, header
size, EXIF orientation); decode; resize/crop; the statistics (exact pixel moments of the batch, in
the same pass: no second decode); encode; the record (tf.train.Example, TFRecord framing with CRCs);
the checksums (the shard's SHA-256 and framing digest); write. The sum is set beside the whole job's
marginal time per image and core (from section 1): what is left is Beam's and the run's own cost.
Pixels never cross a stage boundary: each shard's rows are decoded, written and reduced to 7
integers in one DoFn, so there is no shuffle or serialization of images to time.
"""

import hashlib
import tempfile
import time

from benchmarks.harness import CORES
from benchmarks.targets import STAGES_TABLE

SIZE = 224


def stage_milliseconds(paths, config_values, count):
    """{part: ms per image on one core} over the first `count` paths."""
    import tensorflow as tf

    from beam_pipeline.common.records import example_bytes, frame_record, framing_of
    from beam_pipeline.common.runners import configure_tensorflow_threads
    from beam_pipeline.inputs.rows import read_image_bytes
    from beam_pipeline.preprocess.row_preprocessor import ROWS_PER_CALL
    from tf_serving_input.codecs import codec_for, to_bytes
    from tf_serving_input.features import PreprocessConfig
    from tf_serving_input.normalization import pixel_moments
    from tf_serving_input.preprocessing import decode_checked_image, exif_orientation, inspect_image, resize_image

    configure_tensorflow_threads()  # One thread, as in a worker, unless this process started TensorFlow already.
    config = PreprocessConfig.from_dict(config_values)
    paths = paths[:count]
    shrink = SIZE if config.jpeg_shrink_on_load else None
    codec = codec_for(config)
    scalar, image = tf.TensorSpec([], tf.string), tf.TensorSpec([None, None, 3], tf.uint8)

    inspect = tf.function(lambda batch: tf.map_fn(  # The job's shape: a call per batch, map_fn inside.
        lambda data: inspect_image(data, config.max_pixels)[0] + exif_orientation(data), batch,
        fn_output_signature=tf.TensorSpec([], tf.int32), parallel_iterations=1),
        input_signature=[tf.TensorSpec([None], tf.string)])
    decode = tf.function(lambda data, image_format, height_width: decode_checked_image(
        data, image_format, height_width, shrink, config.resize_mode),
        input_signature=[scalar, tf.TensorSpec([], tf.int32), tf.TensorSpec([2], tf.int64)])
    header = tf.function(lambda data: inspect_image(data, config.max_pixels)[1:], input_signature=[scalar])
    resize = tf.function(lambda picture, box: resize_image(picture, SIZE, config.resize_mode, box),
                         input_signature=[image, tf.TensorSpec([4], tf.float32)])
    moments = tf.function(pixel_moments, input_signature=[tf.TensorSpec([None, SIZE, SIZE, 3], tf.uint8)])
    encode = tf.function(lambda image: codec.encode(image, config),
                         input_signature=[tf.TensorSpec([SIZE, SIZE, 3], tf.uint8)])
    times = {}

    def timed(name, function, items):
        function(items[0])  # Tracing is not timed.
        started = time.perf_counter()
        outputs = [function(item) for item in items]
        times[name] = (time.perf_counter() - started) / len(paths) * 1000
        return outputs

    def batches(items):
        return [items[start:start + ROWS_PER_CALL] for start in range(0, len(items), ROWS_PER_CALL)]

    datas = timed("read", read_image_bytes, paths)  # The job's own read.
    timed("inspect (format, size, EXIF)", inspect, [tf.constant(batch) for batch in batches(datas)])
    # Decode, resize and encode one image per call: what a call costs on top is taken out (an empty call's time).
    empty = tf.function(lambda data: tf.strings.length(data), input_signature=[scalar])
    timed("call overhead", empty, datas)
    decoded = timed("decode", lambda item: decode(item[0], *item[1]), [(data, header(data)) for data in datas])
    resized = timed("resize/crop", lambda item: resize(*item), decoded)
    stacked = [tf.stack(batch) for batch in batches(resized)]
    timed("statistics (pixel moments)", moments, stacked)
    encoded = timed("encode", lambda image: to_bytes(encode(image)), resized)
    for name in ("decode", "resize/crop", "encode"):
        times[name] -= times["call overhead"]
    del times["call overhead"]
    def record(stored):
        return frame_record(example_bytes(stored, codec, SIZE, "source.jpg", "0123456789abcdef", "label"))

    records = timed("record (Example, framing, CRCs)", record, encoded)
    checksum, framing = hashlib.sha256(), hashlib.sha256()

    def digests(framed):
        checksum.update(framed)
        for part in framing_of(framed):
            framing.update(part)

    timed("checksums (SHA-256, framing digest)", digests, records)
    with tempfile.TemporaryFile() as out:
        timed("write", out.write, records)
    times["sum"] = sum(times.values())
    return times


def measure(bench, image_sets):
    """The stage table, a column per image set, with the job's marginal ms per image and core."""
    rates = bench.results.median_rates()
    by_set = {}
    for image_set in image_sets:
        parts = stage_milliseconds(image_set.paths, bench.config_values, min(200, len(image_set.images)))
        job_rate = rates.get(f"Beam job, marginal ({image_set.name})")
        pillow_rate = rates.get(f"Pillow loop ({image_set.name})")
        if job_rate:
            parts["whole job, marginal"] = CORES * 1000 / job_rate
        if pillow_rate:
            parts["Pillow loop (for comparison)"] = CORES * 1000 / pillow_rate
        by_set[image_set.title] = parts
    bench.results.tables[STAGES_TABLE] = format_table(by_set)
    for title, parts in by_set.items():
        bench.results.say(f"5. [{title}] ms per image on one core: " +
                          ", ".join(f"{part} {ms:.2f}" for part, ms in parts.items()))


def format_table(by_set):
    """The report's stage table from {image set title: {part: ms}}, a column per set."""
    parts = list(dict.fromkeys(part for ms in by_set.values() for part in ms))
    table = ["| part | " + " | ".join(by_set) + " |", "|---|" + "---|" * len(by_set)]
    return table + [f"| {part} | " + " | ".join(f"{ms[part]:.2f}" if part in ms else "-" for ms in by_set.values())
                    + " |" for part in parts]
