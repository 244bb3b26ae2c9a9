"""The second half under hostile use, through the real command lines on a real PostgreSQL (issue 19's trials).

Two small datasets whose CSVs name the same relative paths (different pictures) go through the
job in this process; a tiny classifier is exported on the first. Then the predict job, the load
and search run as a user would run them, with damaged files, hostile text, bad names, passwords,
kills and concurrent runs.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import psycopg
import pytest

import imaging
import in_process
import outputs
import postgres_servers
import said
import scaleout
from beam_pipeline import database
from beam_pipeline.database.server import EmbeddedServer
from beam_pipeline.preprocess import cli as main
from tf_serving_input import export_serving_model

SIZE = 16
ROWS = 10  # Per dataset, all readable.


# In this process (tests/in_process.py): what the command decides and says. The kills, the concurrent runs, a
# FIFO that must not block, and a failure inside Beam's worker processes keep real processes.
run = in_process.run_module
predict = in_process.predict


def make_dataset(folder, seed):
    """ROWS images named img/0.jpg ... (the same names in every dataset), labels a/b, train and validation."""
    rng = np.random.default_rng(seed)
    (folder / "img").mkdir(parents=True)
    rows = []
    for i in range(ROWS):
        (folder / "img" / f"{i}.jpg").write_bytes(imaging.encode(imaging.photo_like(rng, 24, 28), "JPEG"))
        rows.append([f"img/{i}.jpg", "ab"[i % 2], "validation" if i % 5 == 0 else "train"])
    imaging.write_csv(folder / "in.csv", ["path", "label", "split"], rows)
    return folder / "in.csv"


def run_job(csv_path, out):
    assert main.run(["--input_csv", str(csv_path), "--output_dir", str(out), "--image_size", str(SIZE),
                     "--num_shards", "3", "--no_progress", "--direct_num_workers", "1",
                     "--direct_running_mode", "in_memory"]) == 0
    return out


def export(job, folder, seed, width=8):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((SIZE, SIZE, 3)), keras.layers.Conv2D(width, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2, activation="softmax")])
    return export_serving_model(model, str(job), str(folder))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Two job outputs with the same relative paths (a, b), an export on a, another export, a third of 12-d."""
    root = tmp_path_factory.mktemp("safety")
    jobs = {name: run_job(make_dataset(root / name, seed), root / f"job_{name}")
            for name, seed in (("a", 1), ("b", 2))}
    exports = {"main": export(jobs["a"], root / "export", 5), "other": export(jobs["a"], root / "export2", 6),
               "wide": export(jobs["a"], root / "export12", 5, width=12)}
    return root, jobs, exports


@pytest.fixture(scope="module")
def predicted_a(world, tmp_path_factory):
    """The predict job over dataset a with the main export, no database: read-only, copied by the tests that
    change or load it (one run instead of one per test)."""
    _, jobs, exports = world
    out = tmp_path_factory.mktemp("predicted_a") / "pred"
    made = predict("--model_dir", exports["main"], "--input_dir", jobs["a"], "--output_dir", out, "--database", "none")
    assert made.returncode == 0, made.stderr[-3000:]
    return out


def copy_of(predictions, folder):
    """A copy of `predicted_a`'s output at `folder` (for a test that changes or loads it)."""
    import shutil

    shutil.copytree(predictions, folder)
    return folder


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    with postgres_servers.embedded(str(tmp_path_factory.mktemp("pg_safety"))) as url:
        yield url


def rows_of(url, table, dataset=None):
    with psycopg.connect(url) as connection:
        where = "WHERE dataset = %s" if dataset else ""
        return connection.execute(f"SELECT dataset, key, source, label, embedding::text FROM {table} {where} "
                                  "ORDER BY dataset, key", (dataset,) if dataset else ()).fetchall()


# TensorFlow's C++ start-up notices (absl, oneDNN, no CUDA) print before any setting can stop them;
# quieting them is another issue's work. Everything else on stderr counts.
_STARTUP_NOISE = re.compile(r"^(WARNING: All log messages before absl::InitializeLog|[IWE]\d{4} \d\d:\d\d:)")


