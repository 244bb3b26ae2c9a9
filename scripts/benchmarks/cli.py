"""`python scripts/benchmark.py`: every measurement in order, then the report."""

import argparse
import dataclasses
import os
import sys
import time

from benchmarks import (
    columns,
    data,
    end_to_end,
    engines,
    fit,
    job,
    predict,
    quality,
    quality_job,
    reader,
    report,
    search,
    shrink,
    stages,
    steps,
    storage,
    ui,
    url_rows,
)
from benchmarks.harness import REPO, MachineShare, Results, tree_cpu_seconds

# `--section NAME` run alone on the light set: NAME -> (its number in the docstring's list, its module).
ALONE = {"steps": (9, steps), "columns": (12, columns), "engines": (13, engines)}


@dataclasses.dataclass
class Bench:
    """What every section gets: the flags, the work folder, the results so far, the job's config."""

    args: argparse.Namespace
    work: str
    results: Results
    config_values: dict

    @property
    def repetitions(self):
        return self.args.repetitions


def parse_args(argv, description):
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000, help="Heavy JPEGs (~500x375, ~110 KiB) to use.")
    parser.add_argument("--light_images", type=int, default=None,
                        help="Light (everyday) JPEGs (~500x375, ~35 KiB, made from sample_data's photos) to use "
                             "(default: as many as --images).")
    parser.add_argument("--large_images", type=int, default=120, help="2.7 MP JPEGs for shrink-on-load.")
    parser.add_argument("--memory_factor", type=int, default=10, help="Rows of the larger runs / --images.")
    parser.add_argument("--seconds", type=float, default=6.0, help="Time per tf.data throughput measurement.")
    parser.add_argument("--search_vectors", type=int, default=100_000, help="Vectors in the search index.")
    parser.add_argument("--quality_hashes", type=int, default=100_000,
                        help="Synthetic hashes of the quality pair-finding run; the larger run has 10x as many.")
    parser.add_argument("--repetitions", type=int, default=3,
                        help="Interleaved repetitions of each baseline/subject pair (3 or more for a result; "
                             "fewer only for smoke runs, which the report marks).")
    parser.add_argument("--workdir", default=os.path.join(REPO, "output", "benchmark"))
    parser.add_argument("--photos_dir", default=os.path.join(REPO, ".cache", "benchmark-photos"),
                        help="Where the real photographs are kept once fetched (see benchmarks/data.py).")
    parser.add_argument("--docs_dir", default=os.path.join(REPO, "docs"))
    parser.add_argument("--readme", default=None,
                        help="The README whose table (between its benchmark-table markers) is rewritten "
                             "(default: README.md beside --docs_dir; left alone when missing).")
    parser.add_argument("--job_only", action="store_true",
                        help="Only the job's sections (1: the job against its baselines, 5: the stage table), on "
                             "both photo sets; prints the ratios and leaves the docs alone (~10 min with "
                             "--memory_factor 4).")
    parser.add_argument("--section", choices=["steps", "lists", "columns", "engines"], default=None,
                        help="Run one section alone on the light set, print its ratios and leave the docs alone: "
                             "'steps' (9: a user's own --image_step, Python and TF, against a sequential loop and "
                             "tf.py_function; smoke: --section steps --light_images 12 --step_images 6 "
                             "--memory_factor 2 --repetitions 1); 'lists' (10: the launcher's peak memory and time "
                             "to the first shard from a --list_rows list as CSV and as Parquet); 'columns' (12: the "
                             "job keeping five extra columns against none; smoke: --section columns "
                             "--light_images 12 --repetitions 1); 'engines' (13: the job's marginal images/s on the "
                             "local runner, the portable runner, Flink embedded and as a standing cluster, and a "
                             "Spark standing cluster, on N and 10 N rows; needs Java 17 and Maven; ~40 min with "
                             "--light_images 1000; smoke: --section engines --light_images 12 --repetitions 1).")
    parser.add_argument("--list_rows", type=int, default=1_000_000,
                        help="Rows of the lists section's CSV and Parquet lists (section 10).")
    parser.add_argument("--step_images", type=int, default=200,
                        help="Light photos the Python-step comparisons use (section 9; at ~40 ms a photo).")
    args = parser.parse_args(argv)
    if args.repetitions < 1:
        parser.error("--repetitions must be at least 1")
    args.readme = args.readme or os.path.join(os.path.dirname(os.path.abspath(args.docs_dir)), "README.md")
    return args


