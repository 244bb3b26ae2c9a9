"""Nearest neighbours for the UI: an uploaded image (embedded by the export, loaded once) or a stored key.

The shared parts are search's too: `common.query_embedding` embeds and checks an image as the job
would, `database.nearest` and `database.stored_embedding` ask pgvector with parameters only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from beam_pipeline import database
from beam_pipeline.common.query_embedding import QueryEmbedder, check_image_bytes


@dataclasses.dataclass(frozen=True, slots=True)
class Neighbour:
    """One stored image near the query."""

    key: str
    source: str
    label: str
    distance: float


class NeighbourSearch:
    """A pooled connection to the predictions table, and the export when uploads can be searched."""

    def __init__(self, pool: Any, table: str, dataset_id: str | None, embedder: QueryEmbedder | None,
                 max_pixels: int) -> None:
        self.pool = pool
        self.table = table
        self.dataset_id = dataset_id
        self.embedder = embedder
        self.max_pixels = max_pixels

    def by_image(self, data: bytes, k: int, split: str | None = None, label: str | None = None) -> list[Neighbour]:
        """The k nearest an image's bytes (of one split and/or label when given); RowFailure (the job's reason
        codes) when they are no usable image."""
        assert self.embedder is not None, "uploads are searched only with --model_dir"
        check_image_bytes(data, self.max_pixels)
        return self._nearest(self.embedder.embed(data), k, split, label)

    def by_key(self, key: str, k: int, split: str | None = None, label: str | None = None) -> list[Neighbour]:
        """The k nearest a stored image, itself left out; LookupError when the table has no such key."""
        with self.pool.connection() as connection:
            vector, _ = database.stored_embedding(connection, self.table, key, self.dataset_id)
        return [n for n in self._nearest(vector, min(k + 1, database.MAX_K), split, label) if n.key != key][:k]

    def _nearest(self, vector: Any, k: int, split: str | None, label: str | None) -> list[Neighbour]:
        with self.pool.connection() as connection:
            # Filters are query parameters in database.nearest (issue 21), and still return k rows when k exist.
            rows = database.nearest(connection, self.table, vector, k, dataset_id=self.dataset_id, split=split,
                                    label=label)
        return [Neighbour(key, source, label, float(distance)) for key, source, _, label, distance in rows]
