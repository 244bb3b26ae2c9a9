"""Side-by-side speed and memory measurements, as ratios against baselines measured in the same run.

    .venv/bin/python scripts/benchmark.py            # ~2,000 ImageNet-like JPEGs, < 10 min on 2 cores

Measures (absolute numbers on a shared machine mean little; the ratios are the result):
 1. the Beam job's marginal images/s (N and 10 N rows, so start-up cancels) against a bare
    multiprocessing loop doing the same read/decode/resize/encode on the same cores;
 2. the reader's images/s of normalized batches against the tf.data optimization guide's
    "before" (numpy_function per image) and "after" (TF ops, parallel maps, batch-level
    normalization, prefetch) pipelines and image_dataset_from_directory, for each storage format,
    with bytes per image and train/serve parity error;
 3. shrink-on-load JPEG decoding on 2+ MP photos: job speed-up and PSNR against full decode;
 4. peak RSS of the whole local job (launcher and workers) on N rows and 10 N rows;
 5. images/s per core of each stage (read, decode, resize, encode, write, statistics).
It prints a table, writes docs/benchmarks.md and docs/benchmark_throughput.png.
"""

import argparse
import csv
import datetime
import glob
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from tf_serving_input.features import IMAGE_FORMATS, PreprocessConfig  # noqa: E402  (no TensorFlow import)
from tf_serving_input.layout import OutputLayout  # noqa: E402  (no TensorFlow import)
CORES = os.cpu_count() or 1
SIZE = 224
TARGETS = {"job_vs_bare": 0.85, "reader_vs_after": 6.0, "shrink_speedup": 1.5, "shrink_psnr": 40.0,
           "memory_ratio": 1.3}


# ---------------------------------------------------------------- data
def make_images(folder, count, seed, size_range, quality=90):
    """ImageNet-like JPEGs: crops of the bundled sample photos, rescaled, with sensor-like noise.

    Returns [(path, label)] in class folders (as image_dataset_from_directory wants them).
    Reuses files already there.
    """
    rng = np.random.default_rng(seed)
    sources = sorted(glob.glob(os.path.join(REPO, "sample_data", "images", "*", "*.jpg")))
    result = []
    for i in range(count):
        source = sources[i % len(sources)]
        label = os.path.basename(os.path.dirname(source))
        path = os.path.join(folder, label, f"{i:06d}.jpg")
        result.append((path, label))
        if os.path.exists(path):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        width = int(rng.integers(*size_range))
        height = int(width * rng.uniform(0.66, 0.8))
        image = Image.open(source).convert("RGB")
        image = image.resize((width, height), Image.Resampling.BICUBIC)
        pixels = np.asarray(image).astype(np.int16) + rng.integers(-5, 6, size=(height, width, 3))
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, "JPEG", quality=quality)
    return result


def write_csv(path, images, repeat_to=None):
    """A job CSV listing `images` (repeated cyclically up to `repeat_to` rows), all 'train'."""
    rows = len(images) if repeat_to is None else repeat_to
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label", "split"])
        for i in range(rows):
            writer.writerow([images[i % len(images)][0], images[i % len(images)][1], "train"])
    return path


