"""The list's files and their cells: `--input` expanded (a file, a glob or a folder), each file's format, and one
reader per format giving the same thing, a header and numbered records of cells.

    files = list_files("lists/", "")            # (ListFile('lists/a.csv', 'csv'), ListFile('lists/b.parquet', ...))
    table = open_table(files[0])                 # Table(names=[...], records=iterator of (line, [cell, ...]))

Formats (docs/columns.md): CSV and TSV (Python's csv module: every cell is text, read as a stream with
line-numbered errors; .gz too), JSON Lines (one object a line, read with Python's json: values as JSON gives them,
numbered by line; .gz too) and Parquet (pyarrow, in batches: values as Arrow gives them, numbered by row). A
cell is made into a column's typed value by `cells.cell_value`, whatever the format; the path, label and split
cells into text by `text_cell`. Nothing here knows what a row is (`rows`).

A column kept with no type (`--column NAME`) takes it from the list: a Parquet schema's Arrow type
(`arrow_type`), or the values of a JSON Lines column over the whole list (`value_type`); a CSV or TSV column
needs its type (`--column NAME:TYPE`). Pure Python but for pyarrow, imported only for Parquet.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import gzip
import json
import posixpath
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any

from beam_pipeline.common import terminal
from beam_pipeline.common.launcher import InputRefused
from beam_pipeline.inputs.cells import a_type
from tf_serving_input.columns import BOXES, FLOAT, FLOATS, INT, LABELS, TEXT

CSV, TSV, JSONL, PARQUET = "csv", "tsv", "jsonl", "parquet"
FORMATS = (CSV, TSV, JSONL, PARQUET)
# A file's format by its name's ending; the text formats may be gzipped (NAME.csv.gz).
EXTENSIONS = {".csv": CSV, ".tsv": TSV, ".tab": TSV, ".jsonl": JSONL, ".ndjson": JSONL, ".parquet": PARQUET,
              ".pq": PARQUET}
TEXT_FORMATS = (CSV, TSV, JSONL)
# What messages call a file of each format.
KINDS = {CSV: "CSV", TSV: "TSV", JSONL: "JSON Lines file", PARQUET: "Parquet file"}
# Rows of a Parquet file converted to Python at a time: bounded memory whatever its row groups.
PARQUET_BATCH_ROWS = 4096


class ListError(InputRefused):
    """The list cannot be used at all; the message names the file, the line (or row) and the reason."""


@dataclasses.dataclass(frozen=True)
class ListFile:
    """One file of the list: its path (as matched) and its format (one of FORMATS); `gzip` for NAME.csv.gz."""

    path: str
    format: str
    gzip: bool = False


@dataclasses.dataclass
class Table:
    """One file's column names (stripped; '' for a blank header cell) and its records.

    `records` yields (line, cells): the 1-based line where a CSV/TSV record or a JSON line starts, or a
    Parquet row's 1-based number; cells in the order of `names` (text for CSV/TSV, JSON's or Arrow's
    values otherwise; None where a JSON object lacks the key). `header_line`: the header's line (0 for
    Parquet), for messages; `where` says "line" or "row".
    """

    names: list[str]
    records: Iterator[tuple[int, list[Any]]]
    header_line: int = 1
    where: str = "line"


def format_of(path: str, input_format: str = "") -> tuple[str, bool] | None:
    """(format, gzipped) of `path` by its name, `input_format` (one of FORMATS) winning; None when unknown."""
    name = posixpath.basename(path.rstrip("/")).lower()
    gzipped = name.endswith(".gz")
    if gzipped:
        name = name[:-3]
    detected = next((fmt for ext, fmt in EXTENSIONS.items() if name.endswith(ext)), None)
    chosen = input_format or detected
    if chosen is None:
        return None
    return chosen, gzipped


def _is_glob(spec: str) -> bool:
    return any(char in spec for char in "*?[")


def _matched(pattern: str) -> list[str]:
    from apache_beam.io.filesystems import FileSystems

    try:
        return [metadata.path for metadata in FileSystems.match([pattern])[0].metadata_list]
    except Exception:  # noqa: BLE001 - Beam wraps every filesystem error (no match included) in its own type.
        return []


def _is_folder(spec: str) -> bool:
    if spec.endswith("/"):
        return True
    if "://" in spec:
        return False
    import os

    return os.path.isdir(spec)


def list_files(spec: str, input_format: str = "") -> tuple[ListFile, ...]:
    """The files `--input` names, in a stable order: one file; or a glob's or a folder's files sorted by path.

    A folder's files are those with a known extension (every one with `input_format`), names starting with
    '.' or '_' left out (_SUCCESS, .crc). One file of unknown extension is read as CSV (as --input_csv always did).
    Raises ListError when nothing matches or a glob matches a file of unknown format.
    """
    if not _is_glob(spec) and not _is_folder(spec):
        found = format_of(spec, input_format) or (CSV, spec.lower().endswith(".gz"))
        return (ListFile(spec, *found),)
    if _is_glob(spec):
        paths = sorted(_matched(spec))
        unknown = [path for path in paths if format_of(path, input_format) is None]
        if unknown:
            raise ListError(f"{spec}: matches {terminal.shown(unknown[0], terminal.PATH_WIDTH)}, of no list format "
                            f"known by its name ({', '.join(EXTENSIONS)}, .gz for the text ones): name the format "
                            "with --input_format")
    else:
        paths = sorted(path for path in _matched(spec.rstrip("/") + "/*")
                       if not posixpath.basename(path).startswith((".", "_"))
                       and format_of(path, input_format) is not None)
    if not paths:
        raise ListError(f"{spec}: no list file there (names ending in {', '.join(EXTENSIONS)}, .gz for the text "
                        "ones)")
    return tuple(ListFile(path, *format_of(path, input_format)) for path in paths)  # type: ignore[misc]


def list_digest(spec: str, input_format: str = "") -> str:
    """SHA-256 of the list's content: one file's own digest (as a CSV run's fingerprint always held), or of every
    file's path and digest in order, so that a file added, removed, renamed or changed is another list."""
    import hashlib

    from beam_pipeline.common.files import file_digest

    files = list_files(spec, input_format)
    if len(files) == 1 and files[0].path == spec:
        return file_digest(spec)
    digest = hashlib.sha256()
    for file in files:
        digest.update(f"{file.path}\0{file.format}\0{file_digest(file.path)}\n".encode())
    return digest.hexdigest()


def _open(path: str) -> IO[bytes]:
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def open_table(file: ListFile) -> Table:
    """The header and records of one list file; ListError naming the file (and the line) when it cannot be read.

    The records are read as they are iterated (the file stays open until then); a file that turns out
    malformed further on raises ListError from the iteration, naming its line.
    """
    try:
        raw = _open(file.path)
    except Exception as error:  # noqa: BLE001 - Beam wraps every filesystem error in its own type.
        raise ListError(f"{file.path}: cannot open the {KINDS[file.format]}: {error}") from None
    if file.gzip:
        raw = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
    if file.format == PARQUET:
        return _parquet_table(file.path, raw)
    if file.format == JSONL:
        return _jsonl_table(file.path, raw)
    return _delimited_table(file.path, raw, "\t" if file.format == TSV else ",")


def _lines(raw: IO[bytes], path: str) -> Iterator[str]:
    """The file's text lines, each decoded as UTF-8 so that an error names its line; the raw file closed at the end."""
    with raw:
        try:
            for number, data in enumerate(iter(raw.readline, b""), start=1):
                if number == 1 and data.startswith(codecs.BOM_UTF8):
                    data = data[len(codecs.BOM_UTF8):]
                try:
                    yield data.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise ListError(f"{path}: line {number}: not valid UTF-8 ({error.reason} at byte "
                                    f"{error.start + 1} of the line); save the list as UTF-8") from None
        except (OSError, EOFError) as error:  # A gzip file cut short or not gzip at all.
            raise ListError(f"{path}: cannot read the list: {error}") from None


def _delimited_table(path: str, raw: IO[bytes], delimiter: str) -> Table:
    reader = csv.reader(_lines(raw, path), strict=True, delimiter=delimiter)
    kind = "TSV" if delimiter == "\t" else "CSV"
    try:
        header = next(reader, None)
        while header is not None and not any(cell.strip() for cell in header):
            header = next(reader, None)
    except csv.Error as error:
        raise ListError(f"{path}: line 1: malformed header: {error}") from None
    if header is None:
        raise ListError(f"{path}: the file is empty; expected a header row naming the columns, then one row per "
                        "image")
    header_line = reader.line_num

    def records() -> Iterator[tuple[int, list[Any]]]:
        start_line = reader.line_num + 1
        try:
            for cells in reader:
                line, start_line = start_line, reader.line_num + 1
                if any(cell.strip() for cell in cells):  # A blank line is no row.
                    yield line, cells
        except csv.Error as error:
            raise ListError(f"{path}: line {start_line}: malformed {kind}: {error}") from None

    return Table([cell.strip() for cell in header], records(), header_line)


def _jsonl_table(path: str, raw: IO[bytes]) -> Table:
    """A JSON Lines file: one object a line; its first object's keys name the columns (later objects may lack
    one: a missing value; their other keys are ignored)."""
    lines = enumerate(_lines(raw, path), start=1)

    def parsed(number: int, text: str) -> dict[str, Any]:
        try:
            value = json.loads(text)
        except ValueError as error:
            raise ListError(f"{path}: line {number}: not JSON ({error})") from None
        if not isinstance(value, dict):
            raise ListError(f"{path}: line {number}: {a_type(value)}, not a JSON object (one object per "
                            "line, its keys the columns)")
        return value

    first: tuple[int, dict[str, Any]] | None = None
    for number, text in lines:
        if text.strip():
            first = number, parsed(number, text)
            break
    if first is None:
        raise ListError(f"{path}: the file is empty; expected one JSON object per line, one per image")
    names = list(first[1])

    def records() -> Iterator[tuple[int, list[Any]]]:
        assert first is not None
        yield first[0], [first[1].get(name) for name in names]
        for number, text in lines:
            if text.strip():
                value = parsed(number, text)
                yield number, [value.get(name) for name in names]

    return Table([name.strip() for name in names], records(), first[0])


def _parquet_table(path: str, raw: IO[bytes]) -> Table:
    """A Parquet file, read in batches of PARQUET_BATCH_ROWS rows whatever its row groups."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(raw)
    except (pa.ArrowException, OSError) as error:
        raw.close()
        raise ListError(f"{path}: not a Parquet file: {terminal.shown(str(error), 200)}") from None
    schema = parquet.schema_arrow
    names = list(schema.names)

    def records() -> Iterator[tuple[int, list[Any]]]:
        number = 0
        with raw:
            try:
                for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
                    columns = [batch.column(at).to_pylist() for at in range(batch.num_columns)]
                    for values in zip(*columns):
                        number += 1
                        yield number, list(values)
            except (pa.ArrowException, OSError) as error:
                raise ListError(f"{path}: row {number + 1}: cannot read the Parquet file: "
                                f"{terminal.shown(str(error), 200)}") from None

    return Table([name.strip() for name in names], records(), 0, "row")


def text_cell(value: Any) -> str | None:
    """A path, label or split cell as text: text as it is, '' for a missing one, an integer's digits; None for
    any other value (a list, a float, a boolean), which no such cell can be."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


# The type of a column kept without one, from its Arrow type: by the Arrow type's kind.
def arrow_type(arrow: Any) -> str | None:
    """The column type (tf_serving_input.columns) of an Arrow type, None when there is none."""
    import pyarrow as pa
    import pyarrow.types as t

    if t.is_dictionary(arrow):
        arrow = arrow.value_type
    if t.is_integer(arrow):
        return INT
    if t.is_floating(arrow):
        return FLOAT
    if t.is_string(arrow) or t.is_large_string(arrow) or arrow == pa.string_view():
        return TEXT
    if t.is_list(arrow) or t.is_large_list(arrow) or t.is_fixed_size_list(arrow) or t.is_list_view(arrow):
        item = arrow.value_type
        if t.is_dictionary(item):
            item = item.value_type
        if t.is_string(item) or t.is_large_string(item):
            return LABELS
        if t.is_integer(item) or t.is_floating(item):
            return FLOATS
        if t.is_list(item) or t.is_large_list(item) or t.is_fixed_size_list(item):
            inner = item.value_type
            if t.is_integer(inner) or t.is_floating(inner):
                return BOXES
    return None


def value_type(values: Iterable[Any]) -> str | None:
    """The column type of a JSON column from its values (nulls and empty lists left out), None when they fit none
    or disagree: all integers int; numbers float; text text; lists of text labels; lists of numbers floats;
    lists of lists of numbers boxes."""
    kinds = set()
    for value in values:
        kinds.add(_json_kind(value))
        if len(kinds) > 2:
            return None
    kinds.discard("missing")
    if kinds == {INT}:
        return INT
    if kinds <= {INT, FLOAT} and kinds:
        return FLOAT
    if len(kinds) == 1 and next(iter(kinds)) in (TEXT, LABELS, FLOATS, BOXES):
        return next(iter(kinds))
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_kind(value: Any) -> str:
    if value is None or value == []:
        return "missing"
    if _is_number(value):
        return INT if isinstance(value, int) else FLOAT
    if isinstance(value, str):
        return TEXT
    if isinstance(value, list):
        if all(isinstance(item, str) for item in value):
            return LABELS
        if all(_is_number(item) for item in value):
            return FLOATS
        if all(isinstance(item, list) and all(_is_number(x) for x in item) for item in value):
            return BOXES
    return "other"


def parquet_schema(file: ListFile) -> dict[str, Any]:
    """The Arrow type of each column of a Parquet file (its footer alone is read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with _open(file.path) as raw:
            schema = pq.ParquetFile(raw).schema_arrow
    except (pa.ArrowException, OSError) as error:
        raise ListError(f"{file.path}: not a Parquet file: {terminal.shown(str(error), 200)}") from None
    return {field.name.strip(): field.type for field in schema}


def schema_types(files: Sequence[ListFile], names: Sequence[str],
                 opener: Callable[[ListFile], Table] = open_table) -> dict[str, str]:
    """The type of each column `names` (kept with no --column TYPE) from the list; ListError (one line) when a
    file cannot give it: a CSV or TSV file (text has no types), an Arrow type of no column type, a JSON column
    whose values fit no type or disagree, or files that disagree."""
    found: dict[str, tuple[str, str]] = {}  # name -> (type, the file it came from)
    for file in files:
        if file.format in (CSV, TSV):
            raise ListError(f"{file.path}: --column '{terminal.shown(names[0])}' needs a type in a "
                            f"{file.format.upper()} list, whose cells are text: --column NAME:TYPE with TYPE one "
                            f"of {', '.join((INT, FLOAT, TEXT, LABELS, FLOATS, BOXES))}")
        if file.format == PARQUET:
            arrow_types = parquet_schema(file)
            types = {name: arrow_type(arrow_types[name]) for name in names if name in arrow_types}
            described = {name: f"Arrow's {arrow_types[name]}" for name in types}
        else:
            table = opener(file)
            at = {name: table.names.index(name) for name in names if name in table.names}
            values: dict[str, list[Any]] = {name: [] for name in at}
            for _, cells in table.records:
                for name, index in at.items():
                    values[name].append(cells[index])
            types = {name: value_type(column) for name, column in values.items()}
            described = {name: "values that fit no one type (or only nulls)" for name in types}
        for name, kind in types.items():
            if kind is None:
                raise ListError(f"{file.path}: column '{terminal.shown(name)}' holds {described[name]}, of no column "
                                f"type: give it one with --column {terminal.shown(name)}:TYPE")
            if name in found and found[name][0] != kind:
                raise ListError(f"{file.path}: column '{terminal.shown(name)}' is {kind} here but {found[name][0]} in "
                                f"{found[name][1]}: give its type with --column {terminal.shown(name)}:TYPE")
            found.setdefault(name, (kind, file.path))
    return {name: kind for name, (kind, _) in found.items()}
