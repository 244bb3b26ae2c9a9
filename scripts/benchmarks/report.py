"""The report: docs/benchmarks.md, the throughput chart, and README's table between its markers.

Every figure comes from the run that writes it: a ratio's median, its min-max over the
interleaved repetitions, and whether the median meets the target. No best-of-N.
"""

import datetime
import importlib.metadata
import os
import platform

from benchmarks.harness import CORES
from benchmarks.targets import PER_IMAGE_SET, SECTION_ALONE, TABLES, TARGETS, target_text

README_BEGIN = "<!-- benchmark-table:begin -->"
README_END = "<!-- benchmark-table:end -->"

# What each ratio compares, in one line (subject vs baseline).
MEANING = {
    "job_vs_bare": "Beam job (marginal over N vs 10 N rows) vs the same TensorFlow ops in a bare multiprocessing loop",
    "job_vs_pillow": "Beam job (marginal) vs a Pillow loop (libjpeg-turbo, antialiased resize, crop, JPEG encode)",
    "job_vs_img2dataset": "Beam job (marginal) vs img2dataset 1.47 over file:// URLs of the same JPEGs (marginal; "
                          "224 px center crop, webdataset shards, one process per core)",
    "memory_ratio": "peak RSS of the job (launcher + workers), 10 N vs N rows",
    "reader_vs_after": "reader (raw storage, evaluation) vs the tf.data guide's 'after' from the JPEGs",
    "reader_vs_same_work": "reader vs plain tf.data over the same records (per-record parse + decode, "
                           "per-image normalization)",
    "train_reader_vs_no_augment": "training reader with its default augmentation vs `augment=False`",
    "train_reader_vs_after": "training reader with its default augmentation vs 'after'",
    "end_to_end_1_epoch": "'after' for 1 epoch vs the job + 1 epoch of the reader (seconds / seconds)",
    "end_to_end_10_epochs": "'after' for 10 epochs vs the job + 10 epochs of the reader",
    "shrink_speedup": "job seconds per image, full JPEG decode vs shrink-on-load, on 2.7 MP photos",
    "shrink_psnr": "PSNR (dB) of the shrink-on-load output against full decode, minimum over the photos",
    "predict_vs_model_predict": "predict job (marginal) vs `model.predict` over `make_dataset` (marginal, warmed up)",
    "load_vs_bare_copy": "database load (first load: COPY straight into the keyed table, marginal) vs a bare COPY",
    "search_p50_ms": "search k=10 through the HNSW index, median latency (ms)",
    "search_p99_ms": "search k=10, 99th percentile latency (ms)",
    "search_recall_at_10": "recall@10 of that search against exact neighbours (default ef_search)",
    "filtered_search_p50_ms": "search k=10 filtered to a label on 1% of rows (iterative scan), median latency (ms)",
    "filtered_search_p99_ms": "that filtered search, 99th percentile latency (ms)",
    "filtered_search_recall_at_10": "recall@10 of the filtered search against exact search over that label's rows",
    "index_build_sized_speedup": "HNSW build time at PostgreSQL's default 64 MB / at the memory sized for the graph",
    "index_append_vs_rebuild": "adding a tenth more rows: drop + insert + rebuild / inserting into the index (s / s)",
    "predict_memory_ratio": "peak RSS of the predict job, 10 N vs N rows",
    "ui_search_p50_ms": "web UI search by upload (POST /search, k=10: checks, serving_default, pgvector), median (ms)",
    "ui_search_p99_ms": "web UI search by upload, 99th percentile latency (ms)",
    "ui_thumbnail_p50_ms": "web UI thumbnail of a stored image not asked for before (GET /image/KEY), median (ms)",
    "ui_overview_50_answered": "fraction of 50 concurrent overview requests the web UI answered 200",
    "quality_pairs_time_10x": "quality job's pair finding (banded GroupByKey), 10 N vs N synthetic hashes (time)",
    "quality_pairs_peak_rss_gib": "peak RSS (GiB) of that pair finding on 10 N hashes, in one process",
    "quality_recall": "planted near-duplicates of real photos found (every transformation class)",
    "quality_precision": "pairs found that are true duplicates (distinct photos kept apart)",
    "quality_job_vs_reader": "whole quality job (real CLI, marginal N vs 10 N rows) / the reader over the same records",
    "fit_reader_vs_arrays": "a small CNN's `fit` through the reader (raw storage, no augmentation) vs from arrays in "
                            "memory (images/s)",
    "fit_cached_jpeg_vs_arrays": "that fit through the reader over JPEG storage with `cache=True` vs from arrays",
    "fit_accuracy_difference": "largest validation accuracy difference between those reader fits and the arrays fit",
    "url_rows_vs_files": ("the job on URL rows served 50 ms away (loopback, one host, --url_per_host 64) vs on the "
                          "same files, marginal"),
    "step_gil_job_vs_loop": ("the job with a pure-Python, GIL-bound step (--image_step, 2 workers, marginal) vs "
                             "a sequential loop of decode, step, resize (moonshot 1.9)"),
    "step_numpy_job_vs_loop": ("the job with a NumPy filter step that releases the GIL vs that sequential loop "
                               "(moonshot 1.9)"),
    "step_gil_job_vs_py_function": ("the job with the GIL-bound step vs 'after' with the step in tf.py_function "
                                    "(AUTOTUNE)"),
    "step_numpy_job_vs_py_function": ("the job with the NumPy filter step vs 'after' with it in tf.py_function "
                                      "(AUTOTUNE)"),
    "step_memory_ratio": "peak RSS of the job with a Python step (launcher + workers), memory_factor x N vs N rows",
    "tf_step_job_vs_no_step": ("the job with a trivial TF step (identity, --image_step) vs the job without one, "
                               "marginal"),
    "columns_vs_none": ("the job keeping five extra columns (200-character caption, 1-4 labels, float, int, 1-3 "
                        "boxes) vs the job keeping none, marginal"),
    "portable_vs_local": "the job on Beam's portable runner with a separate worker pool vs the local runner, marginal",
    "flink_embedded_vs_local": "the job on embedded Flink (run_flink.sh's default) vs the local runner, marginal",
    "flink_cluster_vs_local": "the job on a standing Flink cluster (2 TaskManagers) vs the local runner, marginal",
    "spark_cluster_vs_local": "the job on a standing Spark cluster (2 workers) vs the local runner, marginal",
}


