"""End-to-end: the real command line, default runner, on good and bad files; the output contract."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

import http_server
import imaging
import in_process
import outputs
from tf_serving_input import features

SIZE = 32
BAD = {  # file -> (reason code, words its detail must hold)
    "missing.jpg": ("file_not_found", "missing.jpg"),
    "empty.jpg": ("empty_file", "0 bytes"),
    "truncated.jpg": ("truncated", "JPEG"),
    "notes.jpg": ("not_an_image", "unknown file format"),
    "bomb.png": ("too_many_pixels", "60000x60000 is more than max_pixels=100000000"),
}


def run_cli(*args, module="beam_pipeline"):
    """The command line in a process of its own, on the default runner."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          env=env, timeout=600)


def make_mixed_dataset(folder, good_count=24):
    """good_count good images in 3 classes (train and validation) plus one file of each bad kind."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(good_count):
        label = "abc"[i % 3]
        image = imaging.quadrants(rng.integers(40, 90), rng.integers(40, 90))
        image[..., "abc".index(label)] = 255
        fmt, ext = [("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp")][i % 3]
        name = f"images/{label} {i}, v2.{ext}"  # Spaces and commas in paths.
        (folder / "images").mkdir(exist_ok=True)
        (folder / name).write_bytes(imaging.encode(image, fmt))
        rows.append([name, label, "validation" if i % 4 == 0 else "train"])
    good = imaging.encode(imaging.quadrants(), "JPEG", quality=90)
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (folder / "notes.jpg").write_text("shopping list: milk, eggs")
    (folder / "bomb.png").write_bytes(imaging.png_claiming_size(60000, 60000))
    rows += [[name, "a", "train"] for name in BAD]
    imaging.write_csv(folder / "images.csv", ["path", "label", "split"], rows)
    return folder / "images.csv", rows


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, loopback):
    folder = tmp_path_factory.mktemp("mixed")
    csv_path, rows = make_mixed_dataset(folder)
    # One URL row, fetched in Beam's worker processes (the fetch settings pickle, the reader starts there).
    image = imaging.quadrants(50, 70)
    image[..., 1] = 255
    rows.append([loopback.route("/images/b.jpg", http_server.image(imaging.encode(image, "JPEG"))), "b", "train"])
    imaging.write_csv(csv_path, ["path", "label", "split"], rows)
    out = folder / "out"
    result = run_cli("--input_csv", str(csv_path), "--output_dir", str(out), "--image_size", str(SIZE),
                     "--max_error_rate", "0.25", "--url_allow_private")
    return result, out, rows


def test_a_run_keeping_no_column_has_the_graph_of_before_and_no_column_statistics(finished_run):
    """Issue 52: a run without --column keeps the transform graph it had (the same outputs and one asset), writes
    no column_stats.json, and its features.json lists no column."""
    import tensorflow_transform as tft

    from tf_serving_input import column_stats
    from tf_serving_input.column_parsing import load_feature_spec

    _, out, _ = finished_run
    assert set(tft.TFTransformOutput(str(out)).transformed_feature_spec()) == {"label", "pixel_mean", "pixel_std"}
    assert {path.name for path in (out / "transform_fn" / "assets").iterdir()} == {"label"}
    assert column_stats.read_document(str(out)) is None and column_stats.load_column_stats(str(out)) == {}
    spec = load_feature_spec(str(out))
    assert spec.columns == () and not spec.multi_label and (out / "features.json").exists()


def test_run_succeeds_under_the_error_rate_with_progress_and_summary(finished_run):
    result, _, _ = finished_run
    assert result.returncode == 0, result.stderr[-3000:]
    # Progress on stderr; stdout holds the result (the summary) only.
    assert "progress: " in result.stderr and "shards" in result.stderr and "images/s" in result.stderr
    assert "progress: " not in result.stdout and "Summary" in result.stdout
    assert "Summary" in result.stdout and "failed" in result.stdout


def test_output_contract_and_row_accounting(finished_run):
    result, out, rows = finished_run
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = outputs.manifest(out)
    assert manifest["rows"] == len(rows) == manifest["written"] + manifest["failed"]
    assert manifest["failed"] == len(BAD)
    assert manifest["failed_by_reason"] == {reason: 1 for reason, _ in BAD.values()}
    assert {"splits", "shards", "config", "statistics", "wall_seconds", "versions"} <= set(manifest)
    assert manifest["versions"]["tensorflow-transform"].startswith("1.21")
    assert set(manifest["splits"]) == {"train", "validation"}
    # The URL row, fetched in Beam's worker processes: their counters reach the manifest (this run's fetches).
    assert manifest["fetch"]["urls"] == manifest["fetch"]["requested"] == 1 and manifest["fetch"]["bytes"] > 0

    errors = outputs.errors(out)
    assert {e["source"]: e["reason"] for e in errors} == {name: reason for name, (reason, _) in BAD.items()}
    for error in errors:
        assert BAD[error["source"]][1] in error["detail"] and error["key"] and error["line"] >= 2

    seen = {}
    for shard in manifest["shards"]:
        name = os.path.basename(shard["file"])
        split, rest = name.split("-", 1)
        assert rest.endswith(".tfrecord") and "-of-" in rest
        examples = outputs.examples(out / shard["file"])
        assert len(examples) == shard["records"]
        for example in examples:
            assert example[features.IMAGE_FORMAT] == b"raw"  # The default: pixels under image/raw.
            assert features.IMAGE_RAW in example and features.IMAGE_ENCODED not in example
            assert (example[features.IMAGE_HEIGHT], example[features.IMAGE_WIDTH],
                    example[features.IMAGE_CHANNELS]) == (SIZE, SIZE, 3)
            assert example["pixels"].shape == (SIZE, SIZE, 3)
            seen[example[features.IMAGE_SOURCE].decode()] = (example[features.LABEL_TEXT].decode(), split,
                                                            example[features.IMAGE_KEY].decode())
    good = {name: (label, split) for name, label, split in rows if name not in BAD}
    assert {name: value[:2] for name, value in seen.items()} == good
    assert len({value[2] for value in seen.values()}) == len(good)  # Keys are unique.
    assert not list(out.rglob("*.incomplete")) and not (out / ".tmp").exists()


def test_transform_output_loads_and_holds_the_statistics(finished_run):
    _, out, _ = finished_run
    manifest = outputs.manifest(out)
    transform_output = tft.TFTransformOutput(str(out))
    assert set(transform_output.raw_feature_spec()) == {features.RAW_PIXEL_MOMENTS, features.RAW_LABEL}
    assert sorted(transform_output.vocabulary_by_name(features.LABEL_VOCABULARY)) == [b"a", b"b", b"c"]
    stats = manifest["statistics"]
    assert len(stats["pixel_mean"]) == 3 and all(0 < m < 255 for m in stats["pixel_mean"])
    assert all(s > 1 for s in stats["pixel_std"])
    # The saved graph maps labels to vocabulary ids and holds the manifest's statistics.
    transformed = transform_output.transform_raw_features({
        features.RAW_PIXEL_MOMENTS: tf.zeros([2, 7], tf.int64), features.RAW_LABEL: tf.constant(["b", "zebra"])})
    vocabulary = [v.decode() for v in transform_output.vocabulary_by_name(features.LABEL_VOCABULARY)]
    # -1, as the README's output contract says (not only "whatever UNKNOWN_LABEL_ID holds").
    assert transformed[features.TRANSFORMED_LABEL].numpy().tolist() == [vocabulary.index("b"), -1]
    np.testing.assert_allclose(transformed[features.TRANSFORMED_PIXEL_MEAN].numpy()[0], stats["pixel_mean"],
                               rtol=1e-6)
    np.testing.assert_allclose(transformed[features.TRANSFORMED_PIXEL_STD].numpy()[0], stats["pixel_std"],
                               rtol=1e-6)


def test_inspect_prints_statistics_and_renders_a_contact_sheet(finished_run, tmp_path):
    _, out, _ = finished_run
    sheet = tmp_path / "sheet.png"
    result = in_process.run_module("beam_pipeline.inspect", out, "--contact_sheet", sheet)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "pixel mean" in result.stdout and "labels (3)" in result.stdout
    image = tf.io.decode_png(sheet.read_bytes()).numpy()
    assert image.shape[0] >= SIZE and image.shape[1] >= 8 * SIZE and image.std() > 10


def test_other_configuration_into_the_same_folder_is_refused_untouched(finished_run):
    result, out, _ = finished_run
    before = sorted((p.name, p.stat().st_mtime_ns) for p in out.rglob("*"))
    again = in_process.run_module("beam_pipeline", "--input_csv", out.parent / "images.csv", "--output_dir", out,
                                  "--image_size", "16")
    assert again.returncode == 2
    assert "different input or configuration" in again.stderr and "--overwrite" in again.stderr
    assert sorted((p.name, p.stat().st_mtime_ns) for p in out.rglob("*")) == before


def test_too_many_failures_exit_non_zero_after_writing_everything(tmp_path):
    # A Parquet list (issue 52): its rows take the same path; a discarded row is counted, not written, and a
    # blank split is 'train', counted; 'Train' is 'train'.
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "ok.png").write_bytes(imaging.encode(imaging.quadrants(), "PNG"))
    pq.write_table(pa.table({"path": ["ok.png", "gone.png", "ok.png"], "split": ["Train", None, "DISCARD"]}),
                   tmp_path / "in.parquet")
    out = tmp_path / "out"
    result = in_process.run_module("beam_pipeline", "--input", tmp_path / "in.parquet", "--output_dir", out,
                                   "--image_size", "16", "--no_progress")
    assert result.returncode == 1
    assert "1 of 2 rows failed" in result.stderr and "file_not_found: 1" in result.stderr
    manifest = outputs.manifest(out)
    assert (manifest["rows"], manifest["written"], manifest["failed"]) == (2, 1, 1)
    assert list(manifest["splits"]) == ["train"]
    assert manifest["statistics"]["label_vocabulary"] == []  # Unlabeled data is valid.
    assert [e["source"] for e in outputs.errors(out)] == ["gone.png"]
    summary = " ".join(result.stdout.split())
    assert "list rows 3 read (parquet 3)" in summary and "discarded 1 rows of the split 'discard'" in summary
    assert "blank splits 1 rows with a blank split cell" in summary


@pytest.mark.parametrize("name,content,flags,message", [
    ("in.csv", "file,label\na.jpg,x\n", (), "no 'path' column"),
    ("in.csv", "path,label\n", (), "no data rows"),
    ("in.csv", "path,label,label\na.jpg,x,y\n", (), "in.csv: line 1: the column 'label' is named twice"),
    ("in.jsonl", '{"path": "a.jpg", "score": 1}\n', ("--column", "size:int"),
     "in.jsonl: line 1: --column size is not a column of the list; its columns: ['path', 'score']"),
    ("in.jsonl", '{"path": "a.jpg", "score": 1}\n{"path": "b.jpg", "score": "high"}\n', ("--column", "score"),
     "column 'score' holds values that fit no one type"),
    ("in.csv", "path,score\na.jpg,1\n", ("--column", "score"), "--column 'score' needs a type in a CSV list"),
])
def test_unusable_csv_is_refused_before_any_work(tmp_path, name, content, flags, message):
    (tmp_path / name).write_text(content)
    result = in_process.run_module("beam_pipeline", "--input", tmp_path / name, "--output_dir",
                                   tmp_path / "out", *flags)
    assert result.returncode == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_help_explains_every_flag_with_its_default():
    result = run_cli("--help")
    assert result.returncode == 0
    for flag in ("--input_csv", "--output_dir", "--image_size", "--resize_mode", "--image_format",
                 "--jpeg_quality", "--num_shards", "--path_column", "--label_column", "--split_column",
                 "--max_error_rate", "--max_pixels", "--overwrite", "--runner"):
        assert flag in result.stdout, flag
    text = " ".join(result.stdout.split())  # argparse wraps lines.
    assert "(default: 224)" in text and "(default: center_crop)" in text and "FnApiRunner" in text


def test_a_reader_that_closes_stdout_early_does_not_fail_a_finished_run(tmp_path):
    """`... | grep -q`, `... | true`: the outputs are complete; the command ends quietly with 141, not as a
    failed run (exit 1, "error: BrokenPipeError ... while writing the manifest")."""
    csv_path = imaging.small_dataset(tmp_path, count=4)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "beam_pipeline", "preprocess", "--input_csv", csv_path, "--output_dir", out,
               "--image_size", SIZE, "--direct_num_workers", "1", "--direct_running_mode", "in_memory"]
    process = subprocess.Popen([str(c) for c in command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # The reader is gone before the summary is printed.
    stderr = process.stderr.read()
    assert process.wait(timeout=300) == 141, stderr[-3000:]
    assert "error" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    assert outputs.manifest(out)["written"] == 4 and not list((out / "logs").glob("*.log"))
