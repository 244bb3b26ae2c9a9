"""The run's image index: what it holds, and a damaged, stale or unwritable one (rebuilt, never trusted).

Each test copies the session's tiny job output (tests/conftest.py `tiny_job`), since the index is written
beside the run. A failure row is appended to the copy's errors.jsonl as the job writes them.
"""

import contextlib
import json
import os
import shutil
import subprocess

import pytest

from beam_pipeline.common import image_index
from beam_pipeline.common.records import parse_example, read_records_at
from tf_serving_input.layout import OutputLayout, shard_stem

FAILURE = {"source": "gone.jpg", "key": "00000000deadbeef", "split": "train", "reason": "missing_file",
           "detail": "no such file"}


@pytest.fixture
def run(tiny_job, tmp_path):
    """A copy of the tiny job output with one failed row: its OutputLayout."""
    out = tmp_path / "run"
    shutil.copytree(tiny_job[0], out)
    with open(out / "errors.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(FAILURE) + "\n")
    return OutputLayout(str(out))


def records_of(layout, image_feature="image/encoded"):
    """(key, source, split, label, shard, offset, length, stored bytes) of every record, read by TensorFlow."""
    rows = []
    for shard in layout.load_manifest()["shards"]:
        with open(layout.path(shard["file"]), "rb") as f:
            for offset, record in read_records_at(f):
                feature = parse_example(record).features.feature
                text = {name: feature[name].bytes_list.value[0].decode() for name in
                        ("image/key", "image/source", "label/text")}
                rows.append((text["image/key"], text["image/source"], shard["split"], text["label/text"],
                             shard_stem(shard["file"]), offset, len(record),
                             len(feature[image_feature].bytes_list.value[0])))
    return rows


def stored_rows(table):
    return [(r["key"], r["source"], r["split"], r["label"], r["shard"], r["offset"], r["length"], r["stored_bytes"])
            for r in table.to_pylist() if r["reason"] is None]


def failed_rows(table):
    return [{name: r[name] for name in FAILURE} for r in table.to_pylist() if r["reason"] is not None]


def open_saying(layout, cache_dir):
    lines = []
    index = image_index.open_index(layout, layout.load_manifest(), cache_dir=str(cache_dir), say=lines.append)
    return index, lines


def test_the_index_holds_every_record_and_failed_row_and_is_read_back_silently(run, tmp_path):
    built, lines = open_saying(run, tmp_path / "cache")
    assert stored_rows(built.table) == records_of(run)
    assert failed_rows(built.table) == [FAILURE]
    assert built.where == run.index_file and len(lines) == 1 and "building it once" in lines[0], lines
    read, lines = open_saying(run, tmp_path / "cache")
    assert lines == [] and read.table.equals(built.table)


def test_a_flipped_byte_in_the_index_is_detected_and_it_is_rebuilt_with_one_line(run, tmp_path):
    built, _ = open_saying(run, tmp_path / "cache")
    data = bytearray(open(run.index_file, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(run.index_file, "wb").write(bytes(data))
    rebuilt, lines = open_saying(run, tmp_path / "cache")
    assert len(lines) == 1 and "is damaged" in lines[0] and "building it again" in lines[0], lines
    assert rebuilt.table.equals(built.table)
    assert open(run.index_file, "rb").read() != bytes(data)  # Written again, whole.


def test_a_flipped_byte_in_its_record_is_detected_too(run, tmp_path):
    open_saying(run, tmp_path / "cache")
    data = bytearray(open(run.index_record_file, "rb").read())
    data[data.index(b'"sha256"') + 12] ^= 0x01  # A character of the index's recorded SHA-256.
    open(run.index_record_file, "wb").write(bytes(data))
    _, lines = open_saying(run, tmp_path / "cache")
    assert len(lines) == 1 and "damaged" in lines[0], lines


def test_an_index_of_shards_since_rewritten_is_stale_and_rebuilt(run, tiny_raw_job, tmp_path):
    old, _ = open_saying(run, tmp_path / "cache")
    # The job rerun into the same folder with other settings (raw storage): other shards, offsets and sizes.
    for name in ("data", "shards"):
        shutil.rmtree(run.path(name))
        shutil.copytree(os.path.join(tiny_raw_job, name), run.path(name))
    shutil.copy(os.path.join(tiny_raw_job, "manifest.json"), run.manifest_file)
    new, lines = open_saying(run, tmp_path / "cache")
    assert len(lines) == 1 and "is stale" in lines[0], lines
    assert stored_rows(new.table) == records_of(run, "image/raw") != stored_rows(old.table)


def test_a_shard_replaced_in_place_makes_the_index_stale(run, tmp_path):
    open_saying(run, tmp_path / "cache")
    shard = run.path(run.load_manifest()["shards"][0]["file"])
    os.utime(shard, ns=(os.stat(shard).st_atime_ns, os.stat(shard).st_mtime_ns + 10**9))
    _, lines = open_saying(run, tmp_path / "cache")
    assert len(lines) == 1 and "is stale" in lines[0], lines


@contextlib.contextmanager
def read_only(folder):
    """`folder` made read-only: a read-only bind mount over it as root (root ignores permissions), else chmod."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        try:
            yield
        finally:
            os.chmod(folder, 0o755)
        return
    mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"running as root, and a read-only bind mount is not allowed here ({mounted.stderr.strip()})")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True, capture_output=True)
        yield
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def test_a_read_only_run_gets_its_index_in_the_cache_folder_and_says_so(run, tmp_path):
    expected = records_of(run)
    with read_only(run.root):
        index, lines = open_saying(run, tmp_path / "cache")
        assert len(lines) == 1 and "cannot be written" in lines[0] and "cache folder" in lines[0], lines
        assert index.where == str(tmp_path / "cache" / "index.parquet")
        assert stored_rows(index.table) == expected and failed_rows(index.table) == [FAILURE]
        again, lines = open_saying(run, tmp_path / "cache")
        assert lines == [] and again.where == index.where  # Built once: the cache's index is trusted next time.
    assert not os.path.exists(run.index_file)


def test_a_read_only_run_without_a_writable_cache_gets_its_index_in_memory(run, tmp_path):
    expected = records_of(run)
    with read_only(run.root):
        index, lines = open_saying(run, os.path.join(run.root, "cache"))  # Inside the read-only folder.
        assert len(lines) == 1 and "in memory only" in lines[0], lines
        assert index.where == "memory"
        assert stored_rows(index.table) == expected and failed_rows(index.table) == [FAILURE]


def test_a_truncated_shard_is_named(run, tmp_path):
    shard = run.path(run.load_manifest()["shards"][0]["file"])
    os.truncate(shard, os.path.getsize(shard) - 5)
    with pytest.raises(image_index.DamagedShard, match="ends inside the record"):
        open_saying(run, tmp_path / "cache")
