"""The UI at a million rows (issue 42): start-up, gallery pages in every filter, counts, the server's RSS.

    # A generated run: a manifest, its image index and a quality folder, no images (index only).
    python scripts/benchmarks/ui_million.py --generate 1000000 --work_dir /tmp/ui1m
    # A real run (read-only is fine: the index then goes to $XDG_CACHE_HOME, see docs/million_rows.md).
    python scripts/benchmarks/ui_million.py --input_dir JOB [--quality_dir Q] [--predictions_dir P]

What it measures, through the UI's real command line (`python -m beam_pipeline.ui`, a server process):
- start: from the command to the port accepting connections, with the index present, --repeat times;
- build (a real run only, `--build`): the same with an empty cache folder, so the index is built first;
- each filter (none, split, label, split+label, failure reason, quality flag, duplicate group): --requests
  GETs of /gallery at random pages of it, one at a time as one user clicks: p50 and p99 in ms;
- counts and charts: the overview (the label chart), the failures page, the quality page;
- with --thumbnails N (a real run): N thumbnails of random gallery pages (the first of a JPEG or PNG run
  loads TensorFlow; a raw run's never do);
- the server's RSS (VmHWM, its peak) after all of it.
The generated run's images do not exist, so no thumbnail is asked for; its pages draw tiles by key.
Writes WORK_DIR/ui_results.json and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

LABELS = ["airplane", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck", "astronaut"]
REASONS = ["missing_file", "corrupt_image", "unsupported_format"]
FLAGS = ["dark", "bright", "blurry", "near_constant"]
SHARD_ROWS = 1000


def _hex_keys(rng: np.random.Generator, count: int):
    """`count` distinct-enough 16-hex-digit keys as one Arrow string array (no Python string per key)."""
    import binascii

    import pyarrow as pa

    data = binascii.hexlify(rng.bytes(8 * count))
    offsets = np.arange(0, 16 * count + 1, 16, dtype=np.int32)
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data))


def generated_run(folder: str, rows: int, seed: int = 0) -> dict:
    """A job output of `rows` stored images and rows/100 failed rows (manifest, errors.jsonl, its index; no
    shard files), and a quality folder over it (rows/50 images in groups of 2-50, rows/25 flagged).

    Returns {"job", "quality", "expected": the counts each filter must give}.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from beam_pipeline.common import image_index
    from beam_pipeline.common.job_shards import job_input_sha256
    from beam_pipeline.common.quality_outputs import FLAG_SCHEMA, GROUP_SCHEMA
    from tf_serving_input.features import PreprocessConfig
    from tf_serving_input.layout import OutputLayout, QualityLayout, shard_name

    rng = np.random.default_rng(seed)
    job = os.path.join(folder, "job")
    layout = OutputLayout(job)
    os.makedirs(job, exist_ok=True)
    split_of = np.where(np.arange(rows) % 5 == 4, 1, 0)  # 1 row in 5 in validation.
    label_of = rng.integers(0, len(LABELS), rows)
    order = np.argsort(split_of, kind="stable")  # Shards are per split: the index's rows go split by split.
    split_of, label_of = split_of[order], label_of[order]
    splits = ["train", "validation"]
    shards, shard_of = [], np.empty(rows, dtype=np.int32)
    for split in (0, 1):
        where = np.flatnonzero(split_of == split)
        count = max(1, -(-len(where) // SHARD_ROWS))
        for i in range(count):
            part = where[i * SHARD_ROWS:(i + 1) * SHARD_ROWS]
            shard_of[part] = len(shards)
            shards.append({"file": layout.relative_shard_file(shard_name(splits[split], i, count)),
                           "split": splits[split], "records": len(part), "bytes": 0, "sha256": "0" * 64})
    lengths = rng.integers(15_000, 30_000, rows)
    offsets = np.zeros(rows, dtype=np.int64)
    for index in range(len(shards)):  # Each record after the previous one of its shard (16 bytes of framing).
        part = np.flatnonzero(shard_of == index)
        offsets[part] = np.concatenate([[0], np.cumsum(lengths[part] + 16)[:-1]])
    failed = rows // 100
    failed_split = rng.integers(0, 2, failed)
    failed_reason = rng.integers(0, len(REASONS), failed)
    keys = _hex_keys(rng, rows + failed)
    stems = [shard["file"].rsplit("/", 1)[-1].rsplit(".", 1)[0] for shard in shards]

    def coded(codes, names, nulls=0):
        indices = pa.array(np.concatenate([codes, np.zeros(nulls, dtype=codes.dtype)]).astype(np.int32),
                           mask=np.concatenate([np.zeros(len(codes), bool), np.ones(nulls, bool)]) if nulls else None)
        return pa.DictionaryArray.from_arrays(indices, pa.array(names, pa.string()))

    sources = pa.array([f"images/{i // 1000:05d}/{i:07d}.jpg" for i in range(rows + failed)])
    table = pa.table({
        "key": keys, "source": sources,
        "split": coded(np.concatenate([split_of, failed_split]), splits),
        "label": coded(np.concatenate([label_of, np.zeros(failed, dtype=label_of.dtype)]), LABELS),
        "shard": coded(shard_of, stems, failed),
        "offset": pa.array(np.concatenate([offsets, np.zeros(failed, np.int64)]), mask=_tail_mask(rows, failed)),
        "length": pa.array(np.concatenate([lengths, np.zeros(failed, np.int64)]), mask=_tail_mask(rows, failed)),
        "stored_bytes": pa.array(np.concatenate([lengths - 243, np.zeros(failed, np.int64)]),
                                 mask=_tail_mask(rows, failed)),
        "reason": pa.DictionaryArray.from_arrays(
            pa.array(np.concatenate([np.zeros(rows, np.int32), failed_reason.astype(np.int32)]),
                     mask=np.concatenate([np.ones(rows, bool), np.zeros(failed, bool)])),
            pa.array(REASONS, pa.string())),
        "detail": pa.array([None] * rows + ["generated"] * failed, pa.string()),
    }).cast(image_index.SCHEMA)
    failed_by_reason = {REASONS[r]: int((failed_reason == r).sum()) for r in range(len(REASONS))}
    split_rows = {name: int((split_of == i).sum()) for i, name in enumerate(splits)}
    manifest = {
        "rows": rows + failed, "written": rows, "failed": failed, "created": "generated",
        "splits": {name: {"rows": split_rows[name] + int((failed_split == i).sum()), "written": split_rows[name],
                          "failed": int((failed_split == i).sum()),
                          "shards": sum(s["split"] == name for s in shards)} for i, name in enumerate(splits)},
        "failed_by_reason": failed_by_reason, "shards": shards,
        "config": {"preprocess": dataclass_dict(PreprocessConfig(image_size=224, image_format="jpeg"))},
    }
    with open(layout.manifest_file, "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    with open(layout.errors_file, "w", encoding="utf-8") as f:
        for i in range(failed):
            f.write(json.dumps({"source": sources[rows + i].as_py(), "key": keys[rows + i].as_py(),
                                "split": splits[failed_split[i]], "reason": REASONS[failed_reason[i]],
                                "detail": "generated"}) + "\n")
    image_index.write_index(layout, table)

    # The quality folder: groups of 2-50 members drawn from all images, flags on others.
    quality = os.path.join(folder, "quality")
    os.makedirs(quality, exist_ok=True)
    chosen = rng.permutation(rows)
    grouped = chosen[: rows // 50]
    sizes = []
    while sum(sizes) < len(grouped):
        sizes.append(int(rng.integers(2, 51)))
    sizes[-1] -= sum(sizes) - len(grouped)
    if sizes[-1] < 2:
        sizes[-2] += sizes.pop()
    group_of = np.repeat(np.arange(len(sizes)), sizes)
    member_split = split_of[grouped]
    member_label = label_of[grouped]
    members = pa.table({
        "group": pa.array(group_of, pa.int64()), "key": keys.take(pa.array(grouped)),
        "source": sources.take(pa.array(grouped)), "split": pa.array(np.array(splits)[member_split]),
        "label": pa.array(np.array(LABELS)[member_label]), "match": pa.array(["near"] * len(grouped)),
        "distance": pa.array(rng.integers(0, 10, len(grouped)), pa.int32()),
        "group_size": pa.array(np.repeat(sizes, sizes), pa.int32()), "group_match": pa.array(["near"] * len(grouped)),
        "leak": pa.array([False] * len(grouped)), "label_conflict": pa.array([False] * len(grouped)),
        "clean_split": pa.array(np.array(splits)[member_split]),
    }).cast(GROUP_SCHEMA)
    flagged = np.sort(chosen[rows // 50: rows // 50 + rows // 25])
    flag_of = rng.integers(0, len(FLAGS), len(flagged))
    flags = pa.table({
        "key": keys.take(pa.array(flagged)), "source": sources.take(pa.array(flagged)),
        "split": pa.array(np.array(splits)[split_of[flagged]]), "label": pa.array(np.array(LABELS)[label_of[flagged]]),
        "flags": pa.array([[FLAGS[f]] for f in flag_of], pa.list_(pa.string())),
        "brightness": pa.array(rng.random(len(flagged)) * 255, pa.float32()),
        "contrast": pa.array(rng.random(len(flagged)) * 60, pa.float32()),
        "blur": pa.array(rng.random(len(flagged)) * 100, pa.float32()),
    }).cast(FLAG_SCHEMA)
    quality_layout = QualityLayout(quality)
    pq.write_table(members, quality_layout.path(quality_layout.DUPLICATE_GROUPS_FILE))
    pq.write_table(flags, quality_layout.path(quality_layout.IMAGE_FLAGS_FILE))
    with open(quality_layout.path(quality_layout.SUMMARY_FILE), "w") as f:
        # Shaped as the quality job's: nested figures, and None for what it did not measure (no predictions).
        json.dump({"images": rows, "near_groups": len(sizes), "flagged_images": len(flagged),
                   "suspected_label_errors": None, "clean_split": {"rows": rows, "rows_moved": 1},
                   "thresholds": {"hamming": 8, "embedding_distance": 0.05}}, f)
    with open(quality_layout.manifest_file, "w") as f:
        json.dump({"outputs": {}}, f)
    with open(quality_layout.run_file, "w") as f:
        json.dump({"input_sha256": job_input_sha256(manifest)}, f)
    return {"job": job, "quality": quality, "expected": {
        "images": rows, "failed": failed, "validation": split_rows["validation"],
        "label_" + LABELS[0]: int((label_of == 0).sum()),
        "validation_" + LABELS[0]: int(((split_of == 1) & (label_of == 0)).sum()),
        "reason_" + REASONS[0]: failed_by_reason[REASONS[0]], "flag_" + FLAGS[0]: int((flag_of == 0).sum()),
        "group_0": sizes[0], "groups": len(sizes),
        "group_0_validation": int((split_of[grouped[group_of == 0]] == 1).sum()),
        "flag_" + FLAGS[0] + "_" + LABELS[0]: int(((flag_of == 0) & (label_of[flagged] == 0)).sum()),
        "group_0_keys": keys.take(pa.array(np.sort(grouped[group_of == 0]))).to_pylist()}}


def _tail_mask(rows: int, failed: int) -> np.ndarray:
    return np.concatenate([np.zeros(rows, bool), np.ones(failed, bool)])


def dataclass_dict(value) -> dict:
    import dataclasses

    return dataclasses.asdict(value)


# ------------------------------------------------------------------------------------------- measuring
def _rss_peak_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _start(flags: list[str], log_path: str, env: dict) -> tuple:
    from benchmarks.ui import start

    os.environ.update(env)
    started = time.monotonic()
    process, url = start(flags, log_path)
    return process, url, time.monotonic() - started


def measure_ui(job: str, quality: str | None, predictions: str | None, work: str, requests: int, repeat: int,
            build: bool, thumbnails: int = 0) -> dict:
    """Every figure of the module docstring over the run `job` (and its quality/predictions folders)."""
    import httpx

    from benchmarks.ui import stop

    cache = tempfile.mkdtemp(prefix="ui_cache_", dir=work)
    env = {"XDG_CACHE_HOME": cache, "TF_CPP_MIN_LOG_LEVEL": "3"}
    flags = ["--input_dir", job, "--database", "none"]
    if quality:
        flags += ["--quality_dir", quality]
    if predictions:
        flags += ["--predictions_dir", predictions]
    results: dict = {"input_dir": job, "requests_per_filter": requests}
    log = os.path.join(work, "ui.log")
    if build:  # The cache is empty: the first start builds the index (a read-only run: into the cache).
        process, url, seconds = _start(flags, log, env)
        stop(process)
        results["start_building_index_s"] = [round(seconds, 2)]
        with open(log) as f:
            results["build_lines"] = [line.strip() for line in f if line.startswith("index:")]
    starts = []
    for _ in range(repeat):
        process, url, seconds = _start(flags, log, env)
        starts.append(round(seconds, 2))
        stop(process)
    results["start_with_index_s"] = starts
    process, url, _ = _start(flags, log, env)
    try:
        client = httpx.Client(timeout=60)
        first = client.get(f"{url}/gallery")
        total = int(re.search(r'id="count">(\d+)', first.text).group(1))
        overview = client.get(f"{url}/")
        def options(name: str) -> list[str]:  # The values of one of the gallery form's <select>s.
            block = re.findall(rf'name="{name}">.*?</select>', first.text, re.S)
            return re.findall(r'<option value="([^"]+)"', block[0]) if block else []

        filters: dict[str, dict] = {"none": {}, "split": {"split": "validation"}}
        label = next(iter(options("label")), None)
        if label:
            filters["label"] = {"label": label}
            filters["split+label"] = {"split": "validation", "label": label}
        reason_values = options("reason")
        if reason_values:
            filters["failure reason"] = {"reason": reason_values[0]}
        if quality:
            flag_values = options("flag")
            if flag_values:
                filters["quality flag"] = {"flag": flag_values[-1]}
            groups = re.findall(r'href="/gallery\?group=(\d+)"', client.get(f"{url}/quality").text)
            if groups:
                filters["duplicate group"] = {"group": groups[0]}
        rng = random.Random(0)
        results["filters"] = {}
        for name, params in filters.items():
            response = client.get(f"{url}/gallery", params=params)
            count = int(re.search(r'id="count">(\d+)', response.text).group(1))
            pages = max(1, -(-count // 48))
            times = []
            for _ in range(requests):
                page = rng.randint(1, pages)
                started = time.perf_counter()
                response = client.get(f"{url}/gallery", params={**params, "page": page})
                times.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, (name, page, response.status_code)
            times.sort()
            results["filters"][name] = {"params": params, "rows": count, "pages": pages,
                                        "p50_ms": round(statistics.median(times), 2),
                                        "p99_ms": round(times[min(len(times) - 1, int(0.99 * len(times)))], 2)}
        counts = {}
        for name, path in (("overview (label chart)", "/"), ("failures", "/failures")) + (
                (("quality page", "/quality"),) if quality else ()):
            times = []
            for _ in range(5):
                started = time.perf_counter()
                response = client.get(f"{url}{path}")
                times.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, (path, response.status_code)
            counts[name] = {"max_ms": round(max(times), 1), "bytes": len(response.content)}
        results["counts_and_charts"] = counts
        if thumbnails:  # A real run's images: thumbnails (one record read by offset, decoded, PNG), TF loaded.
            keys = []
            while len(keys) < thumbnails:
                page = rng.randint(1, max(1, -(-total // 48)))
                listed = client.get(f"{url}/gallery", params={"page": page}).text
                keys += re.findall(r'href="/item/([0-9a-f]+)"', listed)
            times = []
            for key in keys[:thumbnails]:
                started = time.perf_counter()
                response = client.get(f"{url}/image/{key}")
                times.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, (key, response.status_code)
            first, rest = times[0], sorted(times[1:])
            results["thumbnails"] = {"count": len(times), "first_ms": round(first, 1),
                                     "p50_ms": round(statistics.median(rest), 2),
                                     "p99_ms": round(rest[min(len(rest) - 1, int(0.99 * len(rest)))], 2)}
        results["gallery_total"] = total
        results["overview_bytes"] = len(overview.content)
        results["server_rss_peak_bytes"] = _rss_peak_bytes(process.pid)
    finally:
        stop(process)
    shutil.rmtree(cache, ignore_errors=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generate", type=int, help="Rows of a generated run (index only, no images).")
    parser.add_argument("--input_dir", help="A real job output instead.")
    parser.add_argument("--quality_dir")
    parser.add_argument("--predictions_dir")
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--requests", type=int, default=200, help="Gallery requests per filter.")
    parser.add_argument("--repeat", type=int, default=3, help="Starts timed with the index present.")
    parser.add_argument("--build", action="store_true", help="Also time a start that builds the index.")
    parser.add_argument("--thumbnails", type=int, default=0,
                        help="Thumbnails to fetch (a real run only), before the RSS is read.")
    args = parser.parse_args(argv)
    if bool(args.generate) == bool(args.input_dir):
        parser.error("give --generate ROWS or --input_dir JOB")
    sys.path.insert(0, os.path.join(REPO, "scripts"))
    work = os.path.abspath(args.work_dir)
    os.makedirs(work, exist_ok=True)
    results: dict = {}
    if args.generate:
        started = time.monotonic()
        run = generated_run(work, args.generate)
        results["generated_seconds"] = round(time.monotonic() - started, 1)
        job, quality = run["job"], run["quality"]
        results["index_bytes"] = os.path.getsize(os.path.join(job, "index.parquet"))
    else:
        job, quality = args.input_dir, args.quality_dir
    results.update(measure_ui(job, quality, args.predictions_dir, work, args.requests, args.repeat, args.build,
                           args.thumbnails))
    with open(os.path.join(work, "ui_results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
