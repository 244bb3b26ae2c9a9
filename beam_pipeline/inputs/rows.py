"""The list's rows: read and checked (line-numbered errors), `Row`, keys, shards, reading image bytes.

Every format's cells (`tables`: CSV, TSV, JSON Lines, Parquet) become Rows here, by
one code path. Pure Python (no TensorFlow; Beam's FileSystems only when a file is
opened, pyarrow only for Parquet, so that importing this module stays cheap), so the
launcher can check a list in a streaming pass and the pipeline can read it with the
very same code.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import hashlib
import math
import posixpath
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from beam_pipeline.common import storage_errors, terminal
from beam_pipeline.common.redact import redact, redact_url
from beam_pipeline.inputs import file_urls, path_hints, tables, urls
from beam_pipeline.inputs.cells import (
    DEFAULT_LIST_SEPARATOR,
    LABEL_BREAKERS,
    BadValue,
    a_type,
    cell_value,
    is_blank,
    quoted,
)
from tf_serving_input import failures
from tf_serving_input.columns import BOXES, LABELS, Column, FeatureSpec, Value

if TYPE_CHECKING:
    import apache_beam as beam

# A row's split when the list has no split column or its cell is blank (a blank cell is counted in the summary).
DEFAULT_SPLIT = "train"
# Rows of this split (any case: TFRecorder's DISCARD) are counted and never written.
DISCARD_SPLIT = "discard"
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# A shard holds about this many rows unless --num_shards says otherwise.
ROWS_PER_SHARD = 1000
# Small splits still get a few shards, so that several workers share them.
MIN_AUTO_SHARDS = 8
# Never read more than this from one image file: a huge file is refused, not loaded.
DEFAULT_MAX_FILE_BYTES = 256 * 1024 * 1024
# (split, shard_index): what rows are grouped by.
ShardKey = tuple[str, int]
# The reason of a local file's read by its errno; any other errno is a read_error whose detail names it.
_REASON_BY_ERRNO = {
    errno.ENOENT: failures.FILE_NOT_FOUND,
    # A name on the path is a file, not a folder: no file can be there, as when a folder is missing (ENOENT).
    errno.ENOTDIR: failures.FILE_NOT_FOUND,
    errno.ENAMETOOLONG: failures.PATH_TOO_LONG,
    errno.EACCES: failures.PERMISSION_DENIED,
    errno.EPERM: failures.PERMISSION_DENIED,
    errno.EISDIR: failures.IS_A_DIRECTORY,
    errno.ELOOP: failures.SYMLINK_LOOP,
}


# The list cannot be used at all; the message names the file, the line and the reason (one type for every format).
CsvError = tables.ListError


@dataclasses.dataclass(frozen=True)
class Row:
    """One data row of the list, as the pipeline carries it (never pixels).

    Attributes:
      index: 0-based position among the list's data rows (over all its files, in order).
      line: 1-based line of its file where the row starts (a CSV or TSV record, a JSON line), or its
        1-based row number in a Parquet file (for messages).
      source: the path exactly as written in the list.
      path: `source` resolved against the list file's folder when relative.
      label: the label text without surrounding whitespace, '' when unlabeled (a blank cell too).
      split: the split name, lower-cased ('train' when the list has no split column or the cell is blank;
        'discard' for a row counted and never written).
      key: stable hexadecimal key of the row (see `row_key`).
      fetch_url: for an http(s) URL with a password only: the URL as written, which only the fetch
        reads; `source` and `path` then hold it with the password replaced by ***, so no output,
        log or database ever sees it.
      columns: the kept columns' values (`--column`), typed as `tf_serving_input.columns` says, in the
        run's column order; a missing value is left out (never "" or 0).
      labels: the labels of a multi-label row (a label column of type `labels`); `label` is then ''.
      failure: (reason, detail) of a row that fails before its image is read: a cell that is not of its
        column's type (`bad_value`); `failure_of` makes it the row's RowFailure.
    """

    index: int
    line: int
    source: str
    path: str
    label: str
    split: str
    key: str
    fetch_url: str = dataclasses.field(default="", repr=False)
    columns: tuple[tuple[str, Value], ...] = ()
    labels: tuple[str, ...] = ()
    failure: tuple[str, str] | tuple[()] = ()


@dataclasses.dataclass(frozen=True)
class CsvColumns:
    """Which CSV columns hold the path, the label and the split."""

    path: str = "path"
    label: str = "label"
    split: str = "split"


@dataclasses.dataclass(frozen=True)
class ColumnReading:
    """Which columns the rows keep (`--column`), the separator of a list in a text cell, the list's format."""

    features: FeatureSpec = FeatureSpec()
    separator: str = DEFAULT_LIST_SEPARATOR
    # The list's format (one of tables.FORMATS) for every file, or '' to tell each file's by its name.
    input_format: str = ""


