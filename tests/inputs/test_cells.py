"""A list's cells made into typed column values (beam_pipeline/inputs/cells.py) and the CSV rows that carry them."""

import math

import pytest

from beam_pipeline.inputs import rows
from beam_pipeline.inputs.cells import BadValue, cell_value
from tests import imaging
from tf_serving_input import failures
from tf_serving_input.columns import Column, ColumnError, FeatureSpec, check_columns

INT, FLOAT, TEXT = Column("n", "int"), Column("score", "float"), Column("caption", "text")
LABELS, FLOATS, BOXES = Column("tags", "labels"), Column("emb", "floats"), Column("objects", "boxes")


@pytest.mark.parametrize("column, raw, value", [
    (INT, " 42 ", 42), (INT, -7, -7), (INT, 3.0, 3), (INT, "", None), (INT, None, None),
    (FLOAT, "0.25", 0.25), (FLOAT, 2, 2.0), (FLOAT, "nan", None), (FLOAT, math.nan, None), (FLOAT, "  ", None),
    (TEXT, "a, \"quoted\"\nline", "a, \"quoted\"\nline"), (TEXT, "x" * 10_000, "x" * 10_000),
    (LABELS, "cat| dog ", ("cat", "dog")), (LABELS, ["a", "b"], ("a", "b")), (LABELS, "猫|🐕", ("猫", "🐕")),
    (LABELS, [], None),
    (FLOATS, "1|2.5", (1.0, 2.5)), (FLOATS, "[1, 2]", (1.0, 2.0)), (FLOATS, [0.5], (0.5,)),
    (BOXES, "0.1 0.2 0.5 0.6|0,0,1,1", ((0.1, 0.2, 0.5, 0.6), (0.0, 0.0, 1.0, 1.0))),
    (BOXES, "[[0.1, 0.2, 0.5, 0.6]]", ((0.1, 0.2, 0.5, 0.6),)), (BOXES, [0.1, 0.2, 0.5, 0.6], ((0.1, 0.2, 0.5, 0.6),)),
])
def test_a_cell_becomes_its_columns_type_and_a_blank_one_is_missing(column, raw, value):
    assert cell_value(column, raw, "|") == value


@pytest.mark.parametrize("column, raw, words", [
    (INT, "1.5", "is not an int"), (INT, "1_000", "is not an int"), (INT, True, "boolean"),
    (INT, str(2 ** 63), "int64"), (FLOAT, "abc", "is not a float"), (FLOAT, "inf", "float32"),
    (FLOAT, "1e39", "float32"), (TEXT, 3, "not text"), (LABELS, "a||b", "empty label"),
    (LABELS, "a|b\x00c", "NUL"), (LABELS, "a|b\u2028c", "line separator"), (FLOATS, "1|x", "not a float"),
    (FLOATS, "[1, NaN]", "NaN"), (BOXES, "0.1 0.2 0.5", "4 numbers"), (BOXES, "[[0.5, 0.2, 0.1, 0.6]]", "normalized"),
    (BOXES, "[[0, 0, 1, 1.5]]", "normalized"), (BOXES, "[[0, 0", "JSON"),
])
def test_a_cell_not_of_its_type_is_a_bad_value_naming_the_column(column, raw, words):
    with pytest.raises(BadValue) as error:
        cell_value(column, raw, "|")
    assert f"column {column.name!r}" in str(error.value) and words in str(error.value)


@pytest.mark.parametrize("column, raw, words", [
    (TEXT, 3, "is an int, not text"), (LABELS, [1], "holds an int, not a label"), (FLOAT, [1.5], "is a list"),
    (INT, {"a": 1}, "is a dict, not an int"),
])
def test_a_value_of_another_type_is_named_with_its_article(column, raw, words):
    with pytest.raises(BadValue, match=words):
        cell_value(column, raw, "|")


def test_a_bad_cell_is_quoted_escaped_and_cut():
    with pytest.raises(BadValue) as error:
        cell_value(INT, "\x00\n" + "9" * 500, "|")
    message = str(error.value)
    assert "\\x00\\n" in message and "\n" not in message and len(message) < 140


@pytest.mark.parametrize("columns, words", [
    ([Column("a", "int"), Column("A", "float")], "differ only in case"), ([Column("", "int")], "empty"),
    ([Column("a/b", "int")], "'/'"), ([Column("x" * 65, "int")], "at most 64"), ([Column("a\u202e", "int")], "bidi"),
    ([Column("b1", "boxes"), Column("b2", "boxes")], "both boxes"), ([Column("a", "str")], "not one of"),
])
def test_column_declarations_that_cannot_be_used_are_refused(columns, words):
    with pytest.raises(ColumnError, match=words):
        check_columns(columns)


