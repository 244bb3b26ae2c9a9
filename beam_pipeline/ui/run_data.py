"""What the pages show of a run, read once at start-up: the job's manifest, its image index, the predictions' top-k.

Only files the layouts name are read (`OutputLayout`, `PredictionLayout`), never a path from a request.
"""

from __future__ import annotations

import dataclasses
import glob
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_pipeline.common import kept_columns
from beam_pipeline.ui.record_index import KeyLookup, RecordIndex, counts, dictionary_column, equal_mask
from tf_serving_input.columns import FeatureSpec
from tf_serving_input.features import LABEL_TEXT
from tf_serving_input.layout import OutputLayout, PredictionLayout


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    """One failed row of errors.jsonl."""

    source: str
    key: str
    split: str
    reason: str
    detail: str


class JobRun:
    """The preprocessing job's output: manifest, the image index, counts by split, label and failure reason.

    Counts are computed once from the index's dictionary columns (milliseconds at a million rows);
    `select` and `failures` answer a gallery page with pyarrow.compute, without a Python object per row.
    """

    def __init__(self, input_dir: str, cache_dir: str | None = None, manifest: dict | None = None) -> None:
        self.layout = OutputLayout(input_dir)
        self.manifest = self.layout.load_manifest() if manifest is None else manifest
        self.index = RecordIndex(self.layout, self.manifest, cache_dir)
        features = self.manifest.get("config", {}).get("features")
        self.features = FeatureSpec.from_json(features) if features else FeatureSpec()
        self.label_counts = counts(self.index.columns["label"])
        self.splits = sorted(counts(self.index.columns["split"]))
        self.labels = sorted(self.label_counts)
        self._failed = {name: dictionary_column(self.index.failed, name) for name in ("split", "reason")}
        self.failure_counts = dict(sorted(counts(self._failed["reason"]).items()))
        self.image_count = len(self.index)
        self.failure_count = self.index.failed.num_rows
        self._every_row = pa.array(np.arange(self.image_count, dtype=np.int64))
        # Reading, unifying and sorting left ~100 MB a million rows of freed buffers in Arrow's pool: give
        # them back, the server's RSS is what a million-image run is judged by.
        pa.default_memory_pool().release_unused()

    def kept_columns(self, key: str) -> list[tuple[str, str]]:
        """(name, value as a page shows it) of an image's kept columns (the job's --column), and a multi-label
        image's labels, read from its record; [] when the run kept none."""
        if not self.features.columns and not self.features.multi_label:
            return []
        record = self.index.record(key)
        shown = []
        if self.features.multi_label:
            labels = kept_columns.feature_lists(record, [LABEL_TEXT]).get(LABEL_TEXT, [])
            shown.append(("labels", ", ".join(label.decode("utf-8", "replace") for label in labels) or "(none)"))
        values = kept_columns.from_record(record, self.features)
        for column in self.features.columns:
            value = values.get(column.name)
            text = ("(missing)" if value is None else value if isinstance(value, str)
                    else ", ".join(value) if column.type == "labels" else json.dumps(value))
            shown.append((column.name, text))
        return shown

    def select(self, split: str | None, label: str | None, within: pa.Array | None = None) -> pa.Array:
        """The rows (gallery order) of one split and/or label (None: any), among `within` (sorted rows) if given."""
        masks = [equal_mask(self.index.columns[name], value)
                 for name, value in (("split", split), ("label", label)) if value is not None]
        if within is not None:
            return within.filter(pc.array_take(_all(masks), within)) if masks else within
        if not masks:
            return self._every_row
        return pc.indices_nonzero(_all(masks))

    def failures(self, reason: str, split: str | None = None) -> pa.Array:
        """The rows of `index.failed` with `reason` (and `split`), in errors.jsonl's order."""
        mask = equal_mask(self._failed["reason"], reason)
        if split is not None:
            mask = pc.and_(mask, equal_mask(self._failed["split"], split))
        return pc.indices_nonzero(mask)

    def failure_rows(self, rows: pa.Array) -> list[Failure]:
        """The Failures of some rows of `index.failed` (a page of them)."""
        picked = self.index.failed.take(rows).select(["source", "key", "split", "reason", "detail"]).to_pylist()
        return [Failure(**{name: value or "" for name, value in row.items()}) for row in picked]


def _all(masks: list[pa.BooleanArray]) -> pa.BooleanArray:
    result = masks[0]
    for mask in masks[1:]:
        result = pc.and_(result, mask)
    return result


@dataclasses.dataclass(frozen=True, slots=True)
class TopK:
    """The model's top classes of one image."""

    labels: list[str]
    scores: list[float]


class PredictRun:
    """The predict job's output: its manifest (dataset id, table) and each image's top-k."""

    def __init__(self, predictions_dir: str) -> None:
        import pyarrow.parquet as pq

        self.layout = PredictionLayout(predictions_dir)
        self.manifest = self.layout.load_manifest()
        dataset, database = (self.manifest.get(name) if isinstance(self.manifest, dict) else None
                             for name in ("dataset", "database"))
        if not isinstance(dataset, dict) or not isinstance(database or {}, dict):
            raise ValueError(f"{self.layout.manifest_file} is damaged (no dataset record): rerun the predict job "
                             "to rewrite it")
        self.dataset_id = dataset.get("id")
        self.source = dataset.get("source")  # The folder (or CSV) its predictions were made from, for messages.
        self.table = (database or {}).get("table")
        # One Arrow table of every image's top-k, looked up by binary search: no Python object per image.
        tables = [pq.read_table(path, columns=["key", "top_k_labels", "top_k_scores"])
                  for path in sorted(glob.glob(self.layout.shard_files_glob()))]
        self._top_k = pa.concat_tables(tables).combine_chunks() if tables else None
        self._keys = KeyLookup(self._top_k.column("key").combine_chunks()) if self._top_k is not None else None

    def top_k(self, key: str) -> TopK | None:
        """The top classes of a stored key, or None when the predictions hold no row of it."""
        row = self._keys.find(key) if self._keys is not None else None
        if row is None or self._top_k is None:
            return None
        picked = self._top_k.slice(row, 1).to_pylist()[0]
        return TopK(picked["top_k_labels"], picked["top_k_scores"])
