"""Passwords appear nowhere: one redaction, used by the lock, the one-line errors and the run log."""

import json
import sys

from beam_pipeline.common import redact, run_errors
from beam_pipeline.common.run_lock import OutputLock


def test_url_keyword_and_registered_passwords_are_masked():
    assert redact.redact("postgresql://me:s3cr@t@db:5432/x?host=/s") == "postgresql://me:***@db:5432/x?host=/s"
    assert redact.redact("host=db password='a b' user=me") == "host=db password=*** user=me"
    assert redact.redact("postgresql://me@db/x") == "postgresql://me@db/x"  # Nothing to hide.
    redact.register_url("postgresql://me:pa%2Fss-word@db/x")
    assert redact.redact("FATAL: auth failed (pa/ss-word)") == "FATAL: auth failed (***)"


def test_the_lock_file_and_its_messages_hold_no_password(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["predict", "--database", "postgresql://u:lock-secret-1@db/x"])
    with OutputLock(str(tmp_path / ".lock")):
        text = (tmp_path / ".lock").read_text()
        assert "lock-secret-1" not in text and "u:***@db" in json.loads(text)["command"]
    # A lock an older version wrote with the password in it: the refusal still hides it.
    (tmp_path / ".lock").write_text(json.dumps({"host": "elsewhere", "pid": 1, "command":
                                                "predict --database postgresql://u:old-secret-2@db/x"}))
    try:
        OutputLock(str(tmp_path / ".lock")).acquire()
        raise AssertionError("a lock held from another host was taken")
    except Exception as error:  # noqa: BLE001 - LockHeld
        assert "old-secret-2" not in str(error) and "u:***@db" in str(error)


def test_one_line_errors_and_the_run_log_hold_no_password(tmp_path):
    error = RuntimeError("Traceback (most recent call last):\n  File \"w.py\", line 3\n"
                         "psycopg.OperationalError: connection to postgresql://u:log-secret-3@db/x failed "
                         "[while running 'Upsert']")
    line = run_errors.one_line(error, "loading", None)
    assert line == ("error: OperationalError: connection to postgresql://u:***@db/x failed while loading; "
                    "see the traceback; run the same command again to resume")
    log = run_errors.RunLog(str(tmp_path / "logs"))
    log.records.append("worker: password=log-secret-3")
    assert "log-secret-3" not in open(log.write(error)).read()
