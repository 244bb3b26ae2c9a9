"""The shard DoFn in a real Beam pipeline: status, statistics rows, and a resumed shard re-emitting both."""

import json
import shutil

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

import imaging
import outputs
from beam_pipeline.inputs import rows as source
from beam_pipeline.preprocess.shard_writer import STATS_TAG, WriteShardFn
from tf_serving_input import features
from tf_serving_input.features import PreprocessConfig
from tf_serving_input.layout import OutputLayout


def make_rows(tmp_path, count, bad=("missing.jpg",), write=True):
    """Rows of `count` PNGs in tmp_path (written unless `write` is False) and the `bad` sources."""
    rows = []
    for index in range(count):
        name = f"{index}.png"
        if write:
            (tmp_path / name).write_bytes(imaging.encode(imaging.solid((index * 20, 50, 90)), "PNG"))
        rows.append(name)
    rows += list(bad)
    return [source.Row(index=i, line=i + 2, source=name, path=str(tmp_path / name), label="ab"[i % 2],
                       split="train", key=source.row_key(i, name)) for i, name in enumerate(rows)]


def run_writer(out, rows, config):
    """Runs WriteShardFn on one train shard; returns (status dicts, stats row count, moment totals)."""
    layout = OutputLayout(str(out))
    for folder in (layout.data_dir, layout.status_dir):
        (out / folder.rsplit("/", 1)[1]).mkdir(parents=True, exist_ok=True)
    written = len([row for row in rows if row.source != "missing.jpg"])
    with TestPipeline(runner=FnApiRunner()) as p:
        results = (p | beam.Create([(("train", 0), list(reversed(rows)))])  # Any order in: CSV order out.
                   | beam.ParDo(WriteShardFn(str(out), config, {"train": 1})).with_outputs(STATS_TAG, main="status"))
        assert_that(results.status | beam.Map(lambda s: (s["name"], s["rows"], s["records"], len(s["failed"]))),
                    equal_to([("train-00000-of-00001", len(rows), written, len(rows) - written)]),
                    label="StatusCounts")
        # One row with the shard's moment totals, then one row per written image (its label).
        assert_that(results[STATS_TAG] | "StatsRows" >> beam.Map(lambda batch: batch.num_rows)
                    | beam.CombineGlobally(sum), equal_to([1 + written]), label="StatsRowCount")
        assert_that(results[STATS_TAG] | beam.Map(lambda batch: tuple(sorted(batch.schema.names))) | beam.Distinct(),
                    equal_to([("label", "pixel_moments")]), label="StatsSchema")
    return json.loads(open(layout.status_file("train-00000-of-00001")).read())


def test_shard_file_status_and_statistics(tmp_path):
    rows = make_rows(tmp_path, 5)
    out = tmp_path / "out"
    status = run_writer(out, rows, PreprocessConfig(image_size=8))
    assert [e[features.IMAGE_SOURCE] for e in outputs.all_examples(out)] == [f"{i}.png".encode() for i in range(5)]
    assert status["failed"] == [{"source": "missing.jpg", "key": rows[-1].key, "line": 7, "split": "train",
                                 "reason": "file_not_found", "detail": str(tmp_path / "missing.jpg")}]
    assert status["file"] == "data/train-00000-of-00001.tfrecord" and status["pixel_moments"][6] == 5 * 64
    assert not list(out.rglob("*.incomplete"))


@pytest.fixture(scope="module")
def finished_shard(tmp_path_factory):
    """Three images, a missing one and the finished shard over them, written once: each resume test
    damages a copy of it (`copy_of`)."""
    folder = tmp_path_factory.mktemp("finished_shard")
    return folder, run_writer(folder / "out", make_rows(folder, 3), PreprocessConfig(image_size=8))


def copy_of(finished_shard, tmp_path):
    """(rows over a copy of the finished shard's images, the copy's output folder, its first status)."""
    folder, first = finished_shard
    shutil.copytree(folder, tmp_path, dirs_exist_ok=True)
    return make_rows(tmp_path, 3, write=False), tmp_path / "out", first


def test_a_finished_shard_is_kept_and_re_emits_its_statistics(tmp_path, finished_shard):
    rows, out, first = copy_of(finished_shard, tmp_path)
    data = (out / "data" / "train-00000-of-00001.tfrecord").read_bytes()
    for row in rows:  # The images are gone: a kept shard must not read them again.
        (tmp_path / row.source).unlink(missing_ok=True)
    second = run_writer(out, rows, PreprocessConfig(image_size=8))
    assert second == first and (out / "data" / "train-00000-of-00001.tfrecord").read_bytes() == data


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_a_damaged_shard_is_rewritten(tmp_path, finished_shard, damage):
    rows, out, first = copy_of(finished_shard, tmp_path)
    path = out / "data" / "train-00000-of-00001.tfrecord"
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:-10])
    else:
        path.unlink()
    second = run_writer(out, rows, PreprocessConfig(image_size=8))
    assert path.read_bytes() == data and second["sha256"] == first["sha256"]


@pytest.mark.parametrize("damage", ["flip", "moments", "rows"])
def test_a_changed_byte_or_number_is_caught_on_resume(tmp_path, finished_shard, damage):
    """A same-size byte flip in the shard, or an edited number in its status, is never reused."""
    rows, out, first = copy_of(finished_shard, tmp_path)
    path, status_path = out / "data" / "train-00000-of-00001.tfrecord", out / "shards" / "train-00000-of-00001.json"
    data = path.read_bytes()
    if damage == "flip":  # Size unchanged: only the checksum tells.
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(flipped))
    else:
        text = status_path.read_text()
        status = json.loads(text)
        if damage == "moments":  # The statistics are summed from these on resume.
            status["pixel_moments"][0] += 80000
        else:
            status["rows"] = 2
        status_path.write_text(json.dumps(status))
    second = run_writer(out, rows, PreprocessConfig(image_size=8))
    assert path.read_bytes() == data
    assert second["pixel_moments"] == first["pixel_moments"] and second["rows"] == first["rows"]
    assert json.loads(status_path.read_text())["pixel_moments"] == first["pixel_moments"]
