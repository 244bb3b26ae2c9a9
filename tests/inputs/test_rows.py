"""The CSV: quoting, encodings, refusals naming the line, keys and shard assignment."""

import os

import pytest

from beam_pipeline.inputs import rows as source


def write(tmp_path, content, name="in.csv"):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return str(path)


def test_rfc4180_quoting_and_relative_paths(tmp_path):
    csv_path = write(tmp_path, 'path,label\n"a, b.jpg",x\n"say ""hi"".png",y\n/abs/c.jpg,\ngs://b/d.jpg,z\n')
    rows = list(source.iter_rows(csv_path))
    assert [r.source for r in rows] == ["a, b.jpg", 'say "hi".png', "/abs/c.jpg", "gs://b/d.jpg"]
    assert rows[0].path == os.path.join(str(tmp_path), "a, b.jpg")
    assert rows[2].path == "/abs/c.jpg" and rows[3].path == "gs://b/d.jpg"
    assert [r.label for r in rows] == ["x", "y", "", "z"]
    assert {r.split for r in rows} == {"train"}
    assert [r.line for r in rows] == [2, 3, 4, 5]


def test_bom_crlf_blank_lines_and_extra_columns(tmp_path):
    csv_path = write(tmp_path, b"\xef\xbb\xbfpath,label,split,extra\r\n\r\na.jpg,x,validation,1\r\n"
                               b"\r\nb.jpg,y,,2,3\r\nc.jpg\r\n")
    rows = list(source.iter_rows(csv_path))
    assert [(r.source, r.label, r.split, r.line) for r in rows] == [
        ("a.jpg", "x", "validation", 3), ("b.jpg", "y", "train", 5), ("c.jpg", "", "train", 6)]


def test_non_ascii_and_custom_columns(tmp_path):
    csv_path = write(tmp_path, "file,klass\nbilder/äpfel ü.jpg,Äpfel\n")
    rows = list(source.iter_rows(csv_path, source.CsvColumns(path="file", label="klass")))
    assert rows[0].source == "bilder/äpfel ü.jpg" and rows[0].label == "Äpfel"


@pytest.mark.parametrize("content,message", [
    (b"", "the file is empty"),
    (b"\n\n", "the file is empty"),
    (b"file,label\na.jpg,x\n", "line 1: no 'path' column"),
    (b"path,label\na.jpg,x\nb\xff\xfe.jpg,y\n", "line 3: not valid UTF-8"),
    (b"path,split\na.jpg,tr ain\n", "line 2: split 'tr ain' is not a valid split name"),
    (b'path\n"unterminated\n', "malformed CSV"),
])
def test_unusable_csv_is_refused_naming_the_line(tmp_path, content, message):
    csv_path = write(tmp_path, content)
    with pytest.raises(source.CsvError) as caught:
        source.summarize_csv(csv_path)
    assert message in str(caught.value) and csv_path in str(caught.value)


def test_header_only_and_missing_file_are_refused(tmp_path):
    with pytest.raises(source.CsvError, match="no data rows"):
        source.summarize_csv(write(tmp_path, "path,label\n"))
    with pytest.raises(source.CsvError, match="cannot open the CSV"):
        source.summarize_csv(str(tmp_path / "absent.csv"))


def test_summary_counts_rows_per_split(tmp_path):
    csv_path = write(tmp_path, "path,label,split\na,x,train\nb,y,validation\nc,x,\nd,,test\n")
    summary = source.summarize_csv(csv_path)
    assert summary.rows == 4
    assert summary.rows_per_split == {"test": 1, "train": 2, "validation": 1}
    assert summary.has_label and summary.has_split


def test_keys_are_stable_distinct_and_spread_over_shards():
    assert source.row_key(0, "a.jpg") == source.row_key(0, "a.jpg")
    assert source.row_key(0, "a.jpg") != source.row_key(1, "a.jpg")  # Duplicate rows stay distinct.
    # A fixed value guards against anyone switching to Python's per-process hash().
    assert source.row_key(0, "a.jpg") == "e439d64aed980bad"
    counts = [0] * 8
    for index in range(8000):
        counts[source.shard_of(source.row_key(index, f"img{index}.jpg"), 8)] += 1
    assert min(counts) > 850 and max(counts) < 1150


def test_auto_num_shards_depends_on_rows_only():
    assert source.auto_num_shards(0) == 0
    assert source.auto_num_shards(3) == 3
    assert source.auto_num_shards(300) == 8
    assert source.auto_num_shards(1_000_000) == 1000


@pytest.mark.parametrize("label, named", [("c\x00t", "a NUL byte"), ("two\nlines", "a line break"),
                                          ("c\rr", "a carriage return"), ("u\u2028v", "a line separator")])
