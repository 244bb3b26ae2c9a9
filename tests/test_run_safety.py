"""Concurrent or duplicated work never loses a shard; a run's own failures are one clear line.

Two runs of one command into one folder, attempts racing on one shard file, a shard
deleted after the pipeline, a full disk and a read-only folder: each is a real
scenario, through the real command line where a user would meet it.
"""

import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import imaging
import outputs
import scaleout
from beam_pipeline.common import report
from beam_pipeline.common.shard_file import ShardFileWriter, read_verified
from beam_pipeline.preprocess import cli as main
from tf_serving_input.layout import OutputLayout

NAME = "train-00000-of-00001"
RECORDS = [bytes([i]) * (1000 + i) for i in range(50)]


def write_shard(root, barrier=None):
    """One attempt at shard NAME: writes RECORDS, waits for the others, publishes; returns the status."""
    layout = OutputLayout(root)
    with ShardFileWriter(layout, NAME) as shard:
        for record in RECORDS:
            shard.write_record(record)
        if barrier is not None:
            barrier.wait(timeout=60)  # Every attempt publishes at the same moment.
        return shard.publish({"rows": len(RECORDS), "failed": []})


def prepared_folder(tmp_path):
    for folder in ("data", "shards"):
        (tmp_path / folder).mkdir(exist_ok=True)
    return str(tmp_path)


def assert_one_verified_shard(root):
    layout = OutputLayout(root)
    status, data = read_verified(layout, NAME, len(RECORDS))
    assert status["records"] == len(RECORDS) and len(data) == status["bytes"]
    assert not [name for folder in ("data", "shards") for name in os.listdir(os.path.join(root, folder))
                if name.endswith(".incomplete")]


