"""Progress lines from shard status files as they appear (runner-agnostic)."""

import json

from beam_pipeline.common.progress import ShardProgress, format_duration
from tf_serving_input.layout import OutputLayout


def test_lines_report_completed_shards_rows_and_eta(tmp_path):
    layout = OutputLayout(str(tmp_path))
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "train-00000-of-00003.json").write_text(json.dumps({"rows": 10}))  # An earlier run's.
    lines = []
    progress = ShardProgress(layout, total_shards=3, total_rows=30, interval=0.01,
                             out=lambda line, flush: lines.append(line))
    (tmp_path / "shards" / "train-00001-of-00003.json").write_text(json.dumps({"rows": 10}))
    (tmp_path / "shards" / "train-00002-of-00003.json.x.incomplete").write_text("{")  # Not a status yet.
    progress.start()
    progress.stop()
    assert lines and lines[-1].startswith("progress: 2/3 shards, 20/30 images")
    assert "ETA" in lines[-1]


def test_format_duration():
    assert format_duration(0) == "0:00:00" and format_duration(3725.4) == "1:02:05"


def test_a_step_after_the_shards_is_announced_once_when_the_last_shard_completes(tmp_path):
    # The quality job finds pairs in the same pipeline after its last shard: without a line, a million
    # images' pair stage would look like a hang after "N/N shards".
    layout = OutputLayout(str(tmp_path))
    (tmp_path / "shards").mkdir()
    lines = []
    progress = ShardProgress(layout, total_shards=2, total_rows=20, interval=0.01,
                             out=lambda line, flush: lines.append(line), then="finding near-duplicate pairs")
    progress.start()
    (tmp_path / "shards" / "train-00000-of-00002.json").write_text(json.dumps({"rows": 10}))
    progress.report()
    assert not any("finding" in line for line in lines)  # Not before the last shard.
    (tmp_path / "shards" / "train-00001-of-00002.json").write_text(json.dumps({"rows": 10}))
    progress.stop()
    assert lines[-2].startswith("progress: 2/2 shards, 20/20 images")
    assert lines[-1] == "progress: all 2 shards done; now finding near-duplicate pairs"
    progress.report()  # Once only.
    assert [line for line in lines if "finding" in line] == [lines[-2]]
