"""The embedding types: how a unit-length embedding is held in NumPy, Arrow (Parquet) and pgvector.

One table in the style of `tf_serving_input.codecs.CODECS`: the predict job's
post-processing and Parquet shards, the database's columns, index and COPY, and
search all look an embedding type up here. Pure Python at import (NumPy, Arrow
and pgvector load when used), so flag parsing stays fast.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class EmbeddingType:
    """One way of storing embeddings, named by its `--embedding_dtype` value."""

    name: str  # The flag value, and the NumPy / Arrow element type of that name.
    pgvector: str  # The pgvector column type ('vector' or 'halfvec').
    operator_class: str  # The HNSW cosine operator class of that type.
    bit_width: int

    def column_type(self, embedding_size: int) -> str:
        """The pgvector column type of embeddings of `embedding_size` dimensions, e.g. 'halfvec(128)'."""
        return f"{self.pgvector}({embedding_size})"

    def numpy_dtype(self) -> Any:
        """The NumPy dtype."""
        import numpy as np

        return np.dtype(self.name)

    def arrow_type(self) -> Any:
        """The Arrow element type of the Parquet embedding column."""
        import pyarrow as pa

        return pa.from_numpy_dtype(self.numpy_dtype())

    def to_database(self, vector: Any) -> Any:
        """A NumPy row as the value psycopg's pgvector adapter sends for this column type."""
        if self.pgvector == "halfvec":
            from pgvector import HalfVector

            return HalfVector(vector)
        return vector


EMBEDDING_TYPES = {
    "float32": EmbeddingType("float32", pgvector="vector", operator_class="vector_cosine_ops", bit_width=32),
    "float16": EmbeddingType("float16", pgvector="halfvec", operator_class="halfvec_cosine_ops", bit_width=16),
}
EMBEDDING_DTYPES = tuple(EMBEDDING_TYPES)
DEFAULT_EMBEDDING_DTYPE = "float32"


def embedding_type(name: str) -> EmbeddingType:
    """The EmbeddingType of an `--embedding_dtype` value; ValueError naming the choices otherwise."""
    try:
        return EMBEDDING_TYPES[name]
    except KeyError:
        raise ValueError(f"unknown embedding type {name!r}: one of {', '.join(EMBEDDING_DTYPES)}") from None


def of_bit_width(bit_width: int) -> EmbeddingType:
    """The EmbeddingType whose elements have `bit_width` bits (an Arrow column's value type tells it)."""
    for kind in EMBEDDING_TYPES.values():
        if kind.bit_width == bit_width:
            return kind
    raise ValueError(f"no embedding type of {bit_width}-bit elements")


def of_column_type(column_type: str) -> EmbeddingType:
    """The EmbeddingType of a pgvector column type such as 'vector(24)' or 'halfvec(128)'."""
    base = column_type.split("(")[0]
    for kind in EMBEDDING_TYPES.values():
        if kind.pgvector == base:
            return kind
    raise ValueError(f"{column_type} is not an embedding column type")


def l2_normalize(embeddings: Any) -> Any:
    """Each row scaled to unit length (float32); an all-zero row stays zero instead of becoming NaN."""
    import numpy as np

    embeddings = np.asarray(embeddings, np.float32)
    norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
    return np.divide(embeddings, norms, out=np.zeros_like(embeddings), where=norms > 0)
