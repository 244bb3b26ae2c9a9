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