def test_a_label_no_vocabulary_or_database_can_hold_is_refused_with_its_line(tmp_path, label, named):
    # Quoted, so the CSV itself is well-formed: the label is what cannot be used.
    csv_path = write(tmp_path, 'path,label\na.jpg,ok\n"b.jpg","' + label + '"\n')
    with pytest.raises(source.CsvError, match=f"line 3: label .* holds {named}"):
        source.summarize_csv(csv_path)


def test_hostile_but_storable_labels_pass(tmp_path):
    labels = ['say "hi", ok', "tab\there", "ünïcödé 🐈", "x" * 10_000]
    csv_path = write(tmp_path, "path,label\n" + "".join(
        f'{i}.jpg,"{label.replace(chr(34), chr(34) * 2)}"\n' for i, label in enumerate(labels)))
    assert [row.label for row in source.iter_rows(csv_path)] == labels


def test_row_keys_are_the_rows_keys_in_file_order_and_a_csv_without_rows_is_refused(tmp_path):
    csv_path = write(tmp_path, "path,label\na.png,x\n\nb.png,y\na.png,x\n")
    assert source.row_keys(csv_path) == [row.key for row in source.iter_rows(csv_path)]
    assert len(set(source.row_keys(csv_path))) == 3  # The same path twice: two rows, two keys.
    with pytest.raises(source.CsvError, match="no data rows"):
        source.row_keys(write(tmp_path, "path,label\n"))


def test_labels_are_stripped_like_splits_and_a_blank_label_is_unlabeled(tmp_path):
    csv_path = write(tmp_path, 'path,label,split\na.jpg,cat, train\nb.jpg,cat ,train\nc.jpg, cat,train\n'
                               'd.jpg,"   ",train\ne.jpg,"\t\u00a0",train\nf.jpg,,train\ng.jpg,"tab\there ",train\n')
    rows = list(source.iter_rows(csv_path))
    assert [row.label for row in rows] == ["cat", "cat", "cat", "", "", "", "tab\there"]
    summary = source.summarize_csv(csv_path)
    assert (summary.labels_stripped, summary.labels_blank) == (3, 2)  # 'cat ', ' cat', 'tab\there '; '   ', '\t\xa0'.


def test_a_rows_key_does_not_depend_on_its_label(tmp_path):
    spaced = [row.key for row in source.iter_rows(write(tmp_path, "path,label\na.jpg, cat \nb.jpg,   \n", "s.csv"))]
    plain = [row.key for row in source.iter_rows(write(tmp_path, "path,label\na.jpg,cat\nb.jpg,\n", "p.csv"))]
    assert spaced == plain


def test_a_line_break_at_a_labels_edge_is_stripped_with_the_other_whitespace(tmp_path):
    # The hostile trial: 'cat\n' (a spreadsheet's stray line end) refused the whole CSV, while 'cat ' was stripped.
    csv_path = write(tmp_path, 'path,label\na.jpg,"cat\n"\nb.jpg,"dog\r"\nc.jpg,"\r\n"\nd.jpg,"\u2028x\u2029"\n')
    assert [row.label for row in source.iter_rows(csv_path)] == ["cat", "dog", "", "x"]
    summary = source.summarize_csv(csv_path)
    assert (summary.labels_stripped, summary.labels_blank) == (3, 1)


def test_a_cell_of_only_invisible_characters_is_blank_as_a_blank_cell_is(tmp_path):
    """The hostile trial: a label cell holding only a zero-width space (U+200B), a word joiner or a BOM was a class
    of its own that no one can see; it is unlabeled and counted, as a whitespace-only cell is. A split cell so too."""
    from beam_pipeline.inputs.cells import cell_value
    from tf_serving_input.columns import Column

    csv_path = write(tmp_path, 'path,label,split\na.jpg,\u200b,train\nb.jpg," \u2060\ufeff ",\u200b\n'
                               'c.jpg,cat\u200b,train\n')
    rows = list(source.iter_rows(csv_path))
    assert [(row.label, row.split) for row in rows] == [("", "train"), ("", "train"), ("cat\u200b", "train")]
    summary = source.summarize_csv(csv_path)
    assert (summary.labels_blank, summary.blank_splits) == (2, 1)
    # The kept columns read a cell the same way: invisible only is missing; a list item so is an empty label.
    assert cell_value(Column("caption", "text"), "\u200b\u200d", "|") is None
    assert cell_value(Column("tags", "labels"), "\u2060", "|") is None
    with pytest.raises(ValueError, match="empty label"):
        cell_value(Column("tags", "labels"), "cat|\u200b", "|")


def test_a_list_without_a_split_column_folds_and_blanks_no_split(tmp_path):
    summary = source.summarize_csv(write(tmp_path, "path,label\na.jpg,cat\nb.jpg,\n"))
    assert (summary.splits_folded, summary.blank_splits) == (0, 0)
