"""The whole workflow at a million rows, measured: job → predict (killed part-way, resumed) → load → HNSW → search.

    python scripts/million_rows.py --rows 1000000 --work_dir /work/million

What it runs, each stage through the project's real command line:
1. Input (not timed as part of the workflow): ROWS distinct JPEGs, each a random crop, flip and brightness
   change of one of the bundled sample photos, at --source_size pixels; labels from the photo's class,
   1 row in 5 in `validation`. Distinct images matter: repeated ones would make every search a tie.
2. `beam-image-pipeline preprocess` at --image_size.
3. An export: MobileNetV3Small (untrained, weights=None: speed and recall are measured, not accuracy),
   576-d embeddings, the benchmark's model.
4. `beam-image-pipeline predict --input_dir` into the embedded PostgreSQL, SIGKILLed once --kill_at of its
   Parquet shards exist, then the same command again: it resumes, loads (staging COPY + upsert) and
   builds the HNSW index. The table is then checked to be exact against the Parquet: row count, the
   set of keys, and the stored embeddings of 1,000 sampled rows.
5. A bare binary COPY of the same rows into a plain table: the load's baseline.
6. --queries fresh images (not in the table) embedded through the export's serving_default, searched
   through `database.nearest` (the search command's query, default ef_search), timed one by one; recall@10
   against exact search computed blockwise in NumPy over the Parquet. The same with `--split validation`.
7. With --quality: `beam-image-pipeline quality` over the job's output (perceptual hashes; the untrained
   model's embeddings would mean nothing), its group counts from summary.json.

`--source_size everyday --image_size 224 --image_format jpeg` is issue 39's real-sized run: ~500x375 photos
(~33 KiB) instead of small squares, stored as JPEG since raw 224 px records take ~147 KiB an image.

Each stage reports wall time, rate, peak memory (the sum of PSS over the process tree, so shared pages
count once; the PostgreSQL server's tree separately) and disk. Writes WORK_DIR/results.json and prints
the markdown table docs/million_rows.md holds. A rerun reuses the input images and a finished job.
"""

import argparse
import glob
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.join(REPO, "scripts")]

K = 10
TABLE = "million"


# ---------------------------------------------------------------------- memory and disk
def tree_pss_bytes(root_pid):
    """Proportional set size of a process and its descendants: shared pages counted once in all."""
    from benchmarks.harness import proc_field_bytes, process_tree

    return sum(proc_field_bytes(pid, "smaps_rollup", "Pss:") for pid in process_tree(root_pid))


class PeakMemory:
    """Samples the PSS of process trees every second while it is open: {name: peak bytes}."""

    def __init__(self, **pids):
        self.pids, self.peaks = pids, dict.fromkeys(pids, 0)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()

    def _sample(self):
        while not self.done.is_set():
            for name, pid in self.pids.items():
                if pid() if callable(pid) else pid:
                    value = tree_pss_bytes(pid() if callable(pid) else pid)
                    self.peaks[name] = max(self.peaks[name], value)
            self.done.wait(1.0)


def disk_bytes(path):
    """Bytes of the files under `path` (du -sb)."""
    return int(subprocess.run(["du", "-sb", path], capture_output=True, text=True, check=True).stdout.split()[0])


def gib(value):
    return f"{value / (1 << 30):.2f} GiB"


# ---------------------------------------------------------------------- input
def _photo(index, photos, source_size):
    """Row `index`'s image: a random crop (30-100% of the area), flip and brightness change of a sample photo."""
    from PIL import Image, ImageEnhance

    rng = np.random.default_rng(index)
    label, photo = photos[index % len(photos)]
    width, height = photo.size
    area = rng.uniform(0.3, 1.0) * width * height
    aspect = rng.uniform(0.75, 1.33)
    w = int(min(width, max(8, (area * aspect) ** 0.5)))
    h = int(min(height, max(8, (area / aspect) ** 0.5)))
    left, top = rng.integers(0, width - w + 1), rng.integers(0, height - h + 1)
    image = photo.crop((left, top, left + w, top + h)).resize((source_size, source_size), Image.BILINEAR)
    if rng.random() < 0.5:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    return label, ImageEnhance.Brightness(image).enhance(rng.uniform(0.8, 1.2))


