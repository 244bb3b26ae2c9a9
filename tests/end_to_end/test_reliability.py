"""Interrupted runs, resume, determinism and hostile inputs, through the real command line."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import imaging
import in_process
import outputs
import said
from tf_serving_input.layout import OutputLayout


def job_command(csv_path, out, *extra):
    return [sys.executable, "-m", "beam_pipeline", "--input_csv", str(csv_path), "--output_dir", str(out),
            "--max_error_rate", "0.5", *extra] + ([] if "--image_size" in extra else ["--image_size", "32"])


def run_job(csv_path, out, *extra):
    """The job's command line in a process of its own, on the default runner (worker processes)."""
    result = subprocess.run(job_command(csv_path, out, *extra), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def run_job_here(csv_path, out, *extra):
    """The same command in this process, in memory with one worker (tests/in_process.py)."""
    return in_process.run_module("beam_pipeline", *job_command(csv_path, out, *extra)[3:])


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory):
    """48 images of ~1600x1200, a missing file and a duplicate row, in train and validation."""
    folder = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(5)
    rows = []
    for i in range(48):
        name = f"photo {i}.jpg"
        (folder / name).write_bytes(imaging.encode(imaging.photo_like(rng, 1200, 1600), "JPEG", quality=90))
        rows.append([name, "xyz"[i % 3], "validation" if i % 6 == 0 else "train"])
    rows += [["absent.jpg", "x", "train"], ["photo 1.jpg", "y", "train"]]
    imaging.write_csv(folder / "in.csv", ["path", "label", "split"], rows)
    return folder / "in.csv"


@pytest.fixture(scope="module")
def uninterrupted(big_dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted") / "out"
    run_job(big_dataset, out, "--num_shards", "12")
    return out


def signal_mid_run(command, out, signum, **popen):
    """Starts the job in a process group of its own; sends `signum` to the group once a first shard is done."""
    process = subprocess.Popen(command, start_new_session=True, **popen)
    status_dir = out / OutputLayout.STATUS_DIR
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if status_dir.exists() and list(status_dir.glob("*.json")):
            break
        time.sleep(0.01)
    os.killpg(process.pid, signum)
    return process


def test_ctrl_c_is_one_line_exit_130_and_the_same_command_resumes(big_dataset, uninterrupted, tmp_path):
    out = tmp_path / "out"
    # Ctrl-C in a terminal: SIGINT to the launcher and its worker processes (one process group).
    process = signal_mid_run(job_command(big_dataset, out, "--num_shards", "12"), out, signal.SIGINT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-3000:]
    # One line, not the gRPC tracebacks of the runner's threads as its workers stop; no summary.
    assert said.problems(stderr) == ["interrupted"] and "Traceback" not in stderr, stderr[-3000:]
    assert stdout == "" and not (out / OutputLayout.MANIFEST_FILE).exists() and not (out / ".lock").exists()
    resumed = run_job_here(big_dataset, out, "--num_shards", "12")
    assert resumed.returncode == 0 and "Resuming:" in resumed.stderr, resumed.stderr[-3000:]
    assert outputs.shard_bytes(out) == outputs.shard_bytes(uninterrupted)


def test_killed_run_resumes_to_the_same_output(big_dataset, uninterrupted, tmp_path):
    out = tmp_path / "out"
    # The launcher and its worker processes, mid-run.
    process = signal_mid_run(job_command(big_dataset, out, "--num_shards", "12"), out, signal.SIGKILL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    process.wait()
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
    out = tmp_path / "out"
    assert run_job_here(big_dataset, out, "--num_shards", "12", "--direct_num_workers", "1",
                        "--direct_running_mode", "in_memory").returncode == 0
    assert outputs.shard_bytes(out) == outputs.shard_bytes(uninterrupted)  # Byte-identical shard files.
    assert outputs.keys_by_shard(out) == outputs.keys_by_shard(uninterrupted)
    first, second = outputs.manifest(uninterrupted), outputs.manifest(out)
    assert first["statistics"] == second["statistics"]  # Bit-identical mean, std and vocabulary.
    assert first["failed"] == 1 and first["written"] == 49  # The duplicate row is written twice.


def test_overwrite_replaces_output_of_another_configuration(big_dataset, tmp_path):
    out = tmp_path / "out"
    (tmp_path / "small.csv").write_text("path\n" + str(big_dataset.parent / "photo 2.jpg") + "\n")
    assert run_job_here(tmp_path / "small.csv", out).returncode == 0
    refused = run_job_here(tmp_path / "small.csv", out, "--image_size", "16")
    assert refused.returncode == 2 and "different input or configuration" in refused.stderr
    assert run_job_here(tmp_path / "small.csv", out, "--image_size", "16", "--overwrite").returncode == 0
    assert outputs.manifest(out)["config"]["preprocess"]["image_size"] == 16
