"""quality_job_vs_reader: the whole quality job against reading the same records with the reader (issue 22).

Subject: the quality job's real command line (`python -m beam_pipeline.quality`, its default local runner,
one worker per core) on the job section's two outputs, N and memory_factor x N rows of the heavy set;
its rate is marginal between the two runs (start-up, tracing and the launcher's findings over a few
columns cancel; what is left is (factor - 1) x N images of verified reading, decoding, signals and
Parquet writing). Baseline: the project's reader (`make_dataset`, evaluation mode) over every split of
the larger output, the same records, for --seconds. Each repetition runs the reader, then both quality
runs, so each ratio compares one moment of the (shared) machine. Every arm starts from the page cache
(`read_through` of its input, untimed): the reader's loop reads from it after its first pass, and a quality
run whose records were partly paged out measured the disk (a cold read here is ~70 MB/s: 3-40 s more).
"""

import os

from benchmarks.harness import dataset_rate, in_turn, marginal_rate, python_command, read_through, run_measured

BATCH = 64


def run_quality(input_dir, output_dir):
    """Seconds of one fresh quality job run (the real CLI, --overwrite: no earlier shard is kept), its input
    read through the page cache first (untimed)."""
    read_through(input_dir)
    wall, _ = run_measured(python_command("-m", "beam_pipeline.quality", "--input_dir", input_dir,
                                          "--output_dir", output_dir, "--overwrite", "--no_progress"))
    return wall


def reader_dataset(output_dir, splits):
    """The reader in evaluation mode over every split of `output_dir`, one after the other, repeated."""
    from tf_serving_input.reader import make_dataset

    datasets = [make_dataset(output_dir, split, batch_size=BATCH, training=False) for split in splits]
    dataset = datasets[0]
    for other in datasets[1:]:
        dataset = dataset.concatenate(other)
    return dataset.repeat()


def measure(bench, job):
    """The ratio on the job section's outputs (`job`: a job.JobSection)."""
    results = bench.results
    rows, many = job.rows, job.many_rows
    folder = os.path.join(bench.work, "quality_job")
    reader = reader_dataset(job.many_out, sorted(job.manifest["splits"]))

    def log(repetition, sample):
        small, big = sample["quality"]
        results.say(f"   [{repetition + 1}/{bench.repetitions}] reader {sample['reader']:.0f} img/s; quality job "
                    f"{rows:,} rows {small:.1f} s, {many:,} rows {big:.1f} s: marginal "
                    f"{marginal_rate((rows, small), (many, big)):.0f} img/s")

    def reader_rate(_repetition):
        read_through(job.many_out)
        return dataset_rate(reader, bench.args.seconds)

    samples = in_turn(bench.repetitions, {
        "reader": reader_rate,
        "quality": lambda _: (run_quality(job.out, os.path.join(folder, "small")),
                              run_quality(job.many_out, os.path.join(folder, "many")))}, log)
    job_rates = [marginal_rate((rows, small), (many, big)) for small, big in samples["quality"]]
    results.say(f"9. the whole quality job (real CLI, marginal, {rows:,} vs {many:,} rows) vs the reader "
                f"(evaluation mode) over the same records:")
    results.ratio("quality_job_vs_reader", "224 px records",
                  [j / r for j, r in zip(job_rates, samples["reader"], strict=True)])
    results.rate("quality job, marginal (heavy)", job_rates)
    results.rate("reader over the quality job's records (heavy)", samples["reader"])


def main(argv=None):
    """This section alone, on its own job outputs: the heavy set of --images and factor x as many rows."""
    import argparse

    from benchmarks import data
    from benchmarks.cli import Bench
    from benchmarks.harness import REPO, Results
    from benchmarks.job import JobSection, run_job
    from tf_serving_input.features import PreprocessConfig

    parser = argparse.ArgumentParser(description="quality_job_vs_reader alone (python -m benchmarks.quality_job).")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--memory_factor", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--workdir", default=os.path.join(REPO, "output", "benchmark_quality_job"))
    parser.add_argument("--photos_dir", default=os.path.join(REPO, ".cache", "benchmark-photos"))
    args = parser.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    heavy = data.make_set("heavy", args.workdir, data.fetch_photos(args.photos_dir), args.images, data.HEAVY)
    rows, many = len(heavy.images), len(heavy.images) * args.memory_factor
    csvs = [data.write_csv(os.path.join(args.workdir, f"rows_{n}.csv"), heavy.images, repeat_to=n)
            for n in (rows, many)]
    outs = [os.path.join(args.workdir, f"out_{n}") for n in (rows, many)]
    small = run_job(csvs[0], outs[0])
    run_job(csvs[1], outs[1])
    bench = Bench(args, args.workdir, Results(), PreprocessConfig().to_dict())
    measure(bench, JobSection(csvs[0], outs[0], outs[1], rows, many, small.manifest, [small.wall]))


if __name__ == "__main__":
    main()
