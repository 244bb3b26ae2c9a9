"""A small real run for the UI's tests: job + export + predict into a PostgreSQL, a quality folder, the UI server.

- `build_run(folder, database_url)`: 16 sample photos (4 per class; one photo listed twice, in train and in
  validation: a duplicate that leaks across splits; another listed again under another label: a label
  conflict) plus a missing file and a text file (two failures), through the job (32 px), a small exported
  classifier, and the predict command line into the server, all in this process. tests/conftest.py builds it
  once a session (`ui_inputs`) and starts one UI over it (`ui_server`).
- `write_quality_folder(folder, job_dir)`: the real quality job's output over that job output, and what it
  found, read back from its Parquet independently of the UI.
- `start_ui(*flags, log_path)`: the UI's command line on a free port, as a server process; `stop_ui`.
- `read_answer_head(sock)`: the head of the server's answer on a raw socket (the slow-client tests).
"""

import json
import os
import sys

import imaging
import in_process
import scaleout

# Not imported from the root conftest: a test helper imports no conftest (tests/ui once had one of its own).
SAMPLE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_data")

SIZE = 32
TABLE = "ui_sample"
# The kept columns of every row (issue 52): a hostile caption (markup, a quote, bidi, a line break), the tags
# 'even'/'odd' and the class, a score that is the row's position.
KEPT = ("--column", "caption:text", "--column", "tags:labels", "--column", "score:float")


def kept_cells(i, label):
    """Row i's caption, tags and score cells (KEPT)."""
    return [f"<b>{label}</b> \"{i}\" \u202e\nline", f"{'even' if i % 2 == 0 else 'odd'}|{label}", str(i)]


def sample_photos():
    """(path, label) of 16 bundled photos: the first 4 files of each class; the first is the duplicate."""
    chosen = []
    for label in ("cat", "coffee", "astronaut", "rocket"):
        names = sorted(os.listdir(os.path.join(SAMPLE_DIR, "images", label)))[:4]
        chosen += [(os.path.join(SAMPLE_DIR, "images", label, name), label) for name in names]
    return chosen


def build_run(folder, database_url):
    """Job, export and predictions (loaded into `database_url`, table TABLE) in `folder`: a dict of their paths."""
    from beam_pipeline.preprocess import cli as job

    photos = sample_photos()
    rows = [[path, label, "validation" if i % 4 == 3 else "train"] for i, (path, label) in enumerate(photos)]
    rows.append([photos[0][0], photos[0][1], "validation"])  # The duplicate.
    rows.append([photos[5][0], "rocket", "train"])  # A coffee photo again, labelled rocket: a label conflict.
    (folder / "notes.txt").write_text("this is no image\n")
    rows.append([str(folder / "notes.txt"), "cat", "train"])
    rows.append([str(folder / "missing.jpg"), "rocket", "train"])
    rows = [[*row, *kept_cells(i, row[1])] for i, row in enumerate(rows)]
    imaging.write_csv(folder / "images.csv", ["path", "label", "split", "caption", "tags", "score"], rows)
    job_dir = folder / "job"
    assert job.run(["--input_csv", str(folder / "images.csv"), "--output_dir", str(job_dir), "--image_size",
                    str(SIZE), "--image_format", "png", "--num_shards", "2", "--max_error_rate", "0.5",
                    "--no_progress", "--direct_num_workers", "1", "--direct_running_mode", "in_memory",
                    *KEPT]) == 0
    manifest = json.loads((job_dir / "manifest.json").read_text())
    assert manifest["written"] == len(photos) + 2 and manifest["failed"] == 2, manifest
    export_dir = scaleout.export_small_model(job_dir, folder / "export", size=SIZE)
    predictions = folder / "predictions"
    result = in_process.predict("--model_dir", export_dir, "--input_dir", job_dir, "--output_dir", predictions,
                                "--database", database_url, "--table", TABLE, "--batch_size", 8, "--no_progress")
    assert result.returncode == 0, result.stderr[-3000:]
    return {"job": str(job_dir), "export": str(export_dir), "predictions": str(predictions),
            "database": database_url, "photos": [path for path, _ in photos]}


def write_quality_folder(folder, job_dir):
    """The quality job (its real command line, in this process) over `job_dir`, into `folder`, with a blur
    threshold high enough that some of the 32 px images are flagged blurry (none is dark or constant).
    Returns the folder and what it found: keys of a leaking group, of a label-conflict group and of the
    flagged images, and the counts, read from its Parquet files."""
    import pyarrow.parquet as pq

    from beam_pipeline.quality import cli as quality

    assert quality.run(["--input_dir", str(job_dir), "--output_dir", str(folder), "--blur_variance", "400",
                        "--no_progress", "--direct_num_workers", "1", "--direct_running_mode", "in_memory"]) == 0
    groups = {}
    for row in pq.read_table(folder / "duplicate_groups.parquet").to_pylist():
        groups.setdefault(row["group"], []).append(row)
    leaks = [members for members in groups.values() if len({m["split"] for m in members}) > 1]
    conflicts = [members for members in groups.values() if len({m["label"] for m in members}) > 1]
    flagged = pq.read_table(folder / "image_flags.parquet").to_pylist()
    assert leaks and conflicts and flagged, (len(leaks), len(conflicts), len(flagged))
    return folder, {"leak": [m["key"] for m in leaks[0]], "conflict": [m["key"] for m in conflicts[0]],
                    "flagged": [row["key"] for row in flagged], "groups": len(groups), "leaks": len(leaks),
                    "conflicts": len(conflicts), "group_images": sum(map(len, groups.values())),
                    "leak_images": sum(map(len, leaks)), "conflict_images": sum(map(len, conflicts)),
                    "flag_names": sorted({flag for row in flagged for flag in row["flags"]})}


def _job_rows(job_dir):
    """(key, source, split, label) of every stored image, read back through the run's image index."""
    from beam_pipeline.common import image_index
    from tf_serving_input.layout import OutputLayout

    layout = OutputLayout(str(job_dir))
    table = image_index.build_table(layout, layout.load_manifest())
    return table.filter(table.column("reason").is_null()).select(["key", "source", "split", "label"]).to_pylist()


def ui_command(*flags):
    """The UI's command line."""
    return [sys.executable, "-m", "beam_pipeline.ui", *map(str, flags)]


def start_ui(*flags, log_path, port=None):
    """(process, base URL) of the UI started with `flags` on a free port (or `port`), once it accepts connections."""
    port = port or scaleout.free_port()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    process = scaleout.start_server(ui_command(*flags, "--port", port), port, log_path, env=env, timeout=180)
    return process, f"http://127.0.0.1:{port}"


stop_ui = scaleout.stop_server


def read_answer_head(sock):
    """The head of the server's answer on `sock` (read until the blank line, or until it closes)."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        if not chunk:
            break
        answer += chunk
    return answer