def _everyday_photo(index, photos, noise):
    """Row `index`'s image by the benchmark's everyday (light) recipe: a random 4:3 crop (60-100% of the
    side) of a full-size sample photo, rescaled (bicubic) to 450-550 x 3/4 of it, mirrored half the time,
    with sensor-like noise (sigma 2, a window of a precomputed field: drawing it per image would cost more
    than the rest) and a brightness change; ~500x375, ~33 KiB at quality 90."""
    from PIL import Image, ImageEnhance

    rng = np.random.default_rng(index)
    label, photo = photos[index % len(photos)]
    width = int(rng.integers(450, 551))
    height = width * 3 // 4
    fraction = rng.uniform(0.6, 1.0)
    crop_width = int(min(photo.width, photo.height / 0.75) * fraction)
    crop_height = int(crop_width * 0.75)
    left = int(rng.uniform() * (photo.width - crop_width))
    top = int(rng.uniform() * (photo.height - crop_height))
    image = photo.crop((left, top, left + crop_width, top + crop_height)).resize((width, height), Image.BICUBIC)
    if rng.random() < 0.5:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    image = ImageEnhance.Brightness(image).enhance(rng.uniform(0.8, 1.2))
    y, x = int(rng.integers(0, noise.shape[0] - height + 1)), int(rng.integers(0, noise.shape[1] - width + 1))
    pixels = np.asarray(image, np.int16) + noise[y:y + height, x:x + width]
    return label, Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _load_photos(full_size=False):
    import csv

    from PIL import Image

    folder = os.path.join(REPO, "sample_data")
    with open(os.path.join(folder, "sample.csv")) as f:
        rows = list(csv.DictReader(f))
    photos = []
    for row in rows:
        image = Image.open(os.path.join(folder, row["path"])).convert("RGB")
        if not full_size:
            image.thumbnail((192, 192))
        photos.append((row["label"], image))
    return photos


_PHOTOS = None
_NOISE = None
EVERYDAY = "everyday"  # --source_size's value for the everyday recipe.


def make_image(index, photos, source_size):
    """(label, PIL image, JPEG quality) of row `index`: square `source_size` images, or everyday photos."""
    global _NOISE
    if source_size == EVERYDAY:
        if _NOISE is None:
            _NOISE = np.rint(np.random.default_rng(7).normal(0.0, 2.0, (500, 640, 3))).astype(np.int16)
        return (*_everyday_photo(index, photos, _NOISE), 90)
    return (*_photo(index, photos, int(source_size)), 85)


def _write_range(job):
    global _PHOTOS
    start, stop, folder, source_size = job
    if _PHOTOS is None:
        _PHOTOS = _load_photos(full_size=source_size == EVERYDAY)
    lines = []
    for index in range(start, stop):
        path = os.path.join(folder, f"{index // 1000:05d}", f"{index:07d}.jpg")
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            label, image, quality = make_image(index, _PHOTOS, source_size)
            image.save(path + ".tmp", "JPEG", quality=quality)
            os.replace(path + ".tmp", path)
        else:
            label = _PHOTOS[index % len(_PHOTOS)][0]
        lines.append(f"{os.path.relpath(path, os.path.dirname(folder))},{label},"
                     f"{'validation' if index % 5 == 0 else 'train'}\n")
    return lines


def make_input(work, rows, source_size):
    """WORK/input.csv of `rows` distinct images (made once; a rerun finds them)."""
    import multiprocessing

    csv_path = os.path.join(work, "input.csv")
    if os.path.exists(csv_path):
        with open(csv_path) as f:
            if sum(1 for _ in f) == rows + 1:
                return csv_path, 0.0
    started = time.monotonic()
    folder = os.path.join(work, "images")
    step = 5000
    jobs = [(start, min(rows, start + step), folder, source_size) for start in range(0, rows, step)]
    with multiprocessing.Pool(os.cpu_count()) as pool, open(csv_path + ".tmp", "w") as out:
        out.write("path,label,split\n")
        for done, lines in enumerate(pool.imap(_write_range, jobs), start=1):
            out.writelines(lines)
            if done % 20 == 0:
                print(f"  input: {done * step:,} of {rows:,} images", flush=True)
    os.replace(csv_path + ".tmp", csv_path)
    return csv_path, time.monotonic() - started


