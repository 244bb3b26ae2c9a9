"""Concurrent or duplicated work never loses a shard; a run's own failures are one clear line.

Two runs of one command into one folder, attempts racing on one shard file, a shard
deleted after the pipeline, a full disk and a read-only folder: each is a real
scenario, through the real command line where a user would meet it.
"""

import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
import threading

import pytest

import imaging
import outputs
import shard_attempts
from beam_pipeline.common import report
from beam_pipeline.common.shard_file import ShardFileWriter, read_verified
from beam_pipeline.preprocess import cli as main
from shard_attempts import NAME, RECORDS
from tf_serving_input.layout import OutputLayout


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
    threads = [threading.Thread(target=lambda: statuses.append(shard_attempts.write_shard(root, barrier)))
               for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(statuses) == 6 and len({status["sha256"] for status in statuses}) == 1
    assert_one_verified_shard(root)


@pytest.mark.slow  # Four fresh interpreters: the full suite's; the threads' race above stays in the everyday lane.
def test_attempts_racing_in_processes_leave_one_complete_shard(tmp_path):
    root = prepared_folder(tmp_path)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(4)
    # The children import only shard_attempts (no TensorFlow), as a worker's shard writer would need.
    processes = [context.Process(target=shard_attempts.attempt, args=(root, barrier)) for _ in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [process.exitcode for process in processes] == [0] * 4
    assert_one_verified_shard(root)


def test_a_damaged_final_shard_is_replaced_and_a_published_one_kept(tmp_path):
    root = prepared_folder(tmp_path)
    layout = OutputLayout(root)
    first = shard_attempts.write_shard(root)
    kept = os.stat(layout.shard_file(NAME)).st_ino
    assert shard_attempts.write_shard(root) == first  # Found published with its checksum: kept, the copy discarded.
    assert os.stat(layout.shard_file(NAME)).st_ino == kept
    with open(layout.shard_file(NAME), "r+b") as f:
        f.truncate(100)
    shard_attempts.write_shard(root)
    assert_one_verified_shard(root)
    # One changed byte keeps the size: only the checksum tells, and the shard is replaced too.
    with open(layout.shard_file(NAME), "r+b") as f:
        f.seek(50)
        byte = f.read(1)
        f.seek(50)
        f.write(bytes([byte[0] ^ 1]))
    shard_attempts.write_shard(root)
    assert_one_verified_shard(root)


def test_failed_attempt_leaves_no_temporary_file(tmp_path):
    root = prepared_folder(tmp_path)
    with pytest.raises(RuntimeError):
        with ShardFileWriter(OutputLayout(root), NAME) as shard:
            shard.write_record(b"x")
            raise RuntimeError("worker died")
    assert os.listdir(tmp_path / "data") == []


def framing_as_read_by_hand(data):
    """The framing digest's definition, walked over the file's bytes: each record's header, then its data CRC."""
    import struct

    digest, offset = hashlib.sha256(), 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        digest.update(data[offset:offset + 12] + data[offset + 12 + length:offset + 16 + length])
        offset += 16 + length
    return digest.hexdigest()


def test_a_shard_of_records_publishes_its_framing_digest_and_one_of_other_bytes_does_not(tmp_path):
    """The job's manifest carries the digest the predict and quality jobs check each record's CRC against."""
    root = prepared_folder(tmp_path)
    with ShardFileWriter(OutputLayout(root), NAME) as shard:
        for record in RECORDS:
            shard.write_record(record)
        status = shard.publish({"rows": len(RECORDS)})
    data = (tmp_path / status["file"]).read_bytes()
    assert status["framing_sha256"] == framing_as_read_by_hand(data) != status["sha256"]
    with ShardFileWriter(OutputLayout(root), "other") as shard:  # A Parquet file, say: no record framing.
        shard.write(b"PAR1 ... PAR1", records=3)
        assert "framing_sha256" not in shard.publish({"rows": 3})


@pytest.mark.slow  # A whole run of the job (~9 s): the full suite's.
def test_a_shard_lost_after_the_pipeline_fails_the_run_naming_it(tmp_path, monkeypatch, capsys):
    csv_path = imaging.small_dataset(tmp_path)
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


@pytest.mark.slow  # A whole run of the job, for its notice on stderr; tests/common/test_run_lock.py takes
# over a dead run's lock in the everyday lane.
def test_a_lock_left_by_a_dead_run_is_taken_over_with_a_notice(tmp_path, capsys):
    csv_path = imaging.small_dataset(tmp_path, count=3)
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = {"host": os.uname().nodename, "pid": int(dead.stdout), "started": "2026-01-01T00:00:00+00:00"}
    (out / ".lock").write_text(json.dumps(holder))
    argv = ["--input_csv", str(csv_path), "--output_dir", str(out), "--image_size", "8", "--no_progress",
            "--direct_num_workers", "1", "--direct_running_mode", "in_memory"]
    assert main.run(argv) == 0
    said = capsys.readouterr()
    # Notices and progress on stderr; stdout carries the result (the summary) only.
    assert "taking over the lock of a run that is gone" in said.err and "writing 3 shards" in said.err
    assert said.out.lstrip().startswith("Summary") and "taking over" not in said.out and "shards to" not in said.out
    assert not (out / ".lock").exists()


@pytest.mark.parametrize("layout_class", ["OutputLayout", "PredictionLayout", "QualityLayout"])
def test_a_run_killed_while_preparing_its_folder_is_resumed_by_the_same_command(tmp_path, monkeypatch, layout_class):
    """Killed between creating its first folder and the next step: the same command must resume.

    Found by `test_a_password_appears_nowhere_across_a_killed_run_and_its_rerun` on a loaded machine: the
    folders were made before the run file, so a kill between them left folders and no run file, and the
    rerun refused the folder as "output of a different input or configuration".
    """
    from apache_beam.io.filesystems import FileSystems

    from beam_pipeline.common import output_dir
    from tf_serving_input import layout as layouts

    folder = getattr(layouts, layout_class)(str(tmp_path / "out"))
    fingerprint = {"config": {"input": "a"}}
    real_mkdirs = FileSystems.mkdirs

    def killed_after_one(path):
        real_mkdirs(path)
        raise KeyboardInterrupt("killed")  # Not an Exception: nothing on the way catches it, as with SIGKILL.

    monkeypatch.setattr(FileSystems, "mkdirs", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        output_dir.prepare(folder, fingerprint, overwrite=False)
    monkeypatch.setattr(FileSystems, "mkdirs", real_mkdirs)
    assert output_dir.prepare(folder, fingerprint, overwrite=False) == 0  # Resumed, nothing finished yet.
    with pytest.raises(output_dir.OutputDirError, match=r"different input or configuration \(it differs in "
                                                        r"config\.input\)"):
        output_dir.prepare(folder, {"config": {"input": "b"}}, overwrite=False)  # Another run: still refused.


def test_an_output_dir_that_is_a_file_is_refused_as_bad_input(tmp_path, capsys):
    csv_path = imaging.small_dataset(tmp_path, count=2)
    not_a_folder = tmp_path / "hostname"
    not_a_folder.write_text("a file")
    assert main.run(["--input_csv", str(csv_path), "--output_dir", str(not_a_folder), "--image_size", "8",
                     "--direct_num_workers", "1", "--direct_running_mode", "in_memory"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"error: --output_dir {not_a_folder} is a file, not a folder: name a folder (it is created when " \
                   "missing)"
    assert not_a_folder.read_text() == "a file" and not list(tmp_path.glob("*.log"))
