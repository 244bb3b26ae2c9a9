"""The benchmark's second half: the predict job, the database load and search, each against a baseline.

- predict job images/s (marginal over N and 10 N rows: start-up cancels) vs `model.predict` over
  `make_dataset` batches, same model, batch size and cores;
- database load rows/s (marginal, the same two runs) vs a bare binary COPY of the same rows into
  the same server;
- search latency p50/p99 over >= 100,000 stored vectors of the model's embedding size;
- peak RSS of the predict job's process tree at N vs 10 N rows.
The model is a Keras application (MobileNetV3Small, random weights: nothing is downloaded) with a
classifier on top; its embedding is the pooled 576-d feature vector.
"""

import json
import os
import sys
import time

import numpy as np

BATCH = 64


def export_benchmark_model(job_out, export_dir, classes):
    """MobileNetV3Small (weights=None) + a softmax classifier, exported on the job's output."""
    import keras

    from tf_serving_input import export_serving_model

    keras.utils.set_random_seed(0)
    size = json.load(open(os.path.join(job_out, "manifest.json")))["config"]["preprocess"]["image_size"]
    backbone = keras.applications.MobileNetV3Small(input_shape=(size, size, 3), include_top=False, weights=None,
                                                   pooling="avg", include_preprocessing=False)
    model = keras.Sequential([keras.Input((size, size, 3)), backbone,
                              keras.layers.Dense(classes, activation="softmax")])
    return model, export_serving_model(model, job_out, export_dir)


def run_predict(run_measured, export_dir, job_out, out, database, database_dir, table):
    """Runs the real predict CLI through `run_measured`; returns (wall seconds, manifest, peak RSS)."""
    wall, peak = run_measured([sys.executable, "-m", "beam_pipeline.predict", "--model_dir", export_dir,
                               "--input_dir", job_out, "--output_dir", out, "--database", database,
                               "--database_dir", database_dir, "--table", table, "--batch_size", str(BATCH),
                               "--overwrite", "--no_progress"])
    with open(os.path.join(out, "manifest.json")) as f:
        return wall, json.load(f), peak


def model_predict_rate(model, job_out, rows):
    """Images/s of keras `model.predict` over the reader's batches of `rows` images (after a warm-up)."""
    from tf_serving_input import make_dataset

    dataset = make_dataset(job_out, "train", batch_size=BATCH, training=False)
    model.predict(dataset.take(2), verbose=0)
    os.sync()
    started = time.time()
    model.predict(dataset, verbose=0)
    return rows / (time.time() - started)


def bare_copy_rate(url, parquet_paths, table):
    """Rows/s of one connection COPYing (binary) the predictions' rows into a plain table, no upsert."""
    import psycopg
    import pyarrow.parquet as pq
    from pgvector.psycopg import register_vector

    tables = [pq.read_table(path) for path in parquet_paths]
    dimension = tables[0].schema.field("embedding").type.list_size
    names = ("key", "source", "path", "split", "label", "top_k_ids", "top_k_labels", "top_k_scores", "embedding")
    types = ("text", "text", "text", "text", "text", "int4[]", "text[]", "float4[]", "vector")
    with psycopg.connect(url) as connection:
        register_vector(connection)
        connection.execute(f"DROP TABLE IF EXISTS {table}")
        connection.execute(f"CREATE TABLE {table} (" + ", ".join(
            f"{n} {t if n != 'embedding' else f'vector({dimension})'}" for n, t in zip(names, types)) + ")")
        connection.commit()
        rows = 0
        started = time.time()
        with connection.cursor().copy(f"COPY {table} ({', '.join(names)}) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(list(types))
            for arrow in tables:
                columns = {name: arrow.column(name).to_pylist() for name in names[:8]}
                embeddings = arrow.column("embedding").combine_chunks()
                matrix = embeddings.values.to_numpy(zero_copy_only=False).reshape(len(arrow), -1)
                for row in range(len(arrow)):
                    copy.write_row([columns[name][row] for name in names[:8]] + [matrix[row]])
                rows += len(arrow)
        connection.commit()
        return rows / (time.time() - started)


def search_latency(url, embeddings, count, queries=200, seed=0):
    """(p50 ms, p99 ms, vectors, index build seconds) of k=10 searches over `count` stored vectors.

    The vectors are the predictions' own embeddings, each repeated with a little noise (unit length
    again) up to `count`, so the index holds realistic clusters; queries are noisy stored vectors.
    """
    import psycopg
    from pgvector.psycopg import register_vector

    from beam_pipeline import database

    rng = np.random.default_rng(seed)
    base = np.asarray(embeddings, np.float32)
    vectors = base[rng.integers(0, len(base), count)] + rng.normal(0, 0.05, (count, base.shape[1])).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with psycopg.connect(url) as connection:
        register_vector(connection)
        connection.execute("DROP TABLE IF EXISTS search_benchmark")
        connection.execute(f"CREATE TABLE search_benchmark (key text PRIMARY KEY, source text, path text, "
                           f"label text, embedding vector({base.shape[1]}))")
        with connection.cursor().copy("COPY search_benchmark (key, source, path, label, embedding) FROM STDIN "
                                      "WITH (FORMAT BINARY)") as copy:
            copy.set_types(["text", "text", "text", "text", "vector"])
            for i in range(count):
                copy.write_row([f"{i:08d}", "", "", "", vectors[i]])
        connection.commit()
    started = time.time()
    database.create_index(url, "search_benchmark", "float32")
    build_seconds = time.time() - started
    latencies = []
    with database.connect(url) as connection:
        for _ in range(queries):
            query = vectors[rng.integers(0, count)] + rng.normal(0, 0.02, base.shape[1]).astype(np.float32)
            begun = time.perf_counter()
            database.nearest(connection, "search_benchmark", query / np.linalg.norm(query), 10)
            latencies.append(time.perf_counter() - begun)
    return (float(np.percentile(latencies, 50) * 1000), float(np.percentile(latencies, 99) * 1000), count,
            build_seconds)