def missing_figures(results, image_set_titles):
    """What a run failed to record: every ratio of TARGETS, each PER_IMAGE_SET ratio on each of
    `image_set_titles` (the photo sets its sections measured), and every table of TABLES. An empty
    list when nothing is missing."""
    recorded = {(r.name, r.images) for r in results.ratios}
    names = {name for name, _ in recorded}
    missing = [name for name in TARGETS if name not in names and name not in SECTION_ALONE]
    missing += [f"{name} [{title}]" for name in PER_IMAGE_SET if name in names
                for title in image_set_titles if (name, title) not in recorded]
    return missing + [f"the table {title!r}" for title in TABLES if not results.tables.get(title)]


def versions():
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


def verdict(ratio):
    return {True: "yes", False: "**no**", None: "no target"}[ratio.met]


def range_text(ratio):
    if ratio.exact:
        return "exact, measured once"
    return "one repetition" if len(ratio.samples) == 1 else f"{ratio.low:.2f}-{ratio.high:.2f}"


def ratio_table(ratios):
    lines = ["| measurement | images | median | min-max | target | median meets |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.name} | {r.images} | {r.median:.2f} | {range_text(r)} | {target_text(r.name)} | {verdict(r)} |"
              for r in ratios]
    return lines


def met_counts(ratios):
    """(targets met by the median, ratios with a target)."""
    with_target = [r for r in ratios if r.met is not None]
    return sum(r.met for r in with_target), len(with_target)


def readme_block(ratios, repetitions, machine_line):
    """README's table, between the markers: the same figures as docs/benchmarks.md, in words."""
    met, total = met_counts(ratios)
    missed = sorted({f"`{r.name}` ({r.images})" for r in ratios if r.met is False})
    lines = [README_BEGIN,
             f"Latest run ({machine_line}; {repetitions} interleaved repetitions, each ratio their median and "
             f"min-max; the median meets {met} of {total} targets"
             + (f", not {', '.join(missed)}" if missed else "") + "; generated by `scripts/benchmark.py`, "
             "details in [`docs/benchmarks.md`](docs/benchmarks.md)):", "",
             "| ratio | what it compares | images | median (min-max) | target |", "|---|---|---|---|---|"]
    for r in ratios:
        spread = "" if len(r.samples) == 1 else f" ({r.low:.2f}-{r.high:.2f})"
        mark = {True: "", False: " (not met)", None: ""}[r.met]
        lines.append(f"| `{r.name}` | {MEANING[r.name]} | {r.images} | {r.median:.2f}{spread} | "
                     f"{target_text(r.name)}{mark} |")
    return lines + [README_END]


def update_readme(path, block):
    """Replaces what lies between README's markers with `block`; returns a line saying what happened."""
    if not os.path.exists(path):
        return f"no {path}: README table not written"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    begin, end = text.find(README_BEGIN), text.find(README_END)
    if begin < 0 or end < begin:
        return f"{path} has no {README_BEGIN} ... {README_END} markers: README table not written"
    updated = text[:begin] + "\n".join(block) + text[end + len(README_END):]
    with open(path, "w", encoding="utf-8") as f:
        f.write(updated)
    return f"wrote the table in {path}"


