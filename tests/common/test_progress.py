"""Progress lines from shard status files as they appear (runner-agnostic)."""

import json
import time

from beam_pipeline.common.progress import ShardProgress, format_duration
from tf_serving_input.layout import OutputLayout


def test_lines_report_completed_shards_rows_and_eta(tmp_path):
    layout = OutputLayout(str(tmp_path))
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "train-00000-of-00003.json").write_text(json.dumps({"rows": 10}))  # An earlier run's.
    lines = []
    progress = ShardProgress(layout, total_shards=3, total_rows=30, interval=0.01,
                             out=lines.append)
    (tmp_path / "shards" / "train-00001-of-00003.json").write_text(json.dumps({"rows": 10}))
    (tmp_path / "shards" / "train-00002-of-00003.json.x.incomplete").write_text("{")  # Not a status yet.
    progress.start()
    progress.stop()
    assert lines and lines[-1].startswith("progress: 2/3 shards, 20/30 images")
    assert "ETA" in lines[-1]


def test_format_duration():
    assert format_duration(0) == "0:00:00" and format_duration(3725.4) == "1:02:05"


def _wait_for(lines, text):
    deadline = time.monotonic() + 30  # A bound for a loaded machine, not a timing check.
    while not any(text in line for line in lines) and time.monotonic() < deadline:
        time.sleep(0.01)


def _started_monitor(tmp_path, shards, interval):
    """A running ShardProgress over `shards` shards of 10 rows each, announcing the pairs; (it, its lines)."""
    (tmp_path / "shards").mkdir(exist_ok=True)
    lines = []
    progress = ShardProgress(OutputLayout(str(tmp_path)), total_shards=shards, total_rows=10 * shards,
                             interval=interval, out=lines.append,
                             then="finding near-duplicate pairs")
    progress.start()
    return progress, lines


def test_a_step_after_the_shards_is_announced_once_when_the_last_shard_completes(tmp_path):
    # The quality job finds pairs in the same pipeline after its last shard: without a line, a million
    # images' pair stage would look like a hang after "N/N shards".
    progress, lines = _started_monitor(tmp_path, shards=2, interval=0.01)
    (tmp_path / "shards" / "train-00000-of-00002.json").write_text(json.dumps({"rows": 10}))
    _wait_for(lines, "1/2 shards")
    assert not any("finding" in line for line in lines)  # Not before the last shard.
    (tmp_path / "shards" / "train-00001-of-00002.json").write_text(json.dumps({"rows": 10}))
    _wait_for(lines, "finding")
    progress.stop()
    assert [line for line in lines if "finding" in line] == [
        "progress: all 2 shards done; now finding near-duplicate pairs"]
    assert lines[lines.index("progress: all 2 shards done; now finding near-duplicate pairs") - 1].startswith(
        "progress: 2/2 shards, 20/20 images")


def test_the_step_after_the_shards_is_announced_at_once_when_an_earlier_run_finished_them(tmp_path):
    # A rerun after a kill during the pair stage: every shard is kept, and the pairs start right away.
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "train-00000-of-00001.json").write_text(json.dumps({"rows": 10}))
    progress, lines = _started_monitor(tmp_path, shards=1, interval=0.01)
    _wait_for(lines, "finding")
    progress.stop()
    assert lines == ["progress: all 1 shards done; now finding near-duplicate pairs"]


def test_a_step_after_the_shards_is_not_announced_once_the_run_is_over(tmp_path):
    # The last shard seen only by the final look after the pipeline returned: its next step is done too.
    progress, lines = _started_monitor(tmp_path, shards=1, interval=60)
    (tmp_path / "shards" / "train-00000-of-00001.json").write_text(json.dumps({"rows": 10}))
    progress.stop()
    assert len(lines) == 1 and lines[0].startswith("progress: 1/1 shards, 10/10 images")
