"""The img2dataset baseline: the tool a user would pick to turn a list of images into shards.

img2dataset (https://github.com/rom1504/img2dataset) downloads, resizes (OpenCV, INTER_AREA when it
shrinks) and writes webdataset tar shards, one process per core with threads inside each. It reads
`file://` URLs with urllib like any other, so it runs here over the benchmark's local JPEGs. It pins
versions that do not mix with this project's (albumentations, opencv, older fsspec), so it lives in a
virtual environment of its own under the photos folder, made with pip the first time (PyPI only).

Its flags are those a user would pass for the job's work: 224 px, center crop, one process per core,
its default JPEG quality 95 and SHA-256 of each image. The rate is marginal, N vs FACTOR x N rows,
as the job's is, so its start-up cancels.
"""

import glob
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

from benchmarks.harness import CORES, marginal_rate, settle

VERSION = "1.47.0"
FACTOR = 4
THREADS = 16  # Threads per process: local files need few; its default (256) only adds switching.


def ensure_installed(folder):
    """The img2dataset command in its own virtual environment under `folder` (made once)."""
    venv = os.path.join(folder, f"img2dataset-{VERSION}")
    command = os.path.join(venv, "bin", "img2dataset")
    stamp = os.path.join(venv, "installed")  # Written last: an install cut short is redone, not trusted.
    if not (os.path.exists(stamp) and os.access(command, os.X_OK)):
        shutil.rmtree(venv, ignore_errors=True)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", venv], check=True)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--quiet", f"img2dataset=={VERSION}"], check=True)
        subprocess.run([command, "--help"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(stamp, "w") as f:
            f.write(f"img2dataset=={VERSION}\n")
    return command


def _run(command, paths, rows, folder):
    """Seconds of one img2dataset run over `rows` URLs (cycling over `paths`); checks that all were written."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    urls = os.path.join(folder, "urls.txt")
    with open(urls, "w", encoding="utf-8") as f:
        f.writelines(f"{pathlib.Path(paths[i % len(paths)]).absolute().as_uri()}\n" for i in range(rows))
    out = os.path.join(folder, "out")
    settle()
    started = time.perf_counter()
    log = os.path.join(folder, "img2dataset.log")
    with open(log, "w") as output:
        finished = subprocess.run([command, "--url_list", urls, "--output_folder", out, "--image_size", "224",
                                   "--resize_mode", "center_crop", "--processes_count", str(CORES),
                                   "--thread_count", str(THREADS), "--output_format", "webdataset",
                                   "--number_sample_per_shard", "1000"], stdout=output, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - started
    if finished.returncode != 0:
        raise RuntimeError(f"img2dataset failed (exit {finished.returncode}); its output: {log}")
    written = sum(_stats(path)["successes"] for path in glob.glob(os.path.join(out, "*_stats.json")))
    if written != rows:
        raise RuntimeError(f"img2dataset wrote {written} of {rows} images into {out}: see its *_stats.json")
    return seconds


def _stats(path):
    with open(path) as f:
        return json.load(f)


def img2dataset_rate(command, paths, folder):
    """Marginal images/s of img2dataset over len(paths) vs FACTOR x len(paths) URLs."""
    small = _run(command, paths, len(paths), os.path.join(folder, "small"))
    big = _run(command, paths, FACTOR * len(paths), os.path.join(folder, "big"))
    return marginal_rate((len(paths), small), (FACTOR * len(paths), big))
