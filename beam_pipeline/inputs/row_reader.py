"""Reading a shard's rows concurrently when it holds URL rows: `RowReader.batches(rows)`, as they complete.

    reader = RowReader(fetch_config, max_file_bytes)
    for batch in reader.batches(rows, max_rows=8, max_bytes=32 << 20):
        for position, row, item, fields in batch:   # item: bytes or a failures.RowFailure
            ...                                     # fields: a URL row's url, http_status, attempts
    reader.close()

Up to `config.concurrency` rows are read at once on a thread pool, and at most
`config.per_host` of them from one host (name and port): a host's further rows
wait in its own queue, not in a pool thread, so one slow or rate-limiting host
cannot take every slot. Rows come back as they complete, a batch of whatever is
ready at a time: a row that waits out its whole --url_timeout holds no other
row, and TensorFlow works on the rows already read while later ones are still
on the network (socket reads and TF ops both release the GIL). The caller puts
the outcomes back in row order (`preprocess/row_order.py`). Reads stop
starting while the bytes read and not yet taken pass a cap.

File rows in such a shard go through `rows.read_image_bytes`, the same as in a
file-only shard, which never comes here. A URL row comes with the fields
errors.jsonl keeps of its fetch (`url`, `http_status`, `attempts`), so that a
row whose bytes later fail to decode still carries them; a file row with none.
"""

from __future__ import annotations

import concurrent.futures
import threading
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from beam_pipeline.common.redact import redact, redact_url
from beam_pipeline.inputs import urls
from beam_pipeline.inputs.urls import FetchConfig
from tf_serving_input import failures

if TYPE_CHECKING:
    from beam_pipeline.inputs.http_fetch import Fetched

# Bytes read and not yet taken by the consumer before no new read starts (the reads in flight still land).
MAX_BUFFERED_BYTES = 256 * 1024 * 1024
_FILES = "\x00files"  # The queue of file rows (capped like a host: local reads need no more at once).


class ReadableRow(Protocol):
    """What the reader needs of a row: where to read it."""

    @property
    def path(self) -> str: ...

    @property
    def fetch_url(self) -> str: ...


Item = bytes | failures.RowFailure
# What errors.jsonl keeps of a URL row's fetch; empty for a file row.
Fields = dict[str, object]
# A fetch function: the body with its fields (HttpFetcher.get), or bare bytes (no fields).
Fetch = Callable[[str], "Fetched | bytes"]


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
                 fetch: Fetch | None = None,
                 read_file: Callable[[str, int], bytes] | None = None,
                 max_buffered_bytes: int = MAX_BUFFERED_BYTES) -> None:
        from beam_pipeline.inputs.rows import read_image_bytes

        self._config = config
        self._max_file_bytes = max_file_bytes
        self._fetcher = None
        if fetch is None:
            from beam_pipeline.inputs.http_fetch import HttpFetcher

            self._fetcher = HttpFetcher(config, max_file_bytes)
            fetch = self._fetcher.get
        self._fetch: Fetch = fetch
        self._read_file = read_file or read_image_bytes
        self._max_buffered = max_buffered_bytes
        self._pool = concurrent.futures.ThreadPoolExecutor(config.concurrency, thread_name_prefix="url-fetch")

    def close(self) -> None:
        """Stops the threads and closes the connections (rows being fetched are abandoned)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._fetcher is not None:
            self._fetcher.close()

    def read(self, row: ReadableRow) -> tuple[Item, Fields]:
        """One row's bytes or its RowFailure, and its fields, on the calling thread."""
        is_url = urls.is_http_url(row.path)
        if getattr(row, "failure", ()):  # A bad cell (a Row's `failure`): neither read nor fetched.
            return failures.RowFailure(*row.failure), {}  # type: ignore[attr-defined]
        try:
            if not is_url:
                return self._read_file(row.path, self._max_file_bytes), {}
            answer = self._fetch(row.fetch_url or row.path)
            if isinstance(answer, bytes):
                return answer, {}
            return answer.body, answer.fields
        except failures.RowFailure as failure:
            return failure, failure.fields
        except Exception as error:  # noqa: BLE001 - recorded as the row's failure, never raised.
            # HttpFetcher.get raises only RowFailures: this is a bug outside it (or a test's fetch function).
            fields: Fields = {"url": redact_url(row.path), "http_status": None, "attempts": None} if is_url else {}
            detail = redact(f"{type(error).__name__}: {error}")  # Its words may quote the URL with its password.
            return failures.RowFailure(failures.UNEXPECTED, detail, fields), fields

    def batches(self, rows: Iterable[ReadableRow], max_rows: int,
                max_bytes: int) -> Iterator[list[tuple[int, ReadableRow, Item, Fields]]]:
        """Yields every row once as (position in `rows`, row, bytes or RowFailure, fields), in batches of the
        rows that completed: at least one, at most `max_rows` and (but for a single row) `max_bytes` bytes."""
        rows = list(rows)
        schedule = _Schedule(self, rows)
        try:
            taken = 0
            while taken < len(rows):
                batch = schedule.take(max_rows, max_bytes)
                taken += len(batch)
                yield [(position, rows[position], item, fields) for position, item, fields in batch]
        finally:
            schedule.abandon()


class _Schedule:
    """One `batches` call: which rows are queued per host, in flight, and done but not taken."""

    def __init__(self, reader: RowReader, rows: list[ReadableRow]) -> None:
        self._reader = reader
        self._rows = rows
        self._lock = threading.Condition()
        self._queues: dict[str, deque[int]] = {}
        self._in_flight: dict[str, int] = {}
        self._done: deque[tuple[int, Item, Fields]] = deque()
        self._buffered = 0  # Bytes read and not yet taken.
        self._next = 0  # The next row to queue.
        self._abandoned = False
        with self._lock:
            self._dispatch()

    def take(self, max_rows: int, max_bytes: int) -> list[tuple[int, Item, Fields]]:
        """Waits for at least one completed row, then takes what else completed, within the limits."""
        with self._lock:
            while not self._done:
                self._lock.wait()
            batch: list[tuple[int, Item, Fields]] = []
            size = 0
            while self._done and len(batch) < max_rows:
                item = self._done[0][1]
                length = len(item) if isinstance(item, bytes) else 0
                if batch and size + length > max_bytes:
                    break
                batch.append(self._done.popleft())
                size += length
            self._buffered -= size
            self._dispatch()
            return batch

    def abandon(self) -> None:
        """The consumer stopped: rows not started are never started."""
        with self._lock:
            self._abandoned = True
            self._queues.clear()

    def _dispatch(self) -> None:
        """Queues the rows not yet queued, then starts what the caps allow (the lock held)."""
        if self._abandoned:
            return
        while self._next < len(self._rows):
            row = self._rows[self._next]
            host = host_of(row.path) if urls.is_http_url(row.path) else _FILES
            self._queues.setdefault(host, deque()).append(self._next)
            self._next += 1
        if self._buffered >= self._reader._max_buffered:
            return  # TensorFlow is behind: no new reads until it takes some.
        per_host = self._reader._config.per_host
        for host, queue in self._queues.items():
            while queue and self._in_flight.get(host, 0) < per_host:
                position = queue.popleft()
                self._in_flight[host] = self._in_flight.get(host, 0) + 1
                self._reader._pool.submit(self._run, position, host)

    def _run(self, position: int, host: str) -> None:
        item, fields = self._reader.read(self._rows[position])
        with self._lock:
            self._in_flight[host] -= 1
            self._done.append((position, item, fields))
            self._buffered += len(item) if isinstance(item, bytes) else 0
            self._dispatch()
            self._lock.notify_all()
