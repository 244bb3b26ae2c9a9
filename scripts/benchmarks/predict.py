"""predict_vs_model_predict, load_vs_bare_copy and predict_memory_ratio: the predict job's half.

The model is a Keras application (MobileNetV3Small, random weights: nothing is downloaded) with a
classifier on top; its embedding is the pooled 576-d feature vector. Each repetition measures:
- model.predict over the reader's batches of N and of factor x N rows (the job's two outputs),
  timed in this process after a warm-up on the same batch shapes (full batches and each size's
  last partial one); marginal images/s, as for the job (baseline);
- the real predict CLI on the same two outputs into fresh tables of the embedded server, which
  this process keeps running (the runs join it); predict time is the wall time less the
  database load, marginal over the two sizes (subject); the load's marginal rows/s from the
  same two runs (subject) and their peak RSS;
- one bare binary COPY of the larger run's predictions into a plain table (baseline).
"""

import json
import os
import time

from benchmarks.harness import in_turn, marginal_rate, median, python_command, run_measured, settle

BATCH = 64


def export_benchmark_model(job_out, export_dir, classes):
    """MobileNetV3Small (weights=None) + a softmax classifier, exported on the job's output."""
    import keras

    from tf_serving_input import export_serving_model

    keras.utils.set_random_seed(0)
    with open(os.path.join(job_out, "manifest.json")) as f:
        size = json.load(f)["config"]["preprocess"]["image_size"]
    backbone = keras.applications.MobileNetV3Small(input_shape=(size, size, 3), include_top=False, weights=None,
                                                   pooling="avg", include_preprocessing=False)
    classifier = keras.layers.Dense(classes, activation="softmax")
    model = keras.Sequential([keras.Input((size, size, 3)), backbone, classifier])
    return model, export_serving_model(model, job_out, export_dir)


def run_predict(export_dir, job_out, out, database_dir, table):
    """Runs the real predict CLI into the embedded server; returns (wall seconds, manifest, peak RSS)."""
    wall, peak = run_measured(python_command(
        "-m", "beam_pipeline.predict", "--model_dir", export_dir, "--input_dir", job_out, "--output_dir", out,
        "--database", "embedded", "--database_dir", database_dir, "--table", table, "--batch_size", BATCH,
        "--overwrite", "--no_progress"))
    with open(os.path.join(out, "manifest.json")) as f:
        return wall, json.load(f), peak


def model_predict_seconds(model, dataset):
    settle()
    started = time.perf_counter()
    model.predict(dataset, verbose=0)
    return time.perf_counter() - started


