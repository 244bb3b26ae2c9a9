"""Progress lines while a local run writes shards: done/total, images/s, ETA, elapsed time.

    progress: 5/16 shards, 1,210/4,000 images (230 in shards being written), 41.3 images/s, ETA 0:01:08,
    0:00:37 elapsed

Shards count as done when their status file appears. Images count as they are written: a shard's
records are read from its temporary file's TFRecord framing (headers only, each file walked once from
where the last look stopped) while it is written on a local disk, so a run whose shards take minutes each
still moves. The rate is this run's work only: shards an earlier run finished are not speed, and neither
is the start-up before this run's first image lands (the worker processes start and import TensorFlow:
counting that made a resume's first ETA 0:11:38 for a 92 s run). A line comes whenever a shard completes,
and at least every `heartbeat` seconds otherwise (URL rows in flight, the step after the last shard), with
the time elapsed.
"""

from __future__ import annotations

import glob
import os
import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.common import terminal
from beam_pipeline.common.files import read_json
from tf_serving_input.layout import TEMP_SUFFIX, is_local

if TYPE_CHECKING:
    from tf_serving_input.layout import RunFolder

# The longest silence between two progress lines, in seconds.
HEARTBEAT_SECONDS = 10.0
# TFRecord framing: length (uint64), its masked CRC (uint32), the data, the data's masked CRC (uint32).
_HEADER = struct.Struct("<Q")
_FRAMING_BYTES = 16


def format_duration(seconds: float) -> str:
    """Seconds as H:MM:SS."""
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class _RecordCounter:
    """Whole TFRecords in a file that is being appended to, walking only the framing not walked before."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.records = 0

    def update(self) -> int:
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                while self.offset + 12 <= size:
                    f.seek(self.offset)
                    header = f.read(8)
                    if len(header) < 8:
                        break
                    end = self.offset + _FRAMING_BYTES + _HEADER.unpack(header)[0]
                    if end > size:
                        break  # The record is still being written.
                    self.offset, self.records = end, self.records + 1
        except OSError:
            pass  # Published (renamed) or deleted meanwhile: its status counts it now.
        return self.records


class ShardProgress(threading.Thread):
    """Watches the shard status folder (and the shards being written) and prints progress lines.

    Runner-agnostic: it only looks at files the shard writer publishes, so it
    works whichever process or machine wrote them.
    """

    def __init__(self, layout: RunFolder, total_shards: int, total_rows: int, interval: float = 1.0,
                 out: Callable[..., Any] = terminal.notice, then: str | None = None,
                 heartbeat: float = HEARTBEAT_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        """`then`: what the run does after its last shard, announced once when it completes (a pipeline
        whose steps go on after the shards, e.g. the quality job's pairs, would otherwise look stalled).
        `clock`: seconds, for the rate and the heartbeat (a test's own clock)."""
        super().__init__(daemon=True)
        self._then = then
        self._pattern = layout.status_files_glob()
        # Shards being written, counted record by record: TFRecord shards on a local disk only (an object
        # store shows a file once it is complete; Parquet cannot be counted before its footer).
        writing = layout.path(layout.DATA_DIR, "*" + layout.SHARD_SUFFIX + ".*" + TEMP_SUFFIX)
        self._writing_pattern = writing if layout.SHARD_SUFFIX == ".tfrecord" and is_local(writing) else None
        self._counters: dict[str, _RecordCounter] = {}
        self._total_shards = total_shards
        self._total_rows = total_rows
        self._interval = interval
        self._heartbeat = heartbeat
        self._clock = clock
        self._out = out
        self._stop_event = threading.Event()
        self._rows_by_status: dict[str, int] = {}
        self._in_flight = 0
        self._poll()  # Shards an earlier run finished count as done, not as speed.
        self._baseline_rows = sum(self._rows_by_status.values())
        self._start = self._last_line = self._clock()
        # Where the rate is measured from: the start, until this run's first image is seen being written.
        self._origin_time, self._origin_rows, self._origin_seen = self._start, self._baseline_rows, False

    @property
    def rows(self) -> int:
        """Images done: the rows of complete shards and the records of shards being written."""
        return sum(self._rows_by_status.values()) + self._in_flight

    def _poll(self) -> bool:
        """Looks at the files once; True when a shard completed since the last look."""
        changed = False
        try:
            matches = FileSystems.match([self._pattern])[0].metadata_list
        except Exception:  # noqa: BLE001 - the folder may not exist yet.
            matches = []
        for metadata in matches:
            if metadata.path in self._rows_by_status:
                continue
            status = read_json(metadata.path)
            if not isinstance(status, dict) or "rows" not in status:
                continue  # Half-visible on an object store: read it next time.
            self._rows_by_status[metadata.path] = status["rows"]
            changed = True
        if self._writing_pattern is not None:
            paths = set(glob.glob(self._writing_pattern))
            self._counters = {path: self._counters.get(path) or _RecordCounter(path) for path in paths}
            self._in_flight = sum(counter.update() for counter in self._counters.values())
        return changed

    def _rate(self, now: float) -> float:
        """Images a second, from this run's work only (see the module's docstring)."""
        rows = self.rows
        if not self._origin_seen and rows > self._baseline_rows:
            self._origin_seen = True
            if sum(self._rows_by_status.values()) == self._baseline_rows:
                # This run's first images, seen being written: the start-up is over, the rate counts from
                # here. (A shard completed before any was seen being written: the start stays the origin.)
                self._origin_time, self._origin_rows = now, rows
        elapsed = now - self._origin_time
        return (rows - self._origin_rows) / elapsed if elapsed > 0 else 0.0

    def report(self) -> None:
        """Prints one progress line for what is done now."""
        now = self._clock()
        done, rows = len(self._rows_by_status), self.rows
        rate = self._rate(now)
        remaining = max(0, self._total_rows - rows)
        eta = format_duration(remaining / rate) if rate > 0 else "?"
        writing = f" ({self._in_flight} in shards being written)" if self._in_flight else ""
        self._out(f"progress: {done}/{self._total_shards} shards, {rows}/{self._total_rows} images{writing}, "
                  f"{rate:.1f} images/s, ETA {eta}, {format_duration(now - self._start)} elapsed")
        self._last_line = now
        self._announce_then()

    def _announce_then(self) -> None:
        """Prints `then` once, when every shard is complete."""
        if self._then and len(self._rows_by_status) >= self._total_shards:
            self._out(f"progress: all {self._total_shards} shards done; now {self._then}")
            self._then = None

    def step(self) -> None:
        """One look: a line when a shard completed, or when `heartbeat` seconds passed without one."""
        changed = self._poll()
        now = self._clock()
        if not changed and now - self._last_line < self._heartbeat:
            self._rate(now)  # Notes this run's first images as they appear, for the rate.
            return
        if changed or len(self._rows_by_status) < self._total_shards:
            self.report()
        else:  # Every shard is done; the run goes on (statistics, pairs, a resume's end): say it still does.
            self._out(f"progress: all {self._total_shards} shards done, {format_duration(now - self._start)} "
                      "elapsed")
            self._last_line = now

    def run(self) -> None:
        self._announce_then()  # Every shard finished by an earlier run: what comes next starts now.
        while not self._stop_event.wait(self._interval):
            self.step()

    def stop(self) -> None:
        """Stops watching after a last look, so the final line shows the end state (not `then`: it is over)."""
        self._stop_event.set()
        self.join()
        self._then = None
        if self._poll():
            self.report()
