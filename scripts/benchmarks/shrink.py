"""shrink_speedup and shrink_psnr: shrink-on-load JPEG decoding on 2.7 MP photos.

Each repetition runs the job with full decoding (baseline), then with shrink-on-load (subject), and
compares in-DoFn seconds per image (each worker's first shard, with TensorFlow's start-up, left
out). PSNR of the shrunk output against the fully decoded one is exact arithmetic: measured once.
"""

import os

import numpy as np

from benchmarks.data import write_csv
from benchmarks.harness import in_turn
from benchmarks.job import run_job, steady_seconds_per_image
from benchmarks.storage import read_file


def measure(bench, large):
    import tensorflow as tf

    from tf_serving_input.features import PreprocessConfig
    from tf_serving_input.preprocessing import preprocess_image

    csv_path = write_csv(os.path.join(bench.work, "large.csv"), large.images)
    shards = str(max(4, min(24, len(large.images) // 5)))

    def job_seconds_per_image(flag):
        return lambda _: steady_seconds_per_image(
            run_job(csv_path, os.path.join(bench.work, "out_large"), flag, "--num_shards", shards).statuses)

    def log(repetition, sample):
        bench.results.say(f"   [large {repetition + 1}/{bench.repetitions}] full decode {sample['full'] * 1000:.1f} "
                          f"ms/image, shrink-on-load {sample['shrink'] * 1000:.1f} ms/image")

    seconds = in_turn(bench.repetitions, {"full": job_seconds_per_image("--no-jpeg_shrink_on_load"),
                                          "shrink": job_seconds_per_image("--jpeg_shrink_on_load")}, log)
    # A zero only in tiny smoke runs (rounded timings).
    speedups = [full / shrunk if shrunk else float("nan") for full, shrunk in zip(seconds["full"], seconds["shrink"])]
    full = PreprocessConfig.from_dict(dict(bench.config_values, jpeg_shrink_on_load=False))
    small = PreprocessConfig.from_dict(dict(bench.config_values, jpeg_shrink_on_load=True))
    signature = [tf.TensorSpec([], tf.string)]
    full_fn = tf.function(lambda data: preprocess_image(data, full), input_signature=signature)
    small_fn = tf.function(lambda data: preprocess_image(data, small), input_signature=signature)
    psnrs = []
    for path in large.paths:
        data = read_file(path)
        error = np.mean((full_fn(data).numpy().astype(np.float64) - small_fn(data).numpy()) ** 2)
        psnrs.append(99.0 if error == 0 else 10 * np.log10(255.0 ** 2 / error))
    bench.results.say(f"4. [{large.title}] shrink-on-load: job seconds per image, full decode / shrink-on-load; "
                      f"PSNR against full decode (mean {np.mean(psnrs):.1f} dB):")
    bench.results.ratio("shrink_speedup", large.title, speedups)
    bench.results.ratio("shrink_psnr", large.title, [float(np.min(psnrs))], exact=True)
