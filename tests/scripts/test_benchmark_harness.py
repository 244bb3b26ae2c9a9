"""The benchmark's bookkeeping: ratios from interleaved repetitions, the README table, the same-work baseline.

No timing is asserted anywhere: only what is computed from given samples, and that a baseline
yields the very tensors the reader yields.
"""

import os
import sys

import numpy as np
import pytest

import outputs

sys.path.insert(0, os.path.join(outputs.REPO_ROOT, "scripts"))

from benchmarks import report  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    Ratio,
    Results,
    free_port,
    in_turn,
    marginal_rate,
    read_through,
    wait_listening,
)
from benchmarks.targets import TARGETS, met  # noqa: E402


def test_repetitions_alternate_baseline_and_subject():
    calls, logged = [], []

    def step(name, value):
        return lambda repetition: calls.append((name, repetition)) or value * repetition

    samples = in_turn(3, {"baseline": step("baseline", 1), "subject": step("subject", -1)},
                      lambda repetition, sample: logged.append((repetition, sample)))
    assert calls == [("baseline", 0), ("subject", 0), ("baseline", 1), ("subject", 1), ("baseline", 2), ("subject", 2)]
    assert samples == {"baseline": [0, 1, 2], "subject": [0, -1, -2]}
    assert logged[1] == (1, {"baseline": 1, "subject": -1})


def test_a_ratio_reports_its_median_and_range_not_its_best():
    ratio = Ratio("job_vs_pillow", "heavy", [0.97, 1.06, 1.01])  # Target >= 1.0 (issue 39).
    assert (ratio.median, ratio.low, ratio.high) == (1.01, 0.97, 1.06)
    assert ratio.met is True and ratio.summary() == "1.01 (0.97-1.06 over 3)"
    assert Ratio("job_vs_pillow", "light", [0.52, 1.10, 0.58]).met is False  # One good sample is not enough.
    assert Ratio("search_p50_ms", "v", [12.0, 3.0, 11.0]).met is False  # Lower is better: 11 > 10.
    assert Ratio("end_to_end_1_epoch", "heavy", [0.1, 0.2, 0.3]).met is None  # No target set.


def test_every_target_is_judged_in_its_direction():
    for name, target in TARGETS.items():
        if target is None:
            assert met(name, 1.0) is None
        else:
            value, higher = target
            assert met(name, value) is True
            assert met(name, value * (0.9 if higher else 1.1)) is False


def test_marginal_rate_cancels_start_up():
    assert marginal_rate((100, 12.0), (1000, 30.0)) == pytest.approx(50.0)  # 900 images in 18 s.
    assert marginal_rate((100, 12.0), (200, 11.0)) == pytest.approx(200 / 11.0)  # Noise: the big run alone.


def test_a_server_is_waited_for_until_it_listens_and_one_that_exits_is_named_with_its_log(tmp_path):
    import subprocess

    port, log_path = free_port(), tmp_path / "server.log"
    serve = ("import socket, time; s = socket.socket(); s.bind(('127.0.0.1', %d)); time.sleep(0.5); s.listen(); "
             "time.sleep(60)" % port)
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, "-c", serve], stdout=log, stderr=log)
    try:
        wait_listening(port, server, log_path, timeout=30)
        assert server.poll() is None  # Returned because it listens, not because it ended.
    finally:
        server.kill()
        server.wait()
    with open(log_path, "w") as log:
        failing = subprocess.Popen([sys.executable, "-c", "import sys; print('no config'); sys.exit(3)"],
                                   stdout=log, stderr=log)
    with pytest.raises(RuntimeError, match="exited 3:\n(.|\n)*no config"):
        wait_listening(free_port(), failing, log_path, timeout=30)