@dataclasses.dataclass
class CsvSummary:
    """What the launcher learned from its validation pass over the CSV."""

    rows: int
    rows_per_split: dict[str, int]
    has_label: bool
    has_split: bool
    # Label cells the read changed (counted so that nothing changes silently): surrounding whitespace
    # stripped, and whitespace only (read as unlabeled).
    labels_stripped: int = 0
    labels_blank: int = 0
    # Data rows per format read (csv, tsv, jsonl, parquet); `rows` leaves out the discarded ones.
    rows_per_format: dict[str, int] = dataclasses.field(default_factory=dict)
    # Rows of the split 'discard' (never written), rows whose split cell was blank (they are DEFAULT_SPLIT),
    # and rows whose split cell's case was folded ('Train' is 'train').
    discarded: int = 0
    blank_splits: int = 0
    splits_folded: int = 0


class RowLike(Protocol):
    """What an errors.jsonl entry needs of a row: a `Row`, or the predict job's RowRef."""

    @property
    def source(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def line(self) -> int: ...

    @property
    def split(self) -> str: ...


def row_key(index: int, source: str) -> str:
    """A stable key for a data row: the same on every run, process and machine.

    Built from the row's position and its path, so duplicate rows still get
    distinct keys; never from Python's hash(), which changes between processes.
    """
    digest = hashlib.sha256(f"{index}\x00{source}".encode("utf-8")).hexdigest()
    return digest[:16]


def shard_of(key: str, num_shards: int) -> int:
    """The shard (0..num_shards-1) a row key belongs to."""
    return int(key, 16) % num_shards


def auto_num_shards(rows: int) -> int:
    """Default shard count for a split of `rows` rows.

    Depends only on the row count, never on the machine, so outputs are the
    same whatever the worker count.
    """
    if rows <= 0:
        return 0
    return min(rows, max(MIN_AUTO_SHARDS, math.ceil(rows / ROWS_PER_SHARD)))


def resolve_path(source: str, csv_path: str) -> str:
    """Resolves a relative `source` against the folder of `csv_path`; URIs and absolute paths pass."""
    if "://" in source or source.startswith("/"):
        return source
    base = posixpath.dirname(csv_path) if "://" in csv_path else None
    if base is not None:
        return f"{base.rstrip('/')}/{source}"
    import os  # Local CSV: the OS decides what a folder is.

    folder = _folder_of(csv_path) if csv_path.startswith("/") else os.path.dirname(os.path.abspath(csv_path))
    return os.path.normpath(os.path.join(folder, source))


@functools.lru_cache(maxsize=64)
def _folder_of(absolute_path: str) -> str:
    """The folder of an absolute local path, worked out once per list file (it was a third of a row's path)."""
    import os

    return os.path.dirname(os.path.normpath(absolute_path))


class _Read:
    """One data row as read: the Row, the file's cells it came from, and what the summary counts of it."""

    __slots__ = ("row", "cells", "format", "label_written", "split_blank", "split_folded")

    def __init__(self, row: Row, cells: list[Any], fmt: str, label_written: str, split_blank: bool,
                 split_folded: bool) -> None:
        self.row, self.cells, self.format = row, cells, fmt
        self.label_written, self.split_blank, self.split_folded = label_written, split_blank, split_folded


def iter_rows(csv_path: str, columns: CsvColumns = CsvColumns(),
              kept: ColumnReading = ColumnReading()) -> Iterator[Row]:
    """Yields every data row of the list as a `Row`, in order: its files in `tables.list_files`' order, each
    file's rows in file order, `Row.index` counting over them all.

    `csv_path` is the list: a file (CSV, TSV, JSON Lines or Parquet; `kept.input_format` or its name says
    which), a glob or a folder of them. Raises CsvError (naming the file, the line and the reason) when a file
    cannot be read, is not UTF-8, has no header or lacks the path column. Blank lines are skipped; extra
    columns are ignored; a row shorter than the header gets '' for the missing fields (an empty path then
    fails that row). Rows whose split is `discard` are yielded too (`is_discarded`): the job writes none.
    """
    for read in _read(csv_path, columns, kept):
        yield read.row


def iter_rows_with_cells(csv_path: str, columns: CsvColumns = CsvColumns(),
                         kept: ColumnReading = ColumnReading()) -> Iterator[tuple[Row, list[Any]]]:
    """`iter_rows`, each `Row` with the cells it came from (to write a CSV back with a column changed)."""
    for read in _read(csv_path, columns, kept):
        yield read.row, read.cells


def is_discarded(row: Row) -> bool:
    """Whether the row's split is `discard` (TFRecorder's DISCARD): counted, never written."""
    return row.split == DISCARD_SPLIT


def _read(csv_path: str, columns: CsvColumns, kept: ColumnReading, convert: bool = True) -> Iterator[_Read]:
    """Every data row as read; `convert=False` leaves the kept columns' cells (and a multi-label row's labels)
    untyped: the launcher's check needs none of them, and the pipeline types each cell once."""
    index = 0
    for file in tables.list_files(csv_path, kept.input_format):
        for read in _read_file(file, columns, kept, index, convert):
            index += 1
            yield read


def _read_file(file: tables.ListFile, columns: CsvColumns, kept: ColumnReading, first_index: int,
               convert: bool = True) -> Iterator[_Read]:
    table = tables.open_table(file)
    path, names, where = file.path, table.names, f"{table.where} {table.header_line}"
    if file.format == tables.PARQUET:
        where = "its schema"
    shown_names = terminal.shown(str(names), 200)
    twice = next((name for at, name in enumerate(names) if name and name in names[:at]), None)
    if twice is not None:
        raise CsvError(f"{path}: {where}: the column '{terminal.shown(twice)}' is named twice; its columns: "
                       f"{shown_names}")
    if columns.path not in names:
        raise CsvError(f"{path}: {where}: no '{columns.path}' column in the header "
                       f"{terminal.shown(str(names), terminal.PATH_WIDTH)}; name the path column with --path_column")
    path_at = names.index(columns.path)
    label_at = names.index(columns.label) if columns.label in names else None
    split_at = names.index(columns.split) if columns.split in names else None
    if kept.features.multi_label and label_at is None:
        raise CsvError(f"{path}: {where}: no '{columns.label}' column in the header, and --column names it as the "
                       f"labels; its columns: {shown_names}")
    missing = [column.name for column in kept.features.columns if column.name not in names]
    if missing:
        raise CsvError(f"{path}: {where}: --column {terminal.shown(missing[0])} is not a column of the list; its "
                       f"columns: {shown_names}")
    kept_at = tuple((column, names.index(column.name)) for column in kept.features.columns)
    # A multi-label list's label cell is its labels (a list in Parquet or JSON Lines), typed with the kept columns.
    text_at = tuple(at for at in (path_at, None if kept.features.multi_label else label_at, split_at)
                    if at is not None)
    valued = file.format in (tables.JSONL, tables.PARQUET)  # Cells hold JSON's or Arrow's values, not text.
    index = first_index
    for line, cells in table.records:
        texts: list[Any] = cells
        untext = None
        if valued:  # JSON's and Arrow's values: the path, label and split cells as text.
            texts = list(cells)
            for at in text_at:
                text = tables.text_cell(cells[at])
                if text is None and untext is None:
                    untext = (failures.BAD_VALUE, f"column {names[at]!r}: {quoted(cells[at])} is "
                                                  f"{a_type(cells[at])}, not text")
                texts[at] = text or ""
        fields: dict[str, Any] = {}
        if convert and (kept_at or kept.features.multi_label):
            fields = _typed_columns(cells, kept_at, label_at if kept.features.multi_label else None, columns.label,
                                    kept.separator)
        if untext is not None:
            fields["failure"] = untext
        row = _make_row(path, texts, line, index, path_at, None if kept.features.multi_label else label_at,
                        split_at, table.where, fields)
        written = texts[label_at] if label_at is not None and label_at < len(texts) else ""
        split_text = (texts[split_at] if split_at is not None and split_at < len(texts) else "").strip()
        # A split cell read as DEFAULT_SPLIT that does not say it was blank (or invisible: `cells.is_blank`).
        split_blank = split_at is not None and row.split == DEFAULT_SPLIT and split_text.lower() != DEFAULT_SPLIT
        index += 1
        yield _Read(row, cells, file.format, written, split_blank,
                    bool(split_text) and not split_blank and split_text != row.split)


def _make_row(csv_path: str, cells: list[str], line: int, index: int, path_at: int, label_at: int | None,
              split_at: int | None, where: str = "line", fields: dict[str, Any] | None = None) -> Row:
    """The Row of one record's text cells; `fields`: its kept columns' fields (`_typed_columns`), made with it
    (dataclasses.replace after it was 7% of the read's CPU)."""
    def cell(at: int | None) -> str:
        return cells[at] if at is not None and at < len(cells) else ""

    split = cell(split_at).strip()
    split = DEFAULT_SPLIT if is_blank(split) else split
    if not _SPLIT_NAME.match(split):
        raise CsvError(f"{csv_path}: {where} {line}: split '{terminal.shown(split)}' is not a valid split name "
                       "(letters, digits, '_' and '-' only)")
    split = split.lower()  # 'Train', 'TRAIN' and 'train' are one split (docs/columns.md).
    # As split cells are: 'cat ' and ' cat' are the class 'cat', and a blank cell is unlabeled, not a class.
    # Stripped first, so that a line break at a label's edge ("cat\n", a stray CR) goes with the other
    # whitespace (str.strip takes every breaker but NUL) instead of refusing the whole CSV.
    # A cell of only invisible characters (a zero-width space) is blank too (`cells.is_blank`): no class no one sees.
    label = cell(label_at).strip()
    label = "" if is_blank(label) else label
    bad = next((char for char in label if char in LABEL_BREAKERS), None)
    if bad is not None:
        why = ("the database's text cannot hold NUL" if bad == "\x00"
               else "the statistics' vocabulary is one label per line")
        raise CsvError(f"{csv_path}: {where} {line}: label '{terminal.shown(label)}' holds {LABEL_BREAKERS[bad]}, "
                       f"which a label cannot hold ({why}): remove it")
    source = cell(path_at)
    fetch_url = ""
    if urls.is_http_url(source):
        shown = redact_url(source)
        if shown != source:  # The password goes no further than the fetch.
            source, fetch_url = shown, source
        path = source.strip()
    elif urls.refused_scheme(source):
        path = source.strip()  # Not a relative file: read_image_bytes fails it as bad_url.
    elif file_urls.is_file_url(source):
        path = source.strip()  # read_image_bytes reads the file it names (RFC 8089), or fails the row.
    else:
        path = resolve_path(source, csv_path) if source.strip() else ""
    return Row(index=index, line=line, source=source, path=path, label=label, split=split,
               key=row_key(index, source), fetch_url=fetch_url, **(fields or {}))


def _typed_columns(cells: list[Any], kept_at: tuple[tuple[Column, int], ...], labels_at: int | None,
                   label_name: str, separator: str) -> dict[str, Any]:
    """A row's Row fields from its kept columns: their values (`columns`) and, for a multi-label list, its
    `labels`; or its `failure` as bad_value."""
    values: list[tuple[str, Any]] = []
    labels: tuple[str, ...] = ()
    try:
        for column, at in kept_at:
            value = cell_value(column, cells[at] if at < len(cells) else "", separator)
            if value is not None:
                values.append((column.name, value))
        if labels_at is not None:
            cell = cells[labels_at] if labels_at < len(cells) else ""
            labels = cell_value(Column(label_name, LABELS), cell, separator) or ()  # type: ignore[assignment]
    except BadValue as error:
        return {"failure": (failures.BAD_VALUE, str(error))}
    mismatch = _box_classes_mismatch(kept_at, dict(values))
    if mismatch:
        return {"failure": (failures.BAD_VALUE, mismatch)}
    return {"columns": tuple(values), "labels": labels}


def _box_classes_mismatch(kept_at: tuple[tuple[Column, int], ...], values: dict[str, Any]) -> str | None:
    """Why a row's box classes (--box_class_column) do not go one for one with its boxes, or None."""
    boxes = next((column.name for column, _ in kept_at if column.type == BOXES), None)
    classes = next((column.name for column, _ in kept_at if column.box_classes), None)
    if boxes is None or classes is None:
        return None
    count, named = len(values.get(boxes) or ()), len(values.get(classes) or ())
    if count == named:
        return None
    return (f"column {classes!r}: {count} box{'es' if count != 1 else ''} and {named} class"
            f"{'es' if named != 1 else ''}; --box_class_column holds one class per box of column {boxes!r}")


def failure_of(row: Row) -> failures.RowFailure | None:
    """The RowFailure of a row that fails before its image is read (a bad cell), else None."""
    return failures.RowFailure(*row.failure) if row.failure else None


def row_keys(csv_path: str, columns: CsvColumns = CsvColumns(), kept: ColumnReading = ColumnReading()) -> list[str]:
    """The key of every data row the job writes (discarded rows left out), in list order: the list read and
    checked once, as `summarize_csv` checks it.

    Raises CsvError as `summarize_csv` does (a list with a header and no rows included).
    """
    # Keys need no typed cell: the check's pass, which types none (`summarize_csv`).
    keys = [read.row.key for read in _read(csv_path, columns, kept, convert=False) if not is_discarded(read.row)]
    if not keys:
        raise CsvError(f"{csv_path}: the list has a header but no data rows")
    return keys


def read_header(csv_path: str, input_format: str = "") -> list[str]:
    """The column names of the list's (first file's) header (stripped); [] for an empty file."""
    try:
        return tables.open_table(tables.list_files(csv_path, input_format)[0]).names
    except CsvError:
        return []


def summarize_csv(csv_path: str, columns: CsvColumns = CsvColumns(),
                  kept: ColumnReading = ColumnReading()) -> CsvSummary:
    """Reads the whole list once and returns a CsvSummary, or raises CsvError.

    This is the launcher's check before any work starts: a list that the
    pipeline would choke on is refused here with the line that is wrong. The kept
    columns' cells are not typed here (no cell of the right type can refuse a list):
    the pipeline types each cell once, and a bad one fails its row as bad_value
    (the manifest's `failed_by_reason` counts them). Typing them here too cost
    about half of this pass's CPU on a list of five kept columns.
    """
    per_split: dict[str, int] = {}
    per_format: dict[str, int] = {}
    rows = stripped = blank = discarded = blank_splits = folded = 0
    has_label = has_split = False
    for read in _read(csv_path, columns, kept, convert=False):
        row = read.row
        rows += 1
        per_format[read.format] = per_format.get(read.format, 0) + 1
        blank_splits += read.split_blank
        folded += read.split_folded
        if is_discarded(row):
            discarded += 1
        else:
            per_split[row.split] = per_split.get(row.split, 0) + 1
        # A multi-label row's label cell becomes its labels (Row.labels), not Row.label: nothing was stripped.
        if read.label_written != row.label and not kept.features.multi_label:
            stripped += bool(row.label)
            blank += not row.label
    if rows == 0:
        raise CsvError(f"{csv_path}: the list has a header but no data rows")
    if not per_split:
        raise CsvError(f"{csv_path}: every one of its {rows} rows is in the split '{DISCARD_SPLIT}': nothing to write")
    header = read_header(csv_path, kept.input_format)
    has_label, has_split = columns.label in header, columns.split in header
    return CsvSummary(rows=rows - discarded, rows_per_split=dict(sorted(per_split.items())),
                      has_label=has_label, has_split=has_split,
                      labels_stripped=stripped, labels_blank=blank,
                      rows_per_format=dict(sorted(per_format.items())), discarded=discarded,
                      blank_splits=blank_splits, splits_folded=folded)


def shard_counts_for(num_shards: int, csv_summary: CsvSummary) -> dict[str, int]:
    """Shards per split: `num_shards` for each (the --num_shards flag), or a count from the split's size.

    Discarded rows are in no split (`rows_per_split` leaves them out)."""
    return {split: num_shards or auto_num_shards(rows) for split, rows in csv_summary.rows_per_split.items()}


def assign_shard(row: Row, shard_counts: dict[str, int]) -> tuple[ShardKey, Row]:
    """Row -> ((split, shard_index), Row), by a stable hash of the row's key."""
    return (row.split, shard_of(row.key, shard_counts[row.split])), row


def all_shard_keys(shard_counts: dict[str, int]) -> list[ShardKey]:
    """Every (split, shard_index) the output must contain, so empty shards are written too."""
    return [(split, index) for split, count in sorted(shard_counts.items()) for index in range(count)]


def _drop_placeholders(element: tuple[ShardKey, Iterable[Row | None]]) -> tuple[ShardKey, list[Row]]:
    shard, rows = element
    return shard, [row for row in rows if row is not None]


def group_rows_by_shard(pipeline: beam.Pipeline, input_csv: str, columns: CsvColumns,
                        shard_counts: dict[str, int],
                        kept: ColumnReading = ColumnReading()) -> beam.PCollection[tuple[ShardKey, list[Row]]]:
    """The CSV's rows grouped by shard, every shard present (empty ones too): ((split, index), [Row]).

    Only rows (paths and labels) cross the shuffle, never pixels.
    """
    import apache_beam as beam

    rows = (pipeline
            | "CsvPath" >> beam.Create([input_csv])
            | "ReadCsv" >> beam.FlatMap(iter_rows, columns, kept)
            # Row
            | "DropDiscarded" >> beam.Filter(is_kept)
            # Row, its split not 'discard'
            | "AssignShard" >> beam.Map(assign_shard, shard_counts))
            # ((split, shard_index), Row)
    placeholders = (pipeline
                    | "ShardKeys" >> beam.Create([(key, None) for key in all_shard_keys(shard_counts)]))
                    # ((split, shard_index), None)
    return ((rows, placeholders)
            | "MergeShardKeys" >> beam.Flatten()
            | "GroupShards" >> beam.GroupByKey()
            # ((split, shard_index), [Row | None])
            | "DropPlaceholders" >> beam.Map(_drop_placeholders))
            # ((split, shard_index), [Row])


def is_kept(row: Row) -> bool:
    """Whether the job writes the row (its split is not `discard`)."""
    return not is_discarded(row)


def failure_record(row: RowLike, failure: failures.RowFailure) -> dict[str, Any]:
    """The errors.jsonl entry of a failed Row; a URL row's also has `url`, `http_status` and `attempts`."""
    return {"source": row.source, "key": row.key, "line": row.line, "split": row.split,
            "reason": failure.reason, "detail": failure.detail, **failure.fields}


def _refuse_unreadable_scheme(path: str) -> None:
    """A path no filesystem reads fails its row as bad_url: ftp:, data:, an unknown scheme, or a URL here.

    http(s) rows are fetched by the preprocess job's RowReader, never through this function.
    """
    from apache_beam.io.filesystems import FileSystems

    if ":" not in path:
        return  # No scheme: a local path (redacting and matching it cost ~60 us a row).
    shown = redact_url(path)
    if urls.is_http_url(path):
        raise urls.bad_url(f"{shown}: URL rows are fetched by the preprocess job only; download the image first",
                           shown)
    scheme = urls.refused_scheme(path)
    if scheme in urls.HTTP_SCHEMES:
        raise urls.bad_url(f"{terminal.shown(shown, terminal.PATH_WIDTH)}: an {scheme} URL needs '//' after "
                           f"'{scheme}:'", shown)
    if scheme is not None:
        raise urls.bad_url(f"{terminal.shown(shown, terminal.PATH_WIDTH)}: the scheme {scheme}: names no image "
                           "this job can read (http(s) URLs and files are read)", shown)
    if "://" in path:
        try:
            FileSystems.get_filesystem(path)
        except ValueError:
            scheme = path.split("://", 1)[0]
            raise urls.bad_url(f"{terminal.shown(shown, terminal.PATH_WIDTH)}: no filesystem reads the scheme "
                               f"{terminal.shown(scheme, 40)}:// (http(s) URLs and Beam's filesystems are read)",
                               shown) from None


def _refuse_special_file(path: str) -> None:
    """A local path naming a FIFO, a device or a socket fails its row: reading one could block forever."""
    import os
    import stat

    if "://" in path:
        return
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return  # Absent or unreadable: the open below says which.
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
            "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
        raise failures.RowFailure(failures.READ_ERROR, f"{path} is {kind}, not a regular file")


def _exists(path: str) -> bool:
    from apache_beam.io.filesystems import FileSystems

    try:
        return FileSystems.exists(path)
    except Exception:  # noqa: BLE001 - cannot tell: say it exists, so the read error is reported.
        return True


def _is_local(path: str) -> bool:
    return "://" not in path


def _os_error(error: BaseException, path: str) -> OSError | None:
    """The OSError with an errno behind `error`: itself, its cause, or what a BeamIOError wraps ({path: error})."""
    pending: list[BaseException | None] = [error]
    seen: list[BaseException] = []
    while pending:
        current = pending.pop(0)
        if current is None or any(current is other for other in seen):
            continue
        seen.append(current)
        if isinstance(current, OSError) and current.errno is not None:
            return current
        details = getattr(current, "exception_details", None)  # BeamIOError (itself an OSError without errno).
        if isinstance(details, dict):
            wrapped = [details[path]] if path in details else list(details.values())
            pending += [value for value in wrapped if isinstance(value, BaseException)]
        pending += [current.__cause__, current.__context__]
    return None


def _errno_failure(path: str, error: OSError) -> failures.RowFailure:
    """The RowFailure of a local read the OS refused: the reason by errno, the detail naming the errno and path."""
    import os

    number = error.errno
    assert number is not None
    reason = _REASON_BY_ERRNO.get(number, failures.READ_ERROR)
    name = errno.errorcode.get(number, f"errno {number}")
    words = error.strerror or os.strerror(number)
    if number == errno.ENOENT:
        detail = path  # The reason says it all (as before: the detail of a missing file is its path).
    elif number == errno.EISDIR:
        detail = f"{path} is a directory, not a file ({name})"
    elif number == errno.ENAMETOOLONG:
        names = [len(os.fsencode(part)) for part in path.split("/")]
        detail = (f"{path}: {words} ({name}: its longest name is {max(names)} bytes, the whole path "
                  f"{len(os.fsencode(path))} bytes)")
    else:
        detail = f"{path}: {words} ({name})"
    return failures.RowFailure(reason, detail)


def _read_failure(path: str, error: BaseException) -> failures.RowFailure:
    """The RowFailure of a read that raised `error`: by errno for a local file, else by whether the path exists."""
    os_error = _os_error(error, path) if _is_local(path) else None
    if os_error is not None:
        return _errno_failure(path, os_error)
    # Remote filesystems (gs://, s3://) raise their own types, without an errno; their text holds the request's
    # URL (an endpoint's user:password too), so a refusal or a 404 is told by its HTTP status, in words.
    status = storage_errors.http_status(error)
    if status in storage_errors.DENIED:
        return failures.RowFailure(failures.PERMISSION_DENIED,
                                   f"{path}: the object store refused the credentials in use (HTTP {status})")
    if isinstance(error, FileNotFoundError) or status == storage_errors.NOT_FOUND:
        return failures.RowFailure(failures.FILE_NOT_FOUND, path)
    if isinstance(error, IsADirectoryError):
        return failures.RowFailure(failures.IS_A_DIRECTORY, f"{path} is a directory, not a file")
    if not _exists(path):
        return failures.RowFailure(failures.FILE_NOT_FOUND, path)
    text = str(error).strip().splitlines()
    return failures.RowFailure(failures.READ_ERROR,
                               redact(f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")))


def read_image_bytes(path: str, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> bytes:
    """The bytes of a file: a local path, a `file:` URL (RFC 8089) or any Beam filesystem's; raises RowFailure."""
    if not path:
        raise failures.RowFailure(failures.FILE_NOT_FOUND, "the row's path is empty")
    if file_urls.is_file_url(path):  # Beam reads no file://: the path it names is read like any other.
        path = file_urls.local_path(path)
    else:
        _refuse_unreadable_scheme(path)
    try:
        data = _read_regular_local_file(path, max_bytes)
        if data is None:
            _refuse_special_file(path)
            data = _read_through_beam(path, max_bytes)
    except failures.RowFailure as failure:
        raise _explained(failure, path) from None
    return _checked_size(data, max_bytes)


def _read_through_beam(path: str, max_bytes: int) -> bytes:
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            data: bytes = f.read(max_bytes + 1)
    except Exception as error:  # noqa: BLE001 - remote filesystems wrap errors in their own types.
        raise _read_failure(path, error) from None
    return data


def _explained(failure: failures.RowFailure, path: str) -> failures.RowFailure:
    """`failure` with a missing local file's near match named, and a name's non-UTF-8 bytes made writable.

    Only a failed read gets here: the happy path pays nothing for the hint.
    """
    detail = failure.detail
    if failure.reason == failures.FILE_NOT_FOUND and _is_local(path):
        near = path_hints.near_match(path)
        if near is not None:
            detail = f"{detail}: no such file; did you mean '{terminal.escaped(near[0])}' ({near[1]})?"
    detail = path_hints.safe_text(detail)
    return failure if detail == failure.detail else failures.RowFailure(failure.reason, detail, failure.fields)


def _checked_size(data: bytes, max_bytes: int) -> bytes:
    if len(data) > max_bytes:
        raise failures.RowFailure(failures.TOO_LARGE_FILE, f"more than --max_file_bytes={max_bytes} bytes")
    if not data:
        raise failures.RowFailure(failures.EMPTY_FILE, "0 bytes")
    return data


def _read_regular_local_file(path: str, max_bytes: int) -> bytes | None:
    """The bytes of a plain local path naming a regular file, read at its size (at most max_bytes + 1).

    None for anything else (a scheme, a missing or unreadable file, a FIFO, a device, a folder): the
    general path reads it or says why not. The job reads every row here: through Beam's filesystem a
    110 KiB photo took 77 us of CPU against 27, mostly a 256 MiB buffer allocated and shrunk for
    each `read(max_bytes + 1)`.
    """
    import os
    import stat

    if "://" in path or max_bytes < 0:
        return None
    try:
        status = os.stat(path)
        if not stat.S_ISREG(status.st_mode):
            return None  # Never opened: opening a FIFO blocks, a device may act.
        size = min(status.st_size, max_bytes) + 1
        # Buffered: its read(n) reads on to n bytes or the end, where one read(2) may return less (Linux
        # returns at most 2,147,479,552 bytes a call; procfs and network filesystems, a chunk).
        with open(path, "rb") as f:
            data = f.read(size)
            if len(data) == size and size <= max_bytes:  # It grew since the stat: read on, to the limit.
                data += f.read(max_bytes + 1 - size)
    except (OSError, ValueError):  # ValueError: a NUL in the path. The general path explains both.
        return None
    return data
