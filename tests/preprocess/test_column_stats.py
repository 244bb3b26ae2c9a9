"""The kept columns' statistics (issue 52): TFT's input batches, the file's arithmetic, and one job run.

The run (`columns_job`, tests/conftest.py) keeps a float, two labels columns (one the boxes'
classes), boxes, an int with a hostile name, and a multi-label label; its statistics are checked
against NumPy over the train rows the job wrote.
"""

import json

import numpy as np
import pytest

from beam_pipeline.inputs.rows import Row
from beam_pipeline.preprocess import column_report, inspect
from beam_pipeline.preprocess.analysis import tensor_adapter_config, to_record_batch
from beam_pipeline.preprocess.shard_writer import statistics_batches
from tf_serving_input import column_stats, normalization
from tf_serving_input.columns import Column, FeatureSpec

SPEC = FeatureSpec(columns=(Column("score", "float"), Column("n", "int"), Column("caption", "text"),
                            Column("tags", "labels"), Column("vec", "floats"), Column("objects", "boxes"),
                            Column("cls", "labels", box_classes=True)), multi_label=True)


def _row(index, labels=(), **values):
    return Row(index=index, line=index + 2, source=f"{index}.png", path=f"{index}.png", label="", split="train",
               key=f"k{index}", columns=tuple((name, values[name]) for name in values), labels=labels)


def test_column_batches_match_tfx_bsl_layout():
    """The shard writer's batches with kept columns equal tfx_bsl's own conversion of the same tensors."""
    import tensorflow as tf
    from tfx_bsl.tfxio import tensor_to_arrow

    rows = [_row(0, ("cat", "dog"), score=0.5, n=-3, caption="a b", tags=("x", "y z"), vec=(1.0, 2.0),
                 objects=((0.0, 0.0, 1.0, 1.0),), cls=("car",)),
            _row(1),  # Every value missing, no label.
            _row(2, ("é",), n=2 ** 62, tags=("x",))]
    (batch,) = statistics_batches(np.arange(7), rows, SPEC)

    def ragged(items, dtype):
        return tf.RaggedTensor.from_row_lengths(tf.constant([v for row in items for v in row], dtype),
                                                tf.constant([len(row) for row in items], tf.int64))

    # Per row [label, score, n, caption, tags, vec, objects, cls]; the first row is the shard's moment totals.
    zeros = [0] * 8
    tensors = {"pixel_moments": tf.constant(np.stack([np.arange(7)] + [np.zeros(7, np.int64)] * 3), tf.int64),
               "label": ragged([(), (b"cat", b"dog"), (), ("é".encode(),)], tf.string),
               "images": tf.constant([0, 1, 1, 1], tf.int64),
               "column_present": tf.constant([zeros, [1] * 8, zeros, [1, 0, 1, 0, 1, 0, 0, 0]], tf.int64),
               # Labels, a value, a text's characters, a list's items:
               "column_items": tf.constant([zeros, [2, 1, 1, 3, 2, 2, 1, 1], zeros, [1, 0, 1, 0, 1, 0, 0, 0]],
                                           tf.int64),
               "column_whole": tf.constant([zeros, [2, 0, -3, 3, 2, 2, 1, 1], zeros, [1, 0, 2 ** 62, 0, 1, 0, 0, 0]],
                                           tf.int64),
               "column_real": tf.constant([zeros, [0, 0.5, 0, 0, 0, 0, 0, 0], zeros, zeros], tf.float32),
               "column_labels": ragged([(), (b"label:cat", b"label:dog", b"column_3:x", b"column_3:y z",
                                             b"column_6:car"), (), ("label:é".encode(), b"column_3:x")], tf.string)}
    converter = tensor_to_arrow.TensorsToRecordBatchConverter(normalization.raw_batch_type_specs(SPEC))
    assert batch.equals(converter.convert(tensors))
    assert tensor_adapter_config(SPEC).arrow_schema.equals(batch.schema)
    # No column's name is in the graph's inputs: only indexes.
    assert not {"score", "tags", "cls"} & set(batch.schema.names)