def query_images(rows, count, source_size):
    """JPEG bytes of `count` fresh images (row numbers after the table's: never stored)."""
    import io

    photos = _load_photos(full_size=source_size == EVERYDAY)
    found = []
    for index in range(rows, rows + count):
        _, image, quality = make_image(index, photos, source_size)
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=quality)
        found.append(buffer.getvalue())
    return found


# ---------------------------------------------------------------------- stages
def run_stage(name, command, log, server_pid, kill_when=None):
    """Runs a command (its own process group) with its output in `log`; (wall s, peak PSS, server peak, killed)."""
    print(f"{name}: {' '.join(command)}", flush=True)
    started = time.monotonic()
    with open(log, "a") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        killed = False
        try:
            with PeakMemory(tree=process.pid, server=server_pid) as memory:
                while process.poll() is None:
                    if kill_when is not None and not killed and kill_when():
                        os.killpg(process.pid, signal.SIGKILL)
                        killed = True
                    time.sleep(1.0)
        except BaseException:
            # Stopped (Ctrl-C, SIGTERM, an error): the stage's own session would outlive us and keep
            # its output folder locked, so stop it too.
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
            raise
    wall = time.monotonic() - started
    if process.returncode != 0 and not killed:
        raise RuntimeError(f"{name} failed (exit {process.returncode}); its output: {log}")
    print(f"{name}: {wall:.0f} s{' (killed)' if killed else ''}, peak PSS {gib(memory.peaks['tree'])}", flush=True)
    return wall, memory.peaks["tree"], memory.peaks["server"], killed


def python(*args):
    return [sys.executable, *map(str, args)]


def table_is_exact(url, parquet_paths):
    """(rows in the table, whether its keys and 1,000 sampled embeddings equal the Parquet's)."""
    import pyarrow.parquet as pq

    from beam_pipeline import database

    keys, sample = [], {}
    rng = np.random.default_rng(0)
    for path in parquet_paths:
        part = pq.read_table(path, columns=["key", "embedding"])
        part_keys = part.column("key").to_pylist()
        keys.extend(part_keys)
        picks = rng.choice(len(part_keys), size=min(len(part_keys), 2), replace=False) if part_keys else []
        embeddings = part.column("embedding").combine_chunks()
        matrix = embeddings.values.to_numpy(zero_copy_only=False).reshape(len(part_keys), -1)
        for pick in picks:
            sample[part_keys[pick]] = matrix[pick]
    with database.connect(url) as connection:
        stored = [key for (key,) in connection.execute(f"SELECT key FROM {TABLE}")]
        same_values = all(np.allclose(np.asarray(connection.execute(
            f"SELECT embedding FROM {TABLE} WHERE key = %s", (key,)).fetchone()[0].to_numpy()), vector, atol=1e-6)
            for key, vector in list(sample.items())[:1000])
    return len(stored), sorted(stored) == sorted(keys) and len(set(stored)) == len(stored) and same_values


def exact_neighbours(parquet_paths, queries, split=None):
    """[queries, K] exact cosine distances (sorted) over every stored embedding, blockwise; rows of `split` only."""
    import pyarrow.parquet as pq

    best = np.full((len(queries), K), np.inf, np.float32)
    for path in parquet_paths:
        part = pq.read_table(path, columns=["split", "embedding"])
        if len(part) == 0:
            continue
        embeddings = part.column("embedding").combine_chunks()
        matrix = embeddings.values.to_numpy(zero_copy_only=False).reshape(len(part), -1).astype(np.float32)
        if split is not None:
            matrix = matrix[np.array(part.column("split").to_pylist()) == split]
            if not len(matrix):
                continue
        distances = 1.0 - queries @ matrix.T
        both = np.concatenate([best, distances], axis=1)
        best = np.sort(np.partition(both, K - 1, axis=1)[:, :K], axis=1)
    return best


