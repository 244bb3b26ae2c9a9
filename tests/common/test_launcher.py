"""The launcher skeleton every job shares, in-process on a real Beam pipeline: exit codes, one-line errors, the lock."""

import errno
import json
import os
import types

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.common.launcher import Launcher, Refused, listed
from beam_pipeline.common.run_lock import OutputLock
from beam_pipeline.common.shard_file import ShardFileWriter
from tf_serving_input.layout import OutputLayout

BEAM_ARGS = ["--runner=FnApiRunner", "--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _fill_the_disk(value):
    raise OSError(errno.ENOSPC, "No space left on device", "/data/out/x")


class TinyJob(Launcher):
    """A job of two numbers: refuses, fails inside the pipeline, or reports `failed` of 10 rows failed."""

    def __init__(self, root, refuse=None, fail=False, failed=0, max_error_rate=0.1):
        run_flags = types.SimpleNamespace(progress=False, max_error_rate=max_error_rate, overwrite=False)
        super().__init__(OutputLayout(str(root)), BEAM_ARGS, PipelineOptions(BEAM_ARGS), run_flags)
        self.refuse, self.fail, self.failed = refuse, fail, failed
        self.ran = None

    def check(self, step):
        if self.refuse:
            raise Refused(self.refuse)

    def fingerprint(self):
        return {"job": "tiny"}

    def run(self, finished_earlier, step, run_log):
        self.ran = finished_earlier
        work = _fill_the_disk if self.fail else (lambda value: value * 2)
        self.run_pipeline(step, run_log, f"adding numbers in {self.layout.root}",
                          lambda pipeline: pipeline | beam.Create([1, 2]) | beam.Map(work))
        return self.error_budget_code({"rows": 10, "failed": self.failed,
                                       "failed_by_reason": {"file_not_found": self.failed}})


def error_lines(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_a_refusal_is_exit_2_in_one_line_with_passwords_masked_and_nothing_written(tmp_path, capsys):
    job = TinyJob(tmp_path / "out", refuse="postgresql://me:hunter22@db/x cannot take these rows")
    assert job.execute() == 2
    assert error_lines(capsys) == ["error: postgresql://me:***@db/x cannot take these rows"]
    assert job.ran is None and not (tmp_path / "out" / "run.json").exists()


def test_a_run_prepares_its_folder_locks_it_and_releases_the_lock(tmp_path, capsys):
    job = TinyJob(tmp_path / "out")
    assert job.execute() == 0 and job.ran == 0
    assert json.loads((tmp_path / "out" / "run.json").read_text()) == {"job": "tiny"}
    assert not (tmp_path / "out" / ".lock").exists() and error_lines(capsys) == []


def test_a_failure_inside_the_pipeline_is_one_line_and_its_traceback_goes_to_the_log(tmp_path, capsys):
    assert TinyJob(tmp_path / "out", fail=True).execute() == 1
    (line,) = error_lines(capsys)
    assert line.startswith(f"error: no space left on device while adding numbers in {tmp_path / 'out'}"), line
    assert "free space and run the same command again to resume" in line
    log = line.rsplit("(traceback: ", 1)[1].rstrip(")")
    assert "No space left on device" in open(log).read() and "Traceback" in open(log).read()


def test_a_folder_locked_by_a_live_run_is_refused(tmp_path, capsys):
    layout = OutputLayout(str(tmp_path / "out"))
    os.makedirs(layout.root)
    with OutputLock(layout.lock_file):
        job = TinyJob(tmp_path / "out")
        assert job.execute() == 2
    (line,) = error_lines(capsys)
    assert "is in use by another run: pid" in line and job.ran is None
    assert TinyJob(tmp_path / "out").execute() == 0  # Free again once the holder let go.


@pytest.mark.parametrize("failed,code", [(1, 0), (2, 1)])
def test_more_failed_rows_than_the_error_budget_is_exit_1_naming_the_reasons(tmp_path, capsys, failed, code):
    assert TinyJob(tmp_path / "out", failed=failed, max_error_rate=0.1).execute() == code
    lines = error_lines(capsys)
    if code:
        assert lines == [f"error: 2 of 10 rows failed (20.0%), more than --max_error_rate=0.1. Top reasons: "
                         f"file_not_found: 2. Every failed row is listed in {tmp_path / 'out' / 'errors.jsonl'}"]
    else:
        assert lines == []


def test_a_shard_file_missing_after_the_run_is_named(tmp_path, capsys):
    job = TinyJob(tmp_path / "out")
    os.makedirs(job.layout.data_dir)
    os.makedirs(job.layout.status_dir)
    names = [f"train-0000{i}-of-00002" for i in range(2)]
    for name in names:
        with ShardFileWriter(job.layout, name) as shard:
            shard.write_record(b"x")
            shard.publish({"rows": 1, "failed": []})
    assert job.verified_statuses(_Step(), names) is not None
    os.remove(job.layout.shard_file(names[1]))
    assert job.verified_statuses(_Step(), names) is None
    (line,) = error_lines(capsys)
    assert "1 shard file(s) are missing or damaged after the run: data/train-00001-of-00002.tfrecord (missing)" \
        in line


def test_listed_cuts_long_lists():
    assert listed(["a", "b"]) == "a, b"
    assert listed([str(i) for i in range(12)], limit=3) == "0, 1, 2 ..."


class _Step:
    def now(self, doing):
        self.doing = doing
