"""Failures of the run itself, in-process: the cause found in the chain or in a worker's relayed text, one line."""

import errno

import pytest

from beam_pipeline.common.run_errors import RunLog, explain, one_line, relayed_cause

RELAYED = """Traceback (most recent call last):
  File "apache_beam/runners/worker/sdk_worker.py", line 300, in _execute
psycopg.errors.UniqueViolation: duplicate key value violates unique constraint "t_pkey" [while running 'Load/Upsert']
"""


@pytest.mark.parametrize("error,what", [
    (OSError(errno.ENOSPC, "No space left on device"), "no space left on device"),
    (RuntimeError("write failed"), "RuntimeError: write failed"),
    (RuntimeError("OSError: [Errno 30] Read-only file system: '/data/out'"), "read-only file system"),
    (RuntimeError("botocore EndpointConnectionError: Could not connect to the endpoint URL"),
     "cannot reach the storage service"),
    (RuntimeError("Worker exited with exit code -9"), "a worker process was killed (out of memory?)"),
    (RuntimeError("Lost connection to task manager 'tm-1'"), "a worker machine was lost"),
])
def test_the_cause_is_found_in_the_chain_or_the_relayed_text(error, what):
    assert explain(error)[0].startswith(what)


def test_a_cause_raised_from_another_is_found():
    try:
        try:
            raise OSError(errno.EACCES, "Permission denied", "/data/out")
        except OSError as inner:
            raise RuntimeError("Beam failed") from inner
    except RuntimeError as outer:
        assert explain(outer) == ("permission denied",
                                  "make it writable for this user, or choose another --output_dir")


def test_a_relayed_worker_traceback_names_its_last_exception_line():
    assert relayed_cause(RuntimeError(RELAYED)) == (
        'UniqueViolation: duplicate key value violates unique constraint "t_pkey"')


def test_one_line_names_the_step_the_advice_and_the_log_and_the_log_keeps_the_traceback(tmp_path):
    log = RunLog(str(tmp_path / "logs"))
    try:
        raise OSError(errno.ENOSPC, "No space left on device", "postgresql://u:pw123@h/db")
    except OSError as error:
        path = log.write(error)
        line = one_line(error, "writing shards to /data/out", path)
    assert line == (f"error: no space left on device while writing shards to /data/out; free space and run the "
                    f"same command again to resume (traceback: {path})")
    text = open(path).read()
    assert "Traceback" in text and "No space left on device" in text and "pw123" not in text
