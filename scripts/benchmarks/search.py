"""search_p50_ms, search_p99_ms and search_recall_at_10: k=10 search through the HNSW index.

The vectors have neighbourhood structure, not noise: clusters of CLUSTER_SIZE around random
centres, each vector its centre plus Gaussian noise of NOISE x the centre's scale per dimension
(cosine ~0.89 within a cluster, ~0 across), in the model's embedding size. That is the hard case
for HNSW, as embeddings of similar images are: a query's ten neighbours are near-ties among its
cluster. Queries are fresh draws from the same clusters (not stored vectors). Each repetition
times QUERIES searches as the search command runs them (`database.nearest`, default ef_search)
and scores them against exact neighbours computed here; ties at the tenth distance count as hits.
"""

import time

import numpy as np

from benchmarks.harness import in_turn

CLUSTER_SIZE = 50
NOISE = 0.35
QUERIES = 200
K = 10
TABLE = "search_benchmark"


def clustered_vectors(count, dimension, seed):
    """(unit vectors [count, dimension], centres, the cluster of each vector)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(1, count // CLUSTER_SIZE), dimension)).astype(np.float32)
    members = rng.integers(0, len(centres), count)
    vectors = centres[members] + rng.normal(0, NOISE, (count, dimension)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True), centres


def queries_from(centres, count, seed):
    rng = np.random.default_rng(seed)
    queries = centres[rng.integers(0, len(centres), count)] + rng.normal(
        0, NOISE, (count, centres.shape[1])).astype(np.float32)
    return queries / np.linalg.norm(queries, axis=1, keepdims=True)


def store(url, vectors):
    """A fresh table of `vectors`, then the project's HNSW index; returns the index build seconds."""
    import psycopg
    from pgvector.psycopg import register_vector

    from beam_pipeline import database

    with psycopg.connect(url) as connection:
        register_vector(connection)
        connection.execute(f"DROP TABLE IF EXISTS {TABLE}")
        connection.execute(f"CREATE TABLE {TABLE} (key text PRIMARY KEY, source text, path text, label text, "
                           f"embedding vector({vectors.shape[1]}))")
        with connection.cursor().copy(f"COPY {TABLE} (key, source, path, label, embedding) FROM STDIN "
                                      "WITH (FORMAT BINARY)") as copy:
            copy.set_types(["text", "text", "text", "text", "vector"])
            for i, vector in enumerate(vectors):
                copy.write_row([f"{i:08d}", "", "", "", vector])
        connection.commit()
    started = time.perf_counter()
    database.create_index(url, TABLE)
    return time.perf_counter() - started


def search_pass(connection, vectors, queries):
    """(latencies in ms, recall@K) of searching `queries` through the index."""
    from beam_pipeline import database

    latencies, hits = [], 0
    for query in queries:
        begun = time.perf_counter()
        found = database.nearest(connection, TABLE, query, K)
        latencies.append((time.perf_counter() - begun) * 1000)
        distances = 1.0 - vectors @ query
        tenth = np.partition(distances, K - 1)[K - 1]
        hits += sum(distances[int(key)] <= tenth + 1e-6 for key, *_ in found)
    return latencies, hits / (K * len(queries))


def measure(bench, url, dimension):
    from beam_pipeline import database

    count = bench.args.search_vectors
    vectors, centres = clustered_vectors(count, dimension, seed=0)
    build = store(url, vectors)
    with database.connect(url) as connection:
        plan = database.nearest(connection, TABLE, queries_from(centres, 1, seed=99)[0], K, explain=True)
        uses_index = f"Index Scan using {database.index_name(TABLE)}" in plan
        search_pass(connection, vectors, queries_from(centres, 20, seed=98))  # Warm-up: index pages cached.

        def log(repetition, sample):
            latencies, recall = sample["search"]
            bench.results.say(f"   [{repetition + 1}/{bench.repetitions}] p50 {np.percentile(latencies, 50):.2f} ms, "
                              f"p99 {np.percentile(latencies, 99):.2f} ms, recall@{K} {recall:.3f}")

        passes = in_turn(bench.repetitions, {"search": lambda repetition: search_pass(
            connection, vectors, queries_from(centres, QUERIES, seed=repetition + 1))}, log)["search"]
    p50s = [float(np.percentile(latencies, 50)) for latencies, _ in passes]
    p99s = [float(np.percentile(latencies, 99)) for latencies, _ in passes]
    recalls = [recall for _, recall in passes]
    vectors_text = f"{count:,} clustered {dimension}-d vectors"
    bench.results.say(f"7. search k={K} over {vectors_text} (clusters of {CLUSTER_SIZE}; HNSW built in {build:.0f} s; "
                      f"ef_search {max(database.MIN_EF_SEARCH, 2 * K)}; the plan "
                      f"{'uses the HNSW index' if uses_index else 'does NOT use the index (too few rows?)'}), "
                      f"{QUERIES} fresh queries per repetition:")
    bench.results.ratio("search_p50_ms", vectors_text, p50s)
    bench.results.ratio("search_p99_ms", vectors_text, p99s)
    bench.results.ratio("search_recall_at_10", vectors_text, recalls)
