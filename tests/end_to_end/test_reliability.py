"""Interrupted runs, resume, determinism and hostile inputs, through the real command line."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import imaging
import in_process
import outputs
import said
from tf_serving_input.layout import OutputLayout

# While set, the dataset's URL row is held unanswered (a worker waiting on a stalled server); else answered.
HOLD = threading.Event()
RELEASE = threading.Event()
HELD_PATH = "/held.jpg"


def job_command(csv_path, out, *extra):
    # Timeouts long enough that a worker waiting on the held URL row holds its process for minutes.
    return [sys.executable, "-m", "beam_pipeline", "--input_csv", str(csv_path), "--output_dir", str(out),
            "--max_error_rate", "0.5", "--url_allow_private", "--url_read_timeout", "600", "--url_timeout", "600",
            *extra] + ([] if "--image_size" in extra else ["--image_size", "32"])


def held_unless_released(data):
    """The loopback behaviour of the URL row: held while HOLD is set (until RELEASE), then the image."""
    import http_server

    answer = http_server.image(data)

    def behave(handler, number):
        if HOLD.is_set():
            RELEASE.wait(600)
        answer(handler, number)
    return behave


def run_job_here(csv_path, out, *extra):
    """The same command in this process, in memory with one worker (tests/in_process.py)."""
    return in_process.run_module("beam_pipeline", *job_command(csv_path, out, *extra)[3:])


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory, loopback):
    """48 images of 400x300, a missing file, a duplicate row and a URL row, in train and validation.

    Small: the interrupting tests hold the URL row (HOLD), so a run cannot finish before its signal lands
    whatever the images cost (1600x1200 photos made each of the five runs here pay for decoding them)."""
    folder = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(5)
    rows = []
    for i in range(48):
        name = f"photo {i}.jpg"
        (folder / name).write_bytes(imaging.encode(imaging.photo_like(rng, 300, 400), "JPEG", quality=90))
        rows.append([name, "xyz"[i % 3], "validation" if i % 6 == 0 else "train"])
    rows += [["absent.jpg", "x", "train"], ["photo 1.jpg", "y", "train"]]
    loopback.route(HELD_PATH, held_unless_released(imaging.encode(imaging.photo_like(rng, 60, 80), "JPEG")))
    rows.append([loopback.url(HELD_PATH), "x", "train"])
    imaging.write_csv(folder / "in.csv", ["path", "label", "split"], rows)
    return folder / "in.csv"


@pytest.fixture(scope="module")
def uninterrupted(big_dataset, tmp_path_factory):
    """The reference, in this process and in memory: the interrupted runs' shards come from worker processes and
    their resumes from memory, so each comparison with it is across worker counts too (worker processes here cost
    ~30 s of CPU for their imports alone)."""
    out = tmp_path_factory.mktemp("uninterrupted") / "out"
    assert run_job_here(big_dataset, out, "--num_shards", "12").returncode == 0
    return out


def signal_mid_run(command, out, signum, until=lambda: True, **popen):
    """Starts the job in a process group of its own; once a first shard is done (and `until()`), sends `signum`
    to the launcher alone; returns (the process, its worker processes' pids then)."""
    process = subprocess.Popen(command, start_new_session=True, **popen)
    status_dir = out / OutputLayout.STATUS_DIR
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if status_dir.exists() and list(status_dir.glob("*.json")) and until():
            break
        time.sleep(0.01)
    workers = descendants(process.pid)
    os.kill(process.pid, signum)
    return process, workers


def descendants(pid):
    """The processes below `pid` (its worker processes, and any shell between), from /proc."""
    children = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
        except OSError:
            continue
    found, pending = [], [pid]
    while pending:
        below = children.get(pending.pop(), [])
        found += below
        pending += below
    return found


def assert_gone(pids, bound=60.0):
    """Each process is gone within `bound` seconds of the launcher's end (a bound for a loaded machine)."""
    deadline = time.monotonic() + bound
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if os.path.exists(f"/proc/{pid}")
                and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
        time.sleep(0.05)
    assert not left, f"worker processes {left} outlived the launcher"


def test_ctrl_c_is_one_line_exit_130_and_the_same_command_resumes(big_dataset, uninterrupted, loopback, tmp_path):
    out = tmp_path / "out"
    # SIGINT to the launcher alone (`kill -INT`; Ctrl-C in a terminal reaches its workers too), while a worker
    # waits on a URL its server holds: the launcher stops its workers instead of waiting minutes for them.
    RELEASE.clear()  # An earlier test released its held request: hold this run's.
    HOLD.set()
    try:
        process, workers = signal_mid_run(job_command(big_dataset, out, "--num_shards", "12"), out, signal.SIGINT,
                                          until=lambda: loopback.requests(HELD_PATH) > 0,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = process.communicate(timeout=120)  # A bound: without the stop, 600 s of timeouts.
        finally:
            process.kill()
    finally:
        HOLD.clear()
        RELEASE.set()
    assert process.returncode == 130, stderr[-3000:]
    assert workers and loopback.requests(HELD_PATH) > 0
    assert_gone(workers)
    # One line, not the gRPC tracebacks of the runner's threads as its workers stop; no summary.
    assert said.problems(stderr) == ["interrupted"] and "Traceback" not in stderr, stderr[-3000:]
    assert stdout == "" and not (out / OutputLayout.MANIFEST_FILE).exists() and not (out / ".lock").exists()
    resumed = run_job_here(big_dataset, out, "--num_shards", "12")
    assert resumed.returncode == 0 and "Resuming:" in resumed.stderr, resumed.stderr[-3000:]
    assert outputs.shard_bytes(out) == outputs.shard_bytes(uninterrupted)


def test_killed_run_resumes_to_the_same_output(big_dataset, uninterrupted, loopback, tmp_path):
    out = tmp_path / "out"
    held_before = loopback.requests(HELD_PATH)
    # The launcher alone, mid-run (its URL row held, so the run cannot have finished): its workers die with it.
    RELEASE.clear()  # An earlier test released its held request: hold this run's.
    HOLD.set()
    try:
        process, workers = signal_mid_run(job_command(big_dataset, out, "--num_shards", "12"), out, signal.SIGKILL,
                                          until=lambda: loopback.requests(HELD_PATH) > held_before,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        process.wait()
    finally:
        HOLD.clear()
        RELEASE.set()
    assert workers
    assert_gone(workers)
    status_dir = out / OutputLayout.STATUS_DIR
    finished = list(status_dir.glob("*.json"))
    assert 0 < len(finished) < 24, "the run was not interrupted part-way"
    assert not (out / OutputLayout.MANIFEST_FILE).exists()
    outputs.assert_every_shard_reads_to_its_end(out)  # Nothing under a final name is partial.

    resumed = run_job_here(big_dataset, out, "--num_shards", "12")  # Resumed in memory: the same bytes.
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resuming:" in resumed.stderr
    assert outputs.shard_bytes(out) == outputs.shard_bytes(uninterrupted)
    first, second = outputs.manifest(uninterrupted), outputs.manifest(out)
    for key in ("rows", "written", "failed", "splits", "shards", "failed_by_reason"):
        assert first[key] == second[key], key
    assert second["statistics"] == first["statistics"]  # Exact: statistics come from integer sums.
    assert outputs.errors(out) == outputs.errors(uninterrupted)
    assert not list(out.rglob("*.incomplete"))


def test_output_is_deterministic_whatever_the_worker_count(big_dataset, uninterrupted, tmp_path):
    out = tmp_path / "out"  # Two workers (threads: the bundles split otherwise) against `uninterrupted`'s one.
    assert run_job_here(big_dataset, out, "--num_shards", "12", "--direct_num_workers", "2",
                        "--direct_running_mode", "multi_threading").returncode == 0
    assert outputs.shard_bytes(out) == outputs.shard_bytes(uninterrupted)  # Byte-identical shard files.
    assert outputs.keys_by_shard(out) == outputs.keys_by_shard(uninterrupted)
    first, second = outputs.manifest(uninterrupted), outputs.manifest(out)
    assert first["statistics"] == second["statistics"]  # Bit-identical mean, std and vocabulary.
    assert first["failed"] == 1 and first["written"] == 50  # The duplicate row is written twice.


def test_overwrite_replaces_output_of_another_configuration(big_dataset, tmp_path):
    out = tmp_path / "out"
    (tmp_path / "small.csv").write_text("path\n" + str(big_dataset.parent / "photo 2.jpg") + "\n")
    assert run_job_here(tmp_path / "small.csv", out).returncode == 0
    refused = run_job_here(tmp_path / "small.csv", out, "--image_size", "16")
    assert refused.returncode == 2 and "different input or configuration" in refused.stderr
    assert run_job_here(tmp_path / "small.csv", out, "--image_size", "16", "--overwrite").returncode == 0
    assert outputs.manifest(out)["config"]["preprocess"]["image_size"] == 16
