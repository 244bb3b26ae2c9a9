"""quality_pairs_time_10x, quality_pairs_peak_rss_gib, quality_recall, quality_precision: the quality job's pairs.

Pair finding (beam_pipeline/quality/pairs.py: banded hashing on a GroupByKey) on N and 10 N synthetic
64-bit hashes (--quality_hashes N, 100,000 by default), each run in a fresh process on the in-process
FnApiRunner (one worker, so the process's peak RSS is the whole stage's). The hashes are made inside the
pipeline (Create of chunk numbers, then each chunk's hashes from its seed); 1% of them are planted
near-duplicates of another hash within the guaranteed distance (`guaranteed_distance` flipped bits), so
every planted pair must be found. Ratio: 10 N's time over N's (target <= 12); peak RSS at 10 N (target
<= 2 GiB at a million).

Accuracy: near-duplicates made from the project's real photos (benchmarks/planted.py: disjoint tiles of
sample_data's photos, each transformed by every class the issue names), stored as the job stores them,
hashed by the job's signals and paired by the job's pair finding at its default thresholds.

    python -m benchmarks.quality --hashes 100000      # one stage run: prints a JSON line
"""

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks.harness import REPO, in_turn, proc_field_bytes

SMALL = 100_000
CHUNK = 10_000  # Hashes are made in chunks of this many (the smallest run)
PLANTED_EVERY = 100  # One hash in a hundred is a near-copy of the hash before it.


def chunk_hashes(chunk, flips_per_copy, seed=0):
    """[(id, hash)] signed int64s of one chunk: random hashes, every PLANTED_EVERY-th a near-copy of the one before."""
    from beam_pipeline.quality.pairs import as_signed

    rng = np.random.default_rng([seed, chunk])
    hashes = rng.integers(0, 2**63, CHUNK, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, CHUNK, np.uint64)
    for i in range(PLANTED_EVERY - 1, CHUNK, PLANTED_EVERY):
        flips = rng.choice(64, size=flips_per_copy, replace=False)
        hashes[i] = hashes[i - 1] ^ np.bitwise_or.reduce(np.uint64(1) << flips.astype(np.uint64))
    ids = np.arange(chunk * CHUNK, (chunk + 1) * CHUNK, dtype=np.int64)
    return list(zip(ids.tolist(), as_signed(hashes).tolist(), strict=True))


