"""Storage formats: bytes per image, reader images/s and train/serve parity for raw, JPEG and PNG.

The non-default formats are written by one more job run each on the same CSV. Reader rates are
medians over the repetitions (raw, jpeg, png in turn); parity is exact arithmetic, measured once.
"""

import os

import numpy as np

from benchmarks.harness import in_turn, median, rate_step
from benchmarks.job import run_job
from benchmarks.targets import STORAGE_TABLE


def parity_error(output_dir, raw_by_source, count=100):
    """Max and mean |stored - preprocessed| / std over up to `count` records (normalized units)."""
    import tensorflow as tf

    from tf_serving_input import features
    from tf_serving_input.codecs import parse_record
    from tf_serving_input.features import load_preprocess_config
    from tf_serving_input.layout import OutputLayout
    from tf_serving_input.preprocessing import preprocess_image
    from tf_serving_input.reader import shard_files

    config = load_preprocess_config(output_dir)
    std = np.array(OutputLayout(output_dir).load_manifest()["statistics"]["pixel_std"])
    worst, total, n = 0.0, 0.0, 0
    records = tf.data.TFRecordDataset(shard_files(output_dir, "train")).take(count)
    source_spec = {features.IMAGE_SOURCE: tf.io.FixedLenFeature([], tf.string)}
    for record in records:
        stored, parsed = parse_record(record, config, **source_spec)
        source = parsed[features.IMAGE_SOURCE].numpy().decode()
        fresh = preprocess_image(raw_by_source(source), config).numpy()
        difference = np.abs(stored.numpy().astype(np.float64) - fresh) / std
        worst, total, n = max(worst, float(difference.max())), total + float(difference.mean()), n + 1
    return worst, total / max(n, 1)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def measure(bench, job):
    """The storage table, on the default set's CSV (`job`: its job.JobSection)."""
    from tf_serving_input.features import IMAGE_FORMATS
    from tf_serving_input.reader import make_dataset

    default_format = bench.config_values["image_format"]
    outs, manifests = {default_format: job.out}, {default_format: job.manifest}
    for image_format in IMAGE_FORMATS:
        if image_format != default_format:
            outs[image_format] = os.path.join(bench.work, f"out_{image_format}")
            manifests[image_format] = run_job(job.csv, outs[image_format], "--image_format", image_format).manifest
    datasets = {image_format: make_dataset(out, "train", batch_size=64, training=False, repeat=True)
                for image_format, out in outs.items()}
    rates = in_turn(bench.repetitions, {image_format: rate_step(dataset, bench.args.seconds)
                                        for image_format, dataset in datasets.items()})
    rows = []
    for image_format, out in outs.items():
        manifest = manifests[image_format]
        kib = sum(s["bytes"] for s in manifest["shards"]) / manifest["written"] / 1024
        worst, mean_error = parity_error(out, read_file)
        rows.append((image_format, kib, median(rates[image_format]), worst, mean_error))
        bench.results.say(f"   storage {image_format}: {kib:.1f} KiB/image, reader {median(rates[image_format]):.0f} "
                          f"img/s (median), parity max {worst:.3f} / mean {mean_error:.4f} (normalized units)")
    bench.results.tables[STORAGE_TABLE] = format_table(rows)


def format_table(rows):
    """The report's storage table: rows of (format, KiB/image, reader images/s, parity max, parity mean)."""
    table = ["| storage | KiB/image | reader images/s (median) | parity max | parity mean |", "|---|---|---|---|---|"]
    table += [f"| {image_format} | {kib:.1f} | {rate:.0f} | {worst:.3f} | {mean_error:.4f} |"
              for image_format, kib, rate, worst, mean_error in rows]
    return table + [
        "", "Parity: |stored pixel - freshly preprocessed pixel| / std, i.e. what the reader yields vs what "
        "the serving signature feeds the model, in normalized units."]