def test_read_through_reads_every_byte_of_every_file_under_a_folder(tmp_path):
    # What each timed arm of the quality section reads first, untimed, so it starts from the page cache.
    (tmp_path / "data" / "deep").mkdir(parents=True)
    sizes = {"manifest.json": 10, "data/a.tfrecord": 5 << 20, "data/deep/b.tfrecord": 123}  # One over a 4 MiB chunk.
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"x" * size)
    assert read_through(str(tmp_path)) == sum(sizes.values())
    assert read_through(str(tmp_path / "data" / "deep")) == 123


def test_the_readme_table_replaces_only_what_lies_between_its_markers(tmp_path):
    before, after = "# Project\n\ntext before\n", "\ntext after\n"
    readme = tmp_path / "README.md"
    readme.write_text(before + report.README_BEGIN + "\nold table\n" + report.README_END + after)
    results = Results()
    results.ratios = [Ratio("job_vs_pillow", "light, 45 KiB", [0.5, 0.6, 0.55]),
                      Ratio("reader_vs_after", "heavy, 111 KiB", [10.0, 11.0, 12.0])]
    block = report.readme_block(results.ratios, 3, "2 cores, shared")
    assert "wrote" in report.update_readme(str(readme), block)
    text = readme.read_text()
    assert text.startswith(before + report.README_BEGIN) and text.endswith(report.README_END + after)
    assert "old table" not in text and "meets 1 of 2 targets" in text
    assert "`job_vs_pillow` (light, 45 KiB)" in text and "0.55 (0.50-0.60)" in text
    assert "| `reader_vs_after` |" in text and "| 11.00 (10.00-12.00) |" in text
    assert report.update_readme(str(readme), block) and readme.read_text() == text  # Rerunning changes nothing.


def test_a_readme_without_markers_is_left_alone(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    assert "no" in report.update_readme(str(readme), ["table"]) and readme.read_text() == "no markers here\n"
    assert "not written" in report.update_readme(str(tmp_path / "missing.md"), ["table"])


def test_the_same_work_baseline_yields_what_the_reader_yields(tiny_job):
    """Plain tf.data over the same records gives the reader's images and labels: it is the same work."""
    import tensorflow as tf

    from benchmarks.pipelines import same_work_pipeline
    from tf_serving_input.codecs import codec_for
    from tf_serving_input.features import load_preprocess_config
    from tf_serving_input.layout import OutputLayout
    from tf_serving_input.reader import make_dataset, shard_files

    out, _, rows = tiny_job
    count = sum(1 for row in rows if row[2] == "train")
    config = load_preprocess_config(out)
    statistics = OutputLayout(out).load_manifest()["statistics"]
    plain = same_work_pipeline(shard_files(out, "train"), codec_for(config).feature_key, config.image_size,
                               statistics["label_vocabulary"], statistics["pixel_mean"], statistics["pixel_std"],
                               batch=count)
    images, labels = next(iter(plain))
    reader_images, reader_labels = next(iter(make_dataset(out, "train", batch_size=count, training=False)))

    def by_content(images, labels):
        order = np.lexsort((tf.reduce_sum(images, axis=[1, 2, 3]).numpy(), labels.numpy()))
        return images.numpy()[order], labels.numpy()[order]

    images, labels = by_content(images, labels)
    reader_images, reader_labels = by_content(reader_images, reader_labels)
    np.testing.assert_array_equal(labels, reader_labels)
    assert set(labels) <= set(range(len(statistics["label_vocabulary"])))
    np.testing.assert_allclose(images, reader_images, rtol=0, atol=1e-5)


def test_a_run_with_nothing_else_on_the_machine_is_not_said_to_be_shared():
    quiet_line, quiet_sentence = report.machine_lines(0.001)
    assert "nothing else running" in quiet_line and "shared" not in quiet_line
    assert quiet_sentence.startswith("**Nothing else ran") and "under 1%" in quiet_sentence
    busy_line, busy_sentence = report.machine_lines(0.17)
    assert "shared with other work, which took 17%" in busy_line and "used 17%" in busy_sentence
