"""The quality job through the real command line, on a job output with planted duplicates.

The preprocessing job runs first (its own CLI), then `beam-image-pipeline quality` on its output:
exact copies across splits (a leak), a format change with another label (a conflict), resized and
cropped copies, near-constant images, and a hostile file name and label; then the rerun (a no-op), a
resume after losing a signals shard and the report, and a refusal of other thresholds in the same folder.
"""

import collections
import csv
import html
import html.parser
import io
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

import imaging
import in_process
import said
from conftest import SAMPLE_DIR

HOSTILE_NAME = 'it\'s "quoted" <b>&amp; ünï\ncode.png'
HOSTILE_LABEL = 'la"bel <script>alert(1)</script> ünï'


def quality_process(*args, timeout=600):
    """The quality command in a process of its own, on the default runner (worker processes)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "beam_pipeline", "quality", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout)


def quality(*args, timeout=600):
    """The quality command in this process (tests/in_process.py): what it decides, writes and says."""
    return in_process.run_module("beam_pipeline", "quality", *args)


def tile(label, left, top, side=150):
    return Image.open(os.path.join(SAMPLE_DIR, "images", label, f"{label}_000.jpg")).convert("RGB").crop(
        (left, top, left + side, top + side))


def planted_dataset(folder):
    """(csv path, {name: (path, label, split)}) of the planted set."""
    (folder / "images").mkdir(parents=True)
    a, b, c, d = tile("cat", 0, 0), tile("coffee", 0, 0), tile("rocket", 20, 20), tile("astronaut", 10, 10)
    flat = Image.fromarray(imaging.solid((120, 120, 120), 80, 80))
    files = {
        "a.jpg": (imaging.encode(a, "JPEG", quality=92), "cat", "train"),
        "a_copy.jpg": (imaging.encode(a, "JPEG", quality=92), "cat", "validation"),  # Exact copy, other split.
        "b.jpg": (imaging.encode(b, "JPEG", quality=90), "coffee", "train"),
        "b_as_png.png": (imaging.encode(Image.open(io.BytesIO(imaging.encode(b, "JPEG", quality=90))), "PNG"),
                         "tea", "train"),  # The same picture as PNG, another label.
        "c.png": (imaging.encode(c, "PNG"), "rocket", "train"),
        "c_small.png": (imaging.encode(c.resize((112, 112), Image.BILINEAR), "PNG"), "rocket", "train"),
        "c_crop.jpg": (imaging.encode(c.crop((4, 4, 146, 146)), "JPEG", quality=75), "rocket", "train"),
        "d.png": (imaging.encode(d, "PNG"), "astronaut", "validation"),
        HOSTILE_NAME: (imaging.encode(d, "PNG"), HOSTILE_LABEL, "validation"),
        "flat1.png": (imaging.encode(flat, "PNG"), "flat", "train"),
        "flat2.png": (imaging.encode(flat, "PNG"), "flat", "validation"),
    }
    rows = []
    for name, (data, label, split) in files.items():
        (folder / "images" / name).write_bytes(data)
        rows.append([f"images/{name}", label, split])
    imaging.write_csv(folder / "images.csv", ["path", "label", "split"], rows)
    return folder / "images.csv", {f"images/{n}": (f"images/{n}", label, split) for n, (_, label, split) in
                                   files.items()}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("quality_job")
    csv_path, rows = planted_dataset(folder)
    out = folder / "job"
    done = in_process.run_module("beam_pipeline", "preprocess", "--input_csv", csv_path, "--output_dir", out,
                                 "--image_size", "64", "--no_progress")
    assert done.returncode == 0, done.stderr
    return folder, csv_path, rows, out


FINISHED_FLAGS = ("--max_split_moved", "0.5")


@pytest.fixture(scope="module")
def finished(job):
    folder, csv_path, rows, out = job
    quality_out = folder / "quality"
    # The command as a user runs it. Two of the four validation images are copies of train images: moving them
    # is half of validation, over the default --max_split_moved (0.25; the predictions test sees that refusal).
    # One worker process (a second imported TensorFlow again, ~10 s): the command's own process is what is tested.
    done = quality_process("--input_dir", out, "--output_dir", quality_out, *FINISHED_FLAGS, "--direct_num_workers", 1)
    assert done.returncode == 0, done.stderr
    return folder, csv_path, rows, out, quality_out, done


def groups_by_source(quality_out):
    table = pq.read_table(quality_out / "duplicate_groups.parquet").to_pylist()
    members = collections.defaultdict(list)
    for row in table:
        members[row["group"]].append(row)
    return {frozenset(r["source"] for r in group): group for group in members.values()}, table


def test_groups_leaks_and_conflicts(finished):
    *_, quality_out, done = finished
    groups, table = groups_by_source(quality_out)
    sources = {frozenset(g) for g in groups}
    assert frozenset({"images/a.jpg", "images/a_copy.jpg"}) in sources
    assert frozenset({"images/b.jpg", "images/b_as_png.png"}) in sources
    assert frozenset({"images/c.png", "images/c_small.png", "images/c_crop.jpg"}) in sources
    assert frozenset({"images/d.png", f"images/{HOSTILE_NAME}"}) in sources
    assert frozenset({"images/flat1.png", "images/flat2.png"}) in sources
    assert len(groups) == 5
    leak_group = groups[frozenset({"images/a.jpg", "images/a_copy.jpg"})]
    assert all(r["leak"] and r["match"] == "exact" and r["distance"] == 0 for r in leak_group)
    conflict = groups[frozenset({"images/b.jpg", "images/b_as_png.png"})]
    assert all(r["label_conflict"] for r in conflict) and {r["label"] for r in conflict} == {"coffee", "tea"}
    near = groups[frozenset({"images/c.png", "images/c_small.png", "images/c_crop.jpg"})]
    assert all(r["group_match"] == "near" and not r["leak"] for r in near)
    assert [r["source"] for r in near][0] == "images/c.png"  # The first member in CSV order.
    assert sum(r["match"] == "near" for r in near) == 2
    summary = json.loads((quality_out / "summary.json").read_text())
    assert summary["images"] == 11 and summary["leaking_groups"] == 2  # a (train/validation) and the flat pair.
    # b and its PNG (coffee, tea); d and its hostile-named copy (astronaut, the hostile label).
    assert summary["label_conflict_groups"] == 2 and summary["images_in_groups"] == 11
    assert summary["flagged_by_flag"]["near_constant"] == 2
    assert summary["thresholds"]["hash_distance"] == 10
    flags = pq.read_table(quality_out / "image_flags.parquet").to_pylist()
    assert {r["source"] for r in flags if "near_constant" in r["flags"]} == {"images/flat1.png", "images/flat2.png"}
    assert "Cross-split leaks: 2 groups; label conflicts: 2 groups" in done.stdout
    assert str(quality_out / "report.html") in done.stdout


def test_the_clean_split_has_every_row_once_and_no_group_across_splits(finished, tmp_path):
    _, csv_path, rows, _, quality_out, _ = finished
    with open(quality_out / "clean_split.csv", newline="", encoding="utf-8") as f:
        clean = list(csv.reader(f))
    assert clean[0] == ["path", "label", "split"]
    # Relative paths are written resolved: the file is in another folder than the job's CSV.
    assert all(os.path.isabs(r[0]) for r in clean[1:])
    clean = [clean[0]] + [[os.path.relpath(r[0], os.path.dirname(str(csv_path))), *r[1:]] for r in clean[1:]]
    assert sorted(r[0] for r in clean[1:]) == sorted(rows)  # Every input row exactly once (a newline kept).
    split_of = {r[0]: r[2] for r in clean[1:]}
    labels = {r[0]: r[1] for r in clean[1:]}
    assert labels == {path: label for path, (_, label, _) in rows.items()}  # Only splits change.
    groups, _ = groups_by_source(quality_out)
    for members in groups:
        assert len({split_of[m] for m in members}) == 1, members
    # A tie (one train, one validation) goes to the split of the group's first member in CSV order.
    assert split_of["images/a_copy.jpg"] == "train"
    assert split_of["images/flat2.png"] == "train"
    assert split_of["images/d.png"] == "validation"
    # And the job runs on it where it lies, finding every image.
    rerun = in_process.run_module("beam_pipeline", "preprocess", "--input_csv", quality_out / "clean_split.csv",
                                  "--output_dir", tmp_path / "clean_job", "--image_size", "32", "--no_progress",
                                  "--max_error_rate", "1")
    manifest = json.loads((tmp_path / "clean_job" / "manifest.json").read_text())
    job_manifest = json.loads((finished[3] / "manifest.json").read_text())
    assert rerun.returncode == 0 and manifest["written"] == job_manifest["written"], rerun.stderr[-2000:]


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.sections, self.images, self.figures, self.text = [], [], 0, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append((attrs["id"], int(attrs.get("data-count", -1))))
        elif tag == "img":
            self.images.append(attrs["src"])
        elif tag == "figure":
            self.figures += 1
        elif tag == "script":
            raise AssertionError("the report holds a <script> element")

    def handle_data(self, data):
        self.text.append(data)


def test_the_report_renders_offline_with_its_sections_and_thumbnails(finished):
    *_, quality_out, _ = finished
    page_text = (quality_out / "report.html").read_text(encoding="utf-8")
    page = _Page()
    page.feed(page_text)
    sections = dict(page.sections)
    assert list(sections)[:4] == ["summary", "leaks", "conflicts", "groups"]
    assert sections["leaks"] == 2 and sections["conflicts"] == 2 and sections["groups"] == 5
    assert sections["flag-near_constant"] == 2
    # Thumbnails: every shown member of each group section (2 + 2 leaks, 2 + 2 conflicts, 11 in groups) and
    # each flagged image, all read from the stored records as data URIs.
    assert page.figures == len(page.images) == 4 + 4 + 11 + 2
    assert all(src.startswith("data:image/jpeg;base64,") for src in page.images)
    assert "http://" not in page_text and "https://" not in page_text
    text = "".join(page.text)
    assert HOSTILE_LABEL.replace("\n", "\\n") in text  # Shown as text, escaped in the source.
    assert html.escape(HOSTILE_LABEL) in page_text and "<script>alert" not in page_text
    assert "ünï\\ncode.png" in text  # The newline in the file name made visible.


def test_hostile_text_survives_into_the_parquet(finished):
    *_, quality_out, _ = finished
    _, table = groups_by_source(quality_out)
    hostile = [r for r in table if r["source"] == f"images/{HOSTILE_NAME}"]
    assert len(hostile) == 1 and hostile[0]["label"] == HOSTILE_LABEL


def test_rerun_is_a_no_op_and_a_resume_rebuilds_what_is_lost(finished):
    _, _, _, out, quality_out, _ = finished
    before = {name: (quality_out / name).read_bytes() for name in ("duplicate_groups.parquet", "clean_split.csv",
                                                                     "image_flags.parquet")}
    again = quality("--input_dir", out, "--output_dir", quality_out, *FINISHED_FLAGS, "--format", "json")
    assert again.returncode == 0, again.stderr
    assert "Nothing to do" in again.stderr  # A notice; stdout holds the result only: the summary, as JSON.
    summary = json.loads(again.stdout)
    assert summary == {**json.loads((quality_out / "summary.json").read_text()), "output_dir": str(quality_out),
                       "report": str(quality_out / "report.html")}
    # Lose a signals shard, its status and the report: the same command resumes and rebuilds them.
    status = sorted((quality_out / "shards").glob("*.json"))[0]
    (quality_out / "signals" / (status.stem + ".parquet")).unlink()
    status.unlink()
    (quality_out / "report.html").unlink()
    resumed = quality("--input_dir", out, "--output_dir", quality_out, *FINISHED_FLAGS)
    assert resumed.returncode == 0, resumed.stderr
    assert "Resuming" in resumed.stderr
    assert (quality_out / "report.html").exists()
    for name, data in before.items():
        assert (quality_out / name).read_bytes() == data, name
    # One flipped byte in a finished output (a Parquet often still reads): the rerun sees it and rewrites it.
    groups = quality_out / "duplicate_groups.parquet"
    damaged = bytearray(groups.read_bytes())
    damaged[len(damaged) // 2] ^= 0x01
    groups.write_bytes(bytes(damaged))
    repaired = quality("--input_dir", out, "--output_dir", quality_out, *FINISHED_FLAGS)
    assert repaired.returncode == 0, repaired.stderr
    assert f"note: {groups} does not match the SHA-256 the manifest recorded" in repaired.stderr
    assert "Nothing to do" not in repaired.stderr and groups.read_bytes() == before["duplicate_groups.parquet"]
    other = quality("--input_dir", out, "--output_dir", quality_out, "--hash_distance", "4")
    assert other.returncode == 2
    assert len(other.stderr.strip().splitlines()) == 1 and "--overwrite" in other.stderr


def test_help_explains_every_flag_and_a_missing_input_is_one_line(tmp_path):
    helped = quality("--help")
    assert helped.returncode == 0
    for flag in ("--hash_distance", "--hash_band_bits", "--hash_band_step", "--max_bucket", "--near_constant_contrast",
                 "--dark_brightness", "--bright_brightness", "--blur_variance", "--report_top", "--report_images"):
        assert flag in helped.stdout
    assert "(default: 10)" in helped.stdout
    missing = quality("--input_dir", tmp_path / "nothing", "--output_dir", tmp_path / "q")
    assert missing.returncode == 2
    assert len(missing.stderr.strip().splitlines()) == 1 and "manifest.json not found" in missing.stderr


def test_an_output_inside_the_job_folder_and_a_damaged_job_manifest_are_refused(job, tmp_path):
    import shutil

    _, _, _, out = job
    inside = quality("--input_dir", out, "--output_dir", out / "data")
    assert inside.returncode == 2 and "is inside the job's own folder" in inside.stderr
    assert not (out / "data" / "manifest.json").exists()
    damaged = tmp_path / "damaged_job"
    shutil.copytree(out, damaged)
    manifest = damaged / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b'"', b"'", 1))
    refused = quality("--input_dir", damaged, "--output_dir", tmp_path / "q")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert f"{manifest} is damaged" in refused.stderr


def test_the_thumbnail_is_the_stored_image(finished):
    # The flat image's thumbnail decodes to its stored gray (read through CODECS, not the original file).
    *_, quality_out, _ = finished
    page = _Page()
    page.feed((quality_out / "report.html").read_text(encoding="utf-8"))
    import base64

    pixels = [np.asarray(Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))) for src in page.images]
    assert any(abs(float(p.mean()) - 120) < 2 and p.std() < 2 for p in pixels)


def test_predictions_add_embedding_pairs_and_label_errors(job, tmp_path):
    import scaleout

    _, _, _, out = job
    export = scaleout.export_small_model(out, tmp_path / "export", size=64)
    assert export
    predicted = in_process.predict(*scaleout.predict_command(tmp_path / "export", out, tmp_path / "predictions")[3:])
    assert predicted.returncode == 0, predicted.stderr
    quality_out = tmp_path / "quality"
    done = quality("--input_dir", out, "--output_dir", quality_out, "--predictions_dir", tmp_path / "predictions")
    assert done.returncode == 0, done.stderr
    summary = json.loads((quality_out / "summary.json").read_text())
    assert summary["embedding_pairs"] >= 4  # At least the identical pictures: a, b and d with their copies, flat.
    assert summary["suspected_label_errors"] is not None
    assert summary["thresholds"]["embedding_distance"] == "auto"
    # 11 images, fewer than the 20 labelled images a calibration needs: the former default.
    assert summary["embedding"]["distance"] == 0.05 and summary["embedding"]["distance_from"] == "uncalibrated"
    # The default --max_split_moved (0.25): moving a_copy and flat2 would take 2 of validation's 4 images (50%).
    # Not written, and said so in the summary, on stdout and in the report.
    clean = summary["clean_split"]
    assert not clean["written"] and clean["rows_moved"] == 0 and clean["rows_proposed"] >= 2
    assert clean["images_before"] == clean["images_after"] == {"train": 7, "validation": 4}
    assert not (quality_out / "clean_split.csv").exists()
    refusal = "clean_split.csv not written: it would"
    assert any(w.startswith(refusal) and "split 'validation'" in w for w in summary["warnings"])
    assert "Clean split: NOT written" in done.stdout and f"Warning: {refusal}" in done.stdout
    page = (quality_out / "report.html").read_text(encoding="utf-8")
    assert '<section id="warnings"' in page and refusal in page
    rows = pq.read_table(quality_out / "duplicate_groups.parquet").to_pylist()
    assert all(r["clean_split"] == r["split"] for r in rows)  # Nothing moves in a refused clean split.
    manifest = json.loads((quality_out / "manifest.json").read_text())
    assert "clean_split.csv" not in manifest["outputs"]
    again = quality("--input_dir", out, "--output_dir", quality_out, "--predictions_dir", tmp_path / "predictions")
    assert again.returncode == 0 and "Nothing to do" in again.stderr, again.stderr  # The refusal is a finished run.
    errors = pq.read_table(quality_out / "suspected_label_errors.parquet")
    assert errors.num_rows == summary["suspected_label_errors"]
    groups, _ = groups_by_source(quality_out)
    assert frozenset({"images/a.jpg", "images/a_copy.jpg"}) in {frozenset(g) for g in groups}
    # Predictions of another input (here: a job output whose shards' checksums differ) are refused before any work.
    import shutil

    other_job = tmp_path / "other_job"
    shutil.copytree(out, other_job)
    manifest = json.loads((other_job / "manifest.json").read_text())
    manifest["shards"][0]["sha256"] = "0" * 64
    (other_job / "manifest.json").write_text(json.dumps(manifest))
    other = quality("--input_dir", other_job, "--output_dir", tmp_path / "q2",
                    "--predictions_dir", tmp_path / "predictions")
    assert other.returncode == 2
    assert "holds predictions of another input" in other.stderr and len(other.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "q2" / "signals").exists()


def test_a_damaged_job_shard_is_not_measured_and_its_rows_are_listed(job, tmp_path):
    import shutil

    _, _, _, out = job
    damaged = tmp_path / "damaged_job"
    shutil.copytree(out, damaged)
    manifest = json.loads((damaged / "manifest.json").read_text())
    shard = next(s for s in manifest["shards"] if s["records"] > 0)
    path = damaged / shard["file"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40  # One flipped bit inside a record: its CRC and the SHA-256 catch it.
    path.write_bytes(bytes(data))
    quality_out = tmp_path / "quality"
    done = quality("--input_dir", damaged, "--output_dir", quality_out)
    assert done.returncode == 1  # More than --max_error_rate of the rows could not be measured.
    assert "rows failed" in done.stderr and len(said.problems(done.stderr)) == 1
    errors = [json.loads(line) for line in (quality_out / "errors.jsonl").read_text().splitlines()]
    assert len(errors) == shard["records"]
    assert {e["reason"] for e in errors} == {"input_shard_damaged"}
    assert all(shard["file"] in e["detail"] for e in errors)
    summary = json.loads((quality_out / "summary.json").read_text())
    assert summary["images"] == 11 - shard["records"] and summary["rows_failed"] == shard["records"]
    assert f"({shard['records']} rows of the job not measured: no stored image, or a damaged shard" in done.stdout
    # The same command again checks the damaged shard again (and only it) and still fails: a retrying
    # script must not read the over-budget run as a success (a no-op once exited 0 with "Nothing to do").
    kept = {path: path.stat().st_mtime_ns for path in (quality_out / "signals").glob("*.parquet")
            if path.stem != os.path.basename(shard["file"]).split(".")[0]}
    again = quality("--input_dir", damaged, "--output_dir", quality_out)
    assert "Nothing to do" not in again.stderr
    assert again.returncode == 1 and said.problems(again.stderr) == said.problems(done.stderr)
    assert {path: path.stat().st_mtime_ns for path in kept} == kept
    # Repaired (as the rerun of the preprocessing job does), the same command measures it: no --overwrite
    # needed (a no-op kept the stale failure and exited 1).
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    repaired = quality("--input_dir", damaged, "--output_dir", quality_out)
    assert repaired.returncode == 0, repaired.stderr
    assert json.loads((quality_out / "summary.json").read_text())["images"] == 11
    assert (quality_out / "errors.jsonl").read_text() == ""


def test_a_record_edited_with_its_crcs_recomputed_is_not_measured(job, tmp_path):
    """A tool that rewrites a record (its CRCs made to match, the shard's size and count the same) changes
    the record's data CRC: the framing digest the job's manifest records for the shard tells."""
    import shutil

    from beam_pipeline.common.records import frame_record, read_records

    _, _, _, out = job
    edited = tmp_path / "edited_job"
    shutil.copytree(out, edited)
    manifest = json.loads((edited / "manifest.json").read_text())
    assert all(len(s["framing_sha256"]) == 64 for s in manifest["shards"])  # Every shard of this version's job.
    shard = next(s for s in manifest["shards"] if s["records"] > 0)
    path = edited / shard["file"]
    with open(path, "rb") as f:
        records = [bytearray(record) for record in read_records(f)]
    records[0][len(records[0]) // 2] ^= 0x40
    size = path.stat().st_size
    path.write_bytes(b"".join(frame_record(bytes(record)) for record in records))
    assert path.stat().st_size == size
    quality_out = tmp_path / "quality"
    done = quality("--input_dir", edited, "--output_dir", quality_out, "--max_error_rate", "1")
    assert done.returncode == 0, done.stderr
    errors = [json.loads(line) for line in (quality_out / "errors.jsonl").read_text().splitlines()]
    assert len(errors) == shard["records"]
    assert all(shard["file"] in e["detail"] and "does not match the record checksums" in e["detail"]
               for e in errors)


def test_a_csv_changed_since_the_job_read_it_is_refused_before_any_work(job, tmp_path):
    """clean_split.csv rewrites the job's CSV row by row: a row added or removed since would shift every
    later row's key, and the clean split would silently drop measured rows or keep unmeasured ones."""
    import shutil

    _, csv_path, _, out = job
    copied_job, csv_copy = tmp_path / "job", tmp_path / "input.csv"
    shutil.copytree(out, copied_job)
    shutil.copy(csv_path, csv_copy)
    for name in ("manifest.json", "run.json"):
        document = json.loads((copied_job / name).read_text())
        document["config"]["input_csv"] = str(csv_copy)
        (copied_job / name).write_text(json.dumps(document))
    lines = csv_copy.read_text().splitlines()
    csv_copy.write_text("\n".join(lines[:2] + lines[3:]) + "\n")  # The first data row's successor removed.

    refused = quality("--input_dir", copied_job, "--output_dir", tmp_path / "q")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert f"the job's CSV {csv_copy} changed since the job read it" in refused.stderr
    assert not (tmp_path / "q" / "signals").exists()

    (copied_job / "run.json").unlink()  # An output without the CSV's checksum: the row count still tells.
    refused = quality("--input_dir", copied_job, "--output_dir", tmp_path / "q")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    rows = json.loads((copied_job / "manifest.json").read_text())["rows"]
    assert f"has {rows - 1} rows, not the {rows} the job read" in refused.stderr
