"""The predictions table on a real PostgreSQL: names, what a table holds, concurrent creation, the index."""

import threading

import numpy as np
import pyarrow as pa
import pytest

import postgres_servers
from beam_pipeline import database
from beam_pipeline.predict import shards as prediction_shards
from beam_pipeline.predict.inference import Prediction, RowRef

DATASET = {"id": "d1", "source": "/jobs/a", "model_sha256": "m" * 64, "model_dir": "/exports/one"}


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    with postgres_servers.embedded(str(tmp_path_factory.mktemp("pg_database"))) as url:
        yield url


def predictions(count, label="cat", size=4):
    rng = np.random.default_rng(count)
    refs = [RowRef(shard="s", index=i, total=count, key=f"{i:016x}", source=f"img/{i}.jpg", path=f"/d/img/{i}.jpg",
                   split="train", label=label) for i in range(count)]
    outcomes = [Prediction(np.array([0, 1]), np.array([0.7, 0.3], np.float32),
                           (lambda v: v / np.linalg.norm(v))(rng.normal(size=size).astype(np.float32)))
                for _ in range(count)]
    return prediction_shards.build_table(refs, outcomes, ["cat", "dog"], size, "float32")


def test_names_follow_one_rule_and_index_names_never_collide():
    for bad in ("Hostile", "t" * 64, "1abc", "a-b", "", "x_embedding_hnsw", database.DATASETS_TABLE, "é"):
        with pytest.raises(database.TableNameError):
            database.check_table_name(bad)
    assert database.check_table_name("t" * 63) == "t" * 63
    long_names = [database.table_name("Run " + "x" * 80 + suffix) for suffix in ("1", "2")]
    assert long_names[0] != long_names[1] and all(len(name) <= 63 for name in long_names)
    assert database.table_name("2024 Run") == "t_2024_run" and database.table_name("x_embedding_hnsw") != \
        "x_embedding_hnsw"
    for table in ("t" * 63, "t" * 48, "short"):
        index = database.index_name(table)
        assert index != table and len(index) <= 63 and index.endswith(database.INDEX_SUFFIX)
        with pytest.raises(database.TableNameError):
            database.check_table_name(index)


def test_a_63_byte_table_gets_its_hnsw_index(pg):
    table = "n" * 63
    database.prepare_table(pg, table, 4, "float32", DATASET)
    with database.connect(pg) as connection:
        assert database.upsert_table(connection, table, DATASET["id"], predictions(50)) == (50, {})
        connection.commit()
    definition = database.create_index(pg, table)
    assert "USING hnsw" in definition and database.index_name(table) in definition


def test_a_table_refuses_another_dataset_unless_appended_and_always_another_export(pg):
    database.prepare_table(pg, "holds", 4, "float32", DATASET)
    database.prepare_table(pg, "holds", 4, "float32", DATASET)  # The same dataset again: a rerun.
    other = dict(DATASET, id="d2", source="/jobs/b")
    with pytest.raises(database.DatabaseError, match=r"holds the dataset d1 from /jobs/a, not d2 from /jobs/b"):
        database.prepare_table(pg, "holds", 4, "float32", other)
    database.prepare_table(pg, "holds", 4, "float32", other, append=True)
    with pytest.raises(database.DatabaseError, match="/exports/one .* not of /exports/two"):
        database.prepare_table(pg, "holds", 4, "float32", dict(DATASET, model_sha256="n" * 64,
                                                                 model_dir="/exports/two"), append=True)
    with pytest.raises(database.DatabaseError, match="vector\\(4\\), not vector\\(8\\)"):
        database.prepare_table(pg, "holds", 8, "float32", DATASET)
    with database.connect(pg) as connection:
        assert database.datasets_in(connection, "holds") == [("d1", "/jobs/a"), ("d2", "/jobs/b")]
        for dataset in ("d1", "d2"):
            database.upsert_table(connection, "holds", dataset, predictions(5))
        connection.commit()
    assert database.count_rows(pg, "holds") == 10 and database.count_rows(pg, "holds", "d1") == 5


