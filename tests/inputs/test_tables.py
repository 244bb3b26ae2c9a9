"""Lists in every format: one hostile table written as CSV, TSV, JSON Lines (.gz too) and Parquet gives the same
Rows; globs and folders; the type of a column kept without one; splits folded, blank and discarded."""

import csv
import gzip
import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipeline.inputs import rows as source
from beam_pipeline.inputs import tables
from tf_serving_input.columns import Column, FeatureSpec

HOSTILE = "nul\x00 line\nbreak \"quoted\" 'single' ,comma\ttab \u202ebidi\u202c \U0001f600 emoji"
# One table: path, label, split, then kept columns. None is a missing value.
TABLE = [
    # path,            label,         split,        caption,   score,  count, tags
    ("a, \"b\".png", " cat ", "Train", HOSTILE, 0.5, 3, ["x", "y z"]),
    ("\U0001f600/é.jpg", "dög \u202e", "TRAIN", "", None, None, None),
    ("c.jpg", "", "", "plain", "abc", 1, ["solo"]),  # score: a bad value
    ("d.jpg", "cat", "discard", "dropped", 1.25, 2, []),
    ("e.jpg", "\U0001f431", "validation", " spaced ", float("nan"), -7, ["q"]),
]
NAMES = ["path", "label", "split", "caption", "score", "count", "tags"]
KEPT = source.ColumnReading(FeatureSpec(columns=(Column("caption", "text"), Column("score", "float"),
                                                 Column("count", "int"), Column("tags", "labels"))))


def text_cells(record):
    """A record as CSV/TSV text cells: a missing value blank, a list split by '|'."""
    cells = []
    for value in record:
        if value is None:
            cells.append("")
        elif isinstance(value, list):
            cells.append("|".join(value))
        elif isinstance(value, float) and math.isnan(value):
            cells.append("nan")
        else:
            cells.append(str(value))
    return cells


def write_delimited(path, delimiter):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter=delimiter)
        writer.writerow(NAMES)
        for record in TABLE:
            writer.writerow(text_cells(record))


def jsonl_text():
    return "".join(json.dumps(dict(zip(NAMES, record)), ensure_ascii=False) + "\n" for record in TABLE)


def write_parquet(path, row_group_size=None):
    schema = pa.schema([("path", pa.string()), ("label", pa.string()), ("split", pa.string()),
                        ("caption", pa.string()), ("score", pa.string()), ("count", pa.int64()),
                        ("tags", pa.list_(pa.string()))])
    columns = list(zip(*TABLE))
    # Parquet's column is typed: the scores as text, the bad one too (cell_value makes them floats).
    columns[4] = [None if v is None else ("nan" if isinstance(v, float) and math.isnan(v) else str(v))
                  for v in columns[4]]
    pq.write_table(pa.table([list(c) for c in columns], schema=schema), path, row_group_size=row_group_size)


def written(tmp_path, fmt):
    folder = tmp_path / fmt.replace(".", "_")
    folder.mkdir()
    path = folder / f"list.{fmt}"
    if fmt == "csv":
        write_delimited(path, ",")
    elif fmt == "tsv":
        write_delimited(path, "\t")
    elif fmt == "jsonl":
        path.write_text(jsonl_text(), encoding="utf-8")
    elif fmt == "jsonl.gz":
        path.write_bytes(gzip.compress(jsonl_text().encode("utf-8")))
    else:
        write_parquet(path, row_group_size=2)  # Several row groups: read in batches across them.
    return str(path)


def comparable(row):
    return (row.index, row.key, row.source, row.path.rsplit("/", 1)[-1], row.label, row.split, row.columns,
            row.labels, row.failure)


FORMATS = ["csv", "tsv", "jsonl", "jsonl.gz", "parquet"]