def test_a_run_without_columns_hands_tft_what_it_did_before():
    rows = [_row(0)]
    (batch,) = statistics_batches(np.arange(7), [Row(**{**_row(0).__dict__, "label": "cat"})] + rows)
    assert batch.schema.names == ["label", "pixel_moments"]
    assert batch.column(0).to_pylist() == [[b""], [b"cat"], [b""]]
    assert normalization.raw_batch_type_specs() == normalization.raw_batch_type_specs(FeatureSpec())
    assert to_record_batch([np.zeros(7)], [b"a"]).equals(to_record_batch([np.zeros(7)], [b"a"], FeatureSpec()))


def test_frequency_vocabulary_keeps_labels_with_spaces_and_separators():
    """'COUNT LABEL' lines split at the first space; only b'\\n' ends a line (a label may hold any other
    separator that reached TFT); TFT's placeholder of an empty vocabulary is left out."""
    data = "3 a b\n2  x\n1 \u2028\n1 \x1f\n1 é\n".encode()
    assert column_stats.parse_frequency_vocabulary(data) == [["a b", 3], [" x", 2], ["\u2028", 1], ["\x1f", 1],
                                                             ["é", 1]]
    assert column_stats.parse_frequency_vocabulary(b"0 PLACEHOLDER\n", b"PLACEHOLDER") == []
    assert column_stats.split_vocabularies([["label:a:b", 2], ["column_3:x", 1], ["label:c", 1]]) == {
        "label": [["a:b", 2], ["c", 1]], "column_3": [["x", 1]]}
    # A count its vocabulary does not add up to is said (TFT leaves out an empty label or one with a line break).
    entry = column_stats.entry("labels", [1, 0, 3], ["3", "0", "3", "3"], vocabulary=[["a", 2]])
    assert entry["not_in_vocabulary"] == 1
    assert "1 labels not in the vocabulary" in column_report.column_line(entry)


def test_entries_are_exact_and_empty_columns_have_no_moments():
    entry = column_stats.entry("int", [2, 1, 2], [b"4.50000000000000000e+00", b"1.5e+00",
                                                  b"-9007199254740993", b"9007199254740993"])
    assert entry == {"type": "int", "count": 2, "missing": 1, "mean": 4.5, "std": 1.5,
                     "min": -9007199254740993, "max": 9007199254740993}
    assert column_stats.entry("float", [1, 0, 1], ["1e0", "0e0", str(np.float32(0.1).astype(float)),
                                                   "3.4028234663852886e+38"], float32=True)["min"] == 0.1
    empty = column_stats.entry("labels", [0, 5, 0], ["0", "0", "9223372036854775807", "-9223372036854775808"],
                               vocabulary=[])
    assert empty["per_image"] == {"mean": None, "std": None, "min": None, "max": None} and empty["missing"] == 5
    assert column_report.column_line(empty) == "labels: 0 (5 missing), no value in the train split"


def test_summary_lines_escape_and_cut_names_and_labels():
    document = {"images": 2, "multi_label": False, "columns": {
        "x\u202e" + "n" * 100: {"type": "labels", "count": 1, "missing": 1, "items": 1,
                                "per_image": {"mean": 1.0, "std": 0.0, "min": 1, "max": 1},
                                "vocabulary": [["\x1b[2Jcat\u202e", 1], ["a, b", 1]] + [["y" * 500, 1]] * 50}},
        "label": {"count": 2, "missing": 0, "items": 2, "per_image": {"mean": 1.0, "std": 0.0, "min": 1, "max": 1},
                  "vocabulary": [["new\nline", 2]]}}
    rows = column_report.summary_rows(document)
    text = "\n".join(f"{name} {value}" for name, value in rows)
    assert "\x1b" not in text and "\u202e" not in text and "\n" not in "".join(v for _, v in rows)
    assert "\\x1b[2Jcat\\u202e 1" in text and '"a, b" 1' in text and "new\\x0aline 2" in text
    assert max(len(value) for _, value in rows) < 200 and max(len(name) for name, _ in rows) <= 22