def test_concurrent_first_loads_into_a_new_table_all_succeed(pg):
    errors, barrier = [], threading.Barrier(4)

    def load(index):
        try:
            barrier.wait()
            dataset = dict(DATASET, id=f"c{index}")
            database.prepare_table(pg, "raced", 4, "float32", dataset, append=True)
            with database.connect(pg) as connection:
                database.upsert_table(connection, "raced", dataset["id"], predictions(20))
                connection.commit()
            database.create_index(pg, "raced")
        except Exception as error:  # noqa: BLE001 - collected for the assertion.
            errors.append(error)

    threads = [threading.Thread(target=load, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and database.count_rows(pg, "raced") == 80


def test_a_first_load_copies_straight_in_and_a_rerun_changes_nothing(pg):
    """A shard none of whose rows is stored is COPYed into the table itself (no staging table, no upsert)."""
    database.prepare_table(pg, "direct", 4, "float32", DATASET)
    with database.connect(pg) as connection:
        assert database.upsert_table(connection, "direct", DATASET["id"], predictions(30)) == (30, {})
        connection.commit()
        staged = connection.execute("SELECT count(*) FROM pg_class WHERE relname = 'stage_direct'").fetchone()[0]
        first = connection.execute("SELECT xmin::text, key FROM direct ORDER BY key").fetchall()
        assert database.upsert_table(connection, "direct", DATASET["id"], predictions(30)) == (30, {})
        connection.commit()
        again = connection.execute("SELECT xmin::text, key FROM direct ORDER BY key").fetchall()
    assert staged == 0 and len(first) == 30 and again == first  # The rerun (an upsert) rewrote no row.


def test_a_load_writes_its_rows_in_key_order_whatever_the_shards_order(pg):
    """Key locks are taken in one order by every load (a direct COPY in shard order deadlocked against an
    upsert of the same keys, in 7 of 16 trials of the hostile trial)."""
    shard = predictions(40)
    shard = shard.take(list(range(len(shard)))[::-1])  # Keys descending in the shard.
    database.prepare_table(pg, "key_order", 4, "float32", DATASET)
    with database.connect(pg) as connection:
        assert database.upsert_table(connection, "key_order", DATASET["id"], shard) == (40, {})
        connection.commit()
        written = [key for (key,) in connection.execute("SELECT key FROM key_order ORDER BY ctid")]
    assert written == sorted(written) and len(written) == 40


def test_a_load_racing_another_load_of_the_same_rows_falls_back_to_the_upsert(pg):
    """Two loads of one shard at once: the second's COPY waits on the first's keys, fails on them when the
    first commits, and its savepoint hands the rows to the upsert: one row per key, the last load's values."""
    database.prepare_table(pg, "raced_rows", 4, "float32", DATASET)
    outcome = {}
    with database.connect(pg) as first:
        first.execute("SELECT 1")  # An open transaction: the load below becomes its savepoint, not committed yet.
        database.upsert_table(first, "raced_rows", DATASET["id"], predictions(20, label="cat"))

        def second_load():
            try:
                with database.connect(pg) as second:
                    outcome["result"] = database.upsert_table(second, "raced_rows", DATASET["id"],
                                                              predictions(20, label="dog"))
                    second.commit()
            except Exception as error:  # noqa: BLE001 - asserted below.
                outcome["error"] = error

        thread = threading.Thread(target=second_load)
        thread.start()
        thread.join(timeout=2)
        assert thread.is_alive()  # It waits on the first load's uncommitted keys.
        first.commit()
    thread.join(timeout=60)
    assert "error" not in outcome and outcome["result"] == (20, {}), outcome
    with database.connect(pg) as connection:
        labels = connection.execute("SELECT label, count(*) FROM raced_rows GROUP BY label").fetchall()
    assert labels == [("dog", 20)]


def test_rows_with_text_postgres_cannot_store_are_left_out_alone(pg):
    table = predictions(4)
    labels = table.column("label").to_pylist()
    labels[2] = "c\x00t"
    table = table.set_column(table.schema.get_field_index("label"), "label", pa.array(labels, pa.string()))
    database.prepare_table(pg, "nul_rows", 4, "float32", DATASET)
    with database.connect(pg) as connection:
        loaded, left_out = database.upsert_table(connection, "nul_rows", DATASET["id"], table)
        connection.commit()
    assert loaded == 3 and list(left_out) == [2] and "NUL" in left_out[2]
    assert database.count_rows(pg, "nul_rows") == 3


def test_nearest_checks_k_and_the_table(pg):
    with database.connect(pg) as connection:
        for k in (0, -1, database.MAX_K + 1):
            with pytest.raises(ValueError, match="k must be between"):
                database.nearest(connection, "holds", np.array([1, 0, 0, 0], np.float32), k)
        with pytest.raises(database.DatabaseError, match="no table missing"):
            database.nearest(connection, "missing", np.array([1, 0, 0, 0], np.float32), 3)
        assert len(database.nearest(connection, "holds", np.array([1, 0, 0, 0], np.float32), 3, dataset_id="d2")) == 3


HOSTILE_LABEL = "\u202e" + "x" * 10_000  # A right-to-left override, then ten thousand characters.


@pytest.fixture(scope="module")
def two_datasets(pg):
    """Table two_datasets: d1's 5 rows and d2's 1,200 rows (labelled HOSTILE_LABEL), sharing keys."""
    other = dict(DATASET, id="d2", source="/jobs/b")
    database.prepare_table(pg, "two_datasets", 4, "float32", DATASET)
    database.prepare_table(pg, "two_datasets", 4, "float32", other, append=True)
    with database.connect(pg) as connection:
        database.upsert_table(connection, "two_datasets", "d1", predictions(5))
        database.upsert_table(connection, "two_datasets", "d2", predictions(1200, label=HOSTILE_LABEL))
        connection.commit()
    return "two_datasets"


def test_search_names_the_dataset_of_each_neighbour_when_a_table_holds_several(pg, two_datasets):
    import json

    import in_process

    key = f"{0:016x}"
    shown = in_process.search("--database", pg, "--table", two_datasets, "--key", key, "--dataset", "d1", "-k", 3)
    assert shown.returncode == 0, shown.stderr
    rows = shown.stdout.splitlines()[1:]
    assert len(rows) == 3 and all(row.split()[2] == "d1" for row in rows), shown.stdout
    assert all(row.split()[3] == "/jobs/a" for row in rows), shown.stdout  # Named by its source too.
    mixed = in_process.search("--database", pg, "--table", two_datasets, "--key", key, "--dataset", "d2", "-k", 1000)
    lines = mixed.stdout.splitlines()
    assert len(lines) == 1001 and {line.split()[2] for line in lines[1:]} == {"d2"}
    assert {line.split()[3] for line in lines[1:]} == {"/jobs/b"}
    # The label as a terminal shows it: the override escaped, cut to a sane width; the JSON keeps it whole.
    assert "\u202e" not in mixed.stdout and "\\u202exxx" in lines[1] and max(map(len, lines)) < 200
    as_json = json.loads(in_process.search("--database", pg, "--table", two_datasets, "--key", key,
                                           "--dataset", "d2", "-k", 2, "--format", "json").stdout)
    assert [n["dataset"] for n in as_json["neighbours"]] == ["d2", "d2"]
    assert [n["dataset_source"] for n in as_json["neighbours"]] == ["/jobs/b", "/jobs/b"]
    assert as_json["neighbours"][0]["label"] == HOSTILE_LABEL


def test_a_search_that_names_no_usable_table_or_key_is_a_usage_error(pg, two_datasets):
    """docs/exit-codes.md: bad input is exit 2, like a bad flag; 1 is for a failed run (the database unreachable)."""
    import in_process

    database.prepare_table(pg, "another_table", 4, "float32", DATASET)  # Two tables at least: which one?
    cases = {"name one with --table": ["--key", f"{0:016x}"],
             "no table nosuch": ["--key", f"{0:016x}", "--table", "nosuch"],
             "no row with key": ["--key", "0123456789abcdef0", "--table", two_datasets],
             "choose one with --dataset": ["--key", f"{0:016x}", "--table", two_datasets]}
    for expected, argv in cases.items():
        refused = in_process.search("--database", pg, *argv)
        assert refused.returncode == 2 and expected in refused.stderr, (expected, refused.stderr)
    unreachable = in_process.search("--database", "postgresql://u@/x?host=/nowhere", "--key", "k")
    assert unreachable.returncode == 1, unreachable.stderr


@pytest.mark.slow  # A real command line in a subprocess, and a real pipe into `head`.
def test_search_into_head_prints_one_line_and_no_traceback(pg, two_datasets):
    import subprocess
    import sys

    command = (f"set -o pipefail; {sys.executable} -m beam_pipeline.search --database '{pg}' --table {two_datasets} "
               f"--key {0:016x} --dataset d2 -k 1000 | head -1")
    # 1,000 lines (about 100 KB) do not fit the pipe's buffer: the command writes into a closed pipe.
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith("1000 nearest to") and result.stdout.count("\n") == 1
    assert result.stderr == "" and result.returncode == 141  # Ended by the closed pipe, as `cat` would be.


def test_a_search_in_a_table_the_predict_job_did_not_make_is_a_usage_error(pg):
    """A table with an `embedding` column but none of the predictions table's others: one line, exit 2."""
    import in_process

    with database.connect(pg) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        connection.execute("CREATE TABLE not_predictions (key text, embedding vector(3))")
        connection.execute("INSERT INTO not_predictions VALUES ('x', '[1,0,0]')")
        connection.commit()
    for argv in (["--key", "x"], ["--key", "x", "--exact"]):
        refused = in_process.search("--database", pg, "--table", "not_predictions", *argv)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1 and "not_predictions" in refused.stderr, refused.stderr


KEPT = [  # (labels, columns JSON) per row: hostile text, a 10k caption, numbers, boxes, a multi-label row.
    ((), '{"caption":"a \\"quoted\\", line\\nbreak 🐕 \\u202e","score":0.25,"tags":["cat","猫"]}'),
    (("cat", "dog"), '{"caption":"' + "x" * 10_000 + '","n":3,"objects":[[0.1,0.2,0.5,0.6]],"score":0.75}'),
    ((), '{"n":9007199254740993,"score":-1.5,"tags":["dog"]}'),  # An int64 id float8 cannot hold (2**53 + 1).
    ((), "{}"),
    ((), '{"caption":"n\\u0000l"}'),  # NUL: PostgreSQL's jsonb cannot hold it.
]


def test_kept_columns_and_every_label_reach_the_table_and_filter_a_search(pg):
    """The predictions' `labels` and `columns` (the job's --column values, JSON) load into text[] and jsonb,
    read back by psql; a NUL in a column leaves its row out; --where filters match text, labels and numbers."""
    import json
    import subprocess

    from beam_pipeline.database.column_filters import parse_where

    table = predictions(len(KEPT), label="")
    labels = [list(labels) for labels, _ in KEPT]
    table = table.set_column(table.schema.get_field_index("labels"), "labels", pa.array(labels, pa.list_(pa.string())))
    table = table.set_column(table.schema.get_field_index("columns"), "columns",
                             pa.array([columns for _, columns in KEPT], pa.string()))
    database.prepare_table(pg, "kept", 4, "float32", DATASET)
    with database.connect(pg) as connection:
        loaded, left_out = database.upsert_table(connection, "kept", DATASET["id"], table)
        connection.commit()
        assert loaded == 4 and list(left_out) == [4] and "columns holds a NUL" in left_out[4]

        def keys(*where, label=None):
            rows = database.nearest(connection, "kept", np.array([1, 0, 0, 0], np.float32), 5, exact=True,
                                    label=label, where=tuple(parse_where(text) for text in where))
            return sorted(int(key, 16) for key, *_ in rows)

        assert keys("tags=cat") == [0] and keys("tags=dog") == [2] and keys("score>=0.25") == [0, 1]
        assert keys("score<0") == [2] and keys("n=3") == [1] and keys("n=3.0") == [1] and keys("score>0", "n=3") == [1]
        assert keys('caption=a "quoted", line\nbreak 🐕 \u202e') == [0] and keys("caption>1") == []
        assert keys(label="dog") == [1] and keys("nothing=1") == []
        # An int column compares exactly (numeric, not float8): 2**53 is not 2**53 + 1.
        assert keys("n=9007199254740993") == [2] and keys("n=9007199254740992") == []
        assert keys("n>9007199254740992") == [2] and keys("n>=1e300") == []
    from beam_pipeline.database.server import EmbeddedServer  # psql: what a user reads the table with.

    out = subprocess.run([EmbeddedServer.psql(), pg, "-At", "-c",
                          "SELECT columns->>'caption', labels FROM kept ORDER BY key"],
                         capture_output=True, text=True, check=True).stdout
    assert 'a "quoted", line\nbreak 🐕 \u202e' in out and "{cat,dog}" in out
    with database.connect(pg) as connection:
        stored = connection.execute("SELECT columns FROM kept ORDER BY key").fetchall()
    assert stored[1][0]["objects"] == [[0.1, 0.2, 0.5, 0.6]] and json.dumps(stored[3][0]) == "{}"


@pytest.mark.parametrize("text, words", [("score", "is not NAME=VALUE"), ("=x", "is not NAME=VALUE"),
                                         ("score>=high", "not a finite number"), ("a=\x00", "NUL")])
def test_a_where_filter_that_is_not_one_is_refused_in_one_line(text, words):
    from beam_pipeline.database.column_filters import parse_where

    with pytest.raises(ValueError, match=words):
        parse_where(text)