def test_a_hostile_table_gives_the_same_rows_in_every_format(tmp_path):
    read = {fmt: list(source.iter_rows(written(tmp_path, fmt), kept=KEPT)) for fmt in FORMATS}
    expected = [comparable(row) for row in read["csv"]]
    for fmt in FORMATS[1:]:
        assert [comparable(row) for row in read[fmt]] == expected, fmt
    first, second, bad, dropped, last = read["csv"]
    assert first.source == 'a, "b".png' and first.label == "cat" and first.split == "train"
    assert dict(first.columns) == {"caption": HOSTILE, "score": 0.5, "count": 3, "tags": ("x", "y z")}
    assert second.split == "train" and second.columns == ()  # 'TRAIN' folded; every kept cell missing.
    assert bad.split == "train" and bad.failure == ("bad_value", "column 'score': 'abc' is not a float")
    assert dropped.split == "discard" and source.is_discarded(dropped)
    assert last.label == "\U0001f431" and dict(last.columns) == {"caption": " spaced ", "count": -7, "tags": ("q",)}
    assert [row.line for row in read["parquet"]] == [1, 2, 3, 4, 5]
    assert [row.line for row in read["jsonl"]] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_summary_counts_formats_discards_blank_and_folded_splits(tmp_path, fmt):
    summary = source.summarize_csv(written(tmp_path, fmt), kept=KEPT)
    assert summary.rows == 4 and summary.rows_per_split == {"train": 3, "validation": 1}
    assert (summary.discarded, summary.blank_splits, summary.splits_folded) == (1, 1, 2)
    assert summary.rows_per_format == {fmt.split(".")[0]: 5}
    assert (summary.labels_stripped, summary.labels_blank) == (1, 0)  # " cat "; a bidi mark is no space


def test_a_folder_and_a_glob_are_read_in_path_order_with_keys_counted_over_every_file(tmp_path):
    one = tmp_path / "one.csv"
    write_delimited(one, ",")
    whole = [comparable(row) for row in source.iter_rows(str(one), kept=KEPT)]
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "_SUCCESS").write_text("")
    head = json.dumps(dict(zip(NAMES, TABLE[0])), ensure_ascii=False) + "\n"
    (folder / "b.jsonl").write_text(head, encoding="utf-8")
    rest = TABLE[1:]
    schema_table = pa.table({name: [list(r)[at] if name != "score" else (None if r[4] is None else str(r[4]))
                                    for r in rest] for at, name in enumerate(NAMES)})
    pq.write_table(schema_table, folder / "c.parquet")
    (folder / "a.txt").write_text("not a list")  # No list format by its name: not part of the folder's list.
    for spec in (str(folder), str(folder) + "/", str(folder / "[bc].*")):
        got = [comparable(row) for row in source.iter_rows(spec, kept=KEPT)]
        assert [g[:3] for g in got] == [w[:3] for w in whole], spec
        assert got[:3] == whole[:3], spec
    summary = source.summarize_csv(str(folder), kept=KEPT)
    assert summary.rows_per_format == {"jsonl": 1, "parquet": 4}
    with pytest.raises(source.CsvError, match="of no list format known by its name"):
        list(source.iter_rows(str(folder / "*")))


def test_a_parquet_list_of_many_rows_in_one_row_group_is_read_in_bounded_batches(tmp_path):
    path = tmp_path / "big.parquet"
    count = tables.PARQUET_BATCH_ROWS * 2 + 3
    pq.write_table(pa.table({"path": [f"{i}.jpg" for i in range(count)]}), path)
    assert pq.ParquetFile(path).num_row_groups == 1
    keys = source.row_keys(str(path))
    assert len(keys) == count and keys[-1] == source.row_key(count - 1, f"{count - 1}.jpg")