# ---------------------------------------------------------------- measuring helpers
def tree_rss_bytes(root_pid):
    """Resident memory of a process and all its descendants, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def settle():
    """Flushes dirty pages first: the kernel writing back an earlier run's gigabytes of output
    would otherwise take CPU from whatever is measured next."""
    os.sync()


def run_job(csv_path, out, *extra):
    """Runs the real CLI; returns (wall seconds, manifest, peak RSS of its process tree, shard statuses)."""
    command = [sys.executable, "-m", "beam_pipeline", "--input_csv", csv_path, "--output_dir", out,
               "--overwrite", "--no_progress", *extra]
    settle()
    started = time.time()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    peak = [0]

    def sample():
        while process.poll() is None:
            peak[0] = max(peak[0], tree_rss_bytes(process.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = process.communicate()
    wall = time.time() - started
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"job failed ({' '.join(command)}):\n{stderr[-3000:]}")
    layout = OutputLayout(out)
    manifest = layout.load_manifest()
    statuses = []
    for path in glob.glob(layout.status_files_glob()):
        with open(path) as f:
            statuses.append(json.load(f))
    return wall, manifest, peak[0], statuses


def steady_seconds_per_image(statuses):
    """In-DoFn seconds per image, leaving out each worker's first shard (TF start-up and tracing)."""
    statuses = [s for s in statuses if s["records"]]  # Empty shards (tiny runs) time nothing.
    by_worker = {}
    for status in statuses:
        by_worker.setdefault(status["worker_pid"], []).append(status)
    steady = [s for shards in by_worker.values() for s in sorted(shards, key=lambda s: s["started"])[1:]]
    steady = steady or statuses  # A worker with a single shard: nothing to leave out.
    return sum(s["seconds"] for s in steady) / max(1, sum(s["records"] for s in steady))


def marginal_rate(small, big):
    """Images/s between two runs of different size: start-up cost cancels out."""
    (rows_small, seconds_small), (rows_big, seconds_big) = small, big
    if seconds_big <= seconds_small:  # Too little work to see past the noise (tiny smoke runs).
        return rows_big / seconds_big
    return (rows_big - rows_small) / (seconds_big - seconds_small)


# ---------------------------------------------------------------- 1. job vs bare loop
_BARE = {}


def _bare_init(config_values):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from tf_serving_input.codecs import codec_for, to_bytes
    from tf_serving_input.preprocessing import preprocess_image

    config = PreprocessConfig.from_dict(config_values)
    _BARE["bytes"] = to_bytes
    _BARE["fn"] = tf.function(lambda data: codec_for(config).encode(preprocess_image(data, config), config),
                              input_signature=[tf.TensorSpec([], tf.string)])


def _bare_work(path):
    with open(path, "rb") as f:
        return len(_BARE["bytes"](_BARE["fn"](f.read())))


