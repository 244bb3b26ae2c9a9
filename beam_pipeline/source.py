"""The input CSV: validation before any work starts, rows, stable keys and shard assignment.

Pure Python (no TensorFlow; Beam's FileSystems only when a file is opened, so
that importing this module stays cheap), so the launcher can check a CSV in a
streaming pass and the pipeline can read it with the very same code.
"""

import codecs
import csv
import dataclasses
import hashlib
import math
import posixpath
import re

DEFAULT_SPLIT = "train"
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# What a label may not hold: TFT's vocabulary file is newline-delimited (a label with a line break
# would silently get id -1), and PostgreSQL text cannot hold NUL.
_LABEL_BREAKERS = {"\x00": "a NUL byte", "\n": "a line break", "\r": "a carriage return",
                   "\x0b": "a vertical tab", "\x0c": "a form feed", "\x1c": "a file separator",
                   "\x1d": "a group separator", "\x1e": "a record separator", "\x85": "a next-line character",
                   "\u2028": "a line separator", "\u2029": "a paragraph separator"}
# A shard holds about this many rows unless --num_shards says otherwise.
ROWS_PER_SHARD = 1000
# Small splits still get a few shards, so that several workers share them.
MIN_AUTO_SHARDS = 8
# Never read more than this from one image file: a huge file is refused, not loaded.
DEFAULT_MAX_FILE_BYTES = 256 * 1024 * 1024


class CsvError(ValueError):
    """The CSV cannot be used at all; the message names the file, the line and the reason."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One data row of the CSV, as the pipeline carries it (never pixels).

    Attributes:
      index: 0-based position among the data rows.
      line: 1-based line of the CSV where the row starts (for messages).
      source: the path exactly as written in the CSV.
      path: `source` resolved against the CSV's folder when relative.
      label: the label text, '' when unlabeled.
      split: the split name ('train' when the CSV has no split column).
      key: stable hexadecimal key of the row (see `row_key`).
    """

    index: int
    line: int
    source: str
    path: str
    label: str
    split: str
    key: str


@dataclasses.dataclass(frozen=True)
class CsvColumns:
    """Which CSV columns hold the path, the label and the split."""

    path: str = "path"
    label: str = "label"
    split: str = "split"


@dataclasses.dataclass
class CsvSummary:
    """What the launcher learned from its validation pass over the CSV."""

    rows: int
    rows_per_split: dict
    has_label: bool
    has_split: bool


def row_key(index, source):
    """A stable key for a data row: the same on every run, process and machine.

    Built from the row's position and its path, so duplicate rows still get
    distinct keys; never from Python's hash(), which changes between processes.
    """
    digest = hashlib.sha256(f"{index}\x00{source}".encode("utf-8")).hexdigest()
    return digest[:16]


def shard_of(key, num_shards):
    """The shard (0..num_shards-1) a row key belongs to."""
    return int(key, 16) % num_shards


def auto_num_shards(rows):
    """Default shard count for a split of `rows` rows.

    Depends only on the row count, never on the machine, so outputs are the
    same whatever the worker count.
    """
    if rows <= 0:
        return 0
    return min(rows, max(MIN_AUTO_SHARDS, math.ceil(rows / ROWS_PER_SHARD)))


def resolve_path(source, csv_path):
    """Resolves a relative `source` against the folder of `csv_path`; URIs and absolute paths pass."""
    if "://" in source or source.startswith("/"):
        return source
    base = posixpath.dirname(csv_path) if "://" in csv_path else None
    if base is not None:
        return f"{base.rstrip('/')}/{source}"
    import os  # Local CSV: the OS decides what a folder is.

    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(csv_path)), source))


def _open(csv_path):
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(csv_path, compression_type=CompressionTypes.UNCOMPRESSED)


def _lines(raw, csv_path):
    """Yields the file's text lines, decoding each as UTF-8 so an error names its line."""
    line_number = 0
    for line_number, data in enumerate(iter(raw.readline, b""), start=1):
        if line_number == 1 and data.startswith(codecs.BOM_UTF8):
            data = data[len(codecs.BOM_UTF8):]
        try:
            yield data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise CsvError(f"{csv_path}: line {line_number}: not valid UTF-8 ({error.reason} at "
                           f"byte {error.start + 1} of the line); save the CSV as UTF-8") from None


