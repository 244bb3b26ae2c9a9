"""The quality job's guards (issue 54): no clean split that empties or guts a split, no embedding chains,
and an embedding distance calibrated from the embeddings' own distances. Small synthetic inputs, in process."""

import numpy as np
import pytest

from beam_pipeline.quality import clean_split, embedding_pairs, findings, groups
from beam_pipeline.quality.cli import QualityConfig, parse_args


def images(splits, labels, hashes=None):
    n = len(splits)
    # Hashes far apart by default (no hash pair), digests all distinct.
    rng = np.random.default_rng(0)
    return groups.Images(keys=[f"{i:016x}" for i in range(n)], splits=list(splits), labels=list(labels),
                         hashes=np.array(hashes if hashes is not None else rng.integers(0, 2**63, n), np.uint64),
                         digests=[(i, i) for i in range(n)])


def config(**changes):
    return QualityConfig(input_dir="", output_dir="", predictions_dir="p", **changes)


def sample_like(train=64, validation=16):
    """The bundled sample's shape: four labels, one image in five in validation."""
    n = train + validation
    splits = ["train"] * train + ["validation"] * validation
    return images(splits, [("cat", "coffee", "rocket", "astronaut")[i % 4] for i in range(n)])


def chain(data, distance=0.005):
    """Embedding neighbours joining every image to the next: one chain through the whole set."""
    return [(data.keys[i], data.keys[i + 1], distance) for i in range(len(data.keys) - 1)]


def test_a_clean_split_that_empties_a_split_or_moves_too_much_of_one_is_refused():
    data = images(["train"] * 8 + ["validation"] * 2, [""] * 10)
    everything = {data.keys[8]: "train", data.keys[9]: "train"}
    check = clean_split.check_moves(data, everything, 0.25)
    assert check.before == {"train": 8, "validation": 2} and check.after == {"train": 10, "validation": 0}
    assert check.moved_out == {"train": 0, "validation": 2}
    assert check.problems == ["it would empty split 'validation' (all 2 of its images moved out)"]
    # Even where the fraction allows everything, an emptied split is a problem.
    assert clean_split.check_moves(data, everything, 1.0).problems == check.problems
    half = clean_split.check_moves(data, {data.keys[9]: "train"}, 0.25)
    assert half.problems == ["it would move 1 of the 2 images of split 'validation' out (50%), more than "
                             "--max_split_moved 0.25"]
    assert clean_split.check_moves(data, {data.keys[9]: "train"}, 0.5).problems == []  # At the limit: allowed.
    assert clean_split.check_moves(data, {data.keys[0]: "validation"}, 0.25).problems == []  # 1 of 8 train.


def test_the_sample_case_an_embedding_chain_neither_groups_everything_nor_moves_validation():
    """The issue's case: close embeddings chained all 320 sample images into one group, and the clean split
    moved the whole validation split into train."""
    data = sample_like()
    planned = findings.plan(config(embedding_distance=0.05), data, [], chain(data))
    assert planned.embedding["pairs"] == 79 and planned.embedding["largest_group"] == 80
    assert not planned.embedding["used"]
    assert planned.found == [] and planned.proposed == {} and planned.written
    assert planned.check.after == {"train": 64, "validation": 16}
    assert any("join 80 of the 80 images into one group" in w for w in planned.warnings)
    # The hash pairs still count: a copy across splits is still moved.
    hashed = findings.plan(config(embedding_distance=0.05), data, [(0, 70)], chain(data))
    assert hashed.moves == {data.keys[70]: "train"} and hashed.written


def test_a_clean_split_that_would_empty_validation_is_not_written_unless_forced():
    data = sample_like()
    everything = [(0, i) for i in range(1, 80)]  # Hash pairs joining everything (the hash signal counts).
    planned = findings.plan(config(), data, everything, None)
    assert planned.proposed == {key: "train" for key in data.keys[64:]}
    assert not planned.written and planned.moves == {}
    assert planned.check.problems == ["it would empty split 'validation' (all 16 of its images moved out)"]
    assert any(w.startswith("group 0 holds 80 of the 80 images") for w in planned.warnings)
    assert any(w.startswith("clean_split.csv not written: it would empty split 'validation'") for w in planned.warnings)
    forced = findings.plan(config(force_clean_split=True), data, everything, None)
    assert forced.written and forced.moves == planned.proposed


def test_embeddings_that_mostly_join_different_labels_are_not_used():
    data = images(["train", "validation"] * 6, ["a", "b", "c"] * 4)
    pairs = [(data.keys[i], data.keys[i + 1], 0.001) for i in range(0, 12, 2)]  # Six pairs, every one mixed.
    planned = findings.plan(config(embedding_distance=0.05), data, [], pairs)
    assert planned.embedding["cross_label_share"] == 1.0 and not planned.embedding["used"]
    assert planned.found == [] and "do not separate the labels" in planned.warnings[0]
    # The same pairs within one label each are used (and their leaks moved).
    same = images(["train", "train", "train", "validation", "validation", "validation"] * 2,
                  ["a", "a", "b", "b", "c", "c"] * 2)
    planned = findings.plan(config(embedding_distance=0.05, max_split_moved=1.0), same, [],
                            [(same.keys[i], same.keys[i + 1], 0.001) for i in range(0, 12, 2)])
    assert planned.embedding["used"] and len(planned.found) == 6 and planned.written
    assert planned.moves == {same.keys[3]: "train", same.keys[9]: "train"}


