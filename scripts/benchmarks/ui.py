"""ui_search_p50_ms, ui_search_p99_ms, ui_thumbnail_p50_ms, ui_overview_50_answered: the web UI, through HTTP.

The UI's real command line serves a job output, its predictions (in the embedded server) and the export;
each repetition times QUERIES searches by upload (`POST /search`, k=10: upload parsed, the job's checks,
the export's serving_default, pgvector), thumbnails of stored images not asked for before (`GET
/image/KEY`: one record read by its offset, decoded through its codec, PNG), and 50 overview requests
sent at once (the fraction answered 200). One request at a time for the latencies, as one user clicks.

Also a command of its own over any run, for a quick measurement without the whole benchmark:
    python scripts/benchmarks/ui.py --input_dir JOB --predictions_dir PRED --model_dir EXPORT \
        --database URL [--table T] [--images DIR_OR_FILES...] [--repetitions 3]
"""

import concurrent.futures
import os
import sys
import time

QUERIES = 40
THUMBNAILS = 40
CONCURRENT = 50
K = 10


def start(flags, log_path):
    """(process, base URL) of the UI's command line started with `flags` on a free port."""
    import subprocess

    from benchmarks.harness import free_port, wait_listening

    port = free_port()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "beam_pipeline.ui", *map(str, flags), "--port", str(port)],
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                   start_new_session=True)
    wait_listening(port, process, log_path)
    return process, f"http://127.0.0.1:{port}"


def stop(process):
    """Stops the UI (its process group)."""
    import signal

    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except (ProcessLookupError, PermissionError):
        pass


def keys_of(client, url):
    """Every stored key the gallery lists (page after page)."""
    import re

    keys, page = [], 1
    while True:
        response = client.get(f"{url}/gallery", params={"page": page})
        if response.status_code != 200:
            return keys
        found = list(dict.fromkeys(re.findall(r'href="/item/([0-9a-f]+)"', response.text)))
        if not found:
            return keys
        keys += found
        page += 1


def one_pass(client, url, images, keys):
    """(search latencies ms, thumbnail latencies ms, fraction of CONCURRENT overview requests answered 200)."""
    import httpx

    searches = []
    for path in images:
        with open(path, "rb") as f:
            data = f.read()
        begun = time.perf_counter()
        response = client.post(f"{url}/search", params={"k": K}, files={"image": (os.path.basename(path), data)})
        searches.append((time.perf_counter() - begun) * 1000)
        assert response.status_code == 200, (path, response.status_code, response.text[-500:])
    thumbnails = []
    for key in keys:
        begun = time.perf_counter()
        response = client.get(f"{url}/image/{key}")
        thumbnails.append((time.perf_counter() - begun) * 1000)
        assert response.status_code == 200 and response.content.startswith(b"\x89PNG")

    def overview(_):
        try:
            return httpx.get(f"{url}/", timeout=60).status_code
        except httpx.HTTPError:
            return None

    with concurrent.futures.ThreadPoolExecutor(CONCURRENT) as pool:
        statuses = list(pool.map(overview, range(CONCURRENT)))
    return searches, thumbnails, statuses.count(200) / CONCURRENT


def measure_run(flags, images, repetitions, log_path, say=print):
    """[(search ms, thumbnail ms, answered fraction)] per repetition, over a UI started with `flags`."""
    import httpx

    process, url = start(flags, log_path)
    try:
        with httpx.Client(timeout=60) as client:
            keys = keys_of(client, url)
            assert keys, "the gallery lists no image"
            one_pass(client, url, images[:3], keys[:3])  # Warm-up: the first call traces the signature.
            passes = []
            for repetition in range(repetitions):
                # Thumbnails not asked for before while there are enough keys (the UI caches them).
                start_at = (3 + repetition * THUMBNAILS) % len(keys)
                fresh = (keys[start_at:] + keys[:start_at])[:THUMBNAILS]
                queries = [images[(repetition * QUERIES + i) % len(images)] for i in range(QUERIES)]
                passes.append(one_pass(client, url, queries, fresh))
                searches, thumbnails, answered = passes[-1]
                say(f"   [{repetition + 1}/{repetitions}] upload search p50 {percentile(searches, 50):.1f} ms, "
                    f"p99 {percentile(searches, 99):.1f} ms; thumbnail p50 {percentile(thumbnails, 50):.1f} ms; "
                    f"{answered * CONCURRENT:.0f}/{CONCURRENT} concurrent overviews answered")
    finally:
        stop(process)
    return passes


def percentile(values, q):
    import numpy as np

    return float(np.percentile(values, q))


def measure(bench, url, job_out, predictions_dir, export_dir, table, images):
    """The four UI ratios over the heavy set's job, its predictions in `table` and the export."""
    flags = ["--input_dir", job_out, "--predictions_dir", predictions_dir, "--model_dir", export_dir,
             "--database", url, "--table", table]
    bench.results.say(f"8. the web UI over {job_out} (HTTP, one request at a time; {QUERIES} uploads k={K} and "
                      f"{THUMBNAILS} thumbnails per repetition, then {CONCURRENT} overviews at once):")
    passes = measure_run(flags, images, bench.repetitions, os.path.join(bench.work, "ui.log"), bench.results.say)
    what = "upload -> serving_default -> pgvector"
    bench.results.ratio("ui_search_p50_ms", what, [percentile(s, 50) for s, _, _ in passes])
    bench.results.ratio("ui_search_p99_ms", what, [percentile(s, 99) for s, _, _ in passes])
    bench.results.ratio("ui_thumbnail_p50_ms", "record by offset -> codec -> PNG",
                        [percentile(t, 50) for _, t, _ in passes])
    bench.results.ratio("ui_overview_50_answered", f"{CONCURRENT} at once", [a for _, _, a in passes])


def main(argv=None):
    """The measurement over a run given by flags; prints p50/p99 of each repetition."""
    import argparse
    import glob

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("--input_dir", "--predictions_dir", "--model_dir", "--database"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--table", default=None)
    parser.add_argument("--images", nargs="+", required=True, help="Query images, or folders of them.")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--log", default="ui_benchmark.log")
    args = parser.parse_args(argv)
    images = sorted(path for item in args.images for path in (
        glob.glob(os.path.join(item, "**", "*.*"), recursive=True) if os.path.isdir(item) else [item])
        if path.lower().endswith((".jpg", ".jpeg", ".png")))
    flags = ["--input_dir", args.input_dir, "--predictions_dir", args.predictions_dir, "--model_dir",
             args.model_dir, "--database", args.database] + (["--table", args.table] if args.table else [])
    passes = measure_run(flags, images, args.repetitions, args.log)
    searches = [value for s, _, _ in passes for value in s]
    thumbnails = [value for _, t, _ in passes for value in t]
    print(f"all repetitions: upload search p50 {percentile(searches, 50):.1f} ms, p99 {percentile(searches, 99):.1f} "
          f"ms over {len(searches)}; thumbnail p50 {percentile(thumbnails, 50):.1f} ms over {len(thumbnails)}; "
          f"concurrent overviews answered {min(a for _, _, a in passes) * CONCURRENT:.0f}/{CONCURRENT} at worst")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # The benchmarks package.
    sys.exit(main())
