"""Union-find groups, the clean split's choice and the report's escaping, on small known inputs."""

import csv
import html.parser
import io

import numpy as np

import imaging
from beam_pipeline.inputs import rows as csv_rows
from beam_pipeline.quality import clean_split, groups, health, report_html


def images(splits, labels, hashes=None, digests=None):
    n = len(splits)
    return groups.Images(keys=[f"{i:016x}" for i in range(n)], splits=list(splits), labels=list(labels),
                         hashes=np.array(hashes if hashes is not None else [0] * n, dtype=np.uint64),
                         digests=list(digests) if digests is not None else [(i, i) for i in range(n)])


def test_union_find_joins_chains_and_keeps_the_first_member_as_root():
    sets = groups.UnionFind(6)
    for a, b in [(4, 2), (2, 5), (1, 0)]:
        sets.union(a, b)
    assert sets.roots().tolist() == [0, 0, 2, 3, 2, 2]


def test_groups_come_largest_first_with_leaks_conflicts_and_exact_matches():
    found = groups.find_groups(
        images(["train", "validation", "train", "train", "train", "train"],
               ["a", "a", "b", "c", "x", ""], digests=[(1, 1), (1, 1), (2, 2), (3, 3), (4, 4), (4, 4)]),
        near_pairs=[(2, 3), (3, 5)])
    assert [g.members for g in found] == [[2, 3, 4, 5], [0, 1]]
    big, copy = found
    assert (big.exact, big.leak, big.conflict) == (False, False, True)  # Labels b, c, x ('' is no label).
    assert (copy.exact, copy.leak, copy.conflict) == (True, True, False)
    assert [g.group for g in found] == [0, 1]


def test_the_majority_split_wins_and_a_tie_goes_to_the_first_member():
    data = images(["validation", "train", "train", "test", "validation", "train"], [""] * 6)
    found = [groups.Group(0, [0, 1, 2], False, True, False), groups.Group(1, [3, 4], False, True, False),
             groups.Group(2, [5], False, False, False)]
    moves = clean_split.chosen_splits(data, found)
    assert moves == {data.keys[0]: "train", data.keys[4]: "test"}


def test_clean_split_csv_keeps_every_row_and_cell_but_the_moved_splits_and_resolves_paths(tmp_path):
    hostile = 'x "quoted",\nnew line ünï.jpg'
    rows = [["a.jpg", "cat", "train", "extra 1"], [hostile, 'la"bel', "validation", ""], ["c.jpg", "", "train", "z"]]
    imaging.write_csv(tmp_path / "in.csv", ["path", "label", "split", "note"], rows)
    keys = [row.key for row in csv_rows.iter_rows(str(tmp_path / "in.csv"))]
    text, written = clean_split.clean_split_csv(str(tmp_path / "in.csv"), csv_rows.CsvColumns(), {keys[1]: "train"})
    assert written == 3
    out = list(csv.reader(io.StringIO(text)))
    at = str(tmp_path) + "/"  # Relative paths are written resolved against the CSV's folder.
    assert out == [["path", "label", "split", "note"], [at + "a.jpg", *rows[0][1:]],
                   [at + hostile, 'la"bel', "train", ""], [at + "c.jpg", *rows[2][1:]]]


def test_flags_follow_the_thresholds():
    flags = health.image_flags(np.array([10.0, 128.0, 250.0, 128.0]), np.array([1.0, 40.0, 30.0, 40.0]),
                               np.array([0.0, 500.0, 500.0, 5.0]), health.HealthThresholds())
    assert flags == [["near_constant", "dark"], [], ["bright"], ["blurry"]]