def bare_copy_rate(url, parquet_paths, table):
    """Rows/s of one connection COPYing (binary) the predictions' rows into a plain table: no staging
    table, no upsert, no index; the columns are the predictions table's, less `dataset`."""
    import psycopg
    import pyarrow.parquet as pq
    from pgvector.psycopg import register_vector

    from beam_pipeline import database

    tables = [pq.read_table(path) for path in parquet_paths]
    dimension = tables[0].schema.field("embedding").type.list_size
    columns = [(name, kind) for name, kind in database.table_columns(dimension, "float32") if name != "dataset"]
    names = [name for name, _ in columns]
    with psycopg.connect(url) as connection:
        register_vector(connection)
        connection.execute(f"DROP TABLE IF EXISTS {table}")
        connection.execute(f"CREATE TABLE {table} (" + ", ".join(f"{n} {kind}" for n, kind in columns) + ")")
        connection.commit()
        rows = 0
        started = time.perf_counter()
        with connection.cursor().copy(f"COPY {table} ({', '.join(names)}) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types([kind.split("(")[0] for _, kind in columns])
            for arrow in tables:
                values = {name: arrow.column(name).to_pylist() for name in names if name != "embedding"}
                embeddings = arrow.column("embedding").combine_chunks()
                matrix = embeddings.values.to_numpy(zero_copy_only=False).reshape(len(arrow), -1)
                for row in range(len(arrow)):
                    copy.write_row([matrix[row] if name == "embedding" else values[name][row] for name in names])
                rows += len(arrow)
        connection.commit()
        return rows / (time.perf_counter() - started)


def drop_tables(url, *tables):
    """Fresh tables, as the bare COPY gets: loading over an earlier run's rows and HNSW index is an
    upsert into an index (measured 13,900 vs 19,000 rows/s fresh)."""
    from beam_pipeline import database

    with database.connect(url) as connection:
        for table in tables:
            connection.execute(f"DROP TABLE IF EXISTS {table}")
        connection.commit()


def measure(bench, job, server):
    """The three ratios over the heavy set's job outputs (`job`: a job.JobSection), with `server`
    (an EmbeddedServer this process holds a lease on). Returns the model's embedding size."""
    from tf_serving_input.reader import make_dataset

    results, work = bench.results, bench.work
    classes = len(job.manifest["statistics"]["label_vocabulary"])
    model, export = export_benchmark_model(job.out, os.path.join(work, "export"), classes)
    url = server.url()
    sizes = {"small": (job.out, job.rows), "big": (job.many_out, job.many_rows)}
    datasets = {name: make_dataset(out, "train", batch_size=BATCH, training=False) for name, (out, _) in sizes.items()}
    # Warm-up on the same batch shapes (each shape traces and compiles once): the small dataset
    # whole (full batches, its last partial one), and the large one's last batch.
    model.predict(datasets["small"], verbose=0)
    model.predict(datasets["big"].skip(int(datasets["big"].cardinality()) - 1), verbose=0)

    def model_predict(_):
        seconds = {name: model_predict_seconds(model, dataset) for name, dataset in datasets.items()}
        return marginal_rate((job.rows, seconds["small"]), (job.many_rows, seconds["big"]))

    def predict_job(_):
        """(predict images/s, load rows/s, (small, big) peak RSS, (small, big) wall), all marginal."""
        drop_tables(url, "bench_small", "bench_big")
        (small_wall, small, small_peak), (big_wall, big, big_peak) = (
            run_predict(export, out, os.path.join(work, f"predict_{name}"), server.data_dir, f"bench_{name}")
            for name, (out, _) in sizes.items())
        small_load, big_load = small["database"]["load_seconds"], big["database"]["load_seconds"]
        return (marginal_rate((job.rows, small_wall - small_load), (job.many_rows, big_wall - big_load)),
                marginal_rate((job.rows, small_load), (job.many_rows, big_load)), (small_peak, big_peak),
                (small_wall, big_wall), big["model"]["embedding_size"])

    def bare_copy(_):
        folder = os.path.join(work, "predict_big", "predictions")
        return bare_copy_rate(url, sorted(os.path.join(folder, name) for name in os.listdir(folder)
                                          if name.endswith(".parquet")), "bare_copy")

    def log(repetition, sample):
        job_rate, load_rate, _, (small_wall, big_wall), _ = sample["predict job"]
        results.say(f"   [{repetition + 1}/{bench.repetitions}] model.predict marginal {sample['model.predict']:.0f} "
                    f"img/s; predict job marginal {job_rate:.0f} img/s ({small_wall:.1f} s, {big_wall:.1f} s); load "
                    f"{load_rate:.0f} rows/s, bare COPY {sample['bare COPY']:.0f} rows/s")

    samples = in_turn(bench.repetitions, {"model.predict": model_predict, "predict job": predict_job,
                                          "bare COPY": bare_copy}, log)
    model_rates, copy_rates = samples["model.predict"], samples["bare COPY"]
    job_rates, load_rates, peaks, _, embeddings = (list(column) for column in zip(*samples["predict job"]))
    embedding = embeddings[-1]
    results.say(f"6. predict job (MobileNetV3Small, {embedding}-d embedding, batch {BATCH}; {job.rows} vs "
                f"{job.many_rows} rows, marginal) vs model.predict over make_dataset (marginal, warmed up):")
    records = "224 px records"
    results.ratio("predict_vs_model_predict", records, [j / m for j, m in zip(job_rates, model_rates)])
    results.ratio("load_vs_bare_copy", "predictions", [load / copy for load, copy in zip(load_rates, copy_rates)])
    results.ratio("predict_memory_ratio", records, [big / small for small, big in peaks],
                  note=f"peak RSS {median([s for s, _ in peaks]) / 2**30:.2f} GiB at {job.rows} rows, "
                       f"{median([b for _, b in peaks]) / 2**30:.2f} GiB at {job.many_rows}")
    results.rate("predict job (marginal)", job_rates)
    results.rate("model.predict over make_dataset (marginal)", model_rates)
    results.rate("database load rows/s (marginal)", load_rates)
    results.rate("bare COPY rows/s", copy_rates)
    return embedding
