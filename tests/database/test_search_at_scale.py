"""Search that is right by default on a real PostgreSQL: ef_search, filters that return k rows, loads into an index.

Several thousand clustered vectors, so that the planner uses the HNSW index (at a few hundred rows it scans),
and every answer is compared with exact search over the same NumPy matrix.
"""

import json

import numpy as np
import pytest

import postgres_servers
from beam_pipeline import database
from beam_pipeline.predict import shards as prediction_shards
from beam_pipeline.predict.inference import Prediction, RowRef
from beam_pipeline.search import cli as search_cli

COUNT, DIM, K = 6000, 64, 10
DATASET = {"id": "d1", "source": "/jobs/a", "model_sha256": "m" * 64, "model_dir": "/exports/one"}
RARE = "rare label"  # 0.5% of the rows, scattered over every cluster and both splits.


def clustered_unit_vectors(count, dim, clusters, seed):
    """Unit vectors in tight clusters: many near-ties, the hard case for HNSW (like embeddings of similar images)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, dim))
    vectors = centers[rng.integers(0, clusters, count)] + rng.normal(0, 0.35, (count, dim))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def labels_and_splits(count):
    labels = np.array(["common"] * count, dtype=object)
    labels[::199] = RARE
    labels[7::997] = "seven"  # 7 rows: fewer than K.
    splits = np.where(np.arange(count) % 5 == 0, "validation", "train")
    return labels, splits


def table_of(vectors, labels, splits, start=0):
    refs = [RowRef(shard="s", index=i, total=len(vectors), key=f"{start + i:016x}", source=f"{start + i}.jpg",
                   path=f"/d/{start + i}.jpg", split=str(splits[i]), label=str(labels[i]))
            for i in range(len(vectors))]
    outcomes = [Prediction(np.array([0]), np.array([1.0], np.float32), vector) for vector in vectors]
    return prediction_shards.build_table(refs, outcomes, ["x"], vectors.shape[1], "float32")


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    with postgres_servers.embedded(str(tmp_path_factory.mktemp("pg_search"))) as url:
        yield url


@pytest.fixture(scope="module")
def indexed(pg):
    """(url, vectors, labels, splits) of table 'scale': COUNT rows with its HNSW index built at the defaults."""
    vectors = clustered_unit_vectors(COUNT, DIM, 150, seed=4)
    labels, splits = labels_and_splits(COUNT)
    database.prepare_table(pg, "scale", DIM, "float32", DATASET)
    with database.connect(pg) as connection:
        database.upsert_table(connection, "scale", DATASET["id"], table_of(vectors, labels, splits))
        connection.commit()
    database.create_index(pg, "scale")
    return pg, vectors, labels, splits


def queries(vectors, count=60, seed=5, noise=0.1):
    rng = np.random.default_rng(seed)
    found = vectors[rng.integers(0, len(vectors), count)] + rng.normal(0, noise, (count, vectors.shape[1]))
    return (found / np.linalg.norm(found, axis=1, keepdims=True)).astype(np.float32)


def recall(connection, vectors, asked, mask=None, **options):
    """recall@K of database.nearest against exact search (ties at the K-th distance count as hits)."""
    hits = total = 0
    for query in asked:
        distances = 1.0 - vectors @ query
        if mask is not None:
            distances = np.where(mask, distances, np.inf)
        wanted = min(K, int(np.isfinite(distances).sum()))
        kth = np.sort(distances)[wanted - 1]
        found = [int(key, 16) for key, *_ in database.nearest(connection, "scale", query, K, **options)]
        hits += sum(distances[i] <= kth + 1e-6 for i in found)
        total += wanted
    return hits / total


def test_default_search_uses_the_index_and_recalls_at_least_095(indexed):
    url, vectors, _, _ = indexed
    with database.connect(url) as connection:
        definition = database.index_definition(connection, "scale")  # Read back from pg_indexes.
        assert "USING hnsw" in definition and "vector_cosine_ops" in definition
        plan = database.nearest(connection, "scale", vectors[0], K, explain=True)
        assert f"Index Scan using {database.index_name('scale')}" in plan, plan
        assert database.index_name("scale") not in database.nearest(connection, "scale", vectors[0], K, exact=True,
                                                                     explain=True)
        measured = recall(connection, vectors, queries(vectors))
    print(f"recall@10 at the default ef_search ({database.DEFAULT_EF_SEARCH}): {measured:.3f}")
    assert measured >= 0.95


def test_ef_search_is_honoured(indexed):
    """A candidate list of k finds clearly fewer true neighbours than one of 400: the value reaches the server."""
    url, vectors, _, _ = indexed
    asked = queries(vectors, count=100, seed=9, noise=0.3)  # Far from any row: where the candidate list matters.
    with database.connect(url) as connection:
        low = recall(connection, vectors, asked, ef_search=K)
        high = recall(connection, vectors, asked, ef_search=400)
        with pytest.raises(ValueError, match="ef_search must be from k"):
            database.nearest(connection, "scale", asked[0], K, ef_search=K - 1)
    print(f"recall@10 at ef_search {K}: {low:.3f}; at 400: {high:.3f}")
    assert high >= 0.98 and low <= high - 0.03


def through_the_index(connection):
    """Seq scans made unattractive, as they are at a million rows: here the planner would scan 6,000 rows whole
    for a rare label, and the index's filtering would go untested."""
    connection.execute("SET enable_seqscan = off")
    connection.commit()