def bare_loop_rate(paths, config_values):
    """Images/s of a plain multiprocessing pool doing read -> decode -> resize/crop -> encode."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(CORES, initializer=_bare_init, initargs=(config_values,)) as pool:
        pool.map(_bare_work, paths[: CORES * 4], chunksize=1)  # Warm-up: TF import and tracing.
        settle()
        started = time.time()
        pool.map(_bare_work, paths, chunksize=8)
        return len(paths) / (time.time() - started)


# ---------------------------------------------------------------- 2. reader vs classic pipelines
def dataset_rate(dataset, seconds):
    """Images/s drawn from an (images, labels) batched dataset over about `seconds`."""
    iterator = iter(dataset)
    for _ in range(3):
        next(iterator)
    settle()
    count, started = 0, time.time()
    while time.time() - started < seconds:
        images, _ = next(iterator)
        count += int(images.shape[0])
    return count / (time.time() - started)


def classic_pipelines(csv_path, image_dir, mean, std, batch):
    """The tf.data guide's 'before' and 'after' pipelines and image_dataset_from_directory."""
    import tensorflow as tf

    mean_t, std_t = tf.constant(mean, tf.float32), tf.constant(std, tf.float32)
    rows = tf.data.experimental.CsvDataset(csv_path, [tf.string, tf.string], header=True, select_cols=[0, 1])

    def python_load(path):
        image = Image.open(path.decode()).convert("RGB")
        scale = SIZE / min(image.size)
        image = image.resize((max(SIZE, round(image.width * scale)), max(SIZE, round(image.height * scale))),
                             Image.Resampling.BILINEAR)
        left, top = (image.width - SIZE) // 2, (image.height - SIZE) // 2
        pixels = np.asarray(image.crop((left, top, left + SIZE, top + SIZE)), np.float32)
        return (pixels - np.array(mean, np.float32)) / np.array(std, np.float32)

    def before_map(path, label):
        image = tf.numpy_function(python_load, [path], tf.float32)
        image.set_shape([SIZE, SIZE, 3])
        return image, label

    before = rows.map(before_map, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE).batch(batch)

    def decode(path, label):
        return tf.io.decode_jpeg(tf.io.read_file(path), channels=3), label

    def resize_crop(image, label):
        shape = tf.cast(tf.shape(image)[:2], tf.float32)
        scale = SIZE / tf.reduce_min(shape)
        new_size = tf.cast(tf.math.ceil(shape * scale), tf.int32)
        image = tf.image.resize(image, new_size)
        return tf.image.resize_with_crop_or_pad(image, SIZE, SIZE), label

    def normalize(images, labels):
        return (images - mean_t) / std_t, labels

    after = (rows.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
             .map(resize_crop, num_parallel_calls=tf.data.AUTOTUNE)
             .batch(batch).map(normalize, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))
    import keras

    from_directory = keras.utils.image_dataset_from_directory(
        image_dir, image_size=(SIZE, SIZE), batch_size=batch, crop_to_aspect_ratio=True, shuffle=False,
        verbose=False).map(normalize, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    return {"before (numpy_function)": before.repeat(), "after (TF ops, parallel)": after.repeat(),
            "image_dataset_from_directory": from_directory.repeat()}


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
        stored = stored.numpy()
        source = parsed[features.IMAGE_SOURCE].numpy().decode()
        fresh = preprocess_image(raw_by_source(source), config).numpy()
        difference = np.abs(stored.astype(np.float64) - fresh) / std
        worst, total, n = max(worst, float(difference.max())), total + float(difference.mean()), n + 1
    return worst, total / max(n, 1)


# ---------------------------------------------------------------- 5. stages
def stage_rates(paths, config_values, count):
    """Images/s on one core of each stage of the job's per-image work."""
    import hashlib
    import tempfile

    import tensorflow as tf

    from beam_pipeline.analysis import to_record_batch
    from beam_pipeline.records import frame_record, make_example
    from tf_serving_input.codecs import codec_for, to_bytes
    from tf_serving_input.preprocessing import decode_image, resize_image

    config = PreprocessConfig.from_dict(config_values)
    paths = paths[:count]
    shrink = SIZE if config.jpeg_shrink_on_load else None
    decode = tf.function(lambda d: decode_image(d, config.max_pixels, shrink, config.resize_mode),
                         input_signature=[tf.TensorSpec([], tf.string)])
    resize = tf.function(lambda image: resize_image(image, SIZE, config.resize_mode),
                         input_signature=[tf.TensorSpec([None, None, 3], tf.uint8)])
    codec = codec_for(config)
    encode = tf.function(lambda image: codec.encode(image, config),
                         input_signature=[tf.TensorSpec([SIZE, SIZE, 3], tf.uint8)])

    from tf_serving_input.normalization import pixel_moments

    moments_fn = tf.function(pixel_moments, input_signature=[tf.TensorSpec([SIZE, SIZE, 3], tf.uint8)])

    timings = {}

    def timed(name, fn, items):
        fn(items[0])
        started = time.time()
        results = [fn(item) for item in items]
        timings[name] = len(items) / (time.time() - started)
        return results

    def read(path):
        with open(path, "rb") as f:
            return f.read()

    datas = timed("read", read, paths)
    decoded = timed("decode", lambda d: decode(d), datas)
    resized = timed("resize/crop", lambda image: resize(image), decoded)
    encoded = timed("encode", lambda image: to_bytes(encode(image)), resized)
    with tempfile.TemporaryFile() as out:
        def write(item):
            record = make_example(item, codec, SIZE, "source.jpg", "0123456789abcdef", "label")
            framed = frame_record(record.SerializeToString(deterministic=True))
            hashlib.sha256(framed).digest()
            out.write(framed)
        timed("write", write, encoded)
    moments_fn(resized[0])
    started = time.time()  # Per-image moments, then the Arrow rows TFT gets.
    moments = [moments_fn(image).numpy() for image in resized]
    to_record_batch(moments, [b"x"] * len(moments))
    timings["statistics"] = len(resized) / (time.time() - started)
    return timings


# ---------------------------------------------------------------- report
def bar_chart(rates, path):
    """A horizontal bar chart of images/s (PIL only)."""
    from PIL import ImageDraw, ImageFont

    font = ImageFont.load_default()
    width, bar_height, label_width = 900, 28, 300
    image = Image.new("RGB", (width, 40 + bar_height * len(rates) + 10), "white")
    draw = ImageDraw.Draw(image)
    draw.text((10, 10), f"images/s on {CORES} cores (higher is better), {datetime.date.today()}", fill="black",
              font=font)
    top = max(rates.values())
    for i, (name, rate) in enumerate(rates.items()):
        y = 40 + i * bar_height
        draw.text((10, y + 7), name, fill="black", font=font)
        length = int((width - label_width - 90) * rate / top)
        draw.rectangle((label_width, y + 4, label_width + length, y + bar_height - 4), fill=(66, 133, 244))
        draw.text((label_width + length + 6, y + 7), f"{rate:,.0f}", fill="black", font=font)
    image.save(path)


def versions():
    import importlib.metadata

    return {name: importlib.metadata.version(name) for name in
            ("apache-beam", "tensorflow", "tensorflow-transform", "pyarrow")}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv=None):
    """Runs every measurement; prints the table; writes docs/benchmarks.md and the chart."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000, help="ImageNet-like JPEGs (~500x375) to use.")
    parser.add_argument("--large_images", type=int, default=120, help="2.4 MP JPEGs for shrink-on-load.")
    parser.add_argument("--memory_factor", type=int, default=10, help="Rows of the larger memory run / --images.")
    parser.add_argument("--seconds", type=float, default=8.0, help="Time per tf.data throughput measurement.")
    parser.add_argument("--workdir", default=os.path.join(REPO, "output", "benchmark"))
    parser.add_argument("--docs_dir", default=os.path.join(REPO, "docs"))
    args = parser.parse_args(argv)
    started = time.time()
    os.makedirs(args.workdir, exist_ok=True)
    os.makedirs(args.docs_dir, exist_ok=True)
    work = args.workdir
    results, rates, lines = {}, {}, []

    def say(text):
        print(text, flush=True)
        lines.append(text)

    images = make_images(os.path.join(work, "images"), args.images, seed=1, size_range=(400, 600))
    large = make_images(os.path.join(work, "large"), args.large_images, seed=2, size_range=(1800, 2000))
    average_bytes = np.mean([os.path.getsize(p) for p, _ in images])
    say(f"dataset: {len(images)} JPEGs ~500x375 (q90, {average_bytes / 1024:.0f} KiB avg), "
        f"{len(large)} JPEGs ~1900x1400; {CORES} cores")

    # 1. Job vs bare loop.
    full_csv = write_csv(os.path.join(work, "full.csv"), images)
    config_values = PreprocessConfig().to_dict()
    default_format = config_values["image_format"]
    # The bare loop runs before and after the jobs and counts as their mean: this machine's speed
    # drifts by tens of percent over minutes, and the jobs run in between.
    bare_before = bare_loop_rate([p for p, _ in images], config_values)
    full_wall, manifest, peak_full, _ = run_job(full_csv, os.path.join(work, f"out_{default_format}"))
    # The larger run serves both the marginal rate (start-up cancels, and the difference is
    # (factor - 1) x N images of work, well above start-up noise) and the memory ratio (4.).
    many = len(images) * args.memory_factor
    many_csv = write_csv(os.path.join(work, "many.csv"), images, repeat_to=many)
    many_wall, _, peak_many, _ = run_job(many_csv, os.path.join(work, "out_many"))
    job_rate = marginal_rate((len(images), full_wall), (many, many_wall))
    assert manifest["config"]["preprocess"] == config_values
    bare_after = bare_loop_rate([p for p, _ in images], config_values)
    bare_rate = (bare_before + bare_after) / 2
    results["job_vs_bare"] = job_rate / bare_rate
    rates["bare multiprocessing loop"], rates["Beam job (marginal)"] = bare_rate, job_rate
    say(f"1. Beam job marginal {job_rate:.1f} img/s ({len(images)} vs {many} rows) vs bare loop {bare_rate:.1f} img/s "
        f"(before the jobs {bare_before:.0f}, after {bare_after:.0f}): "
        f"ratio {results['job_vs_bare']:.2f} (target >= {TARGETS['job_vs_bare']})")

    # 2. Reader vs classic pipelines, per storage format.
    import tensorflow as tf

    from tf_serving_input.reader import make_dataset

    manifests = {default_format: manifest}
    for image_format in IMAGE_FORMATS:
        if image_format != default_format:
            _, manifests[image_format], _, _ = run_job(full_csv, os.path.join(work, f"out_{image_format}"),
                                                       "--image_format", image_format)
    mean, std = manifest["statistics"]["pixel_mean"], manifest["statistics"]["pixel_std"]
    by_source = {}

    def raw_bytes(source):
        if source not in by_source:
            with open(source, "rb") as f:
                by_source[source] = f.read()
        return by_source[source]

    storage = {}
    for image_format, out_manifest in manifests.items():
        out = os.path.join(work, f"out_{image_format}")
        dataset = make_dataset(out, "train", batch_size=64, training=False, repeat=True)
        rate = dataset_rate(dataset, args.seconds)
        bytes_per_image = sum(s["bytes"] for s in out_manifest["shards"]) / out_manifest["written"]
        storage[image_format] = (bytes_per_image, rate, parity_error(out, raw_bytes))
        rates[f"reader ({image_format} storage)"] = rate
    classic = classic_pipelines(full_csv, os.path.join(work, "images"), mean, std, 64)
    for name, dataset in classic.items():
        rates[name] = dataset_rate(dataset, args.seconds)
    results["reader_vs_after"] = storage[default_format][1] / rates["after (TF ops, parallel)"]
    say(f"2. reader ({default_format} storage, the default) {storage[default_format][1]:.0f} img/s vs 'after' "
        f"{rates['after (TF ops, parallel)']:.0f} img/s: ratio {results['reader_vs_after']:.1f} "
        f"(target >= {TARGETS['reader_vs_after']}); 'before' {rates['before (numpy_function)']:.0f} img/s, "
        f"image_dataset_from_directory {rates['image_dataset_from_directory']:.0f} img/s")
    for image_format, (bytes_per_image, rate, (worst, mean_error)) in storage.items():
        say(f"   storage {image_format}: {bytes_per_image / 1024:.1f} KiB/image, reader {rate:.0f} img/s, "
            f"parity max {worst:.3f} / mean {mean_error:.4f} (normalized units)")

    # 3. Shrink-on-load on large photos: in-job seconds per image, and output PSNR.
    large_csv = write_csv(os.path.join(work, "large.csv"), large)
    per_image = {}
    shards = str(max(4, min(24, len(large) // 5)))
    for flag in ("--no-jpeg_shrink_on_load", "--jpeg_shrink_on_load"):
        _, _, _, statuses = run_job(large_csv, os.path.join(work, "out_large"), flag, "--num_shards", shards)
        per_image[flag] = steady_seconds_per_image(statuses)
    shrunk_seconds = per_image["--jpeg_shrink_on_load"]  # 0 only in tiny smoke runs (rounded timings).
    results["shrink_speedup"] = (per_image["--no-jpeg_shrink_on_load"] / shrunk_seconds if shrunk_seconds
                                 else float("nan"))
    from tf_serving_input.preprocessing import preprocess_image

    full = PreprocessConfig.from_dict(dict(config_values, jpeg_shrink_on_load=False))
    shrunk = PreprocessConfig.from_dict(dict(config_values, jpeg_shrink_on_load=True))
    full_fn = tf.function(lambda d: preprocess_image(d, full), input_signature=[tf.TensorSpec([], tf.string)])
    shrunk_fn = tf.function(lambda d: preprocess_image(d, shrunk), input_signature=[tf.TensorSpec([], tf.string)])
    psnrs = []
    for path, _ in large:
        data = raw_bytes(path)
        error = np.mean((full_fn(data).numpy().astype(np.float64) - shrunk_fn(data).numpy()) ** 2)
        psnrs.append(99.0 if error == 0 else 10 * np.log10(255.0 ** 2 / error))
    results["shrink_psnr"] = float(np.min(psnrs))
    say(f"3. shrink-on-load on ~2.6 MP JPEGs: job {results['shrink_speedup']:.2f}x faster per image "
        f"(target >= {TARGETS['shrink_speedup']}), PSNR vs full decode min {np.min(psnrs):.1f} dB / mean "
        f"{np.mean(psnrs):.1f} dB (target >= {TARGETS['shrink_psnr']})")

    # 4. Memory: N rows vs factor x N rows (paths repeat), from the runs of 1.
    results["memory_ratio"] = peak_many / peak_full
    say(f"4. peak RSS (launcher + workers): {len(images)} rows {peak_full / 2**30:.2f} GiB, {many} rows "
        f"{peak_many / 2**30:.2f} GiB: ratio {results['memory_ratio']:.2f} (target <= {TARGETS['memory_ratio']})")

    # 5. Where the time goes.
    stages = stage_rates([p for p, _ in images], config_values, min(200, len(images)))
    say("5. images/s on one core per stage: " + ", ".join(f"{k} {v:.0f}" for k, v in stages.items()))

    met = {name: (results[name] <= target if name == "memory_ratio" else results[name] >= target)
           for name, target in TARGETS.items()}
    chart = os.path.join(args.docs_dir, "benchmark_throughput.png")
    bar_chart(rates, chart)
    elapsed = time.time() - started
    table = ["| measurement | result | target | met |", "|---|---|---|---|"]
    for name, target in TARGETS.items():
        table.append(f"| {name} | {results[name]:.2f} | {'<=' if name == 'memory_ratio' else '>='} {target} | "
                     f"{'yes' if met[name] else 'no'} |")
    throughput = ["| pipeline | images/s |", "|---|---|"] + [f"| {k} | {v:.0f} |" for k, v in rates.items()]
    stage_table = ["| stage | images/s per core |", "|---|---|"] + [f"| {k} | {v:.0f} |" for k, v in stages.items()]
    formats = ["| storage | KiB/image | reader images/s | parity max | parity mean |", "|---|---|---|---|---|"] + [
        f"| {fmt} | {b / 1024:.1f} | {r:.0f} | {w:.3f} | {m:.4f} |" for fmt, (b, r, (w, m)) in storage.items()]
    command = "python scripts/benchmark.py " + " ".join(argv if argv is not None else sys.argv[1:])
    document = "\n".join([
        "# Benchmarks", "",
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {CORES} cores "
        f"({cpu_model()}), Python {platform.python_version()}, " +
        ", ".join(f"{k} {v}" for k, v in versions().items()) + f"; {elapsed / 60:.1f} minutes.", "",
        f"Command: `{command.strip()}`", "",
        "Absolute numbers on a shared machine mean little; each ratio compares two things measured in the "
        "same run on the same images and cores.", "",
        "![throughput](benchmark_throughput.png)", "",
        "## Ratios against targets", "", *table, "",
        "## Throughput", "", *throughput, "",
        "## Storage formats", "", *formats, "",
        "Parity: |stored pixel - freshly preprocessed pixel| / std, i.e. what the reader yields vs what "
        "the serving signature feeds the model, in normalized units.", "",
        "## Where the time goes (one core)", "", *stage_table, "",
        "## Log", "", "```", *lines, "```", ""])
    with open(os.path.join(args.docs_dir, "benchmarks.md"), "w", encoding="utf-8") as f:
        f.write(document)
    print("\n" + "\n".join(table))
    print(f"\nwrote {os.path.join(args.docs_dir, 'benchmarks.md')} and {chart} in {elapsed / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