class _Text(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.data = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.data.append(data)


def test_the_report_escapes_hostile_text_and_shows_control_characters():
    hostile = 'a\x00b\n<script>x</script> "q" & ü'
    page = report_html.render(hostile, [("name", hostile)], [report_html.Section(
        "groups", "Duplicate groups", 3, "groups",
        [report_html.Entry(hostile, [("leak", "leak")], [report_html.Figure(None, [hostile])], hidden=2)])])
    parsed = _Text()
    parsed.feed(page)
    assert "script" not in parsed.tags and "\x00" not in page
    text = "".join(parsed.data)
    assert 'a\\x00b\\n<script>x</script> "q" & ü' in text
    assert "3 groups (top 1 shown)" in text and "and 2 more" in text


def test_simhash_bits_track_the_angle():
    from beam_pipeline.quality.embedding_pairs import simhash
    from beam_pipeline.quality.pairs import as_unsigned, hamming

    rng = np.random.default_rng(1)
    base = rng.standard_normal(64)
    near = base + 0.1 * rng.standard_normal(64)
    far = rng.standard_normal(64)
    vectors = np.stack([base, base * 3, near, far]) / 1.0
    distances = hamming(as_unsigned(simhash(vectors))[0], as_unsigned(simhash(vectors))).tolist()
    assert distances[:2] == [0, 0]  # The sign of a hyperplane product does not depend on the length.
    assert distances[2] <= 8 < 20 <= distances[3]


def test_suspected_label_errors_need_most_neighbours_to_agree_on_another_label():
    from beam_pipeline.quality.embedding_pairs import suspected_label_errors

    labels = {"x": "cat", "a": "dog", "b": "dog", "c": "dog", "d": "cat", "y": "cat", "e": "dog", "f": ""}
    neighbours = [("x", "a", 0.1), ("x", "b", 0.1), ("x", "c", 0.1), ("x", "d", 0.1),  # 3 of 4 say dog.
                  ("y", "e", 0.1), ("y", "d", 0.1), ("y", "f", 0.1)]  # Too few labelled neighbours (2).
    suspects = suspected_label_errors(neighbours, labels)
    assert [s["key"] for s in suspects] == ["x"]
    assert suspects[0]["neighbour_label"] == "dog" and suspects[0]["share"] == 0.75 and suspects[0]["neighbours"] == 4


def test_a_clean_split_of_a_parquet_list_writes_list_cells_as_the_list_takes_them_and_reads_back_the_same(tmp_path):
    """The hostile trial: list cells were written as Python text ("['a', 'b']"), so the clean split, fed back as
    --input with the same --column flags, read other labels (or failed its rows as bad_value)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pytest

    from tf_serving_input.columns import Column, FeatureSpec

    table = pa.table({
        "path": ["a.jpg", "b.jpg", "c.jpg"], "label": [["cat", "dog"], ["dog"], None], "split": ["train"] * 3,
        "tags": [["x y", "猫"], [], None], "emb": [[0.5, 1.0], [2.25], None],
        "objects": [[[0.1, 0.2, 0.5, 0.6], [0.0, 0.0, 1.0, 1.0]], [[0.0, 0.0, 0.5, 0.5]], None],
        "n": [3, None, 2**53 + 1], "caption": ['a "quoted", line\nbreak', None, "plain"]})
    pq.write_table(table, tmp_path / "in.parquet")
    spec = FeatureSpec((Column("tags", "labels"), Column("emb", "floats"), Column("objects", "boxes"),
                        Column("n", "int"), Column("caption", "text")), multi_label=True)
    parquet = csv_rows.ColumnReading(spec, ";")
    read = list(csv_rows.iter_rows(str(tmp_path / "in.parquet"), kept=parquet))
    # A multi-label Parquet list's label cell is a list: each row failed as bad_value ("is a list, not text").
    assert [row.failure for row in read] == [(), (), ()] and read[0].labels == ("cat", "dog")
    text, written = clean_split.clean_split_csv(str(tmp_path / "in.parquet"), csv_rows.CsvColumns(),
                                                {read[1].key: "validation"}, parquet)
    assert written == 3 and "['" not in text and "[[" not in text
    (tmp_path / "clean.csv").write_text(text, encoding="utf-8")
    again = list(csv_rows.iter_rows(str(tmp_path / "clean.csv"), kept=csv_rows.ColumnReading(spec, ";", "csv")))
    assert [(row.columns, row.labels, row.failure) for row in again] == [
        (row.columns, row.labels, row.failure) for row in read]
    assert [row.split for row in again] == ["train", "validation", "train"]
    # A label holding the list separator has no CSV form: the clean split says so, naming the row and column.
    pq.write_table(table.set_column(3, "tags", pa.array([["a;b"], [], None])), tmp_path / "sep.parquet")
    with pytest.raises(clean_split.Unwritable, match=r"row 1: column 'tags': 'a;b' holds the list separator ';'"):
        clean_split.clean_split_csv(str(tmp_path / "sep.parquet"), csv_rows.CsvColumns(), {}, parquet)