@pytest.mark.parametrize("planner", ["as_is", "index"])
@pytest.mark.parametrize("filters", [{"label": RARE}, {"split": "validation"}, {"split": "train", "label": RARE}])
def test_a_filtered_search_returns_k_rows_all_matching(indexed, filters, planner):
    url, vectors, labels, splits = indexed
    mask = np.ones(len(vectors), bool)
    if "label" in filters:
        mask &= labels == filters["label"]
    if "split" in filters:
        mask &= splits == filters["split"]
    asked = queries(vectors, count=30, seed=11)
    with database.connect(url) as connection:
        if planner == "index":
            through_the_index(connection)
            plan = database.nearest(connection, "scale", asked[0], K, explain=True, **filters)
            assert f"Index Scan using {database.index_name('scale')}" in plan, plan
        for query in asked:
            # Without the exact fallback: what the iterative index scan itself finds.
            found = database.nearest(connection, "scale", query, K, exact_fallback=False, **filters)
            assert len(found) == K
            assert all(mask[int(key, 16)] for key, *_ in found)
            distances = [row[-1] for row in found]
            assert distances == sorted(distances)
        measured = recall(connection, vectors, asked, mask=mask, **filters)
    assert measured >= 0.95


def test_a_filter_matching_fewer_than_k_rows_returns_all_of_them(indexed):
    url, vectors, labels, _ = indexed
    with database.connect(url) as connection:
        found = database.nearest(connection, "scale", vectors[1], K, label="seven")
        assert sorted(int(key, 16) for key, *_ in found) == sorted(np.flatnonzero(labels == "seven"))
        assert database.nearest(connection, "scale", vectors[1], K, label="no such label") == []


def test_a_filtered_search_falls_back_to_exact_when_the_iterative_scan_stops_early(indexed):
    """hnsw.max_scan_tuples cut low, as a huge table with a rare label would hit it: still k matching rows."""
    url, vectors, labels, _ = indexed
    rare = labels == RARE
    with database.connect(url) as connection:
        through_the_index(connection)
        connection.execute("SET hnsw.max_scan_tuples = 40")
        connection.commit()
        for query in queries(vectors, count=10, seed=13):
            found = database.nearest(connection, "scale", query, K, label=RARE)
            assert len(found) == K and all(rare[int(key, 16)] for key, *_ in found)
            exact = np.argsort(np.where(rare, 1.0 - vectors @ query, np.inf))[:K]
            assert sorted(int(key, 16) for key, *_ in found) == sorted(exact)


def test_rows_loaded_into_an_indexed_table_join_its_index_without_a_rebuild(pg):
    vectors = clustered_unit_vectors(COUNT + 500, DIM, 150, seed=21)
    labels, splits = labels_and_splits(COUNT + 500)
    dataset = {**DATASET, "id": "grow"}
    database.prepare_table(pg, "grows", DIM, "float32", dataset)
    with database.connect(pg) as connection:
        database.upsert_table(connection, "grows", "grow", table_of(vectors[:COUNT], labels, splits))
        connection.commit()
    definition = database.create_index(pg, "grows")

    def index_file(connection):
        return connection.execute("SELECT pg_relation_filenode(to_regclass(%s))",
                                  (database.index_name("grows"),)).fetchone()[0]

    with database.connect(pg) as connection:
        before = index_file(connection)
        database.upsert_table(connection, "grows", "grow", table_of(vectors[COUNT:], labels[COUNT:], splits[COUNT:],
                                                                    start=COUNT))
        connection.commit()
    assert database.create_index(pg, "grows") == definition
    with database.connect(pg) as connection:
        assert index_file(connection) == before  # The same index, not a rebuilt one.
        plan = database.nearest(connection, "grows", vectors[COUNT], K, explain=True)
        assert f"Index Scan using {database.index_name('grows')}" in plan, plan
        for i in range(COUNT, COUNT + 500, 50):  # Each new row is found by the index as its own nearest.
            assert database.nearest(connection, "grows", vectors[i], 1)[0][0] == f"{i:016x}"
    database.create_index(pg, "grows", database.IndexSettings(rebuild=True))
    with database.connect(pg) as connection:
        assert index_file(connection) != before