def test_csv_rows_carry_their_kept_columns_and_a_bad_cell_fails_its_row_unread(tmp_path):
    csv_path = tmp_path / "list.csv"
    imaging.write_csv(csv_path, ["path", "label", "score", "tags", "objects"], [
        ["a.png", "cat|dog", "0.5", "x|y", "0 0 1 1"],
        ["b.png", "", "", "", ""],
        ["c.png", "dog", "high", "z", ""],
    ])
    spec = FeatureSpec(columns=(FLOAT, Column("tags", "labels"), BOXES), multi_label=True)
    kept = rows.ColumnReading(spec)
    first, blank, bad = rows.iter_rows(str(csv_path), rows.CsvColumns(), kept)
    assert first.labels == ("cat", "dog") and first.label == ""
    assert first.columns == (("score", 0.5), ("tags", ("x", "y")), ("objects", ((0.0, 0.0, 1.0, 1.0),)))
    assert blank.columns == () and blank.labels == () and not blank.failure
    assert bad.failure == (failures.BAD_VALUE, "column 'score': 'high' is not a float")
    assert rows.failure_of(bad) == failures.RowFailure(failures.BAD_VALUE, "column 'score': 'high' is not a float")
    summary = rows.summarize_csv(str(csv_path), rows.CsvColumns(), kept)
    assert not hasattr(summary, "bad_values")  # The check types no cell: the pipeline does, once (the manifest counts).
    # A multi-label row's label cell is its labels: none was "blank" or "stripped" (the summary said 3 blank).
    assert summary.labels_blank == 0 and summary.labels_stripped == 0


def test_a_kept_column_the_list_does_not_have_is_refused_naming_its_columns(tmp_path):
    csv_path = tmp_path / "list.csv"
    imaging.write_csv(csv_path, ["path", "label"], [["a.png", "cat"]])
    kept = rows.ColumnReading(FeatureSpec(columns=(Column("Score", "float"),)))
    with pytest.raises(rows.CsvError, match=r"--column Score is not a column of the list; its columns: .*'label'"):
        rows.summarize_csv(str(csv_path), rows.CsvColumns(), kept)


def test_box_classes_that_do_not_match_the_boxes_one_for_one_fail_the_row(tmp_path):
    """The hostile trial: 2 boxes with 1 class, 1 box with 2 classes and classes without boxes were all written."""
    csv_path = tmp_path / "list.csv"
    imaging.write_csv(csv_path, ["path", "objects", "cls"], [
        ["a.png", "0 0 1 1|0 0 0.5 0.5", "a|b"], ["b.png", "0 0 1 1|0 0 0.5 0.5", "a"],
        ["c.png", "0 0 1 1", "a|b"], ["d.png", "", "a"], ["e.png", "", ""]])
    spec = FeatureSpec(columns=(BOXES, Column("cls", "labels", box_classes=True)))
    good, two_one, one_two, none_one, empty = rows.iter_rows(str(csv_path), rows.CsvColumns(), rows.ColumnReading(spec))
    assert not good.failure and not empty.failure and empty.columns == ()
    for row, words in ((two_one, "2 boxes and 1 class"), (one_two, "1 box and 2 classes"),
                       (none_one, "0 boxes and 1 class")):
        assert row.failure[0] == failures.BAD_VALUE and words in row.failure[1], row.failure


def test_the_launchers_check_types_no_cell_and_the_rows_type_each_once(tmp_path, monkeypatch):
    """Speed: the launcher's check (summarize_csv) typed every kept cell, and the pipeline's read typed it again."""
    csv_path = tmp_path / "list.csv"
    imaging.write_csv(csv_path, ["path", "label", "score", "tags"], [["a.png", "cat|dog", "0.5", "x|y"],
                                                                     ["b.png", "dog", "high", ""]])
    kept = rows.ColumnReading(FeatureSpec(columns=(FLOAT, Column("tags", "labels")), multi_label=True))
    typed = []
    real = rows.cell_value
    monkeypatch.setattr(rows, "cell_value", lambda column, raw, separator: typed.append(raw) or real(
        column, raw, separator))
    summary = rows.summarize_csv(str(csv_path), rows.CsvColumns(), kept)
    assert summary.rows == 2 and typed == []
    assert [row.failure[:1] for row in rows.iter_rows(str(csv_path), rows.CsvColumns(), kept)] == [(), ("bad_value",)]
    assert sorted(typed) == sorted(["0.5", "x|y", "cat|dog", "high"])  # Each cell once (a bad one ends its row's).