# The tests below read `columns_job`, a whole run of the job (~12 s of the everyday lane, built only for them):
# the full suite's. The statistics' arithmetic (`column_stats.entry`) and the summary lines stay above.
WHOLE_RUN = pytest.mark.slow


@pytest.fixture(scope="module")
def stats(columns_job):
    return column_stats.read_document(columns_job.out)


@WHOLE_RUN
def test_numeric_statistics_match_numpy(columns_job, stats):
    """Over the train images written (a bad cell's row, a missing file and validation rows left out)."""
    written = columns_job.train_written
    assert stats["images"] == len(written)
    for name, key, cast in (("score", "score", np.float32), ('id,"é', "id", np.int64)):
        present = [row[key] for row in written if row[key] is not None]
        values = np.asarray(present, cast)
        entry = stats["columns"][name]
        assert (entry["count"], entry["missing"]) == (len(present), len(written) - len(present))
        np.testing.assert_allclose([entry["mean"], entry["std"]],
                                   [values.astype(np.float64).mean(), values.astype(np.float64).std()],
                                   rtol=1e-12)
        assert (entry["min"], entry["max"]) == (values.min().item(), values.max().item())
    assert stats["columns"]['id,"é']["max"] == 2 ** 53 + 1  # Exact, not float64's 2 ** 53.
    assert stats["columns"]["score"]["min"] == -2.25


@WHOLE_RUN
def test_labels_boxes_and_multi_label_counts(columns_job, stats):
    written = columns_job.train_written

    def frequencies(name):
        counts = {}
        for row in written:
            for label in row[name] or ():
                counts[label] = counts.get(label, 0) + 1
        return counts

    columns = stats["columns"]
    assert {"z\u200b", "x:y", "b\u202e", "c d"} <= set(frequencies("tags"))  # Kept by TFT, as they are.
    for name in ("tags", "cls"):
        assert dict(map(tuple, columns[name]["vocabulary"])) == frequencies(name)
        assert "not_in_vocabulary" not in columns[name]
        assert columns[name]["items"] == sum(frequencies(name).values())
    counts = [len(row["objects"]) for row in written if row["objects"]]
    boxes = columns["objects"]
    assert (boxes["count"], boxes["items"], boxes["classes"]) == (len(counts), sum(counts), "cls")
    assert boxes["per_image"] == {"mean": np.mean(counts), "std": np.std(counts), "min": min(counts),
                                  "max": max(counts)}
    label = stats["label"]  # Multi-label: every label of each image counts.
    assert dict(map(tuple, label["vocabulary"])) == frequencies("label") and label["multi_label"]
    assert label["missing"] == sum(not row["label"] for row in written)
    manifest = json.loads((columns_job.out_path / "manifest.json").read_text())
    assert set(manifest["statistics"]["label_vocabulary"]) == set(frequencies("label"))


@WHOLE_RUN
def test_the_graph_names_columns_by_index_and_holds_the_statistics(columns_job):
    import tensorflow_transform as tft

    output = tft.TFTransformOutput(columns_job.out)
    names = set(output.transformed_feature_spec())
    assert {"pixel_mean", "pixel_std", "label", "column_0_counts", "column_0_moments", "label_counts"} <= names
    assets = {path.name for path in (columns_job.out_path / "transform_fn" / "assets").iterdir()}
    assert assets == {"label", "label_frequency"}  # Every labels column's labels in one, by column index:
    tokens = (columns_job.out_path / "transform_fn" / "assets" / "label_frequency").read_text().splitlines()
    assert {token.split(" ", 1)[1].split(":")[0] for token in tokens} == {"label", "column_1", "column_3"}
    assert normalization.read_column_statistics(columns_job.out, columns_job.spec, output) == \
        column_stats.read_document(columns_job.out)
    mean, std, vocabulary = normalization.read_statistics(columns_job.out, output)
    assert len(mean) == 3 and set(vocabulary) == {label for label, _ in
                                                   column_stats.read_document(columns_job.out)["label"]["vocabulary"]}


