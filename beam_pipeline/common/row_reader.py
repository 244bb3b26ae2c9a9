"""Reading a shard's rows concurrently when it holds URL rows: `RowReader.reads(rows)`, in row order.

    reader = RowReader(fetch_config, max_file_bytes)
    for row, item in reader.reads(rows):      # item: bytes or a failures.RowFailure
        ...
    reader.close()

Up to `config.concurrency` rows are read at once on a thread pool, and at most
`config.per_host` of them from one host (name and port): a host's further rows
wait in its own queue, not in a pool thread, so one slow or rate-limiting host
cannot take every slot. Rows are handed over in row order (the shard's bytes do
not depend on which fetch ended first); reads run ahead of the consumer by at
most a window of rows and a cap of bytes, so a stuck row bounds memory. The
consumer (TensorFlow) works on the rows already read while later ones are
still being fetched: socket reads and TF ops both release the GIL.

File rows in such a shard go through `rows.read_image_bytes`, the same as in a
file-only shard, which never comes here.
"""

from __future__ import annotations

import concurrent.futures
import threading
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from beam_pipeline.common import urls
from beam_pipeline.common.urls import FetchConfig
from tf_serving_input import failures

# Bytes read ahead of the consumer, at most (one more row may pass it: a single large image still goes).
MAX_BUFFERED_BYTES = 256 * 1024 * 1024
_FILES = "\x00files"  # The queue of file rows: files have no per-host cap.


class ReadableRow(Protocol):
    """What the reader needs of a row: where to read it."""

    @property
    def path(self) -> str: ...

    @property
    def fetch_url(self) -> str: ...


Item = bytes | failures.RowFailure


def host_of(url: str) -> str:
    """The per-host queue a URL row waits in: its lower-case host and port ('' when unparsable)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        return f"{(parts.hostname or '').lower()}:{parts.port or parts.scheme.lower()}"
    except ValueError:
        return ""


class RowReader:
    """Reads rows on a thread pool with per-host caps, handing them over in row order."""

    def __init__(self, config: FetchConfig, max_file_bytes: int,
                 fetch: Callable[[str], bytes] | None = None,
                 read_file: Callable[[str, int], bytes] | None = None,
                 window: int | None = None, max_buffered_bytes: int = MAX_BUFFERED_BYTES) -> None:
        from beam_pipeline.common.rows import read_image_bytes

        self._config = config
        self._max_file_bytes = max_file_bytes
        self._fetcher = None
        if fetch is None:
            from beam_pipeline.common.http_fetch import HttpFetcher

            self._fetcher = HttpFetcher(config, max_file_bytes)
            fetch = self._fetcher.fetch
        self._fetch = fetch
        self._read_file = read_file or read_image_bytes
        self._window = window or max(64, 4 * config.concurrency)
        self._max_buffered = max_buffered_bytes
        self._pool = concurrent.futures.ThreadPoolExecutor(config.concurrency, thread_name_prefix="url-fetch")

    def close(self) -> None:
        """Stops the threads and closes the connections (rows being fetched are abandoned)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._fetcher is not None:
            self._fetcher.close()

    def read(self, row: ReadableRow) -> Item:
        """One row's bytes or its RowFailure, on the calling thread."""
        try:
            if urls.is_http_url(row.path):
                return self._fetch(row.fetch_url or row.path)
            return self._read_file(row.path, self._max_file_bytes)
        except failures.RowFailure as failure:
            return failure
        except Exception as error:  # noqa: BLE001 - recorded as the row's failure, never raised.
            return failures.RowFailure(failures.UNEXPECTED, f"{type(error).__name__}: {error}")

    def reads(self, rows: Iterable[ReadableRow]) -> Iterator[tuple[ReadableRow, Item]]:
        """Yields (row, bytes or RowFailure) for every row, in the order given."""
        rows = list(rows)
        state = _Schedule(self, rows)
        try:
            for position, row in enumerate(rows):
                yield row, state.take(position)
        finally:
            state.abandon()


class _Schedule:
    """One `reads` call: which rows are queued per host, in flight, done, and handed over."""

    def __init__(self, reader: RowReader, rows: list[ReadableRow]) -> None:
        self._reader = reader
        self._rows = rows
        self._lock = threading.Condition()
        self._queues: dict[str, deque[int]] = {}
        self._in_flight: dict[str, int] = {}
        self._done: dict[int, Item] = {}
        self._buffered = 0
        self._next = 0  # The next row to queue.
        self._handed = 0  # Rows handed over so far.
        self._abandoned = False
        with self._lock:
            self._dispatch()

    def take(self, position: int) -> Item:
        """Waits for row `position` (the next in order) and hands it over."""
        with self._lock:
            while position not in self._done:
                self._lock.wait()
            item = self._done.pop(position)
            self._buffered -= len(item) if isinstance(item, bytes) else 0
            self._handed = position + 1
            self._dispatch()
            return item

    def abandon(self) -> None:
        """The consumer stopped: rows not started are never started."""
        with self._lock:
            self._abandoned = True
            self._queues.clear()

    def _dispatch(self) -> None:
        """Queues rows within the window, then starts what the caps allow (the lock held)."""
        if self._abandoned:
            return
        while self._next < len(self._rows) and self._next < self._handed + self._reader._window:
            row = self._rows[self._next]
            host = host_of(row.path) if urls.is_http_url(row.path) else _FILES
            self._queues.setdefault(host, deque()).append(self._next)
            self._next += 1
        per_host = self._reader._config.per_host
        for host, queue in self._queues.items():
            while queue and (host == _FILES or self._in_flight.get(host, 0) < per_host):
                # Over the byte cap only the row the consumer waits for starts (never a deadlock).
                if self._buffered >= self._reader._max_buffered and queue[0] != self._handed:
                    break
                position = queue.popleft()
                self._in_flight[host] = self._in_flight.get(host, 0) + 1
                self._reader._pool.submit(self._run, position, host)

    def _run(self, position: int, host: str) -> None:
        item = self._reader.read(self._rows[position])
        with self._lock:
            self._in_flight[host] -= 1
            self._done[position] = item
            self._buffered += len(item) if isinstance(item, bytes) else 0
            self._dispatch()
            self._lock.notify_all()