def main(argv=None, description=None):
    """Runs every measurement; prints the ratio table; writes docs/benchmarks.md, the chart, README's table."""
    args = parse_args(argv, description)
    started, share = time.time(), MachineShare()
    os.makedirs(args.workdir, exist_ok=True)
    os.makedirs(args.docs_dir, exist_ok=True)
    from tf_serving_input.features import PreprocessConfig  # No TensorFlow import.

    bench = Bench(args, args.workdir, Results(), PreprocessConfig().to_dict())
    say = bench.results.say
    if args.section == "lists":  # No photographs to fetch, no ratios: figures for docs/million_rows.md.
        from benchmarks import lists

        lists.measure(os.path.join(bench.work, "lists"), args.list_rows)
        return 0
    if args.section in ALONE:  # The light set alone: no photographs to fetch.
        number, section = ALONE[args.section]
        light = data.make_set("light", bench.work, data.sample_photos(), args.light_images or args.images, data.LIGHT)
        say(f"dataset: {len(light.images)} light JPEGs ({light.average_kib:.0f} KiB avg); {os.cpu_count()} cores; "
            f"{args.repetitions} interleaved repetitions; section {number} alone")
        section.measure(bench, light)
        for ratio in bench.results.ratios:
            say(f"{ratio.name} [{ratio.images}]: {ratio.summary()}{f'; {ratio.note}' if ratio.note else ''}")
        return 0
    photos = data.fetch_photos(args.photos_dir)
    heavy = data.make_set("heavy", bench.work, photos, args.images, data.HEAVY)
    light = data.make_set("light", bench.work, data.sample_photos(), args.light_images or args.images, data.LIGHT)
    large = data.make_set("large", bench.work, photos, args.large_images, data.LARGE)
    say(f"dataset: {len(heavy.images)} heavy JPEGs ~500x375 ({heavy.average_kib:.0f} KiB avg; ImageNet's ~110), "
        f"{len(light.images)} light ({light.average_kib:.0f} KiB avg), {len(large.images)} large ~1900x1425, cropped "
        f"from {len(photos)} real photos; {os.cpu_count()} cores; {args.repetitions} interleaved repetitions")

    jobs = {image_set.name: job.measure(bench, image_set, out_name)
            for image_set, out_name in ((heavy, f"out_{bench.config_values['image_format']}"), (light, "out_light"))}
    if args.job_only:
        stages.measure(bench, (heavy, light))
        for ratio in bench.results.ratios:
            say(f"{ratio.name} [{ratio.images}]: {ratio.summary()}")
        return 0
    storage.measure(bench, jobs["heavy"])
    for image_set in (heavy, light):
        reader.measure(bench, image_set, jobs[image_set.name], records_ratios=image_set is heavy)
    for image_set in (heavy, light):
        end_to_end.measure(bench, image_set, jobs[image_set.name])
    shrink.measure(bench, large)
    stages.measure(bench, (heavy, light))
    fit.measure(bench)
    url_rows.measure(bench, light)
    steps.measure(bench, light)
    columns.measure(bench, light)
    quality.measure(bench)
    quality_job.measure(bench, jobs["heavy"])

    from beam_pipeline.database.server import EmbeddedServer

    server = EmbeddedServer(os.path.join(bench.work, "postgres"))
    server.start()  # Held for the whole section: the predict runs join it, the COPY and search use it.
    try:
        embedding = predict.measure(bench, jobs["heavy"], server)
        search.measure(bench, server.url(), embedding)
        # The UI over the heavy set's job and the predictions of it the predict section left (table bench_small).
        ui.measure(bench, server.url(), jobs["heavy"].out, os.path.join(bench.work, "predict_small"),
                   os.path.join(bench.work, "export"), "bench_small", heavy.paths)
    finally:
        share.add_own(tree_cpu_seconds(server.pid()) if server.pid() else 0.0)
        server.release()

    command = " ".join(["python scripts/benchmark.py", *(argv if argv is not None else sys.argv[1:])])
    finish(bench.results, args, command.strip(), time.time() - started, (heavy, light, large),
           share.others_fraction())
    return 0


def finish(results, args, command, elapsed, image_sets, others):
    """After the sections: fails if any figure is missing, else prints the ratio table and writes
    docs/benchmarks.md, the chart and README's table. `image_sets`: (heavy, light, large)."""
    missing = report.missing_figures(results, [image_set.title for image_set in image_sets[:2]])
    if missing:  # A section that stopped recording a figure fails the run, not a report without it.
        raise RuntimeError(f"the benchmark did not measure: {', '.join(missing)}")
    table, chart, readme_line = report.write(
        results, docs_dir=args.docs_dir, readme=args.readme, command=command, elapsed=elapsed,
        repetitions=args.repetitions, image_sets=image_sets, others=others)
    print("\n" + "\n".join(table))
    print(f"\nwrote {os.path.join(args.docs_dir, 'benchmarks.md')} and {chart} in {elapsed / 60:.1f} min; "
          f"{readme_line}")