def bar_chart(rates, path):
    """A horizontal bar chart of median rates per second (PIL only)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default()
    width, bar_height, label_width = 1000, 24, 400
    image = Image.new("RGB", (width, 40 + bar_height * len(rates) + 10), "white")
    draw = ImageDraw.Draw(image)
    draw.text((10, 10), f"per second on {CORES} cores, medians (higher is better), {datetime.date.today()}",
              fill="black", font=font)
    top = max(rates.values())
    for i, (name, rate) in enumerate(rates.items()):
        y = 40 + i * bar_height
        draw.text((10, y + 6), name, fill="black", font=font)
        length = int((width - label_width - 90) * rate / top)
        draw.rectangle((label_width, y + 4, label_width + length, y + bar_height - 4), fill=(66, 133, 244))
        draw.text((label_width + length + 6, y + 6), f"{rate:,.0f}", fill="black", font=font)
    image.save(path)


def machine_lines(others):
    """(README's words on the machine, the report's sentence on it) for the CPU share other processes took.

    Under 1% is said as nothing else running: "shared with other work, which took 0%" read as the opposite.
    """
    if others < 0.005:
        return (f"{CORES} cores, nothing else running",
                f"**Nothing else ran on the machine during this run:** processes outside this benchmark used "
                f"under 1% of the {CORES} cores' time")
    return (f"{CORES} cores shared with other work, which took {others:.0%} of their time",
            f"**Other work shared the machine during this run:** processes outside this benchmark (other "
            f"people's tests and jobs) used {others:.0%} of the {CORES} cores' time over the run")


def write(results, *, docs_dir, readme, command, elapsed, repetitions, image_sets, others):
    """Writes docs_dir/benchmarks.md and the chart, README's table; returns (the ratio table's lines,
    the chart's path, a line on README). `others`: the CPU share other processes took (MachineShare)."""
    chart = os.path.join(docs_dir, "benchmark_throughput.png")
    rates = results.median_rates()
    bar_chart(rates, chart)
    table = ratio_table(results.ratios)
    met, total = met_counts(results.ratios)
    machine_line, shared = machine_lines(others)
    throughput = ["| pipeline | per second, median | min-max |", "|---|---|---|"] + [
        f"| {name} | {rates[name]:.0f} | {min(samples):.0f}-{max(samples):.0f} |"
        for name, samples in results.rates.items()]
    too_few = ([f"**{repetitions} repetition(s) only: a smoke run, not a measurement** (ratios need at least 3).", ""]
               if repetitions < 3 else [])
    document = [
        "# Benchmarks", "",
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {CORES} cores "
        f"({cpu_model()}), Python {platform.python_version()}, " +
        ", ".join(f"{k} {v}" for k, v in versions().items()) + f"; {elapsed / 60:.1f} minutes.", "",
        f"Command: `{command}`", "",
        f"{shared}. Absolute numbers mean little here; "
        "each ratio compares two things measured in the same run on the same images and cores, one right "
        f"after the other, in {repetitions} interleaved repetitions (baseline, subject, baseline, subject, ...). "
        "The tables give each ratio's median and its min-max over those repetitions, and whether the "
        f"**median** meets the target: {met} of {total} do. No best-of-N.", "",
        *too_few,
        "Images: crops of real photographs (scripts/benchmarks/data.py), " +
        "; ".join(f"{s.name}: {len(s.images)} JPEGs, {s.average_kib:.0f} KiB on average" for s in image_sets) +
        ". The heavy set is like ImageNet's validation photos (~110 KiB at ~500x375), where decoding "
        "dominates; the light set is like much of its training set, where resizing costs as much. Ratios "
        "that only see the job's 224 px records (or the predictions, or the vectors) are measured once, "
        "not per set.", "",
        "![throughput](benchmark_throughput.png)", "",
        "## Ratios against targets", "", *table, "",
        "What each compares (subject vs baseline):", "",
        *[f"- `{name}`: {meaning}." for name, meaning in MEANING.items()], "",
        *[f"- `{r.name}` [{r.images}]: {r.note}." for r in results.ratios if r.note], "",
        "## Throughput", "", *throughput, "",
        *[line for title, lines in results.tables.items() for line in (f"## {title}", "", *lines, "")],
        "## Log", "", "```", *results.lines, "```", ""]
    with open(os.path.join(docs_dir, "benchmarks.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(document))
    readme_line = update_readme(readme, readme_block(results.ratios, repetitions, machine_line))
    return table, chart, readme_line