def test_the_build_gets_the_memory_its_graph_needs(pg, capsys):
    """With the sized memory the graph fits; with 1 MB pgvector says it does not, and the user is told."""
    vectors = clustered_unit_vectors(3000, DIM, 50, seed=31)
    labels, splits = labels_and_splits(3000)
    dataset = {**DATASET, "id": "mem"}
    database.prepare_table(pg, "memory", DIM, "float32", dataset)
    with database.connect(pg) as connection:
        database.upsert_table(connection, "memory", "mem", table_of(vectors, labels, splits))
        connection.commit()
    lines = []
    database.create_index(pg, "memory", progress=lines.append)
    assert "ran out of its" not in capsys.readouterr().err
    database.create_index(pg, "memory", database.IndexSettings(rebuild=True, build_memory=1 << 20))
    assert "ran out of its 1 MB of memory" in capsys.readouterr().err
    assert database.build_memory(3000, DIM, "float32") == 64 << 20  # Small graphs keep PostgreSQL's default.
    wanted = database.build_memory(1_000_000, 512, "float32", free=64 << 30)
    assert 2.5 * (1 << 30) < wanted < 3.5 * (1 << 30)
    assert database.build_memory(1_000_000, 512, "float32", free=2 << 30) == 1 << 30
    assert database.build_memory(1_000_000, 512, "float16", free=64 << 30) < wanted


def test_index_settings_are_checked_and_reach_the_index(pg):
    assert "--hnsw_m" in database.IndexSettings(m=1).problem()
    assert "at least twice" in database.IndexSettings(m=40, ef_construction=64).problem()
    assert database.parse_memory("4GB") == 4 << 30 and database.parse_memory("auto") is None
    with pytest.raises(ValueError):
        database.parse_memory("4 gigs")
    vectors = clustered_unit_vectors(500, DIM, 10, seed=41)
    labels, splits = labels_and_splits(500)
    database.prepare_table(pg, "tuned", DIM, "float32", {**DATASET, "id": "t"})
    with database.connect(pg) as connection:
        database.upsert_table(connection, "tuned", "t", table_of(vectors, labels, splits))
        connection.commit()
    definition = database.create_index(pg, "tuned", database.IndexSettings(m=24, ef_construction=80))
    assert "m='24'" in definition and "ef_construction='80'" in definition


def run_search(capsys, *argv):
    code = search_cli.run(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_search_command_filters_and_prints_json(indexed, capsys):
    url, vectors, labels, splits = indexed
    key = f"{3:016x}"
    code, out, err = run_search(capsys, "--key", key, "--database", url, "--table", "scale", "--label", RARE,
                                "--split", "train", "-k", "12", "--ef_search", "300", "--format", "json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["filters"] == {"split": "train", "label": RARE, "dataset": None, "where": []}
    assert answer["ef_search"] == 300
    assert len(answer["neighbours"]) == 12
    assert [n["rank"] for n in answer["neighbours"]] == list(range(1, 13))
    for neighbour in answer["neighbours"]:
        index = int(neighbour["key"], 16)
        assert neighbour["label"] == RARE == labels[index] and splits[index] == "train"
    distances = [n["distance"] for n in answer["neighbours"]]
    assert distances == sorted(distances)
    code, out, err = run_search(capsys, "--key", key, "--database", url, "--table", "scale", "--exact",
                                "--format", "json", "-k", "5")
    exact = np.argsort(1.0 - vectors @ vectors[3])[:5]
    assert [int(n["key"], 16) for n in json.loads(out)["neighbours"]] == list(exact)


@pytest.mark.parametrize("argv, message", [
    (["--ef_search", "5", "-k", "10"], "--ef_search must be from -k (10)"),
    (["--ef_search", "1001"], "--ef_search must be from -k"),
    (["--split", "a\x00b"], "--split"),
    (["--format", "xml"], "invalid choice"),
    (["--exact", "--ef_search", "50"], "--ef_search tunes the index, which --exact does not use"),
])
def test_search_command_refuses_bad_search_flags(indexed, capsys, argv, message):
    url = indexed[0]
    try:
        code, _, err = run_search(capsys, "--key", "k", "--database", url, "--table", "scale", *argv)
    except SystemExit as exit_:
        code, err = exit_.code, capsys.readouterr().err
    assert code == 2 and message in err
