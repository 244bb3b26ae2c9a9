"""The kept columns' statistics (train split): their names in the transform graph, and `column_stats.json`.

    stats = load_column_stats("out/")      # {} when the run keeps no column
    stats["score"]   # {'type': 'float', 'count': 5, 'missing': 1, 'mean': 0.52, 'std': 0.2, 'min': 0.1, 'max': 0.9}
    stats["tags"]["vocabulary"]   # [['cat', 3], ['dog', 2]]: every label with its count, most frequent first

The job analyzes the kept columns of the `train` rows it wrote with tensorflow-transform,
as it does the pixels (`normalization.column_preprocessing_fn`), so the statistics are
saved with the transform graph: each column's outputs (`column_<i>_counts`,
`column_<i>_moments`) and the labels of every `labels` column and of the label with their
frequencies (the asset `label_frequency`, a label as `column_<i>:LABEL` or `label:LABEL`).
The graph names a column by its index in features.json's order, never by its name: a
name is someone else's text. After the run the launcher reads them back
once into `column_stats.json` beside the run (`document`), which this module reads
with no TensorFlow (`load_column_stats`, `read_document`): the summary, `inspect` and
the reader (z-scored numeric columns) use that file.

What each column's entry holds (`count`: train images with a value; `missing`: train
images without one; a mean and the population std, as for the pixels, and min and max
over the images with a value; null when no image has one):

| type | entry |
|---|---|
| `int`, `float` | `count`, `missing`, `mean`, `std`, `min`, `max` of the value (an int's min and max exact) |
| `text` | `count`, `missing`, `characters`: {mean, std, min, max} of its length |
| `labels` | `count`, `missing`, `items` (labels in all), `per_image` {mean, std, min, max}, `vocabulary` |
| `floats` | `count`, `missing`, `items`, `per_image` |
| `boxes` | `count`, `missing`, `items` (boxes in all), `per_image` (boxes per image), `classes` |

(`classes`: the column of the boxes' classes, whose vocabulary counts the boxes of each class.)

`vocabulary`: [[label, count], ...], most frequent first (ties in tensorflow-transform's
order: the label's UTF-8 bytes, descending). The document's `label` entry holds the same
for the run's own label: `labels` per image of a multi-label run, or 0-1 (`count` labeled,
`missing` unlabeled). Pure Python: no TensorFlow, no Beam.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from tf_serving_input.columns import BOXES, FLOAT, FLOATS, INT, LABELS, TEXT, FeatureSpec, Value

VERSION = 1
FILE = "column_stats.json"
# The manifest's record of the file's SHA-256 (written after it), checked by every read (`read_document`).
MANIFEST_KEY = "column_stats_sha256"

# The transform graph's names (raw features, outputs, vocabulary assets): by index, never a column's name.
RAW_IMAGES = "images"  # 1 for an image's row, 0 for a shard's row of moment totals.
# Per row, [N] for N = 1 + the kept columns (0: the label, i + 1: the column at features.json's index i): whether
# it has a value, its items (labels, a list's items, a text's characters), what is measured as an int64 (the
# value, or a count) or as a float32 (a float column's value); and the row's labels, as '<prefix>:<label>'.
RAW_PRESENT, RAW_ITEMS, RAW_WHOLE, RAW_REAL, RAW_LABELS = (
    "column_present", "column_items", "column_whole", "column_real", "column_labels")
COUNTS, MOMENTS = "counts", "moments"
LABEL_PREFIX = "label"  # The run's own label: label_counts, label_moments.
# One vocabulary asset with frequencies holds every labels column's labels and the label's, each as
# '<prefix>:<label>' (`label:cat`, `column_3:cat`): one analyzer, whatever the number of columns.
FREQUENCY_VOCABULARY = "label_frequency"
TOKEN_SEPARATOR = ":"
# What `counts` ([3] int64) and `moments` ([4] exact decimal text) hold, in order.
COUNT_FIELDS = ("count", "missing", "items")
MOMENT_FIELDS = ("mean", "std", "min", "max")
# Which quantity a column's moments describe, by type (None: the value itself).
_MEASURED = {INT: None, FLOAT: None, TEXT: "characters", LABELS: "per_image", FLOATS: "per_image",
             BOXES: "per_image"}


def raw_column(index: int) -> str:
    """The prefix of the kept column at `index` (features.json's order) in the graph: its outputs, its labels."""
    return f"column_{index}"


def output_name(prefix: str, kind: str) -> str:
    """A statistics output of the graph: `column_<i>_counts`, `label_moments` ..."""
    return f"{prefix}_{kind}"


Analysed = tuple[list[int], list[int], list[int], list[float], list[bytes]]


def analysed(spec: FeatureSpec, labels: Sequence[str], values: Mapping[str, Value]) -> Analysed:
    """What the analysis gets of one written row: (present, items, whole, real) [N] each and its labels as tokens
    (see RAW_PRESENT): `labels` are the row's labels (one, none, or a multi-label row's), `values` its kept
    columns' values by name (a missing one left out)."""
    rows: list[tuple[int, int, int, float]] = [(int(bool(labels)), len(labels), len(labels), 0.0)]
    tokens = [f"{LABEL_PREFIX}{TOKEN_SEPARATOR}{label}".encode() for label in labels]
    for index, column in enumerate(spec.columns):
        value: Any = values.get(column.name)
        if value is None:
            rows.append((0, 0, 0, 0.0))
        elif column.type == FLOAT:
            rows.append((1, 1, 0, float(value)))
        elif column.type == INT:
            rows.append((1, 1, int(value), 0.0))
        else:  # A text's characters, a list's items: counted.
            rows.append((1, len(value), len(value), 0.0))
            if column.type == LABELS:
                tokens += [f"{raw_column(index)}{TOKEN_SEPARATOR}{label}".encode() for label in value]
    present, items, whole, real = (list(field) for field in zip(*rows))
    return present, items, whole, real, tokens


def parse_frequency_vocabulary(data: bytes, placeholder: bytes | None = None) -> list[list[Any]]:
    """[[label, count], ...] from a tensorflow-transform vocabulary written with frequencies ('COUNT LABEL' a
    line, split at the first space only: a label may hold spaces). `placeholder`: the token TFT writes into a
    vocabulary that would be empty, left out."""
    entries = []
    for line in data.split(b"\n"):  # b"\n" only: the file's separator (str.splitlines would split on more).
        if not line:
            continue
        count, _, token = line.partition(b" ")
        if token == placeholder:
            continue
        entries.append([token.decode("utf-8"), int(float(count))])
    return entries


def split_vocabularies(entries: list[list[Any]]) -> dict[str, list[list[Any]]]:
    """FREQUENCY_VOCABULARY's [[token, count], ...] as {prefix: [[label, count], ...]}, each in the file's order."""
    vocabularies: dict[str, list[list[Any]]] = {}
    for token, count in entries:
        prefix, _, label = token.partition(TOKEN_SEPARATOR)
        vocabularies.setdefault(prefix, []).append([label, count])
    return vocabularies


def _number(text: str | bytes, exact_int: bool) -> float | int | None:
    text = text.decode() if isinstance(text, bytes) else text
    value = float(text)
    if exact_int:
        return int(text) if math.isfinite(value) else None
    return value if math.isfinite(value) else None


def entry(column_type: str, counts: Sequence[int], moments: Sequence[str | bytes], float32: bool = False,
          vocabulary: list[list[Any]] | None = None) -> dict[str, Any]:
    """One column's entry from its graph outputs: `counts` (count, missing, items) and `moments` (mean, std, min,
    max as text). The moments are null when no image has a value (the analyzers' values then mean nothing).
    `float32`: the min and max are float32 values, written as the shortest decimal that is the same float32."""
    count, missing, items = (int(number) for number in counts)
    measured = _MEASURED.get(column_type)
    exact = column_type != FLOAT
    stats: dict[str, Any] = {}
    for field, text in zip(MOMENT_FIELDS, moments):
        number = _number(text, exact and field in ("min", "max")) if count else None
        if float32 and field in ("min", "max") and number is not None:
            number = _shortest_float32(float(number))
        stats[field] = number
    result: dict[str, Any] = {"type": column_type, "count": count, "missing": missing}
    if measured is None:
        result.update(stats)
    else:
        if column_type != TEXT:
            result["items"] = items
        result[measured] = stats
    if vocabulary is not None:
        result["vocabulary"] = vocabulary
        unheld = items - sum(count for _, count in vocabulary)
        if unheld:  # Labels TFT left out of the vocabulary (empty, or holding a line break): said, never silent.
            result["not_in_vocabulary"] = unheld
    return result


def _shortest_float32(value: float) -> float:
    """The shortest decimal that reads back as the same float32 (0.1 for float32(0.1), not 0.10000000149...)."""
    import struct

    bits = struct.pack("<f", value)
    for digits in range(1, 18):
        shorter = float(f"{value:.{digits}g}")
        try:
            if struct.pack("<f", shorter) == bits:
                return shorter
        except OverflowError:  # Rounded past float32's largest: more digits.
            continue
    return value


def document(spec: FeatureSpec, images: int, columns: Mapping[str, dict[str, Any]],
             label: dict[str, Any] | None) -> dict[str, Any]:
    """column_stats.json's content: the train images analyzed, each kept column's entry (in features.json's
    order), and the label's entry."""
    return {"version": VERSION, "split": "train", "images": images, "multi_label": spec.multi_label,
            "columns": {column.name: columns[column.name] for column in spec.columns},
            **({"label": label} if label is not None else {})}


def dumps(value: Mapping[str, Any]) -> str:
    """The file's text: UTF-8, names and labels as they are (JSON escapes what must be)."""
    return json.dumps(value, ensure_ascii=False, indent=2) + "\n"


def read_document(run_dir: str, manifest: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The whole column_stats.json of a finished run, or None when the run wrote none (it keeps no column).

    Checked against the SHA-256 the run's manifest records of it (`MANIFEST_KEY`; a run of an earlier version
    recorded none), as every shard is: a changed digit is still JSON. ValueError naming the file, in one line,
    when it is damaged."""
    import hashlib

    from tf_serving_input.layout import OutputLayout, exists, read_bytes

    layout = OutputLayout(run_dir)
    path = layout.column_stats_file
    if not exists(path):
        return None
    data = read_bytes(path)
    recorded = (layout.load_manifest() if manifest is None else manifest).get(MANIFEST_KEY)
    if recorded is not None and hashlib.sha256(data).hexdigest() != recorded:
        raise ValueError(f"{path} does not match the SHA-256 the run's manifest records of it ({MANIFEST_KEY}): the "
                         "run's column statistics are damaged or were changed; the same command resumes the run and "
                         "writes them again")
    try:
        document = json.loads(data.decode("utf-8"))
    except ValueError as error:  # Damaged (a flipped byte, a cut copy): say which file, in one line.
        raise ValueError(f"{path} is not valid JSON ({error}): the run's column statistics are damaged; the same "
                         "command resumes the run and writes them again") from None
    if not isinstance(document, dict) or document.get("version") != VERSION:
        raise ValueError(f"{path} is not version {VERSION} of the column statistics")
    return document


def load_column_stats(run_dir: str) -> dict[str, dict[str, Any]]:
    """{column name: its statistics} over the run's train images, in features.json's order; {} for a run that
    keeps no column. A numeric column's entry: type, count, missing, mean, std (population), min, max (null
    when no train image has a value); other types as this module's table says (`labels`: `vocabulary`,
    [[label, count], ...] most frequent first)."""
    data = read_document(run_dir)
    return dict(data["columns"]) if data else {}