def one_line(stderr):
    """The one `error: ...` line stderr holds (asserted: nothing else, no traceback)."""
    lines = [line for line in said.problems(stderr) if not _STARTUP_NOISE.match(line)]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def flip_byte(path, offset=None):
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_two_datasets_with_the_same_paths_never_replace_each_other(world, pg, tmp_path):
    _, jobs, exports = world
    first = predict("--model_dir", exports["main"], "--input_dir", jobs["a"], "--output_dir", tmp_path / "pa",
                    "--database", pg, "--table", "shared")
    assert first.returncode == 0, first.stderr[-3000:]
    manifest_a = outputs.manifest(tmp_path / "pa")
    assert "USING hnsw" in manifest_a["database"]["index"]  # Read back from pg_indexes.
    before = rows_of(pg, "shared")
    assert len(before) == ROWS

    # Same keys (img/0.jpg ... in both CSVs), another dataset: refused before any work, naming both.
    second = predict("--model_dir", exports["main"], "--input_dir", jobs["b"], "--output_dir", tmp_path / "pb",
                     "--database", pg, "--table", "shared")
    assert second.returncode == 2 and not (tmp_path / "pb" / "manifest.json").exists()
    refusal = one_line(second.stderr)
    dataset_a = manifest_a["dataset"]["id"]
    assert dataset_a in refusal and "--append" in refusal
    assert str(jobs["a"]) in refusal and str(jobs["b"]) in refusal
    assert rows_of(pg, "shared") == before

    appended = predict("--model_dir", exports["main"], "--input_dir", jobs["b"], "--output_dir", tmp_path / "pb",
                       "--database", pg, "--table", "shared", "--append")
    assert appended.returncode == 0, appended.stderr[-3000:]
    dataset_b = outputs.manifest(tmp_path / "pb")["dataset"]["id"]
    assert dataset_b != dataset_a and dataset_b in refusal
    assert len(rows_of(pg, "shared")) == 2 * ROWS
    assert rows_of(pg, "shared", dataset_a) == before  # Rows of the first dataset are untouched.
    keys = {row[1] for row in rows_of(pg, "shared")}
    assert len(keys) == ROWS  # The same keys twice, under two datasets.

    # A load of another dataset that gets past the early check (here: --load_only) is refused at the load.
    assert predict("--model_dir", exports["main"], "--input_dir", jobs["b"], "--output_dir", tmp_path / "pc",
                   "--database", "none").returncode == 0
    late = predict("--model_dir", exports["main"], "--output_dir", tmp_path / "pc", "--load_only", "--database", pg,
                   "--table", "shared_late")
    assert late.returncode == 0, late.stderr[-3000:]
    refused_late = predict("--model_dir", exports["main"], "--output_dir", tmp_path / "pa", "--load_only",
                           "--database", pg, "--table", "shared_late")
    assert refused_late.returncode == 1 and "pass --append" in one_line(refused_late.stderr)
    assert len(rows_of(pg, "shared_late")) == ROWS

    # Embeddings of another export never join the table, --append or not.
    other = predict("--model_dir", exports["other"], "--input_dir", jobs["a"], "--output_dir", tmp_path / "po",
                    "--database", pg, "--table", "shared", "--append")
    assert other.returncode == 2
    line = one_line(other.stderr)
    assert str(exports["main"]) in line and str(exports["other"]) in line
    assert len(rows_of(pg, "shared")) == 2 * ROWS


def test_a_flipped_or_cut_job_shard_is_not_predicted_and_a_rerun_completes(world, tmp_path):
    import shutil

    _, jobs, exports = world
    job = tmp_path / "job"
    shutil.copytree(jobs["a"], job)
    shards = [shard for shard in outputs.manifest(job)["shards"] if shard["records"]]
    flipped, cut = job / shards[0]["file"], job / shards[1]["file"]
    originals = {flipped: flipped.read_bytes(), cut: cut.read_bytes()}
    flip_byte(flipped)
    cut.write_bytes(originals[cut][:len(originals[cut]) - 100])
    command = ["--model_dir", exports["main"], "--input_dir", job, "--output_dir", tmp_path / "pred",
               "--database", "none", "--max_error_rate", "1"]
    result = predict(*command)
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "2 input shard(s) failed verification" in line
    manifest = outputs.manifest(tmp_path / "pred")
    damaged = shards[0]["records"] + shards[1]["records"]
    assert (manifest["predicted"], manifest["failed"]) == (ROWS - damaged, damaged)
    details = {error["source"]: error["detail"] for error in outputs.errors(tmp_path / "pred")}
    assert {error["reason"] for error in outputs.errors(tmp_path / "pred")} == {"input_shard_damaged"}
    assert "fails its CRC" in details[shards[0]["file"]]
    assert "is truncated" in details[shards[1]["file"]]

    for path, data in originals.items():
        path.write_bytes(data)
    again = predict(*command)
    assert again.returncode == 0, again.stderr[-3000:]
    assert outputs.manifest(tmp_path / "pred")["predicted"] == ROWS