@WHOLE_RUN
def test_summary_and_inspect_show_each_column(columns_job, stats, capsys):
    summary = columns_job.stdout
    for line in ("column score", "column tags", "column objects", "column cls", 'column id,"é',
                 "labels per image", "label counts"):
        assert line in summary
    assert "b\\u202e 1" in summary and "\u202e" not in summary  # Hostile labels, escaped.
    assert "z\\u200b 1" in summary and "\u200b" not in summary
    assert inspect.run([columns_job.out]) == 0
    text = capsys.readouterr().out
    assert "column score: float:" in text and "label counts: " in text and "\u202e" not in text
    assert inspect.run([columns_job.out, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["column_statistics"] == stats
    assert column_stats.load_column_stats(columns_job.out) == stats["columns"]


def test_inspect_of_a_run_keeping_no_column_has_no_column_statistics():
    # The run itself (the graph of before, no column_stats.json): tests/end_to_end/test_cli.py, over its
    # finished run, which keeps no column (the shared tiny_job keeps one of every type).
    assert "column_statistics" not in inspect.summary({"config": {"preprocess": {}}}, columns=None)


@WHOLE_RUN
def test_a_damaged_column_stats_file_is_one_line_naming_it(columns_job, tmp_path, capsys):
    """The hostile trial: one flipped byte in column_stats.json gave inspect a JSONDecodeError traceback."""
    import shutil

    from tf_serving_input import make_dataset

    out = tmp_path / "copy"
    shutil.copytree(columns_job.out, out)
    stats_file = out / "column_stats.json"
    stats_file.write_bytes(b"|" + stats_file.read_bytes()[1:])
    assert inspect.run([str(out)]) == 1
    err = capsys.readouterr().err
    # Now its digest in the manifest says so first (test_a_column_stats_file_changed_but_still_json_...).
    assert err.count("\n") == 1 and "column_stats.json does not match" in err and "Traceback" not in err
    with pytest.raises(ValueError, match="column_stats.json does not match"):
        make_dataset(str(out), columns=["score"], zscore=["score"])


@WHOLE_RUN
@pytest.mark.parametrize("damage, words", [
    (lambda text: text.replace('"version"', '"version!', 1), "features.json is not valid JSON"),  # A flipped byte.
    (lambda text: text.replace('"multi_label": true', '"multi_label": "yes"', 1), "features.json"),  # A wrong type.
    (lambda text: text.replace('"column/score"', '"column/scorf"', 1), "features.json"),  # A key's flipped byte.
])
def test_a_damaged_features_file_is_one_line_naming_it_in_inspect(columns_job, tmp_path, capsys, damage, words):
    """The hostile trial: inspect never read features.json, so a damaged one passed it silently."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(columns_job.out, out)
    features_file = out / "features.json"
    text = features_file.read_text(encoding="utf-8")
    features_file.write_text(damage(text), encoding="utf-8")
    assert damage(text) != text
    assert inspect.run([str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err, err


@WHOLE_RUN
def test_a_column_stats_file_changed_but_still_json_is_caught_by_its_digest(columns_job, tmp_path, capsys):
    """A flipped digit is still JSON: only the digest the manifest records catches it, as for the run's shards."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(columns_job.out, out)
    stats_file = out / "column_stats.json"
    text = stats_file.read_text(encoding="utf-8")
    changed = text.replace('"images": ', '"images": 1', 1)
    assert json.loads(changed) != json.loads(text)
    stats_file.write_text(changed, encoding="utf-8")
    assert inspect.run([str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "column_stats.json" in err and "manifest" in err, err
    with pytest.raises(ValueError, match="column_stats.json"):
        column_stats.load_column_stats(str(out))