def test_attempts_racing_in_threads_leave_one_complete_shard(tmp_path):
    root = prepared_folder(tmp_path)
    barrier = threading.Barrier(6)
    statuses = []
    threads = [threading.Thread(target=lambda: statuses.append(write_shard(root, barrier))) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(statuses) == 6 and len({status["sha256"] for status in statuses}) == 1
    assert_one_verified_shard(root)


def _attempt_in_process(root, barrier):
    write_shard(root, barrier)


def test_attempts_racing_in_processes_leave_one_complete_shard(tmp_path):
    root = prepared_folder(tmp_path)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(4)
    processes = [context.Process(target=_attempt_in_process, args=(root, barrier)) for _ in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [process.exitcode for process in processes] == [0] * 4
    assert_one_verified_shard(root)


def test_a_damaged_final_shard_is_replaced_and_a_published_one_kept(tmp_path):
    root = prepared_folder(tmp_path)
    layout = OutputLayout(root)
    first = write_shard(root)
    kept = os.stat(layout.shard_file(NAME)).st_ino
    assert write_shard(root) == first  # Found published with its checksum: kept, the copy discarded.
    assert os.stat(layout.shard_file(NAME)).st_ino == kept
    with open(layout.shard_file(NAME), "r+b") as f:
        f.truncate(100)
    write_shard(root)
    assert_one_verified_shard(root)
    # One changed byte keeps the size: only the checksum tells, and the shard is replaced too.
    with open(layout.shard_file(NAME), "r+b") as f:
        f.seek(50)
        byte = f.read(1)
        f.seek(50)
        f.write(bytes([byte[0] ^ 1]))
    write_shard(root)
    assert_one_verified_shard(root)


def test_failed_attempt_leaves_no_temporary_file(tmp_path):
    root = prepared_folder(tmp_path)
    with pytest.raises(RuntimeError):
        with ShardFileWriter(OutputLayout(root), NAME) as shard:
            shard.write_record(b"x")
            raise RuntimeError("worker died")
    assert os.listdir(tmp_path / "data") == []


def small_dataset(folder, count=10, size=64):
    rng = np.random.default_rng(3)
    rows = []
    for i in range(count):
        name = f"img{i}.png"
        (folder / name).write_bytes(imaging.encode(rng.integers(0, 256, (size, size, 3), dtype=np.uint8), "PNG"))
        rows.append([name, "ab"[i % 2]])
    imaging.write_csv(folder / "in.csv", ["path", "label"], rows)
    return folder / "in.csv"


def test_a_shard_lost_after_the_pipeline_fails_the_run_naming_it(tmp_path, monkeypatch, capsys):
    csv_path = small_dataset(tmp_path)
    out = tmp_path / "out"
    read_statuses = report.read_shard_statuses

    def lose_a_shard_then_read(layout, names):  # Something deletes a finished shard meanwhile.
        os.remove(layout.shard_file(names[1]))
        return read_statuses(layout, names)

    monkeypatch.setattr(report, "read_shard_statuses", lose_a_shard_then_read)
    argv = ["--input_csv", str(csv_path), "--output_dir", str(out), "--image_size", "8", "--num_shards", "3",
            "--no_progress", "--direct_num_workers", "1", "--direct_running_mode", "in_memory"]
    assert main.run(argv) == 1
    error = capsys.readouterr().err
    assert "data/train-00001-of-00003.tfrecord (missing)" in error and "run the same command again" in error
    assert not (out / "manifest.json").exists()

    monkeypatch.setattr(report, "read_shard_statuses", read_statuses)
    assert main.run(argv) == 0  # The rerun rewrites it.
    assert outputs.manifest(out)["written"] == 10 and len(outputs.shard_paths(out)) == 3


@pytest.mark.slow
def test_a_second_run_into_the_same_folder_is_refused_while_the_first_succeeds(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(5)
    rows = []
    for i in range(24):  # Large photos: the first run is still busy when the second starts.
        (folder / f"p{i}.jpg").write_bytes(imaging.encode(rng.integers(0, 256, (900, 1200, 3), dtype=np.uint8),
                                                          "JPEG", quality=90))
        rows.append([f"p{i}.jpg", "xy"[i % 2]])
    imaging.write_csv(folder / "in.csv", ["path", "label"], rows)
    out = tmp_path / "out"
    command = scaleout.job_command(folder / "in.csv", out, "--num_shards", "8")
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / ".lock").exists() and time.time() < deadline and first.poll() is None:
        time.sleep(0.05)
    second = subprocess.run(command, capture_output=True, text=True, timeout=300)
    stdout, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stderr[-3000:]
    assert second.returncode == 2, second.stderr[-3000:]
    assert f"in use by another run: pid {first.pid} on host" in second.stderr
    assert "Traceback" not in second.stderr
    manifest = outputs.manifest(out)
    assert (manifest["rows"], manifest["written"]) == (24, 24) and len(outputs.shard_paths(out)) == 8
    outputs.assert_every_shard_reads_to_its_end(out)
    assert not (out / ".lock").exists()


def test_a_lock_left_by_a_dead_run_is_taken_over_with_a_notice(tmp_path):
    csv_path = small_dataset(tmp_path, count=3)
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = {"host": os.uname().nodename, "pid": int(dead.stdout), "started": "2026-01-01T00:00:00+00:00"}
    (out / ".lock").write_text(json.dumps(holder))
    result = scaleout.run_job(csv_path, out)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "taking over the lock of a run that is gone" in result.stdout + result.stderr
    assert not (out / ".lock").exists()


@contextlib.contextmanager
def mounted_tmpfs(path, options):
    """A tmpfs at `path` (root only); skips the test where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip() or 'not root'})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.slow
def test_disk_full_is_one_line_and_the_same_command_resumes_to_identical_bytes(tmp_path):
    csv_path = small_dataset(tmp_path, count=24, size=100)
    reference = tmp_path / "reference"
    args = ("--image_size", "224", "--num_shards", "6")  # Raw 224 px: 147 KiB per image, ~3.5 MB in all.
    assert scaleout.run_job(csv_path, reference, *args).returncode == 0
    with mounted_tmpfs(tmp_path / "small", "size=2m") as small:
        out = small / "out"
        full = scaleout.run_job(csv_path, out, *args)
        assert full.returncode == 1, full.stderr[-3000:]
        lines = error_lines(full.stderr)
        assert len(lines) == 1 and "Traceback" not in full.stderr, full.stderr[-3000:]
        assert lines[0].startswith("error: no space left on device while writing shards to")
        assert "free space and run the same command again to resume" in lines[0]
        log = lines[0].rsplit("(traceback: ", 1)[1].rstrip(")")
        assert "No space left on device" in open(log).read()
        outputs.assert_every_shard_reads_to_its_end(out)  # Nothing partial under a final name.

        subprocess.run(["mount", "-o", "remount,size=64m", str(small)], check=True)
        resumed = scaleout.run_job(csv_path, out, *args)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert outputs.shard_bytes(out) == outputs.shard_bytes(reference)
        assert outputs.manifest(out)["statistics"] == outputs.manifest(reference)["statistics"]


@pytest.mark.slow
def test_an_unwritable_output_folder_is_one_line(tmp_path):
    csv_path = small_dataset(tmp_path, count=2)
    if os.geteuid() == 0:
        context = mounted_tmpfs(tmp_path / "readonly", "ro,size=1m")
    else:
        (tmp_path / "readonly").mkdir()
        os.chmod(tmp_path / "readonly", 0o555)
        context = contextlib.nullcontext(tmp_path / "readonly")
    with context as folder:
        result = scaleout.run_job(csv_path, folder / "out")
    assert result.returncode == 1, result.stderr[-3000:]
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[0].startswith(("error: read-only file system while preparing the output folder",
                                "error: permission denied while preparing the output folder"))
    assert str(folder / "out") in lines[0]