def test_the_embedding_distance_is_calibrated_from_the_nearest_other_label():
    # 100 labelled images, alternating labels, each with a neighbour of another label at 0.02 + i/10,000. A copy
    # of image 0, labelled otherwise, lies at 0.0001: the hash calls them one picture (a label conflict, not two
    # pictures), so it is left out; and a quantile, not the minimum, is taken anyway.
    labels = {f"k{i}": ("cat", "dog")[i % 2] for i in range(100)} | {"copy": "dog"}
    neighbours = [(f"k{i}", f"k{i + 1}", 0.02 + i / 10_000) for i in range(99)] + [("k0", "copy", 0.0001)]
    one_picture = lambda a, b: {a, b} == {"k0", "copy"}  # noqa: E731
    nearest = embedding_pairs.nearest_other_label(neighbours, labels, one_picture)
    assert nearest["k0"] == 0.02 and nearest["k5"] == 0.02 + 4 / 10_000 and "copy" not in nearest
    assert embedding_pairs.nearest_other_label(neighbours, labels, lambda a, b: False)["k0"] == 0.0001
    # Sorted: k0 and k1 at 0.02, then k2, k3, ...: the 5% quantile of 101 images is the sixth, k5's 0.0204.
    chosen = embedding_pairs.choose_distance(None, neighbours, labels, one_picture, 0.1)
    assert chosen.origin == "calibrated" and chosen.distance == pytest.approx(0.5 * 0.0204)
    assert "5% of 101 labelled images have a neighbour of another label within 0.0204" in chosen.note
    unexcepted = embedding_pairs.choose_distance(None, neighbours, labels, lambda a, b: False, 0.1)
    assert unexcepted.distance == pytest.approx(0.5 * 0.0203)  # Not 0.5 x 0.0001.
    # The flag wins; calibrated, never more than the former default 0.05; too few labels: not calibrated.
    assert embedding_pairs.choose_distance(0.2, neighbours, labels, one_picture, 0.1).distance == 0.2
    far = [(a, b, 0.5) for a, b, _ in neighbours]
    assert embedding_pairs.choose_distance(None, far, labels, one_picture, 0.1).distance == 0.05
    assert embedding_pairs.choose_distance(None, [], labels, one_picture, 0.1).distance == 0.05  # None verified.
    few = {key: labels[key] for key in list(labels)[:10]}
    assert embedding_pairs.choose_distance(None, neighbours, few, one_picture, 0.1).origin == "uncalibrated"


def test_chains_are_only_large_groups_over_the_share():
    assert groups.largest_set(6, [(0, 1), (1, 2), (4, 5)]) == 3
    assert groups.largest_set(3, []) == 1
    assert not groups.is_chain(9, 20, 0.1)  # Under MIN_CHAIN_SIZE: a small dataset's ordinary group.
    assert groups.is_chain(11, 100, 0.1) and not groups.is_chain(10, 100, 0.1)


def test_the_flags_parse_auto_and_the_limits():
    parsed, _ = parse_args(["--input_dir", "i", "--output_dir", "o"])
    assert parsed.embedding_distance is None and parsed.max_split_moved == 0.25 and not parsed.force_clean_split
    assert parsed.max_group_share == 0.1
    parsed, _ = parse_args(["--input_dir", "i", "--output_dir", "o", "--embedding_distance", "0.01",
                            "--max_split_moved", "0.5", "--force_clean_split", "--predictions_dir", "p"])
    assert parsed.embedding_distance == 0.01 and parsed.max_split_moved == 0.5 and parsed.force_clean_split
    assert parsed.thresholds()["embedding_distance"] == 0.01
    assert config().thresholds()["embedding_distance"] == "auto"


def test_the_warnings_lead_the_report_and_the_summary_lines():
    from beam_pipeline.quality import report_html
    from tf_serving_input.layout import QualityLayout

    page = report_html.render("t", [("images", 3)], [], ["clean_split.csv not written: <it> would empty 'v'"])
    assert page.index('<section id="warnings" data-count="1">') < page.index('<section id="summary">')
    assert "&lt;it&gt; would empty" in page
    assert '<section id="warnings"' not in report_html.render("t", [("images", 3)], [])
    summary = {"images": 80, "rows_failed": 0, "exact_groups": 0, "near_groups": 1, "images_in_groups": 80,
               "duplicate_images": 79, "leaking_groups": 1, "label_conflict_groups": 1, "flagged_images": 0,
               "flagged_by_flag": {}, "suspected_label_errors": None,
               "clean_split": {"rows": 80, "rows_moved": 0, "written": False, "rows_proposed": 16,
                               "images_before": {"train": 64, "validation": 16},
                               "images_after": {"train": 64, "validation": 16}},
               "warnings": ["clean_split.csv not written: it would empty split 'validation'"]}
    lines = findings.format_summary(summary, QualityLayout("/q")).splitlines()
    assert ("Clean split: NOT written (16 rows would move; images per split train 64, validation 16): see the "
            "warning below") in lines
    assert "Warning: clean_split.csv not written: it would empty split 'validation'" in lines
    summary["clean_split"] = {"rows": 80, "rows_moved": 2, "written": True, "rows_proposed": 2,
                              "images_before": {"train": 64, "validation": 16},
                              "images_after": {"train": 66, "validation": 14}}
    assert ("Clean split: 80 rows, 2 moved; images per split train 64, validation 16 -> train 66, validation 14, "
            "in /q/clean_split.csv") in findings.format_summary(summary, QualityLayout("/q"))
