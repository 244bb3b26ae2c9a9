"""search_p50_ms, search_p99_ms and search_recall_at_10: k=10 search through the HNSW index.

The vectors have neighbourhood structure, not noise: clusters of CLUSTER_SIZE around random
centres, each vector its centre plus Gaussian noise of NOISE x the centre's scale per dimension
(cosine ~0.89 within a cluster, ~0 across), in the model's embedding size. That is the hard case
for HNSW, as embeddings of similar images are: a query's ten neighbours are near-ties among its
cluster. Queries are fresh draws from the same clusters (not stored vectors). Each repetition
times QUERIES searches as the search command runs them (`database.nearest`, default ef_search)
and scores them against exact neighbours computed here; ties at the tenth distance count as hits.

Also measured: a filtered search (`--label`, a label on 1 row in RARE_EVERY: pgvector's iterative
scan), scored against exact search over the rows of that label; and the HNSW build of BUILD_VECTORS
of those vectors at PostgreSQL's default maintenance_work_mem (64 MB: the graph does not fit) against
the memory `database.build_memory` sizes for it, interleaved; and adding a tenth more rows to an indexed
table (into the graph as they arrive) against dropping the index, inserting and building it again.
"""

import time

import numpy as np

from benchmarks.harness import in_turn

CLUSTER_SIZE = 50
NOISE = 0.35
QUERIES = 200
K = 10
TABLE = "search_benchmark"
RARE_EVERY = 100
BUILD_VECTORS = 40_000
BUILD_TABLE = "build_benchmark"


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


def store(url, vectors, table=TABLE, index=True):
    """A fresh table of `vectors` (1 in RARE_EVERY labelled 'rare'), then the HNSW index; its build seconds."""
    import psycopg
    from pgvector.psycopg import register_vector

    from beam_pipeline import database

    with psycopg.connect(url) as connection:
        register_vector(connection)
        connection.execute(f"DROP TABLE IF EXISTS {table}")
        connection.execute(f"CREATE TABLE {table} (key text PRIMARY KEY, source text, path text, label text, "
                           f"embedding vector({vectors.shape[1]}))")
        with connection.cursor().copy(f"COPY {table} (key, source, path, label, embedding) FROM STDIN "
                                      "WITH (FORMAT BINARY)") as copy:
            copy.set_types(["text", "text", "text", "text", "vector"])
            for i, vector in enumerate(vectors):
                copy.write_row([f"{i:08d}", "", "", "rare" if i % RARE_EVERY == 0 else "common", vector])
        connection.commit()
    if not index:
        return 0.0
    started = time.perf_counter()
    database.create_index(url, table)
    return time.perf_counter() - started


def search_pass(connection, vectors, queries, label=None):
    """(latencies in ms, recall@K) of searching `queries` through the index (only rows of `label` when given)."""
    from beam_pipeline import database

    latencies, hits = [], 0
    rare = np.arange(len(vectors)) % RARE_EVERY == 0
    for query in queries:
        begun = time.perf_counter()
        found = database.nearest(connection, TABLE, query, K, label=label)
        latencies.append((time.perf_counter() - begun) * 1000)
        distances = 1.0 - vectors @ query
        if label is not None:
            distances = np.where(rare, distances, np.inf)
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
                      f"ef_search {database.ef_search_for(K)}; the plan "
                      f"{'uses the HNSW index' if uses_index else 'does NOT use the index (too few rows?)'}), "
                      f"{QUERIES} fresh queries per repetition:")
    bench.results.ratio("search_p50_ms", vectors_text, p50s)
    bench.results.ratio("search_p99_ms", vectors_text, p99s)
    bench.results.ratio("search_recall_at_10", vectors_text, recalls)
    measure_filtered(bench, connection_url=url, vectors=vectors, centres=centres, vectors_text=vectors_text)
    measure_build(bench, url, vectors[:BUILD_VECTORS])


