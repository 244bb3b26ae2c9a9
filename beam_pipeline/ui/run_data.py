"""What the pages show of a run, read once at start-up: the job's manifest and failures, the predictions' top-k.

Only files the layouts name are read (`OutputLayout`, `PredictionLayout`), never a path from a request.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import json

from beam_pipeline.ui.record_index import RecordIndex
from tf_serving_input.layout import OutputLayout, PredictionLayout


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    """One failed row of errors.jsonl."""

    source: str
    key: str
    split: str
    reason: str
    detail: str


def read_failures(path: str) -> list[Failure]:
    """The failed rows of an errors.jsonl (none when it is absent); a line that is no JSON object is skipped."""
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(Failure(*(str(row.get(name, "")) for name in ("source", "key", "split", "reason", "detail"))))
    return rows


class JobRun:
    """The preprocessing job's output: manifest, failures by reason, label counts, the record index."""

    def __init__(self, input_dir: str) -> None:
        self.layout = OutputLayout(input_dir)
        self.manifest = self.layout.load_manifest()
        self.index = RecordIndex(self.layout, self.manifest)
        self.failures = read_failures(self.layout.errors_file)
        self.failures_by_reason: dict[str, list[Failure]] = collections.defaultdict(list)
        for failure in self.failures:
            self.failures_by_reason[failure.reason].append(failure)
        self.label_counts = collections.Counter(entry.label for entry in self.index.entries.values())
        self.splits = sorted({entry.split for entry in self.index.entries.values()})
        self.labels = sorted(self.label_counts)
        self.keys = list(self.index.entries)  # Shard and record order: the gallery's order.

    def select(self, split: str | None, label: str | None) -> list[str]:
        """The keys of one split and/or label (None: any), in gallery order."""
        entries = self.index.entries
        return [key for key in self.keys if (split is None or entries[key].split == split)
                and (label is None or entries[key].label == label)]


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
        self.top_k: dict[str, TopK] = {}
        for path in sorted(glob.glob(self.layout.shard_files_glob())):
            table = pq.read_table(path, columns=["key", "top_k_labels", "top_k_scores"]).to_pydict()
            for key, labels, scores in zip(table["key"], table["top_k_labels"], table["top_k_scores"]):
                self.top_k[key] = TopK(labels, scores)