def search_stage(url, queries, parquet_paths, split=None):
    """p50/p99 ms and recall@10 of `database.nearest` at its defaults (filtered to `split` when given)."""
    from beam_pipeline import database

    exact = exact_neighbours(parquet_paths, queries, split)
    latencies, hits = [], 0
    with database.connect(url) as connection:
        for query in queries[:20]:  # Warm-up: the index's pages into the cache.
            database.nearest(connection, TABLE, query, K, split=split)
        plan = database.nearest(connection, TABLE, queries[0], K, explain=True, split=split)
        for query, wanted in zip(queries, exact):
            begun = time.perf_counter()
            found = database.nearest(connection, TABLE, query, K, split=split)
            latencies.append((time.perf_counter() - begun) * 1000)
            hits += sum(distance <= wanted[-1] + 1e-5 for *_, distance in found)
    return {"p50_ms": float(np.percentile(latencies, 50)), "p99_ms": float(np.percentile(latencies, 99)),
            "recall_at_10": hits / (K * len(queries)), "queries": len(queries),
            "uses_index": f"Index Scan using {database.index_name(TABLE)}" in plan}


def embed(export_dir, images):
    import tensorflow as tf

    from beam_pipeline.common.embeddings import l2_normalize

    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    parts = [serve(image_bytes=tf.constant(images[i:i + 100]))["embedding"].numpy()
             for i in range(0, len(images), 100)]
    return l2_normalize(np.concatenate(parts)).astype(np.float32)


