"""Nearest neighbours for the UI: an uploaded image (embedded by the export, loaded once) or a stored key.

The shared parts are search's too: `common.query_embedding` embeds and checks an image as the job
would, `database.nearest` and `database.stored_embedding` ask pgvector with parameters only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from beam_pipeline import database
from beam_pipeline.common.query_embedding import QueryEmbedder, check_image_bytes
from beam_pipeline.database.column_filters import ColumnFilter


@dataclasses.dataclass(frozen=True, slots=True)
class Neighbour:
    """One stored image near the query."""

    key: str
    source: str
    label: str
    distance: float
    dataset: str = ""  # Its dataset id (a table loaded with --append holds several).


class NeighbourSearch:
    """A pooled connection to the predictions table, and the export when uploads can be searched."""

    def __init__(self, pool: Any, table: str, dataset_id: str | None, embedder: QueryEmbedder | None,
                 max_pixels: int, datasets: dict[str, str] | None = None, own_dataset: str | None = None) -> None:
        self.pool = pool
        self.table = table
        self.dataset_id = dataset_id
        self.embedder = embedder
        self.max_pixels = max_pixels
        self.datasets = datasets or {}  # {id: source} of what the table holds, read at start-up.
        self.own_dataset = own_dataset  # The --input_dir run's dataset id: its rows are this run's images.

    @property
    def several_datasets(self) -> bool:
        """Whether the table holds more than one dataset: then each result names its own."""
        return len(self.datasets) > 1

    def dataset_name(self, dataset_id: str) -> str:
        """A dataset as a page names it: the folder (or CSV) it was made from, and its id."""
        source = self.datasets.get(dataset_id)
        return f"{source} ({dataset_id})" if source else dataset_id

    def by_image(self, data: bytes, k: int, split: str | None = None, label: str | None = None,
                 where: tuple[ColumnFilter, ...] = ()) -> list[Neighbour]:
        """The k nearest an image's bytes (of one split and/or label when given); RowFailure (the job's reason
        codes) when they are no usable image."""
        assert self.embedder is not None, "uploads are searched only with --model_dir"
        check_image_bytes(data, self.max_pixels)
        return self._nearest(self.embedder.embed(data), k, split, label, where)

    def by_key(self, key: str, k: int, split: str | None = None, label: str | None = None,
               where: tuple[ColumnFilter, ...] = ()) -> list[Neighbour]:
        """The k nearest a stored image, itself left out; LookupError when the table has no such key."""
        with self.pool.connection() as connection:
            vector, _ = database.stored_embedding(connection, self.table, key, self.dataset_id)
        return [n for n in self._nearest(vector, min(k + 1, database.MAX_K), split, label, where)
                if n.key != key][:k]

    def _nearest(self, vector: Any, k: int, split: str | None, label: str | None,
                 where: tuple[ColumnFilter, ...] = ()) -> list[Neighbour]:
        with self.pool.connection() as connection:
            # Filters are query parameters in database.nearest (issue 21), and still return k rows when k exist.
            rows = database.nearest(connection, self.table, vector, k, dataset_id=self.dataset_id, split=split,
                                    label=label, with_dataset=True, where=where)
        return [Neighbour(key, source, label, float(distance), dataset)
                for key, source, _, label, dataset, distance in rows]
