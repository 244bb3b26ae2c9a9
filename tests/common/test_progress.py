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


class _Clock:
    """A clock the test moves: the rate and the heartbeat read it, so nothing here depends on timing."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


_UNFINISHED = {}  # path -> the rest of the record whose start `_write_records` left there


def _write_records(path, count, partial=False):
    """`count` framed TFRecords appended to `path` (first the rest of one left unfinished), and with
    `partial` the start of one more, as a writer's buffer may leave it."""
    from beam_pipeline.common.records import frame_record

    with open(path, "ab") as f:
        rest = _UNFINISHED.pop(path, b"")
        f.write(rest)
        for _ in range(count - (1 if rest else 0)):
            f.write(frame_record(b"x" * 100))
        if partial:
            record = frame_record(b"y" * 100)
            f.write(record[:60])
            _UNFINISHED[path] = record[60:]


def _watching(tmp_path, shards, rows, earlier=(), **options):
    """A ShardProgress over the folder (not started: the test calls `step`), its lines and its clock."""
    (tmp_path / "shards").mkdir(exist_ok=True)
    (tmp_path / "data").mkdir(exist_ok=True)
    for name, count in earlier:
        (tmp_path / "shards" / f"{name}.json").write_text(json.dumps({"rows": count}))
    lines, clock = [], _Clock()
    progress = ShardProgress(OutputLayout(str(tmp_path)), total_shards=shards, total_rows=rows, out=lines.append,
                             clock=clock, **options)
    return progress, lines, clock


def test_a_resume_rates_only_this_runs_images_from_the_first_one_written(tmp_path):
    # Issue 55: a resume began with "ETA 0:11:38" and took 92 s: the rate counted the workers' start-up.
    earlier = [(f"train-0000{i}-of-00008", 100) for i in range(6)]  # 600 rows an earlier run finished.
    progress, lines, clock = _watching(tmp_path, shards=8, rows=800, earlier=earlier, heartbeat=10)
    writing = tmp_path / "data" / "train-00006-of-00008.tfrecord.abc123.incomplete"
    clock.now += 20  # The worker processes start and import TensorFlow: no image yet.
    progress.step()
    assert lines == ["progress: 6/8 shards, 600/800 images, 0.0 images/s, ETA ?, 0:00:20 elapsed"]
    _write_records(writing, 10, partial=True)  # This run's first images: the rate counts from here.
    clock.now += 1
    progress.step()
    _write_records(writing, 50)
    clock.now += 10
    progress.step()  # No shard completed: the heartbeat's line.
    # (660 - 610) images in 10 s: 5 a second, 140 left: 28 s (the start-up counted would say 800 s).
    assert lines[-1] == ("progress: 6/8 shards, 660/800 images (60 in shards being written), 5.0 images/s, "
                         "ETA 0:00:28, 0:00:31 elapsed")


def test_a_shard_being_written_counts_its_whole_records_until_its_status_counts_its_rows(tmp_path):
    progress, lines, clock = _watching(tmp_path, shards=2, rows=40, heartbeat=10)
    writing = tmp_path / "data" / "train-00000-of-00002.tfrecord.abc123.incomplete"
    _write_records(writing, 3, partial=True)
    clock.now += 10
    progress.step()
    assert lines[-1].startswith("progress: 0/2 shards, 3/40 images (3 in shards being written)")
    writing.rename(tmp_path / "data" / "train-00000-of-00002.tfrecord")  # Published: then its status.
    (tmp_path / "shards" / "train-00000-of-00002.json").write_text(json.dumps({"rows": 20}))
    clock.now += 1
    progress.step()  # A shard completed: a line at once.
    assert lines[-1].startswith("progress: 1/2 shards, 20/40 images, ")


def test_a_line_comes_at_least_every_heartbeat_while_no_shard_completes(tmp_path):
    # Issue 55: "ETA 0:00:30" at 31.8 s, then nothing for 28 s (URL rows in flight, then the statistics).
    progress, lines, clock = _watching(tmp_path, shards=1, rows=10, heartbeat=10)
    clock.now += 9
    progress.step()
    assert lines == []
    clock.now += 1
    progress.step()
    assert lines == ["progress: 0/1 shards, 0/10 images, 0.0 images/s, ETA ?, 0:00:10 elapsed"]
    (tmp_path / "shards" / "train-00000-of-00001.json").write_text(json.dumps({"rows": 10}))
    clock.now += 1
    progress.step()
    clock.now += 10
    progress.step()  # After the last shard the run goes on: it still says so.
    assert lines[-1] == "progress: all 1 shards done, 0:00:21 elapsed"
