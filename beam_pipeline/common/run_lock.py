"""One writer per output folder: a lock file naming its holder (host, pid, start time).

    with OutputLock(layout.lock_file) as lock:   # raises LockHeld naming a live holder
        ...

On a local disk the lock is taken atomically (the file is created only if it
does not exist). A lock whose holder is dead (same host, that process gone) is
taken over with a notice; a lock held from another host is never taken over:
its holder cannot be checked from here. On object stores (gs://, s3://)
there is no create-if-absent through Beam's filesystems, so the lock is
advisory: two runs started within the same moment may both proceed. They then
still cannot corrupt each other's shards (each attempt writes its own
temporary file and publishes byte-identical data), but the second's start-up
removes the first's end-of-run files, so start one run per folder. A holder's
pid means something only on its own host: a lock from another machine (a
Dataflow launcher's VM) is never taken over; the user deletes it when that
run is gone (docs/csv-and-images.md, "One run per output folder").
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
from typing import Any, Literal

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.common import terminal
from beam_pipeline.common.files import read_json
from beam_pipeline.common.redact import redact, redact_argv
from tf_serving_input.layout import is_local, temp_path


class LockHeld(RuntimeError):
    """Another live run holds the output folder."""


def _process_start_ticks(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, Linux), or None where that cannot be read.

    With the pid it tells a live holder from a new process that reuses a dead holder's pid.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[19])  # Field 22 of stat; the split starts at field 3.
    except (OSError, IndexError, ValueError):
        return None


def this_process() -> dict[str, Any]:
    """The holder record of this process."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": _process_start_ticks(os.getpid()),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": redact_argv(sys.argv)[:500]}


def holder_alive(holder: dict[str, Any]) -> bool:
    """Whether the process a lock names is alive (only decidable on this host: True elsewhere)."""
    if holder.get("host") != socket.gethostname():
        return True
    pid: Any = holder.get("pid")  # Read from JSON: a non-int is caught as TypeError below.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # Alive, another user's.
    except (TypeError, OverflowError):
        return False
    recorded = holder.get("pid_start")
    return recorded is None or _process_start_ticks(pid) in (None, recorded)


def describe(holder: dict[str, Any]) -> str:
    """The holder of a lock, for messages (its command line redacted: a lock may come from an older version)."""
    # A lock file is anyone's text: each field redacted whole, then escaped and cut (terminal.shown).
    def field(name: str, width: int) -> str:
        return terminal.shown(redact(str(holder.get(name))), width)

    command = f" ({field('command', terminal.PATH_WIDTH)})" if holder.get("command") else ""
    host = field("host", terminal.LABEL_WIDTH)
    return f"pid {field('pid', 20)} on host {host}, started {field('started', 40)}{command}"


# A creator writes its lock within microseconds of creating the file: an unreadable one older than this is damaged.
_WRITE_GRACE_SECONDS = 2.0


class OutputLock:
    """The lock of one output folder; a context manager that releases it only while it is still ours."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.holder: dict[str, Any] | None = None
        self.notice: str | None = None  # Set when a dead holder's lock was taken over.

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> Literal[False]:
        self.release()
        return False

    def acquire(self) -> None:
        """Takes the lock; raises LockHeld naming the holder when another live run has it."""
        me = this_process()
        for _ in range(3):  # A stale lock removed under us, or removed by a competitor: look again.
            if self._create(me):
                self.holder = me
                return
            current = self._read()
            if current is None:
                if self._unreadable_for_good():
                    self.notice = (f"taking over the lock file {self.path}: it is empty or damaged, and no run is "
                                   "writing it")
                    FileSystems.delete([self.path])
                continue  # Gone meanwhile (or unreadable while being written): try again.
            if holder_alive(current):
                raise LockHeld(
                    f"{os.path.dirname(self.path) or '.'} is in use by another run: {describe(current)}. "
                    f"Wait for it to finish, or, if that run is gone, delete {self.path} and run again")
            self.notice = f"taking over the lock of a run that is gone: {describe(current)}"
            if self._read() == current:  # Still the stale lock (not a competitor's fresh one).
                FileSystems.delete([self.path])
        raise LockHeld(f"could not take the lock {self.path}: other runs keep taking it; try again (if no run uses "
                       f"{os.path.dirname(self.path) or '.'}, delete {self.path})")

    def release(self) -> None:
        """Removes the lock if it is still this run's."""
        if self.holder is not None and self._read() == self.holder:
            try:
                FileSystems.delete([self.path])
            except Exception:  # noqa: BLE001 - already gone.
                pass
        self.holder = None

    def _create(self, holder: dict[str, Any]) -> bool:
        data = json.dumps(holder, indent=1).encode("utf-8")
        if is_local(self.path):
            path = self.path.removeprefix("file://")
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            try:
                descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(descriptor, "wb") as f:
                f.write(data)
            return True
        if FileSystems.exists(self.path):  # Advisory on object stores (see the module's note).
            return False
        temp = temp_path(self.path, f"{os.getpid()}")
        with FileSystems.create(temp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            f.write(data)
        FileSystems.rename([temp], [self.path])
        return True

    def _unreadable_for_good(self) -> bool:
        """Whether the lock file exists but holds no lock, and has for longer than its creator takes to write one."""
        if not is_local(self.path):
            return False
        path = self.path.removeprefix("file://")
        try:
            age = time.time() - os.stat(path).st_mtime
        except FileNotFoundError:
            return False
        if age < _WRITE_GRACE_SECONDS:
            time.sleep(_WRITE_GRACE_SECONDS - age)
        return os.path.exists(path) and self._read() is None

    def _read(self) -> Any:
        return read_json(self.path)  # None: absent, or half-written by its creator.
