"""job_vs_bare, job_vs_pillow, job_vs_img2dataset and memory_ratio: the Beam job against bare loops
and img2dataset, and its memory.

Each repetition runs, on one image set: the bare TensorFlow loop, the Pillow loop, img2dataset
(img2dataset_loop.py; baselines), then the real command line on N rows and on memory_factor x N
rows (the subject). The job's rate
is marginal between the two runs, so start-up cancels and the difference is (factor - 1) x N
images of work; the same two runs give the peak RSS (launcher + workers) at both sizes.
"""

import dataclasses
import glob
import json
import os

from benchmarks import img2dataset_loop, loops
from benchmarks.data import write_csv
from benchmarks.harness import in_turn, marginal_rate, median, python_command, run_measured
from tf_serving_input.layout import OutputLayout  # No TensorFlow import.


@dataclasses.dataclass
class JobRun:
    wall: float
    manifest: dict
    peak_rss: int
    statuses: list


@dataclasses.dataclass
class JobSection:
    """What later sections reuse: the outputs on N and factor x N rows, and the N-row wall times."""

    csv: str
    out: str
    many_out: str
    rows: int
    many_rows: int
    manifest: dict
    small_walls: list


def run_job(csv_path, out, *extra):
    """Runs the real CLI; returns its JobRun (wall seconds, manifest, peak RSS, shard statuses)."""
    wall, peak = run_measured(python_command("-m", "beam_pipeline", "--input_csv", csv_path, "--output_dir", out,
                                             "--overwrite", "--no_progress", *extra))
    layout = OutputLayout(out)
    statuses = []
    for path in glob.glob(layout.status_files_glob()):
        with open(path) as f:
            statuses.append(json.load(f))
    return JobRun(wall, layout.load_manifest(), peak, statuses)


def steady_seconds_per_image(statuses):
    """In-DoFn seconds per image, leaving out each worker's first shard (TF start-up and tracing)."""
    statuses = [s for s in statuses if s["records"]]  # Empty shards (tiny runs) time nothing.
    by_worker = {}
    for status in statuses:
        by_worker.setdefault(status["worker_pid"], []).append(status)
    steady = [s for shards in by_worker.values() for s in sorted(shards, key=lambda s: s["started"])[1:]]
    steady = steady or statuses  # A worker with a single shard: nothing to leave out.
    return sum(s["seconds"] for s in steady) / max(1, sum(s["records"] for s in steady))


def measure(bench, image_set, out_name):
    """The three ratios on `image_set`; outputs go to work/out_name and work/out_name_many."""
    results, work = bench.results, bench.work
    rows, many = len(image_set.images), len(image_set.images) * bench.args.memory_factor
    small_csv = write_csv(os.path.join(work, f"{out_name}.csv"), image_set.images)
    many_csv = write_csv(os.path.join(work, f"{out_name}_many.csv"), image_set.images, repeat_to=many)
    out, many_out = os.path.join(work, out_name), os.path.join(work, f"{out_name}_many")
    img2dataset = img2dataset_loop.ensure_installed(bench.args.photos_dir)

    def log(repetition, sample):
        small, big = sample["job"]
        results.say(f"   [{image_set.name} {repetition + 1}/{bench.repetitions}] bare loop {sample['bare']:.0f} img/s, "
                    f"Pillow loop {sample['pillow']:.0f}, img2dataset {sample['img2dataset']:.0f}, "
                    f"job marginal {job_rate(small, big):.0f} ({rows} rows "
                    f"{small.wall:.1f} s, {many} rows {big.wall:.1f} s)")

    def job_rate(small, big):
        return marginal_rate((rows, small.wall), (many, big.wall))

    samples = in_turn(bench.repetitions, {
        "bare": lambda _: loops.bare_loop_rate(image_set.paths, bench.config_values),
        "pillow": lambda _: loops.pillow_loop_rate(image_set.paths),
        "img2dataset": lambda _: img2dataset_loop.img2dataset_rate(
            img2dataset, image_set.paths, os.path.join(work, f"img2dataset_{image_set.name}")),
        "job": lambda _: (run_job(small_csv, out), run_job(many_csv, many_out))}, log)
    bare, pillow = samples["bare"], samples["pillow"]
    small_runs, big_runs = [small for small, _ in samples["job"]], [big for _, big in samples["job"]]
    job = [job_rate(small, big) for small, big in samples["job"]]
    manifest = small_runs[-1].manifest
    assert manifest["config"]["preprocess"] == bench.config_values
    results.say(f"1. [{image_set.title}] Beam job (marginal, {rows} vs {many} rows) vs the same TF ops in a bare loop, "
                f"vs a Pillow loop and vs img2dataset:")
    results.ratio("job_vs_bare", image_set.title, [j / b for j, b in zip(job, bare)])
    results.ratio("job_vs_pillow", image_set.title, [j / p for j, p in zip(job, pillow)])
    results.ratio("job_vs_img2dataset", image_set.title, [j / i for j, i in zip(job, samples["img2dataset"])])
    peaks = [(s.peak_rss, b.peak_rss) for s, b in zip(small_runs, big_runs)]
    results.ratio("memory_ratio", image_set.title, [big / small for small, big in peaks],
                  note=f"peak RSS {median([s for s, _ in peaks]) / 2**30:.2f} GiB at {rows} rows, "
                       f"{median([b for _, b in peaks]) / 2**30:.2f} GiB at {many}")
    results.rate(f"Pillow loop ({image_set.name})", pillow)
    results.rate(f"img2dataset, marginal ({image_set.name})", samples["img2dataset"])
    results.rate(f"bare TensorFlow loop ({image_set.name})", bare)
    results.rate(f"Beam job, marginal ({image_set.name})", job)
    return JobSection(small_csv, out, many_out, rows, many, manifest, [run.wall for run in small_runs])