def test_a_flipped_byte_in_a_parquet_shard_is_not_loaded(world, predicted_a, pg, tmp_path):
    _, jobs, exports = world
    out = copy_of(predicted_a, tmp_path / "pred")
    shard = next(s for s in outputs.manifest(out)["shards"] if s["records"])
    flip_byte(out / shard["file"])
    load = ["--model_dir", exports["main"], "--output_dir", out, "--load_only", "--database", pg,
            "--table", "flipped"]
    result = predict(*load)
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "does not match the SHA-256" in line and os.path.basename(shard["file"]).split(".")[0] in line
    assert database.count_rows(pg, "flipped") == ROWS - shard["records"]  # The other shards are in.
    # The predict command (not --load_only) finds the damaged shard and rewrites it; then it all loads.
    assert predict("--model_dir", exports["main"], "--input_dir", jobs["a"], "--output_dir", out,
                   "--database", "none").returncode == 0
    assert predict(*load).returncode == 0
    assert database.count_rows(pg, "flipped") == ROWS


def test_text_the_database_cannot_store_fails_only_its_row(world, predicted_a, pg, tmp_path):
    import hashlib

    import pyarrow as pa

    from beam_pipeline.common.shard_file import seal, write_json
    from beam_pipeline.predict import shards as prediction_shards

    _, jobs, exports = world
    out = copy_of(predicted_a, tmp_path / "pred")
    # An output whose Parquet holds a NUL (as an older version could write): its status and manifest agree.
    manifest = outputs.manifest(out)
    entry = next(s for s in manifest["shards"] if s["records"] >= 2)
    table = prediction_shards.read_table((out / entry["file"]).read_bytes())
    labels = table.column("label").to_pylist()
    labels[0] = "c\x00t"
    table = table.set_column(table.schema.get_field_index("label"), "label", pa.array(labels, pa.string()))
    data = prediction_shards.to_parquet_bytes(table)
    (out / entry["file"]).write_bytes(data)
    entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    name = os.path.basename(entry["file"]).split(".")[0]
    status = json.loads((out / "shards" / f"{name}.json").read_text())
    status.update(bytes=entry["bytes"], sha256=entry["sha256"])
    write_json(str(out / "shards" / f"{name}.json"), seal(status))
    (out / "manifest.json").write_text(json.dumps(manifest))

    result = predict("--model_dir", exports["main"], "--output_dir", out, "--load_only", "--database", pg,
                     "--table", "with_nul")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "1 row(s) were left out" in result.stderr
    assert database.count_rows(pg, "with_nul") == ROWS - 1
    left_out = [json.loads(line) for line in (out / "load_errors.jsonl").read_text().splitlines()]
    assert [(e["key"], e["reason"]) for e in left_out] == [(table.column("key")[0].as_py(), "unstorable_text")]
    assert outputs.manifest(out)["database"]["left_out_rows"] == 1


def test_labels_no_vocabulary_can_hold_are_refused_by_both_jobs_before_any_work(world, tmp_path):
    root, _, exports = world
    csv_path = tmp_path / "hostile.csv"
    csv_path.write_bytes(f'path,label\n{root}/a/img/0.jpg,ok\n{root}/a/img/1.jpg,"c\x00t"\n'.encode())
    job = run("beam_pipeline", "--input_csv", csv_path, "--output_dir", tmp_path / "job")
    assert job.returncode == 2 and "line 3: label" in one_line(job.stderr) and "NUL" in job.stderr
    assert not (tmp_path / "job").exists()
    csv_path.write_text(f'path,label\n{root}/a/img/0.jpg,"two\nlines"\n')
    predicted = predict("--model_dir", exports["main"], "--input_csv", csv_path, "--output_dir", tmp_path / "p",
                        "--database", "none")
    assert predicted.returncode == 2 and "line 2: label" in one_line(predicted.stderr)


