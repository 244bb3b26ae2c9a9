"""The predict job's Parquet shards: schema, building one from a shard's rows, reading them back.

One row per image: key, source, path, split, label, the top-k class ids, labels
and scores, and the unit-length embedding (a fixed-size list of float32 or
float16). Rows are in the shard's row order and files are written with fixed
options, so the same predictions give the same bytes.
"""

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from beam_pipeline.common.embeddings import embedding_type
from beam_pipeline.common.predictions import COLUMNS, schema

_WRITE_OPTIONS = {"compression": "zstd", "compression_level": 3, "use_dictionary": ["split", "label"],
                  "write_statistics": ["key", "split", "label"]}


def build_table(refs, predictions, vocabulary, embedding_size, embedding_dtype):
    """The Arrow table of one shard's written rows: `refs` (RowRef) and their `predictions`, in order."""
    def labels(ids):
        return [vocabulary[i] if 0 <= i < len(vocabulary) else "" for i in ids]

    columns = {
        "key": [ref.key for ref in refs], "source": [ref.source for ref in refs],
        "path": [ref.path for ref in refs], "split": [ref.split for ref in refs],
        "label": [ref.label for ref in refs],
        "labels": [list(ref.labels) if ref.labels else [ref.label] if ref.label else [] for ref in refs],
        "columns": [ref.columns for ref in refs],
        "top_k_ids": [p.top_ids.tolist() for p in predictions],
        "top_k_labels": [labels(p.top_ids.tolist()) for p in predictions],
        "top_k_scores": [p.top_scores.tolist() for p in predictions],
    }
    table_schema = schema(embedding_size, embedding_dtype)
    arrays = [pa.array(columns[name], table_schema.field(name).type) for name in COLUMNS[:10]]
    if embedding_size:
        dtype = embedding_type(embedding_dtype).numpy_dtype()
        flat = (np.stack([p.embedding for p in predictions]).astype(dtype).reshape(-1) if predictions
                else np.zeros(0, dtype))
        arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(flat), embedding_size))
    return pa.Table.from_arrays(arrays, schema=table_schema)


def to_parquet_bytes(table):
    """The Parquet file of a table, written with the same options every time."""
    sink = io.BytesIO()
    pq.write_table(table, sink, **_WRITE_OPTIONS)
    return sink.getvalue()


def read_table(data):
    """The Arrow table of Parquet file bytes."""
    return pq.read_table(io.BytesIO(data))