def measure_filtered(bench, connection_url, vectors, centres, vectors_text):
    """p50/p99 and recall of a search filtered to a label 1 row in RARE_EVERY holds."""
    from beam_pipeline import database

    with database.connect(connection_url) as connection:
        plan = database.nearest(connection, TABLE, queries_from(centres, 1, seed=97)[0], K, explain=True, label="rare")
        how = ("an iterative HNSW index scan" if f"Index Scan using {database.index_name(TABLE)}" in plan
               else "a scan of the label's rows (the planner's choice at this size)")
        passes = in_turn(bench.repetitions, {"filtered": lambda repetition: search_pass(
            connection, vectors, queries_from(centres, QUERIES, seed=50 + repetition), label="rare")})["filtered"]
    bench.results.say(f"   filtered search (--label, 1 row in {RARE_EVERY}), through {how}:")
    bench.results.ratio("filtered_search_p50_ms", vectors_text,
                        [float(np.percentile(latencies, 50)) for latencies, _ in passes])
    bench.results.ratio("filtered_search_p99_ms", vectors_text,
                        [float(np.percentile(latencies, 99)) for latencies, _ in passes])
    bench.results.ratio("filtered_search_recall_at_10", vectors_text, [recall for _, recall in passes])


def measure_build(bench, url, vectors):
    """The HNSW build at PostgreSQL's default 64 MB against the memory sized for the graph; the speed-up."""
    from beam_pipeline import database

    store(url, vectors, table=BUILD_TABLE, index=False)
    sized = database.build_memory(len(vectors), vectors.shape[1], "float32")

    def build(memory):
        started = time.perf_counter()
        database.create_index(url, BUILD_TABLE, database.IndexSettings(rebuild=True, build_memory=memory))
        return time.perf_counter() - started

    def log(repetition, sample):
        bench.results.say(f"   [{repetition + 1}/{bench.repetitions}] HNSW build: {sample['default']:.1f} s at 64 MB, "
                          f"{sample['sized']:.1f} s at {sized >> 20} MB")

    times = in_turn(bench.repetitions, {"default": lambda repetition: build(64 << 20),
                                        "sized": lambda repetition: build(sized)}, log)
    text = f"{len(vectors):,} {vectors.shape[1]}-d vectors"
    bench.results.ratio("index_build_sized_speedup", text,
                        [default / sized_ for default, sized_ in zip(times["default"], times["sized"])],
                        note=f"maintenance_work_mem 64 MB / sized {sized >> 20} MB")
    measure_append(bench, url, vectors)


def _insert(url, vectors, start):
    """Inserts `vectors` into BUILD_TABLE with keys from `start`; seconds."""
    import psycopg
    from pgvector.psycopg import register_vector

    started = time.perf_counter()
    with psycopg.connect(url) as connection:
        register_vector(connection)
        with connection.cursor().copy(f"COPY {BUILD_TABLE} (key, source, path, label, embedding) FROM STDIN "
                                      "WITH (FORMAT BINARY)") as copy:
            copy.set_types(["text", "text", "text", "text", "vector"])
            for i, vector in enumerate(vectors, start=start):
                copy.write_row([f"{i:08d}", "", "", "common", vector])
    return time.perf_counter() - started


def measure_append(bench, url, vectors):
    """Adding a tenth more rows to an indexed table: into its index as they arrive, against drop + insert + build."""
    from beam_pipeline import database

    base, extra = vectors[: len(vectors) * 10 // 11], vectors[len(vectors) * 10 // 11:]

    def incremental(_):
        store(url, base, table=BUILD_TABLE)
        return _insert(url, extra, len(base))

    def rebuild(_):
        store(url, base, table=BUILD_TABLE)
        database.drop_index(url, BUILD_TABLE)
        seconds = _insert(url, extra, len(base))
        started = time.perf_counter()
        database.create_index(url, BUILD_TABLE)
        return seconds + time.perf_counter() - started

    def log(repetition, sample):
        bench.results.say(f"   [{repetition + 1}/{bench.repetitions}] +{len(extra):,} rows into an indexed table of "
                          f"{len(base):,}: {sample['incremental']:.1f} s into the index, {sample['rebuild']:.1f} s "
                          "with a rebuild")

    times = in_turn(bench.repetitions, {"incremental": incremental, "rebuild": rebuild}, log)
    bench.results.ratio("index_append_vs_rebuild", f"+{len(extra):,} rows on {len(base):,}",
                        [rebuilt / added for added, rebuilt in zip(times["incremental"], times["rebuild"])],
                        note="seconds of drop + insert + build / seconds of inserting into the index")