@pytest.mark.parametrize("table, why", [("t" * 70, "70 bytes"), ("Hostile", "lower case"),
                                        ("x_embedding_hnsw", "reserved")])
def test_table_names_outside_the_rule_are_refused(world, tmp_path, table, why):
    _, jobs, exports = world
    result = predict("--model_dir", exports["main"], "--input_dir", jobs["a"], "--output_dir", tmp_path / "p",
                     "--database", "none", "--table", table, timeout=60)
    assert result.returncode == 2 and why in one_line(result.stderr)
    searched = run("beam_pipeline.search", "--key", "k", "--table", table, timeout=60)
    assert searched.returncode == 2 and why in one_line(searched.stderr)


def test_a_password_appears_nowhere_across_a_killed_run_and_its_rerun(world, pg, tmp_path):
    _, jobs, exports = world
    secret = "pw-Zq81-secret"
    url = pg.replace("postgresql://postgres@", f"postgresql://postgres:{secret}@")  # trust: ignored, accepted.
    out = tmp_path / "pred"
    command = [sys.executable, "-m", "beam_pipeline.predict", "--model_dir", str(exports["main"]), "--input_dir",
               str(jobs["a"]), "--output_dir", str(out), "--database", url, "--table", "secret_test"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (out / ".lock").exists():
        time.sleep(0.01)
    lock = (out / ".lock").read_text()
    os.killpg(process.pid, signal.SIGKILL)
    killed_out, killed_err = process.communicate()
    rerun = predict(*command[3:])  # The same command, in this process: it takes over the killed run's lock.
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "postgres:***@" in lock and "taking over the lock" in rerun.stderr
    written = [lock, killed_out, killed_err, rerun.stdout, rerun.stderr]
    for path in out.rglob("*"):
        if path.is_file() and path.suffix != ".parquet":
            written.append(path.read_text(errors="replace"))
    assert secret in url and not [text for text in written if secret in text]
    # A refusal names the holder's command too: start a run, and a second one beside it.
    holder = subprocess.Popen(command + ["--overwrite"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (out / ".lock").exists() and holder.poll() is None:
            time.sleep(0.01)
        os.killpg(holder.pid, signal.SIGSTOP)  # Frozen while holding the lock: no race with its end.
        refused = predict(*command[3:])
        assert refused.returncode == 2 and "in use by another run" in refused.stderr
        assert secret not in refused.stdout + refused.stderr + (out / ".lock").read_text()
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def test_two_concurrent_loads_into_a_new_table_both_succeed_exactly(world, predicted_a, pg, tmp_path):
    _, jobs, exports = world
    copy_of(predicted_a, tmp_path / "a")
    assert predict("--model_dir", exports["main"], "--input_dir", jobs["b"], "--output_dir", tmp_path / "b",
                   "--database", "none").returncode == 0
    commands = [[sys.executable, "-m", "beam_pipeline.predict", "--model_dir", str(exports["main"]), "--output_dir",
                 str(tmp_path / name), "--load_only", "--database", pg, "--table", "concurrent", "--append"]
                for name in ("a", "b")]
    processes = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in processes]
    assert [code for code, _ in results] == [0, 0], results
    assert len(rows_of(pg, "concurrent")) == 2 * ROWS
    for name in ("a", "b"):
        dataset = outputs.manifest(tmp_path / name)["dataset"]["id"]
        assert len(rows_of(pg, "concurrent", dataset)) == ROWS


def test_two_concurrent_predict_runs_share_one_embedded_server(world, tmp_path):
    _, jobs, exports = world
    data_dir = tmp_path / "pgdata"
    commands = [[sys.executable, "-m", "beam_pipeline.predict", "--model_dir", str(exports["main"]), "--input_dir",
                 str(jobs[name]), "--output_dir", str(tmp_path / f"pred_{name}"), "--database", "embedded",
                 "--database_dir", str(data_dir), "--table", f"shared_{name}", *in_process.IN_MEMORY]
                for name in ("a", "b")]  # Two processes; each runs its pipeline in memory (the workers are not tested).
    processes = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in processes]
    server = EmbeddedServer(str(data_dir))
    assert [code for code, _ in results] == [0, 0], results
    assert not server.running()  # The last run out stopped the server a run started.
    try:
        url = server.start()
        assert [database.count_rows(url, f"shared_{name}") for name in ("a", "b")] == [ROWS, ROWS]
    finally:
        server.release()
    assert not server.running()


def test_every_bad_search_input_is_one_line_and_a_non_zero_exit(world, predicted_a, pg, tmp_path):
    _, jobs, exports = world
    assert predict("--model_dir", exports["main"], "--output_dir", copy_of(predicted_a, tmp_path / "p"),
                   "--load_only", "--database", pg, "--table", "searchable").returncode == 0
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    photo = world[0] / "a" / "img" / "3.jpg"
    base = ["--database", pg, "--table", "searchable", "--model_dir", exports["main"]]
    cases = {
        "not_an_image": ["--image", text, *base],
        "file_not_found": ["--image", tmp_path / "gone.jpg", *base],
        "-k must be from 1 to 1000": ["--image", photo, *base, "-k", 0],
        "not -1": ["--image", photo, *base, "-k", -1],
        "not 1001": ["--image", photo, *base, "-k", 1001],
        "no table nosuch": ["--image", photo, "--database", pg, "--table", "nosuch", "--model_dir",
                            exports["main"]],
        "embeds into 12 values": ["--image", photo, "--database", pg, "--table", "searchable", "--model_dir",
                                  exports["wide"]],
        "not a serving export": ["--image", photo, "--database", pg, "--table", "searchable", "--model_dir",
                                 tmp_path],
        "no row with key": ["--key", "0123456789abcdef", "--database", pg, "--table", "searchable"],
        "not of": ["--image", photo, "--database", pg, "--table", "searchable", "--model_dir", exports["other"]],
        "must name a .png file": ["--image", photo, *base, "--contact_sheet", tmp_path],
        "does not exist or is not writable": ["--image", photo, *base, "--contact_sheet", tmp_path / "no" / "x.png"],
        "not a valid postgresql:// URL": ["--image", photo, "--database", "postgresql://u:pw@[bad/x", "--table",
                                          "searchable", "--model_dir", exports["main"]],
    }
    for expected, args in cases.items():
        result = run("beam_pipeline.search", *args, timeout=120)
        assert result.returncode != 0 and expected in one_line(result.stderr), (expected, result.stderr[-2000:])
    found = run("beam_pipeline.search", "--image", photo, *base, "-k", 1000)
    assert found.returncode == 0 and found.stdout.startswith(f"{ROWS} nearest"), found.stderr[-2000:]


def test_a_fifo_as_query_image_and_bad_database_flags_answer_at_once(world, tmp_path):
    _, jobs, exports = world
    os.mkfifo(tmp_path / "pipe.jpg")
    # A real process: were the FIFO opened, this would block (and time out) instead of answering at once.
    fifo = scaleout.run_module("beam_pipeline.search", "--image", tmp_path / "pipe.jpg", "--model_dir",
                               exports["main"], "--database", "postgresql://u@/x?host=/nowhere", timeout=120)
    assert fifo.returncode == 1 and "a FIFO, not a regular file" in one_line(fifo.stderr)
    for value, why in (("postgresql://u:pw-9z@[bad/x", "not a valid postgresql:// URL"),
                       ("host=db user=u password=pw-9z", "must be 'embedded', 'none' or a postgresql:// URL")):
        refused = predict("--model_dir", exports["main"], "--input_dir", jobs["a"], "--output_dir", tmp_path / "p",
                          "--database", value, timeout=60)
        assert refused.returncode == 2 and why in one_line(refused.stderr) and "pw-9z" not in refused.stderr
        assert not (tmp_path / "p").exists()


def test_a_failure_inside_the_workers_is_one_line_and_its_traceback_goes_to_the_log(world, tmp_path):
    import shutil

    _, jobs, exports = world
    broken = tmp_path / "export"
    shutil.copytree(exports["main"], broken)
    for path in (broken / "variables").glob("variables.data-*"):
        path.write_bytes(b"\x00" * 16)  # The workers cannot restore the weights.
    result = scaleout.predict("--model_dir", broken, "--input_dir", jobs["a"], "--output_dir", tmp_path / "p",
                              "--database", "none", "--direct_num_workers", 1)  # One worker process: enough.
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "while predicting into" in line and "traceback: " in line
    log = line.rsplit("traceback: ", 1)[1].rstrip(")")
    assert "Traceback" in open(log).read()
