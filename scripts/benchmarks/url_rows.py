"""url_rows_vs_files: the job on URL rows against the job on the same files, marginal rates, same run.

The light set's JPEGs are served from memory by latency_server.py on loopback, each answer after
50 ms (a far server's round trip, which costs no CPU), and the job fetches them with
--url_allow_private (the server is on loopback) and --url_per_host equal to --url_concurrency (one host
serves every image here; a real CSV spreads over many). The server runs on the same cores as the job,
so its CPU counts against the URL runs: the ratio is a floor. Each repetition runs the file CSV and
the URL CSV on N and 4N rows, in turn.
"""

import os
import subprocess
import sys

from benchmarks.harness import free_port, in_turn, marginal_rate, python_command, run_measured

LATENCY = 0.05
FACTOR = 4


def _write_csv(path, images, rows, url_of=None):
    import csv

    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label", "split"])
        for i in range(rows):
            image, label = images[i % len(images)]
            writer.writerow([url_of(image) if url_of else image, label, "train"])
    return path


def measure(bench, image_set):
    """url_rows_vs_files on `image_set` (the light set: everyday photos)."""
    results, work = bench.results, bench.work
    rows = len(image_set.images)
    port = free_port()
    server = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "latency_server.py"),
                               image_set.folder, str(port), str(LATENCY)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"

        def url_of(path):
            return f"http://127.0.0.1:{port}/{os.path.relpath(path, image_set.folder)}"

        csvs = {(kind, size): _write_csv(os.path.join(work, f"url_rows_{kind}_{size}.csv"), image_set.images,
                                         size, url_of if kind == "urls" else None)
                for kind in ("files", "urls") for size in (rows, FACTOR * rows)}
        flags = {"files": [], "urls": ["--url_allow_private", "--url_per_host", "64", "--url_concurrency", "64"]}

        def job_rate(kind):
            walls = []
            for size in (rows, FACTOR * rows):
                wall, _ = run_measured(python_command(
                    "-m", "beam_pipeline", "--input_csv", csvs[(kind, size)], "--output_dir",
                    os.path.join(work, f"url_rows_out_{kind}_{size}"), "--overwrite", "--no_progress",
                    *flags[kind]))
                walls.append((size, wall))
            return marginal_rate(*walls)

        def log(repetition, sample):
            results.say(f"   [url rows {repetition + 1}/{bench.repetitions}] files {sample['files']:.0f} img/s, "
                        f"URLs ({LATENCY * 1000:.0f} ms a request) {sample['urls']:.0f} img/s")

        samples = in_turn(bench.repetitions, {"files": lambda _: job_rate("files"),
                                              "urls": lambda _: job_rate("urls")}, log)
    finally:
        server.terminate()
        server.wait()
    results.say(f"11. [{image_set.title}] the job on URL rows ({LATENCY * 1000:.0f} ms per request, loopback) vs on "
                f"the same files (marginal, {rows} vs {FACTOR * rows} rows):")
    results.ratio("url_rows_vs_files", image_set.title,
                  [urls / files for urls, files in zip(samples["urls"], samples["files"])])
    results.rate(f"Beam job on URL rows, marginal ({image_set.name})", samples["urls"])
