"""The command line under hostile conditions: a second run into a busy folder, a full disk, a read-only folder."""

import contextlib
import os
import subprocess
import time

import numpy as np
import pytest

import imaging
import in_process
import outputs
import scaleout


def test_a_second_run_into_the_same_folder_is_refused_while_the_first_succeeds(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(5)
    rows = []
    # Small photos: the first run holds its lock from before its worker processes start (each imports
    # TensorFlow for seconds) to its end, and the second, in this process, checks it at once.
    for i in range(24):
        (folder / f"p{i}.jpg").write_bytes(imaging.encode(imaging.photo_like(rng, 300, 400), "JPEG", quality=90))
        rows.append([f"p{i}.jpg", "xy"[i % 2]])
    imaging.write_csv(folder / "in.csv", ["path", "label"], rows)
    out = tmp_path / "out"
    command = scaleout.job_command(folder / "in.csv", out, "--num_shards", "8")
    # The first run with one worker process (a second imported TensorFlow again: the lock is what is tested).
    first = subprocess.Popen(command + ["--direct_num_workers", "1"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / ".lock").exists() and time.time() < deadline and first.poll() is None:
        time.sleep(0.05)
    second = in_process.run_module("beam_pipeline", *command[3:])  # Beside the first run's process.
    stdout, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stderr[-3000:]
    assert second.returncode == 2, second.stderr[-3000:]
    assert f"in use by another run: pid {first.pid} on host" in second.stderr
    assert "Traceback" not in second.stderr
    manifest = outputs.manifest(out)
    assert (manifest["rows"], manifest["written"]) == (24, 24) and len(outputs.shard_paths(out)) == 8
    outputs.assert_every_shard_reads_to_its_end(out)
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


def test_disk_full_is_one_line_and_the_same_command_resumes_to_identical_bytes(tmp_path):
    csv_path = imaging.small_dataset(tmp_path, count=24, size=100)
    reference = tmp_path / "reference"
    args = ("--image_size", "224", "--num_shards", "6")  # Raw 224 px: 147 KiB per image, ~3.5 MB in all.

    def here(out):  # The same command in this process (tests/in_process.py).
        return in_process.run_module("beam_pipeline", *scaleout.job_command(csv_path, out, *args)[3:])

    assert here(reference).returncode == 0
    with mounted_tmpfs(tmp_path / "small", "size=2m") as small:
        out = small / "out"
        # The disk fills inside a worker process (one: a second imported TensorFlow again, ~10 s).
        full = scaleout.run_job(csv_path, out, *args, "--direct_num_workers", "1")
        assert full.returncode == 1, full.stderr[-3000:]
        lines = error_lines(full.stderr)
        assert len(lines) == 1 and "Traceback" not in full.stderr, full.stderr[-3000:]
        assert lines[0].startswith("error: no space left on device while writing shards to")
        assert "free space and run the same command again to resume" in lines[0]
        log = lines[0].rsplit("(traceback: ", 1)[1].rstrip(")")
        assert "No space left on device" in open(log).read()
        outputs.assert_every_shard_reads_to_its_end(out)  # Nothing partial under a final name.

        subprocess.run(["mount", "-o", "remount,size=64m", str(small)], check=True)
        resumed = here(out)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert outputs.shard_bytes(out) == outputs.shard_bytes(reference)
        assert outputs.manifest(out)["statistics"] == outputs.manifest(reference)["statistics"]


def test_an_unwritable_output_folder_is_one_line(tmp_path):
    csv_path = imaging.small_dataset(tmp_path, count=2)
    if os.geteuid() == 0:
        context = mounted_tmpfs(tmp_path / "readonly", "ro,size=1m")
    else:
        (tmp_path / "readonly").mkdir()
        os.chmod(tmp_path / "readonly", 0o555)
        context = contextlib.nullcontext(tmp_path / "readonly")
    with context as folder:
        result = in_process.run_module("beam_pipeline", *scaleout.job_command(csv_path, folder / "out")[3:])
    assert result.returncode == 1, result.stderr[-3000:]
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[0].startswith(("error: read-only file system while preparing the output folder",
                                "error: permission denied while preparing the output folder"))
    assert str(folder / "out") in lines[0]
