"""The predict job's pieces in process: post-processing, Parquet shards, the model handler, database helpers."""

import numpy as np
import pytest

from beam_pipeline import database
from beam_pipeline.predict import shards as prediction_shards
from beam_pipeline.predict import vectors
from beam_pipeline.predict.inference import EMPTY_SHARD, ExportModelHandler, Prediction, RowRef
from tf_serving_input import failures


def test_l2_normalize_and_top_k():
    unit = vectors.l2_normalize([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(unit, [[0.6, 0.8], [0.0, 0.0]])  # An all-zero embedding stays zero, never NaN.
    ids, scores = vectors.top_k(np.array([[0.1, 0.5, 0.5, 0.2]]), 3)
    assert ids.tolist() == [[1, 2, 3]] and scores.tolist() == [[0.5, 0.5, np.float32(0.2)]]  # Ties: lower id.
    ids, _ = vectors.top_k(np.array([[0.1, 0.9]]), 5)
    assert ids.tolist() == [[1, 0]]  # k larger than the classes: all of them.
    _, _, half = vectors.postprocess(np.ones((1, 2)), np.array([[1.0, 1.0]]), 1, "float16")
    assert half.dtype == np.float16


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_parquet_shards_are_deterministic_and_typed(dtype):
    refs = [RowRef("train-00000-of-00001", i, 2, key=f"k{i}", source=f"{i}.jpg", path=f"/d/{i}.jpg",
                   split="train", label="cat") for i in range(2)]
    predictions = [Prediction(np.array([1, 0], np.int32), np.array([0.9, 0.1], np.float32),
                              vectors.l2_normalize(np.array([[1.0, i, 0.0]]))[0].astype(dtype)) for i in range(2)]
    table = prediction_shards.build_table(refs, predictions, ["cat", "dog"], 3, dtype)
    data = prediction_shards.to_parquet_bytes(table)
    assert data == prediction_shards.to_parquet_bytes(
        prediction_shards.build_table(refs, predictions, ["cat", "dog"], 3, dtype))
    back = prediction_shards.read_table(data)
    assert back.column("top_k_labels").to_pylist() == [["dog", "cat"]] * 2
    assert back.schema.field("embedding").type.list_size == 3
    assert str(back.schema.field("embedding").type.value_type) == ("halffloat" if dtype == "float16" else "float")
    empty = prediction_shards.build_table([], [], ["cat"], 3, dtype)
    assert prediction_shards.read_table(prediction_shards.to_parquet_bytes(empty)).num_rows == 0


class FakeExport:
    """Stands in for a loaded export: fails on b'bad' like a signature refusing an image."""

    def __call__(self, datas):
        import tensorflow as tf

        if b"bad" in datas:
            raise tf.errors.InvalidArgumentError(None, None, "assertion failed: [not_an_image: unknown file format]")
        return {"scores": np.array([[0.2, 0.8]] * len(datas), np.float32),
                "embedding": np.array([[3.0, 4.0]] * len(datas), np.float32)}


def test_model_handler_passes_failures_through_and_redoes_a_failed_batch():
    handler = ExportModelHandler("unused", "serving_default", "image_bytes", top_k=1)
    unreadable = failures.RowFailure(failures.FILE_NOT_FOUND, "/x.jpg")
    results = handler.run_inference([b"ok", unreadable, b"bad", EMPTY_SHARD, b"ok"], FakeExport())
    outcomes = [result.inference for result in results]
    assert outcomes[1] is unreadable and outcomes[3] is EMPTY_SHARD
    assert outcomes[2] == failures.RowFailure(failures.NOT_AN_IMAGE, "unknown file format")
    assert outcomes[0].top_ids.tolist() == [1]
    np.testing.assert_allclose(outcomes[4].embedding, [0.6, 0.8])
    assert handler.get_num_bytes([b"ok", unreadable]) == 2


def test_database_targets_are_described_without_passwords_and_tables_named_safely():
    assert database.describe("postgresql://me:secret@db.example:5432/images") == "postgresql://me@db.example:5432/images"
    assert database.describe("postgresql://postgres:@/postgres?host=/tmp/pg") == \
        "postgresql://postgres@/postgres (socket in /tmp/pg)"
    assert database.table_name("Sample Predictions-2") == "sample_predictions_2"
    assert database.table_name("2024 run") == "t_2024_run"
    with pytest.raises(database.DatabaseError, match="embedded"):
        database.resolve("mysql://x", None)
