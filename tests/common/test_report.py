"""Manifest, errors.jsonl and the summary, from shard statuses (in process)."""

import json

import pytest

from beam_pipeline.common import report
from beam_pipeline.preprocess import options
from tf_serving_input.layout import OutputLayout


def status(name, split, rows, records, failed=(), size=100):
    return {"name": name, "split": split, "file": f"data/{name}.tfrecord", "rows": rows, "records": records,
            "failed": list(failed), "bytes": size, "sha256": "ab" * 32}


def failure(line, reason):
    return {"source": f"{line}.jpg", "key": f"k{line}", "line": line, "split": "train", "reason": reason,
            "detail": "..."}


@pytest.fixture
def manifest_and_failures():
    job, _ = options.parse_args(["--input_csv", "in.csv", "--output_dir", "out"])
    statuses = [status("validation-00000-of-00001", "validation", 2, 2),
                status("train-00001-of-00002", "train", 3, 1, [failure(9, "truncated"), failure(4, "file_not_found")]),
                status("train-00000-of-00002", "train", 4, 3, [failure(7, "file_not_found")])]
    return report.build_manifest(job, statuses, ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], ["cat"]), 2.0, "FnApiRunner")


def test_manifest_counts_every_row_and_reason(manifest_and_failures):
    manifest, failures = manifest_and_failures
    assert (manifest["rows"], manifest["written"], manifest["failed"]) == (9, 6, 3)
    assert manifest["failed_by_reason"] == {"file_not_found": 2, "truncated": 1}
    assert [f["line"] for f in failures] == [4, 7, 9]  # CSV order.
    assert manifest["splits"] == {"train": {"rows": 7, "written": 4, "failed": 3, "shards": 2},
                                  "validation": {"rows": 2, "written": 2, "failed": 0, "shards": 1}}
    assert [s["file"] for s in manifest["shards"]] == sorted(s["file"] for s in manifest["shards"])
    assert manifest["images_per_second"] == 3.0 and manifest["versions"]["tensorflow"]


def test_outputs_and_summary(manifest_and_failures, tmp_path):
    manifest, failures = manifest_and_failures
    layout = OutputLayout(str(tmp_path))
    report.write_outputs(layout, manifest, failures)
    assert [json.loads(line)["line"] for line in open(layout.errors_file)] == [4, 7, 9]
    assert json.loads(open(layout.manifest_file).read()) == manifest
    summary = report.format_summary(manifest, layout)
    assert "file_not_found" in summary and "pixel mean (RGB)       1.00, 2.00, 3.00" in summary
    assert layout.errors_file in summary


def test_missing_statuses_are_named(tmp_path):
    with pytest.raises(RuntimeError, match="never completed .*: train-00000-of-00001"):
        report.read_shard_statuses(OutputLayout(str(tmp_path)), ["train-00000-of-00001"])


def test_each_shard_in_the_manifest_carries_the_framing_digest_its_status_has():
    """A shard kept from a run of an earlier version has none: the jobs that read it check its SHA-256."""
    job, _ = options.parse_args(["--input_csv", "in.csv", "--output_dir", "out"])
    statuses = [dict(status("train-00000-of-00002", "train", 2, 2), framing_sha256="cd" * 32),
                status("train-00001-of-00002", "train", 2, 2)]
    manifest, _ = report.build_manifest(job, statuses, ([1.0] * 3, [1.0] * 3, ["cat"]), 2.0, "FnApiRunner")
    assert [s.get("framing_sha256") for s in manifest["shards"]] == ["cd" * 32, None]
    assert all(s["sha256"] == "ab" * 32 for s in manifest["shards"])


def test_the_summary_escapes_and_cuts_labels_the_manifest_keeps_whole(manifest_and_failures, tmp_path):
    manifest, _ = manifest_and_failures
    label = "\u202e" + "L" * 10_000
    manifest = {**manifest, "statistics": {**manifest["statistics"], "label_vocabulary": [label, "cat\x1b[2J"]}}
    summary = report.format_summary(manifest, OutputLayout(str(tmp_path)))
    assert "\u202e" not in summary and "\x1b" not in summary and "\\u202eLLL" in summary and "cat\\x1b[2J" in summary
    assert max(map(len, summary.splitlines())) < 200  # Not ten thousand characters in the terminal.


def test_the_summary_counts_the_labels_the_csv_read_changed(manifest_and_failures, tmp_path):
    manifest, _ = manifest_and_failures
    layout = OutputLayout(str(tmp_path))
    assert "spaces" not in report.format_summary(manifest, layout)  # Nothing changed: no line.
    job, _ = options.parse_args(["--input_csv", "in.csv", "--output_dir", "out"])
    manifest, _ = report.build_manifest(job, [status("train-00000-of-00001", "train", 2, 2)],
                                        ([1.0] * 3, [1.0] * 3, ["cat"]), 2.0, "FnApiRunner",
                                        label_cells={"stripped": 173, "blank": 171})
    assert manifest["label_cells"] == {"stripped": 173, "blank": 171}
    lines = [" ".join(line.split()) for line in report.format_summary(manifest, layout).splitlines()]
    assert "labels stripped 173 had surrounding spaces, stripped" in lines, lines
    assert "labels blank 171 held only spaces: unlabeled" in lines, lines