def test_types_come_from_parquet_schemas_and_json_values_and_csv_needs_them(tmp_path):
    boxes = pa.list_(pa.list_(pa.float32(), 4))
    path = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"path": ["a"], "n": pa.array([1], pa.int16()), "f": pa.array([0.5], pa.float32()),
                             "t": pa.array(["x"]).dictionary_encode(), "tags": [["a"]], "v": [[1.0, 2.0]],
                             "b": pa.array([[[0.1, 0.1, 0.5, 0.5]]], boxes), "when": pa.array([1], pa.date32())}),
                   path)
    files = tables.list_files(str(path))
    assert tables.schema_types(files, ["n", "f", "t", "tags", "v", "b"]) == {
        "n": "int", "f": "float", "t": "text", "tags": "labels", "v": "floats", "b": "boxes"}
    with pytest.raises(source.CsvError, match=r"column 'when' holds Arrow's date32\[day\], of no column type"):
        tables.schema_types(files, ["when"])
    lines = tmp_path / "typed.jsonl"
    lines.write_text('{"path": "a", "n": 1, "f": 1, "t": "x", "tags": ["a"], "b": [[0, 0, 1, 1]], "m": 1}\n'
                     '{"path": "b", "n": null, "f": 2.5, "t": null, "tags": [], "b": null, "m": "one"}\n')
    assert tables.schema_types(tables.list_files(str(lines)), ["n", "f", "t", "tags", "b"]) == {
        "n": "int", "f": "float", "t": "text", "tags": "labels", "b": "boxes"}
    with pytest.raises(source.CsvError, match="column 'm' holds values that fit no one type"):
        tables.schema_types(tables.list_files(str(lines)), ["m"])
    plain = tmp_path / "plain.csv"
    plain.write_text("path,n\na,1\n")
    with pytest.raises(source.CsvError, match="--column 'n' needs a type in a CSV list"):
        tables.schema_types(tables.list_files(str(plain)), ["n"])


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_duplicate_names_and_a_missing_path_column_are_refused_naming_the_file(tmp_path, fmt):
    path = tmp_path / f"dup.{fmt}"
    if fmt == "csv":
        path.write_text("path,label,label\na,b,c\n")
    elif fmt == "jsonl":
        path.write_text('{"file": "a"}\n')
    else:
        pq.write_table(pa.table([["a"], ["b"], ["c"]], names=["path", "label", "label"]), path)
    with pytest.raises(source.CsvError) as caught:
        source.summarize_csv(str(path))
    message = str(caught.value)
    assert str(path) in message and "\n" not in message
    assert ("no 'path' column" if fmt == "jsonl" else "the column 'label' is named twice") in message


@pytest.mark.parametrize("content,message", [
    ('{"path": "a"}\nnot json\n', "line 2: not JSON"),
    ('["a"]\n', "line 1: a list, not a JSON object"),
])
def test_malformed_json_lines_are_refused_naming_the_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(source.CsvError, match=message):
        source.summarize_csv(str(path))


def test_a_path_or_label_that_is_no_text_fails_its_row_as_bad_value(tmp_path):
    path = tmp_path / "odd.jsonl"
    path.write_text('{"path": "a.jpg", "label": 7}\n{"path": ["x"], "label": "cat"}\n{"path": "c", "label": 1.5}\n')
    first, second, third = source.iter_rows(str(path))
    assert first.label == "7" and not first.failure
    assert second.failure == ("bad_value", "column 'path': ['x'] is a list, not text")
    assert third.failure == ("bad_value", "column 'label': 1.5 is a float, not text")


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_an_infinite_float_fails_its_row_and_nan_is_missing(tmp_path, fmt):
    path = tmp_path / f"f.{fmt}"
    if fmt == "csv":
        path.write_text("path,score\na,inf\nb,nan\n")
    elif fmt == "jsonl":
        path.write_text('{"path": "a", "score": Infinity}\n{"path": "b", "score": NaN}\n')
    else:
        pq.write_table(pa.table({"path": ["a", "b"], "score": [math.inf, math.nan]}), path)
    kept = source.ColumnReading(FeatureSpec(columns=(Column("score", "float"),)))
    inf_row, nan_row = source.iter_rows(str(path), kept=kept)
    assert inf_row.failure[0] == "bad_value" and "beyond float32's range" in inf_row.failure[1]
    assert not nan_row.failure and nan_row.columns == ()


def test_every_row_discarded_is_refused(tmp_path):
    path = tmp_path / "gone.csv"
    path.write_text("path,split\na,DISCARD\n")
    with pytest.raises(source.CsvError, match="in the split 'discard': nothing to write"):
        source.summarize_csv(str(path))


def test_input_format_reads_a_folder_of_any_names_as_that_format(tmp_path):
    (tmp_path / "part-0").write_text("path\tx\na, b.jpg\t1\n")
    (tmp_path / "part-1.txt").write_text("path\tx\nc.jpg\t2\n")
    (tmp_path / ".hidden").write_text("x")
    files = tables.list_files(str(tmp_path), "tsv")
    assert [(f.path.rsplit("/", 1)[-1], f.format) for f in files] == [("part-0", "tsv"), ("part-1.txt", "tsv")]
    assert [row.source for row in source.iter_rows(str(tmp_path), kept=source.ColumnReading(input_format="tsv"))] == [
        "a, b.jpg", "c.jpg"]