def stage(count, folder, max_distance, band_bits, band_step, max_bucket):
    """Runs the pair finding on `count` synthetic hashes; {"seconds", "pairs", "planted", "planted_found"}."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.common import runners
    from beam_pipeline.quality.pairs import FindHashPairs, guaranteed_distance

    options = PipelineOptions(["--runner=FnApiRunner", "--direct_num_workers=1", "--direct_running_mode=in_memory"])
    prefix = os.path.join(folder, f"pairs_{count}")
    started = time.perf_counter()
    with beam.Pipeline(runner=runners.local_runner(options), options=options) as pipeline:
        _ = (pipeline
             | "Chunks" >> beam.Create(range(count // CHUNK))
             # chunk number
             | "SpreadChunks" >> beam.Reshuffle()
             # chunk number
             | "Hashes" >> beam.FlatMap(chunk_hashes, guaranteed_distance(band_bits, band_step))
             # (id, hash)
             # As the quality job runs it: spanning edges (a planted pair of two is its own edge).
             | "FindPairs" >> FindHashPairs(max_distance, band_bits, band_step, max_bucket, spanning=True)
             # (id_a, id_b, distance)
             | "Format" >> beam.Map(lambda pair: f"{pair[0]} {pair[1]}")
             | "Write" >> beam.io.WriteToText(prefix, num_shards=1))
    seconds = time.perf_counter() - started
    with open(prefix + "-00000-of-00001") as f:
        found = {tuple(map(int, line.split())) for line in f}
    planted = {(i - 1, i) for i in range(PLANTED_EVERY - 1, count, PLANTED_EVERY)}
    return {"seconds": seconds, "pairs": len(found), "planted": len(planted),
            "planted_found": len(planted & found)}


def stage_in_process(count, folder):
    """`stage` in a fresh Python process at the job's default thresholds, with that process's peak RSS."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.path.join(REPO, "scripts")]))
    out = subprocess.run([sys.executable, "-m", "benchmarks.quality", "--hashes", str(count), "--workdir", folder],
                         env=env, check=True, capture_output=True, text=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def with_copies(found, hashes):
    """The pairs of positions `found` stands for: pair finding compares the images of one hash as one member
    (pairs.py, "Copies"), so a pair of two hashes' representatives holds for every image of each, and the
    images of one hash are pairs at distance 0. What the groups are built from, as pairs to score."""
    holders = {}
    for position, value in enumerate(hashes.tolist()):
        holders.setdefault(value, []).append(position)
    pairs = {(x, y) for same in holders.values() for i, x in enumerate(same) for y in same[i + 1:]}
    for a, b in found:
        pairs |= {(min(x, y), max(x, y)) for x in holders[int(hashes[a])] for y in holders[int(hashes[b])] if x != y}
    return pairs


def planted_accuracy(image_size=224, max_distance=None, band_bits=None, band_step=None):
    """The accuracy dict of benchmarks.planted.accuracy at the job's default thresholds (real photos)."""
    import tensorflow as tf

    from beam_pipeline.quality.cli import QualityConfig
    from beam_pipeline.quality.pairs import band_bits as bands_of
    from beam_pipeline.quality.pairs import band_values, brute_force_pairs, partition_pairs
    from beam_pipeline.quality.signals import image_signals_graph
    from benchmarks import planted
    from tf_serving_input.features import PreprocessConfig

    defaults = QualityConfig(input_dir="", output_dir="")
    max_distance = defaults.hash_distance if max_distance is None else max_distance
    bands = bands_of(defaults.hash_band_bits if band_bits is None else band_bits,
                     defaults.hash_band_step if band_step is None else band_step)
    items = planted.planted_set(planted.distinct_pictures())
    images = planted.stored_images(items, PreprocessConfig(image_size=image_size))
    hashes = image_signals_graph(tf.constant(images))["phash"].numpy().view(np.uint64)
    ids = np.arange(len(items), dtype=np.int64)
    found = set()
    values = band_values(hashes, bands)
    for band in range(len(bands)):  # Every bucket of the band, verified by what FindHashPairs' workers run.
        _, band_pairs = partition_pairs(ids, hashes, values[:, band], band, max_distance, defaults.max_bucket)
        found |= {(a, b) for a, b, _ in band_pairs}
    result = planted.accuracy(items, hashes, with_copies(found, hashes))
    result["found_pairs"] = with_copies(found, hashes)
    result["all_pairs_found"] = len(with_copies({(a, b) for a, b, _ in brute_force_pairs(ids, hashes, max_distance)},
                                                hashes))
    result["thresholds"] = {"hash_distance": max_distance, "bands": len(bands)}
    return result


def planted_embedding_accuracy(export_dir, image_size=224):
    """The embedding signal on the planted photos, by an export's serving_default (as the predict job embeds).

    Every pair's real cosine distance (the job verifies the candidates its bands propose, a subset), at the
    former fixed --embedding_distance 0.05 and at the calibrated distance (labels: each photo's class; one
    picture by the perceptual hash, as findings.py decides). Returns {"fixed"/"calibrated": accuracy dict with
    "distance" and "largest_group"}, and the calibration's note.
    """
    import tensorflow as tf

    from beam_pipeline.common.query_embedding import QueryEmbedder
    from beam_pipeline.quality import embedding_pairs, groups
    from beam_pipeline.quality.cli import QualityConfig
    from beam_pipeline.quality.pairs import hamming
    from beam_pipeline.quality.signals import image_signals_graph
    from benchmarks import planted
    from tf_serving_input.features import PreprocessConfig

    defaults = QualityConfig(input_dir="", output_dir="")
    items = planted.planted_set(planted.distinct_pictures())
    hashes = image_signals_graph(tf.constant(planted.stored_images(items, PreprocessConfig(image_size=image_size))))[
        "phash"].numpy().view(np.uint64)
    embedder = QueryEmbedder(export_dir)
    vectors = np.stack([embedder.embed(data) for _, _, _, data in items])
    distances = 1.0 - vectors @ vectors.T
    keys = [name for name, _, _, _ in items]
    labels = {name: next(c for c in planted.CLASSES if base.startswith(c)) for name, _, base, _ in items}
    position = {key: i for i, key in enumerate(keys)}
    verified_to = embedding_pairs.verify_distance(None, defaults.label_error_distance)
    upper = np.triu_indices(len(items), 1)
    close = distances[upper] <= verified_to
    neighbours = [(keys[a], keys[b], float(d)) for a, b, d in zip(upper[0][close], upper[1][close],
                                                                   distances[upper][close], strict=True)]

    def same_picture(a, b):
        i, j = position[a], position[b]
        return int(hamming(hashes[i:i + 1], hashes[j])[0]) <= defaults.hash_distance

    chosen = embedding_pairs.choose_distance(None, neighbours, labels, same_picture, verified_to)
    out = {"calibration": chosen.note}
    for name, distance in (("fixed", embedding_pairs.AUTO_MAX_DISTANCE), ("calibrated", chosen.distance)):
        found = [(position[a], position[b]) for a, b, d in neighbours if d <= distance]
        result = planted.accuracy(items, hashes, found)
        result["distance"] = distance
        result["largest_group"] = groups.largest_set(len(items), found)
        out[name] = result
    # The job's pairs, hash and embedding together: before (every embedding pair within 0.05 joined the
    # groups) and now (findings.plan decides whether the calibrated embedding pairs are used).
    from beam_pipeline.quality import findings

    hash_pairs = planted_accuracy(image_size)["found_pairs"]
    config = dataclasses.replace(defaults, predictions_dir="predictions")
    images = groups.Images(keys=keys, splits=["train"] * len(keys), labels=[labels[k] for k in keys], hashes=hashes,
                           digests=[(i, i) for i in range(len(keys))])
    planned = findings.plan(config, images, sorted(hash_pairs), neighbours)
    for name, embedding in (("job_before", out["fixed"]), ("job_now", out["calibrated"])):
        used = name == "job_before" or planned.embedding["used"]
        distance = embedding["distance"]
        pairs = set(hash_pairs) | ({(position[a], position[b]) for a, b, d in neighbours if d <= distance}
                                   if used else set())
        result = planted.accuracy(items, hashes, pairs)
        result["embedding_used"] = used
        result["largest_group"] = groups.largest_set(len(items), pairs)
        out[name] = result
    out["job_now"]["warnings"] = planned.warnings
    return out


def measure(bench):
    from beam_pipeline.quality.cli import QualityConfig

    small = max(CHUNK, bench.args.quality_hashes // CHUNK * CHUNK)
    large = 10 * small
    folder = os.path.join(bench.work, "quality_pairs")
    os.makedirs(folder, exist_ok=True)
    defaults = QualityConfig(input_dir="", output_dir="")

    def log(repetition, sample):
        one, ten = sample["small"], sample["large"]
        bench.results.say(f"   [{repetition + 1}/{bench.repetitions}] {small:,}: {one['seconds']:.1f} s; "
                          f"{large:,}: {ten['seconds']:.1f} s ({ten['peak_rss_bytes'] / 2**30:.2f} GiB peak), "
                          f"planted found {ten['planted_found']}/{ten['planted']}")

    runs = in_turn(bench.repetitions, {"small": lambda r: stage_in_process(small, folder),
                                       "large": lambda r: stage_in_process(large, folder)}, log)
    bench.results.say(f"8. quality pair finding (bands of {defaults.hash_band_bits} bits every "
                      f"{defaults.hash_band_step}, distance {defaults.hash_distance}) "
                      f"on {small:,} and {large:,} synthetic hashes, 1% planted near-duplicates:")
    bench.results.ratio("quality_pairs_time_10x", f"{large:,} vs {small:,} hashes",
                        [b["seconds"] / a["seconds"] for a, b in zip(runs["small"], runs["large"], strict=True)])
    bench.results.ratio("quality_pairs_peak_rss_gib", f"{large:,} hashes",
                        [run["peak_rss_bytes"] / 2**30 for run in runs["large"]])
    result = planted_accuracy()
    classes = ", ".join(f"{name} {entry['found']}/{entry['planted']}" for name, entry in result["classes"].items())
    bench.results.say(f"   planted near-duplicates of real photos: {classes}; {result['false_pairs']} false of "
                      f"{result['pairs']} pairs")
    bench.results.ratio("quality_recall", "planted pairs of real photos", [result["recall"]])
    bench.results.ratio("quality_precision", "pairs found among distinct real photos", [result["precision"]])


def main(argv=None):
    from beam_pipeline.quality.cli import QualityConfig

    parser = argparse.ArgumentParser(description="One run of the quality job's pair finding on synthetic hashes.")
    parser.add_argument("--hashes", type=int, default=SMALL)
    parser.add_argument("--embeddings", metavar="EXPORT_DIR",
                        help="Instead: the embedding signal's recall and precision on the planted photos with this "
                             "export (e.g. output/sample/serving_model), at 0.05 and calibrated; prints JSON.")
    parser.add_argument("--workdir", default=os.path.join(REPO, "output", "benchmark", "quality_pairs"))
    args = parser.parse_args(argv)
    if args.embeddings:
        print(json.dumps(planted_embedding_accuracy(args.embeddings)))
        return
    os.makedirs(args.workdir, exist_ok=True)
    defaults = QualityConfig(input_dir="", output_dir="")
    result = stage(args.hashes, args.workdir, defaults.hash_distance, defaults.hash_band_bits, defaults.hash_band_step,
                   defaults.max_bucket)
    # VmHWM: this process's own peak. ru_maxrss is not: exec carries the launching process's peak into it
    # (Linux counts the replaced memory map), so under the benchmark every run read as the benchmark's 3.16 GiB.
    result["peak_rss_bytes"] = proc_field_bytes("self", "status", "VmHWM:")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
