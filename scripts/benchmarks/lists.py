"""Section 10 (issue 52, item 10b): a big list through the job's launcher, as CSV and as Parquet.

    .venv/bin/python scripts/benchmark.py --section lists --list_rows 1000000

For each format: a list of --list_rows rows (the 320 bundled sample photos repeated, 1 row in 5 in validation;
the Parquet file written with pyarrow's defaults: one row group up to 1Mi rows) is given to
`beam-image-pipeline preprocess --input LIST` (default runner and flags, 16 px images so that the images cost
little), and timed until the first shard's status file exists: the launcher's validation pass, the pipeline's
read of the list, the shuffle by shard and the first shard written. Then the job is stopped (SIGKILL to its
process group). Reports the seconds to the first shard (wall, on the machine as loaded as it is), the launcher
process's own peak RSS (VmHWM: the validation pass and the pipeline's construction, not its workers) and the
whole process tree's peak PSS, sampled each 0.5 s, and the launcher's CPU seconds at the first shard (wall time on a
shared machine says little; say the load average with it).
"""

import glob
import os
import shutil
import signal
import subprocess
import sys
import time

from benchmarks.harness import proc_field_bytes, process_tree

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_lists(work, rows):
    """{'csv': path, 'parquet': path} of the same `rows`-row list (made once; a rerun finds them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchmarks import data

    photos = data.sample_photos()  # (label, path)
    paths = {"csv": os.path.join(work, f"list-{rows}.csv"), "parquet": os.path.join(work, f"list-{rows}.parquet")}
    if all(os.path.exists(path) for path in paths.values()):
        return paths
    column = [photos[index % len(photos)][1] for index in range(rows)]
    labels = [photos[index % len(photos)][0] for index in range(rows)]
    splits = ["validation" if index % 5 == 0 else "train" for index in range(rows)]
    table = pa.table({"path": column, "label": labels, "split": splits})
    pq.write_table(table, paths["parquet"] + ".tmp")  # Defaults: one row group up to 1Mi rows.
    os.replace(paths["parquet"] + ".tmp", paths["parquet"])
    with open(paths["csv"] + ".tmp", "w", encoding="utf-8") as out:
        out.write("path,label,split\n")
        out.writelines(f"{p},{label},{split}\n" for p, label, split in zip(column, labels, splits))
    os.replace(paths["csv"] + ".tmp", paths["csv"])
    return paths


def to_first_shard(list_path, out, timeout):
    """(wall seconds to the first shard's status file, the launcher's CPU seconds then, its VmHWM bytes, the
    process tree's peak PSS bytes) of one job."""
    command = [sys.executable, "-m", "beam_pipeline", "preprocess", "--input", list_path, "--output_dir", out,
               "--image_size", "16", "--no_progress", "--overwrite"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)
    shutil.rmtree(out, ignore_errors=True)  # An earlier run's shards would be found at once.
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    launcher_peak = tree_peak = 0
    seconds = cpu = None
    try:
        while process.poll() is None and time.monotonic() - started < timeout:
            launcher_peak = max(launcher_peak, proc_field_bytes(process.pid, "status", "VmHWM:"))
            tree_peak = max(tree_peak, sum(proc_field_bytes(pid, "smaps_rollup", "Pss:")
                                           for pid in process_tree(process.pid)))
            if glob.glob(os.path.join(out, "shards", "*.json")):
                seconds, cpu = time.monotonic() - started, cpu_seconds(process.pid)
                break
            time.sleep(0.5)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if seconds is None:
        tail = process.stderr.read().decode(errors="replace")[-2000:] if process.stderr else ""
        raise RuntimeError(f"no shard of {list_path} within {timeout} s (exit {process.returncode}): {tail}")
    return seconds, cpu, launcher_peak, tree_peak


def cpu_seconds(pid):
    """User + system CPU seconds of one process so far (/proc/PID/stat): a figure a loaded machine skews less."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(work, rows, timeout=3600):
    """{'csv': (...), 'parquet': (...)}: `to_first_shard` of the same list in each format; printed as they come."""
    os.makedirs(work, exist_ok=True)
    lists = write_lists(work, rows)
    results = {}
    for fmt, path in lists.items():
        seconds, cpu, launcher, tree = to_first_shard(path, os.path.join(work, f"out-{fmt}"), timeout)
        results[fmt] = (seconds, cpu, launcher, tree)
        print(f"{rows:,}-row {fmt} list: first shard after {seconds:.1f} s wall (launcher CPU {cpu:.1f} s); "
              f"launcher peak RSS "
              f"{launcher / 2**20:.0f} MiB; process tree peak PSS {tree / 2**20:.0f} MiB; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
    return results
