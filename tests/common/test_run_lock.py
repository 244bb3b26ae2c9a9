"""One run per output folder, in-process: a live holder refuses, a dead one (or a reused pid) is taken over."""

import json
import os
import socket
import subprocess
import sys

import pytest

from beam_pipeline.common.run_lock import LockHeld, OutputLock, this_process


def dead_pid():
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)


def test_a_live_holder_refuses_a_second_lock_naming_itself_until_it_lets_go(tmp_path):
    path = str(tmp_path / ".lock")
    with OutputLock(path) as first:
        assert json.loads(open(path).read())["pid"] == os.getpid() and first.notice is None
        with pytest.raises(LockHeld, match=f"is in use by another run: pid {os.getpid()} on host"):
            OutputLock(path).acquire()
    assert not os.path.exists(path)
    with OutputLock(path):
        pass


@pytest.mark.parametrize("holder", [
    {"host": socket.gethostname(), "pid": None, "started": "x"},  # Filled in below: a process that is gone.
    # A live pid reused by another process: its start time is not the holder's.
    {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": 1, "started": "2026-01-01T00:00:00+00:00"},
    {"host": socket.gethostname(), "pid": "not a pid", "started": "x"},
])
def test_a_lock_of_a_run_that_is_gone_is_taken_over_with_a_notice(tmp_path, holder):
    holder = dict(holder, pid=holder["pid"] if holder["pid"] is not None else dead_pid())
    path = tmp_path / ".lock"
    path.write_text(json.dumps(holder))
    with OutputLock(str(path)) as lock:
        assert lock.notice.startswith("taking over the lock of a run that is gone: pid")
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not path.exists()


def test_a_lock_of_another_host_is_respected(tmp_path):
    path = tmp_path / ".lock"
    path.write_text(json.dumps({"host": "another-host.example", "pid": 1, "started": "x"}))
    with pytest.raises(LockHeld, match="on host another-host.example"):
        OutputLock(str(path)).acquire()
    assert path.exists()


def test_release_never_removes_a_lock_that_is_no_longer_ours(tmp_path):
    path = tmp_path / ".lock"
    lock = OutputLock(str(path))
    lock.acquire()
    successor = dict(this_process(), pid=12345678)
    path.write_text(json.dumps(successor))  # Taken over meanwhile (we were thought dead).
    lock.release()
    assert json.loads(path.read_text()) == successor


@pytest.mark.parametrize("content", [b"", b"garbage{", b'{"pid": 1'])
def test_an_empty_or_damaged_lock_file_nobody_writes_is_taken_over_with_a_notice(tmp_path, content):
    path = tmp_path / ".lock"
    path.write_bytes(content)
    os.utime(path, (0, 0))  # Long ago: not a lock being written this instant.
    with OutputLock(str(path)) as lock:
        assert lock.notice == f"taking over the lock file {path}: it is empty or damaged, and no run is writing it"
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not path.exists()


def test_a_lock_files_text_is_escaped_and_cut_in_its_messages(tmp_path):
    """A lock file is anyone's text: an escape sequence or a bidi override in it never reaches the terminal raw."""
    path = tmp_path / ".lock"
    path.write_text(json.dumps({"host": "otherhost\x1b[2J", "pid": 1, "started": "\u202eyesterday",
                                "command": "\x1b[31mRED " + "x" * 10_000}))
    with pytest.raises(LockHeld) as held:
        OutputLock(str(path)).acquire()
    message = str(held.value)
    assert "\x1b" not in message and "\u202e" not in message and "otherhost\\x1b[2J" in message
    assert "\\u202eyesterday" in message and len(message) < 600
    path.write_text(json.dumps({"host": socket.gethostname(), "pid": dead_pid(), "started": "x"}))
    with OutputLock(str(path)) as lock:
        assert lock.notice.endswith("started x")  # No command recorded: no empty "()".