# ---------------------------------------------------------------------- the run
def main(argv=None):
    from tf_serving_input.features import IMAGE_FORMATS  # No TensorFlow import.

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--work_dir", required=True, help="Folder for the images, every output and the database.")
    parser.add_argument("--source_size", default="96",
                        help="Side of the generated square JPEGs, or 'everyday': ~500x375 photos at quality 90, "
                             "~33 KiB (the benchmark's light set recipe).")
    parser.add_argument("--image_size", type=int, default=64, help="The job's --image_size.")
    parser.add_argument("--image_format", default="raw", choices=IMAGE_FORMATS,
                        help="The job's --image_format (raw at 224 px is ~147 KiB an image: jpeg fits a disk better).")
    parser.add_argument("--quality", action="store_true",
                        help="Run the quality job over the job's output and the predictions too (timed apart).")
    parser.add_argument("--kill_at", type=float, default=0.4, help="Share of Parquet shards before the SIGKILL.")
    parser.add_argument("--queries", type=int, default=1000)
    args = parser.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so that run_stage stops the running stage.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.rows < 1:
        parser.error(f"--rows must be at least 1, not {args.rows}")
    if args.image_size < 8:
        parser.error(f"--image_size must be at least 8, not {args.image_size}")
    if args.queries < 1:
        parser.error(f"--queries must be at least 1, not {args.queries}")
    if not 0 < args.kill_at < 1:
        parser.error(f"--kill_at must be a share of the shards between 0 and 1, not {args.kill_at}")
    if args.source_size != EVERYDAY and not (re.fullmatch("[0-9]+", args.source_size) and int(args.source_size) >= 8):
        parser.error(f"--source_size must be a number of pixels (8 or more) or '{EVERYDAY}', not {args.source_size!r}")
    work = os.path.abspath(args.work_dir)
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, "run.log")
    results = {"rows": args.rows, "source_size": args.source_size, "image_size": args.image_size,
               "cores": os.cpu_count(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    csv_path, input_seconds = make_input(work, args.rows, args.source_size)
    results["input"] = {"seconds": round(input_seconds, 1), "bytes": disk_bytes(os.path.join(work, "images"))}

    from beam_pipeline.database.server import EmbeddedServer

    server = EmbeddedServer(os.path.join(work, "pg"))
    url = server.start()  # Held for the whole run: predict joins it, and its memory is sampled throughout.
    try:
        job_out = os.path.join(work, "job")
        wall, peak, _, _ = run_stage("job", python("-m", "beam_pipeline", "preprocess", "--input_csv", csv_path,
                                                    "--output_dir", job_out, "--image_size", args.image_size,
                                                    "--image_format", args.image_format), log,
                                     server.pid)
        with open(os.path.join(job_out, "manifest.json")) as f:
            job_manifest = json.load(f)
        written = job_manifest["summary"]["written"] if "summary" in job_manifest else args.rows
        results["job"] = {"seconds": round(wall, 1), "images_per_s": round(args.rows / wall, 1),
                          "peak_pss": peak, "bytes": disk_bytes(os.path.join(job_out, "data"))}

        from benchmarks.predict import bare_copy_rate, export_benchmark_model

        export_dir = os.path.join(work, "export")
        if not os.path.exists(os.path.join(export_dir, "saved_model.pb")):
            export_benchmark_model(job_out, export_dir, classes=4)
        predict_out = os.path.join(work, "predict")
        command = python("-m", "beam_pipeline", "predict", "--model_dir", export_dir, "--input_dir", job_out,
                         "--output_dir", predict_out, "--database", "embedded",
                         "--database_dir", os.path.join(work, "pg"), "--table", TABLE)
        shard_folder = os.path.join(predict_out, "shards")
        total_shards = sum(len(glob.glob(os.path.join(job_out, "data", pattern)))
                           for pattern in ("*.tfrecord", "*.tfrecord.gz"))

        def enough_shards():
            return len(glob.glob(os.path.join(shard_folder, "*.json"))) >= args.kill_at * max(1, total_shards)

        first = run_stage("predict (to be killed)", command, log, server.pid, kill_when=enough_shards)
        done_before = len(glob.glob(os.path.join(shard_folder, "*.json")))
        second = run_stage("predict (resumed)", command, log, server.pid)
        with open(os.path.join(predict_out, "manifest.json")) as f:
            manifest = json.load(f)
        loaded = manifest["database"]
        parquet = sorted(glob.glob(os.path.join(predict_out, "predictions", "*.parquet")))
        in_table, exact = table_is_exact(url, parquet)
        predict_seconds = second[0] - loaded["load_seconds"] - loaded["index_seconds"]
        results["predict"] = {
            "killed_leg_seconds": round(first[0], 1), "killed": first[3], "shards_done_at_kill": done_before,
            "shards": total_shards, "resumed_leg_seconds": round(second[0], 1),
            "predict_seconds": round(predict_seconds, 1), "peak_pss": max(first[1], second[1]),
            "parquet_bytes": disk_bytes(os.path.join(predict_out, "predictions")),
            "rows_in_table": in_table, "table_exact": exact, "written": written}
        results["load"] = {"seconds": loaded["load_seconds"], "rows_per_s": round(loaded["loaded_rows"] /
                                                                                    loaded["load_seconds"], 1)}
        results["index"] = {"seconds": loaded["index_seconds"], "definition": loaded["index"]}
        results["server_peak_pss"] = max(first[2], second[2])

        bare = bare_copy_rate(url, parquet, "bare_copy")
        results["load"]["bare_copy_rows_per_s"] = round(bare, 1)
        results["load"]["vs_bare_copy"] = round(results["load"]["rows_per_s"] / bare, 3)
        from beam_pipeline import database

        with database.connect(url) as connection:
            connection.execute("DROP TABLE bare_copy")
            connection.commit()
            results["database_bytes"] = {
                "table": connection.execute("SELECT pg_table_size(%s)", (TABLE,)).fetchone()[0],
                "index": connection.execute("SELECT pg_relation_size(%s)",
                                            (database.index_name(TABLE),)).fetchone()[0],
                "data_folder": disk_bytes(os.path.join(work, "pg"))}

        started = time.monotonic()
        queries = embed(export_dir, query_images(args.rows, args.queries, args.source_size))
        results["search"] = search_stage(url, queries, parquet)
        results["search_validation_only"] = search_stage(url, queries, parquet, split="validation")
        results["search"]["stage_seconds"] = round(time.monotonic() - started, 1)
    finally:
        server.release()
    results["workflow_seconds"] = round(results["job"]["seconds"] + first[0] + second[0] +
                                        results["search"]["stage_seconds"], 1)
    if args.quality:
        # Hashes only: the benchmark's untrained model makes embedding distances meaningless.
        quality_out = os.path.join(work, "quality")
        wall, peak, _, _ = run_stage("quality", python("-m", "beam_pipeline", "quality", "--input_dir", job_out,
                                                        "--output_dir", quality_out, "--overwrite"), log, None)
        with open(os.path.join(quality_out, "summary.json")) as f:
            summary = json.load(f)
        results["quality"] = {"seconds": round(wall, 1), "images_per_s": round(args.rows / wall, 1),
                              "peak_pss": peak, "bytes": disk_bytes(quality_out),
                              "summary": {key: summary[key] for key in (
                                  "images", "exact_groups", "near_groups", "images_in_groups", "near_pairs",
                                  "oversized_buckets", "flagged_images", "leaking_groups",
                                  "label_conflict_groups")}}
        results["workflow_seconds"] = round(results["workflow_seconds"] + wall, 1)
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))
    print(markdown_tables(results))
    return 0