def iter_rows(csv_path, columns=CsvColumns()):
    """Yields every data row of the CSV as a `Row`, in file order.

    Raises CsvError (naming the file, the line and the reason) when the file
    cannot be read, is not UTF-8, has no header or lacks the path column.
    Blank lines are skipped; extra columns are ignored; a row shorter than the
    header gets '' for the missing fields (an empty path then fails that row).
    """
    try:
        raw = _open(csv_path)
    except Exception as error:  # Beam wraps every filesystem error in its own type.
        raise CsvError(f"{csv_path}: cannot open the CSV: {error}") from None
    with raw:
        reader = csv.reader(_lines(raw, csv_path), strict=True)
        try:
            header = next(reader, None)
        except csv.Error as error:
            raise CsvError(f"{csv_path}: line 1: malformed header: {error}") from None
        while header is not None and not any(cell.strip() for cell in header):
            header = next(reader, None)
        if header is None:
            raise CsvError(f"{csv_path}: the file is empty; expected a header row with a "
                           f"'{columns.path}' column, then one row per image")
        names = [cell.strip() for cell in header]
        if columns.path not in names:
            raise CsvError(f"{csv_path}: line {reader.line_num}: no '{columns.path}' column in the header "
                           f"{names}; name the path column with --path_column")
        path_at = names.index(columns.path)
        label_at = names.index(columns.label) if columns.label in names else None
        split_at = names.index(columns.split) if columns.split in names else None

        index = 0
        start_line = reader.line_num + 1
        try:
            for cells in reader:
                line, start_line = start_line, reader.line_num + 1
                if not any(cell.strip() for cell in cells):
                    continue  # Blank line.
                row = _make_row(csv_path, cells, line, index, path_at, label_at, split_at)
                index += 1
                yield row
        except csv.Error as error:
            raise CsvError(f"{csv_path}: line {start_line}: malformed CSV: {error}") from None


def _make_row(csv_path, cells, line, index, path_at, label_at, split_at):
    def cell(at):
        return cells[at] if at is not None and at < len(cells) else ""

    split = cell(split_at).strip() or DEFAULT_SPLIT
    if not _SPLIT_NAME.match(split):
        raise CsvError(f"{csv_path}: line {line}: split {split!r} is not a valid split name "
                       "(letters, digits, '_' and '-' only)")
    label = cell(label_at)
    bad = next((char for char in label if char in _LABEL_BREAKERS), None)
    if bad is not None:
        raise CsvError(f"{csv_path}: line {line}: label {label[:60]!r} holds {_LABEL_BREAKERS[bad]}, which a label "
                       "cannot hold (the statistics' vocabulary is one label per line, and the database's text "
                       "cannot hold NUL): remove it")
    source = cell(path_at)
    return Row(index=index, line=line, source=source,
               path=resolve_path(source, csv_path) if source.strip() else "",
               label=label, split=split, key=row_key(index, source))


def read_header(csv_path):
    """The column names of the CSV's header row (stripped); [] for an empty file."""
    with _open(csv_path) as raw:
        for cells in csv.reader(_lines(raw, csv_path)):
            if any(cell.strip() for cell in cells):
                return [cell.strip() for cell in cells]
    return []


def summarize_csv(csv_path, columns=CsvColumns()):
    """Reads the whole CSV once and returns a CsvSummary, or raises CsvError.

    This is the launcher's check before any work starts: a CSV that the
    pipeline would choke on is refused here with the line that is wrong.
    """
    per_split = {}
    rows = 0
    for row in iter_rows(csv_path, columns):
        rows += 1
        per_split[row.split] = per_split.get(row.split, 0) + 1
    if rows == 0:
        raise CsvError(f"{csv_path}: the CSV has a header but no data rows")
    header = read_header(csv_path)
    return CsvSummary(rows=rows, rows_per_split=dict(sorted(per_split.items())),
                      has_label=columns.label in header, has_split=columns.split in header)
