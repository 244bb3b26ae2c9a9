"""Failures of the run itself (not of one image) as one line a user can act on, the traceback in a log.

    error: no space left on device while writing shards to /data/out; free space and run the same
    command again to resume (traceback: /data/out/logs/error-20261130T170000Z.log)

A full disk, a permission, a read-only folder, an unreachable bucket or a
killed worker surfaces from deep inside Beam, often as the text of an
exception raised in another process. `explain` finds the cause in the
exception chain (or, for errors relayed from workers, in their text) and says
what it is and what to do; `RunLog` keeps the traceback, and what Beam's
workers logged, for whoever wants it.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import errno
import logging
import os
import re
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator

from beam_pipeline.common import storage_errors, terminal
from beam_pipeline.common.redact import redact
from tf_serving_input.layout import is_local

# errno -> (what happened, what to do)
_BY_ERRNO = {
    errno.ENOSPC: ("no space left on device", "free space and run the same command again to resume"),
    errno.EDQUOT: ("disk quota exceeded", "free space and run the same command again to resume"),
    errno.EACCES: ("permission denied", "make it writable for this user, or choose another --output_dir"),
    errno.EPERM: ("operation not permitted", "make it writable for this user, or choose another --output_dir"),
    errno.EROFS: ("read-only file system", "choose a writable --output_dir"),
    errno.EIO: ("input/output error", "check the disk, then run the same command again to resume"),
}
# Words in relayed exception texts -> (what happened, what to do)
_BY_TEXT = (
    (("No space left on device",), errno.ENOSPC),
    (("Read-only file system",), errno.EROFS),
    (("Permission denied", "AccessDenied", "403 Forbidden"), errno.EACCES),
)
_UNREACHABLE = ("EndpointConnectionError", "Could not connect", "Connection refused", "Name or service not known",
                "Temporary failure in name resolution", "ServiceUnavailable", "Max retries exceeded")
_KILLED = ("SIGKILL", "exit code -9", "exitcode -9", "was killed", "OOMKilled")
_LOST = ("is no longer reachable", "Lost connection to task manager", "remote task manager")
_ERRNO_TEXT = re.compile(r"\[Errno (\d+)\]")
# "psycopg.errors.UniqueViolation: duplicate key ..." at the start of a line of a relayed traceback.
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Failure|Violation|Exit|Interrupt)): (.+)$",
                             re.MULTILINE)
_WHILE_RUNNING = re.compile(r"\s*\[while running '[^']*'\]")


class Step:
    """What the run is doing now, for the one line a failure prints ("writing shards to ...")."""

    def __init__(self, doing: str) -> None:
        self.doing = doing

    def now(self, doing: str) -> None:
        self.doing = doing


def explain(error: BaseException) -> tuple[str, str]:
    """(what happened, what to do) for a failure of the run, judged from its cause."""
    chain = storage_errors.error_chain(error)
    for current in chain:
        if isinstance(current, OSError) and current.errno in _BY_ERRNO:
            return _BY_ERRNO[current.errno]
    text = "\n".join(f"{type(current).__name__}: {current}" for current in chain)
    match = _ERRNO_TEXT.search(text)
    if match and int(match.group(1)) in _BY_ERRNO:
        return _BY_ERRNO[int(match.group(1))]
    # An object store's refusal or 404 (Google's clients; TensorFlow's GCS client says 403 by its error's type).
    status = storage_errors.http_status(error)
    if status is None and any(type(current).__name__ == "PermissionDeniedError" for current in chain):
        status = 403
    described = storage_errors.describe_status(status)
    if described is not None:
        what, _, advice = described.partition(": ")
        return what, advice
    for words, number in _BY_TEXT:
        if any(word in text for word in words):
            return _BY_ERRNO[number]
    if any(word in text for word in _UNREACHABLE):
        return ("cannot reach the storage service", "check the network, the bucket's name and the "
                "credentials, then run the same command again to resume")
    if any(word in text for word in _LOST):
        return ("a worker machine was lost (a Flink TaskManager stopped or became unreachable)",
                "run the same command again to resume once the cluster is whole")
    if any(word in text for word in _KILLED):
        return ("a worker process was killed (out of memory?)", "run the same command again to resume; "
                "fewer workers (--direct_num_workers) use less memory")
    return (relayed_cause(error)[:400], "see the traceback; run the same command again to resume")


def relayed_cause(error: BaseException) -> str:
    """`Type: message` of what failed, also when Beam relays a worker's traceback as the error's text.

    Beam's runners re-raise a worker's failure as a RuntimeError whose text is the worker's
    traceback (often several, nested): the cause is its last exception line, not its first line.
    """
    text = str(error).strip()
    found = [match for match in _EXCEPTION_LINE.finditer(text) if not match.group(2).startswith("Traceback")]
    if found:
        name, message = found[-1].group(1), found[-1].group(2)
        return f"{name.rsplit('.', 1)[-1]}: {_WHILE_RUNNING.sub('', message).strip()}"
    lines = text.splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")


class RunLog:
    """What Beam and its workers log during a run, kept out of the terminal and written to a log file.

    Beam's local runner relays every worker's log records through the root logger, and its worker
    processes (which share this process's stderr) print a failing bundle's traceback and
    TensorFlow's start-up notices themselves. While `capture` runs, both come here instead: the
    user gets progress, the summary or one line (`one_line`), and this file.
    """

    def __init__(self, log_dir: str, keep: int = 2000) -> None:
        self.log_dir = log_dir
        self.records: collections.deque[str] = collections.deque(maxlen=keep)

    @contextlib.contextmanager
    def capture(self) -> Iterator[RunLog]:
        """Routes the root logger's records (WARNING and up) and everything written to stderr here."""
        handler = _Collector(self.records)
        root = logging.getLogger()
        saved = root.handlers[:], root.level
        root.handlers[:] = [handler]
        root.setLevel(logging.WARNING)
        try:
            with self._stderr_to_records():
                yield self
        finally:
            root.handlers[:], level = saved
            root.setLevel(level)

    @contextlib.contextmanager
    def _stderr_to_records(self) -> Iterator[None]:
        """Points file descriptor 2 (inherited by worker processes) at a pipe read into the records.

        A pipe, not a file: a run failing for lack of disk space must still be able to say so.
        """
        read_end, write_end = os.pipe()
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(write_end, 2)
        os.close(write_end)

        def drain() -> None:
            with open(read_end, "r", encoding="utf-8", errors="replace") as pipe:
                for line in pipe:
                    self.records.append(line.rstrip("\n"))

        reader = threading.Thread(target=drain, name="stderr-to-run-log", daemon=True)
        reader.start()
        interrupted = False
        try:
            with terminal.stderr_kept(saved):  # Progress and notices still reach the user.
                yield
        except KeyboardInterrupt:
            # Ctrl-C stops the runner's threads and worker processes, which fail noisily as they go (gRPC
            # tracebacks): that noise stays in this pipe, and the user gets one line (the command exits 130).
            interrupted = True
            sys.stderr.flush()
            terminal.report_interrupt(saved)
            raise
        finally:
            if not interrupted:  # Done, or failed: descriptor 2 is the terminal's again, for the error line.
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                reader.join(timeout=5)  # Ends once every worker holding the pipe has exited.

    def write(self, error: BaseException | None = None) -> str | None:
        """Writes the captured records (and `error`'s traceback) to a log file; returns its path or None.

        The folder is the run's log folder when it is local and writable, else the temp folder
        (a full or read-only output folder cannot take it).
        """
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        text = "".join(f"{line}\n" for line in self.records)
        if error is not None:
            text += "\n" + "".join(traceback.format_exception(error))
        text = redact(text)
        folders = ([self.log_dir] if is_local(self.log_dir) else []) + [tempfile.gettempdir()]
        for folder in folders:
            path = os.path.join(folder, f"beam-image-pipeline-{stamp}-{os.getpid()}.log")
            try:
                os.makedirs(folder, exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                return path
            except OSError:
                continue
        return None


class _Collector(logging.Handler):
    def __init__(self, records: collections.deque[str]) -> None:
        super().__init__(logging.WARNING)
        self._records = records
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._records.append(self.format(record))
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is dropped, never raised.
            pass


def one_line(error: BaseException, doing: str, log_path: str | None) -> str:
    """`error: <what> while <doing>; <what to do> (traceback: <log>)`."""
    what, advice = explain(error)
    where = f" (traceback: {log_path})" if log_path else ""
    return redact(f"error: {what} while {doing}; {advice}{where}")
