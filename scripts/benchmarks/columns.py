"""columns_vs_none: the job keeping five extra columns against the same job keeping none, marginal rates, same run.

Issue 52 (10a): the same light-set rows, once with five kept columns (a 200-character caption, 1-4 labels, a
float, an int, 1-3 boxes: `--column caption:text tags:labels score:float count:int objects:boxes`) and once
without them. Each repetition runs both CSVs on N and 4N rows, in turn; the ratio is the columns' marginal
images/s over the plain job's (target >= 0.95: reading, typing and writing the columns costs under 5%).
"""

import csv
import os
import random

from benchmarks.harness import in_turn, marginal_rate, python_command, run_measured

FACTOR = 4
COLUMNS = (("caption", "text"), ("tags", "labels"), ("score", "float"), ("count", "int"), ("objects", "boxes"))
WORDS = ("a", "photo", "of", "the", "cat", "on", "red", "sofa", "near", "window", "\u00e9t\u00e9", "dog")


def extra_cells(rng):
    """One row's cells of COLUMNS: a 200-character caption, 1-4 labels, a float, an int, 1-3 boxes."""
    caption = " ".join(rng.choice(WORDS) for _ in range(80))[:200].ljust(200, ".")
    tags = "|".join(rng.sample(["cat", "dog", "sofa", "indoor", "red", "pet"], rng.randint(1, 4)))
    boxes = []
    for _ in range(rng.randint(1, 3)):
        x, y = rng.random() / 2, rng.random() / 2
        boxes.append(f"{x:.4f} {y:.4f} {x + rng.random() / 2:.4f} {y + rng.random() / 2:.4f}")
    return [caption, tags, f"{rng.random():.6f}", str(rng.randint(-10**9, 10**9)), "|".join(boxes)]


def write_csv(path, images, rows, columns):
    rng = random.Random(52)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label", "split", *([name for name, _ in COLUMNS] if columns else [])])
        for i in range(rows):
            image, label = images[i % len(images)]
            writer.writerow([image, label, "train", *(extra_cells(rng) if columns else [])])
    return path


def measure(bench, image_set):
    """columns_vs_none on `image_set` (the light set: its decode costs least, so the columns weigh most)."""
    results, work = bench.results, bench.work
    rows = len(image_set.images)
    csvs = {(kind, size): write_csv(os.path.join(work, f"columns_{kind}_{size}.csv"), image_set.images, size,
                                    kind == "columns")
            for kind in ("none", "columns") for size in (rows, FACTOR * rows)}
    flags = {"none": [], "columns": [flag for name, kind in COLUMNS for flag in ("--column", f"{name}:{kind}")]}

    def job_rate(kind):
        walls = []
        for size in (rows, FACTOR * rows):
            wall, _ = run_measured(python_command(
                "-m", "beam_pipeline", "--input_csv", csvs[(kind, size)], "--output_dir",
                os.path.join(work, f"columns_out_{kind}_{size}"), "--overwrite", "--no_progress", *flags[kind]))
            walls.append((size, wall))
        return marginal_rate(*walls)

    def log(repetition, sample):
        results.say(f"   [columns {repetition + 1}/{bench.repetitions}] none {sample['none']:.0f} img/s, five "
                    f"columns {sample['columns']:.0f} img/s")

    samples = in_turn(bench.repetitions, {"none": lambda _: job_rate("none"), "columns": lambda _: job_rate("columns")},
                      log)
    results.say(f"12. [{image_set.title}] the job keeping five extra columns vs none (marginal, {rows} vs "
                f"{FACTOR * rows} rows):")
    results.ratio("columns_vs_none", image_set.title,
                  [columns / none for columns, none in zip(samples["columns"], samples["none"])])
    results.rate(f"Beam job with five kept columns, marginal ({image_set.name})", samples["columns"])
