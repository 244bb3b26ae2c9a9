"""Progress lines while a local run writes shards: done/total, images/s, ETA."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.common import terminal
from beam_pipeline.common.files import read_json

if TYPE_CHECKING:
    from tf_serving_input.layout import RunFolder


def format_duration(seconds: float) -> str:
    """Seconds as H:MM:SS."""
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class ShardProgress(threading.Thread):
    """Watches the shard status folder and prints a line whenever shards complete.

    Runner-agnostic: it only looks at files the shard writer publishes, so it
    works whichever process or machine wrote them.
    """

    def __init__(self, layout: RunFolder, total_shards: int, total_rows: int, interval: float = 1.0,
                 out: Callable[..., Any] = terminal.notice, then: str | None = None) -> None:
        """`then`: what the run does after its last shard, announced once when it completes (a pipeline
        whose steps go on after the shards, e.g. the quality job's pairs, would otherwise look stalled)."""
        super().__init__(daemon=True)
        self._then = then
        self._pattern = layout.status_files_glob()
        self._total_shards = total_shards
        self._total_rows = total_rows
        self._interval = interval
        self._out = out
        self._stop_event = threading.Event()
        self._start_time = time.time()
        self._rows_by_status: dict[str, int] = {}
        self._poll()  # Shards an earlier run finished count as done, not as speed.
        self._baseline_rows = sum(self._rows_by_status.values())

    def _poll(self) -> bool:
        try:
            matches = FileSystems.match([self._pattern])[0].metadata_list
        except Exception:  # noqa: BLE001 - the folder may not exist yet.
            return False
        changed = False
        for metadata in matches:
            if metadata.path in self._rows_by_status:
                continue
            status = read_json(metadata.path)
            if not isinstance(status, dict) or "rows" not in status:
                continue  # Half-visible on an object store: read it next time.
            self._rows_by_status[metadata.path] = status["rows"]
            changed = True
        return changed

    def report(self) -> None:
        """Prints one progress line for what is complete now."""
        done = len(self._rows_by_status)
        rows = sum(self._rows_by_status.values())
        elapsed = time.time() - self._start_time
        rate = (rows - self._baseline_rows) / elapsed if elapsed > 0 else 0.0
        remaining = self._total_rows - rows
        eta = format_duration(remaining / rate) if rate > 0 else "?"
        self._out(f"progress: {done}/{self._total_shards} shards, {rows}/{self._total_rows} images, "
                  f"{rate:.1f} images/s, ETA {eta}")
        self._announce_then()

    def _announce_then(self) -> None:
        """Prints `then` once, when every shard is complete."""
        if self._then and len(self._rows_by_status) >= self._total_shards:
            self._out(f"progress: all {self._total_shards} shards done; now {self._then}")
            self._then = None

    def run(self) -> None:
        self._announce_then()  # Every shard finished by an earlier run: what comes next starts now.
        while not self._stop_event.wait(self._interval):
            if self._poll():
                self.report()

    def stop(self) -> None:
        """Stops watching after a last look, so the final line shows the end state (not `then`: it is over)."""
        self._stop_event.set()
        self.join()
        self._then = None
        if self._poll():
            self.report()