def markdown_tables(results):
    """The stage table and the search table of docs/million_rows.md, from results.json's dict."""
    gib = 2**30
    job, predict, load, index = results["job"], results["predict"], results["load"], results["index"]
    database = results["database_bytes"]
    predicted_rate = results["rows"] / (predict["killed_leg_seconds"] + predict["predict_seconds"])
    stages = [
        ("input (not part of the workflow)", f"{results['input']['seconds']:,.0f} s", "", "",
         f"{results['input']['bytes'] / gib:.2f} GiB of JPEGs"),
        ("job (`preprocess`)", f"{job['seconds']:,.0f} s", f"{job['images_per_s']:,.0f} images/s",
         f"{job['peak_pss'] / gib:.2f} GiB", f"{job['bytes'] / gib:.1f} GiB of TFRecords"),
        (f"predict, killed leg (SIGKILL at {predict['shards_done_at_kill']:,} of {predict['shards']:,} shards)",
         f"{predict['killed_leg_seconds']:,.0f} s", "", f"{predict['peak_pss'] / gib:.2f} GiB", ""),
        ("predict, resumed leg: prediction", f"{predict['predict_seconds']:,.0f} s",
         f"{predicted_rate:,.0f} images/s over both legs", f"{predict['peak_pss'] / gib:.2f} GiB",
         f"{predict['parquet_bytes'] / gib:.2f} GiB of Parquet"),
        ("load", f"{load['seconds']:,.1f} s", f"{load['rows_per_s']:,.0f} rows/s, {load['vs_bare_copy']:.2f}x a bare "
         f"COPY ({load['bare_copy_rows_per_s']:,.0f} rows/s)", "", f"table {database['table'] / gib:.2f} GiB"),
        ("HNSW index", f"{index['seconds']:,.0f} s", f"{results['rows'] / index['seconds']:,.0f} rows/s", "",
         f"index {database['index'] / gib:.2f} GiB"),
        ("search stage", f"{results['search']['stage_seconds']:,.0f} s", "", "", ""),
    ]
    if "quality" in results:
        quality = results["quality"]
        groups = quality["summary"]
        stages.append(("quality job (hashes)", f"{quality['seconds']:,.0f} s",
                       f"{quality['images_per_s']:,.0f} images/s", f"{quality['peak_pss'] / gib:.2f} GiB",
                       f"{groups['exact_groups']:,} exact and {groups['near_groups']:,} near-duplicate groups "
                       f"({groups['images_in_groups']:,} images), {groups['flagged_images']:,} flagged"))
    stages += [
        (f"**whole workflow** (job to {'quality' if 'quality' in results else 'search'})",
         f"**{results['workflow_seconds']:,.0f} s**", "",
         f"PostgreSQL server: {results['server_peak_pss'] / gib:.2f} GiB",
         f"data folder {database['data_folder'] / gib:.2f} GiB"),
    ]
    lines = ["| stage | wall | rate | peak memory (PSS of the process tree) | disk |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in stages]
    lines += ["", "| query | p50 | p99 | recall@10 against exact search |", "|---|---|---|---|"]
    for name, key in (("all rows", "search"), ("`--split validation`", "search_validation_only")):
        search = results[key]
        lines.append(f"| {name} | {search['p50_ms']:.2f} ms | {search['p99_ms']:.1f} ms "
                     f"| {search['recall_at_10']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
