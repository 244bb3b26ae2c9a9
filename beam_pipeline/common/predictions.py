"""The predictions contract: the columns of one predicted image, as the predict job's Parquet shards hold them.

The predict job writes this schema and the database derives its table from it
(`database.tables.table_columns`): a column added here reaches both.
"""

from __future__ import annotations

import pyarrow as pa

from beam_pipeline.common.embeddings import embedding_type

TEXT_COLUMNS = ("key", "source", "path", "split", "label")
# `labels`: every label of the image (a multi-label run's; [label] or [] otherwise). `columns`: the job's kept
# columns (--column) as one JSON object (`common/kept_columns.py`; `jsonb` in the database).
COLUMNS = (*TEXT_COLUMNS, "labels", "columns", "top_k_ids", "top_k_labels", "top_k_scores", "embedding")
JSON_COLUMNS = ("columns",)


def schema(embedding_size: int, embedding_dtype: str) -> pa.Schema:
    """The Arrow schema of a shard (no embedding column when `embedding_size` is 0)."""
    fields = [pa.field(name, pa.string(), nullable=False) for name in TEXT_COLUMNS]
    fields += [pa.field("labels", pa.list_(pa.string()), nullable=False),
               pa.field("columns", pa.string(), nullable=False)]
    fields += [pa.field("top_k_ids", pa.list_(pa.int32()), nullable=False),
               pa.field("top_k_labels", pa.list_(pa.string()), nullable=False),
               pa.field("top_k_scores", pa.list_(pa.float32()), nullable=False)]
    if embedding_size:
        value_type = embedding_type(embedding_dtype).arrow_type()
        fields.append(pa.field("embedding", pa.list_(value_type, embedding_size), nullable=False))
    return pa.schema(fields)
