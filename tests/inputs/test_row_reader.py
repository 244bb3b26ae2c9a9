"""RowReader: rows read concurrently with per-host caps, handed over as they complete, memory bounded."""

import dataclasses
import threading
import time

from beam_pipeline.inputs.row_reader import RowReader
from beam_pipeline.inputs.urls import FetchConfig
from tf_serving_input import failures


@dataclasses.dataclass(frozen=True)
class FakeRow:
    path: str
    fetch_url: str = ""


class Recorder:
    """A fetch function that records how many fetches run at once, per host, and can slow one host down."""

    def __init__(self, delays=None):
        self.lock = threading.Lock()
        self.running = {}
        self.peak = {}
        self.started = []
        self.delays = delays or {}

    def __call__(self, url):
        host = url.split("/")[2]
        with self.lock:
            self.running[host] = self.running.get(host, 0) + 1
            self.peak[host] = max(self.peak.get(host, 0), self.running[host])
            self.started.append(url)
        time.sleep(self.delays.get(host, 0.01))
        with self.lock:
            self.running[host] -= 1
        if url.endswith("/missing"):
            raise failures.RowFailure(failures.HTTP_404, url)
        return url.encode()


def read_all(reader, rows, max_rows=8, max_bytes=1 << 20):
    batches = list(reader.batches(rows, max_rows, max_bytes))
    return batches, {position: (row, item) for batch in batches for position, row, item, _ in batch}


def fields_of(reader, rows):
    return {position: fields for batch in reader.batches(rows, 8, 1 << 20) for position, _, _, fields in batch}


def test_every_row_comes_back_once_with_its_position_failures_and_files_included(tmp_path):
    image = tmp_path / "a.bin"
    image.write_bytes(b"file bytes")
    rows = [FakeRow(f"http://host{i % 3}/{i}") for i in range(30)] + [FakeRow(str(image)),
                                                                      FakeRow("http://host0/missing")]
    reader = RowReader(FetchConfig(concurrency=8, per_host=2), 1024, fetch=Recorder())
    try:
        batches, by_position = read_all(reader, rows, max_rows=4)
    finally:
        reader.close()
    assert sorted(by_position) == list(range(len(rows))) and sum(map(len, batches)) == len(rows)
    assert all(1 <= len(batch) <= 4 for batch in batches)
    assert [by_position[i] for i in range(30)] == [(row, row.path.encode()) for row in rows[:30]]
    assert by_position[30] == (rows[30], b"file bytes")
    assert by_position[31][1].reason == failures.HTTP_404


def test_one_slow_host_takes_at_most_its_share_of_the_slots():
    recorder = Recorder(delays={"slow": 0.3})
    rows = [FakeRow(f"http://slow/{i}") for i in range(8)] + [FakeRow(f"http://fast/{i}") for i in range(40)]
    reader = RowReader(FetchConfig(concurrency=6, per_host=2), 1024, fetch=recorder)
    try:
        batches, _ = read_all(reader, rows)
    finally:
        reader.close()
    assert recorder.peak == {"slow": 2, "fast": 2}
    # The fast host's rows were not held behind the slow host's: they came back first.
    first_slow = next(i for i, batch in enumerate(batches) if any(row.path.startswith("http://slow")
                                                                  for _, row, _, _ in batch))
    assert sum(len(batch) for batch in batches[:first_slow]) >= 20


def test_a_stuck_row_holds_no_other_row():
    release = threading.Event()

    def fetch(url):
        if url.endswith("/0"):
            release.wait(5)
        return b"x"

    rows = [FakeRow(f"http://h{i}/{i}") for i in range(100)]
    reader = RowReader(FetchConfig(concurrency=4, per_host=4), 1024, fetch=fetch)
    try:
        batches = reader.batches(rows, 8, 1 << 20)
        seen = set()
        while len(seen) < 99:
            seen |= {position for position, _, _, _ in next(batches)}
        assert 0 not in seen  # Every other row came back while row 0 was stuck.
        release.set()
        assert [position for position, _, _, _ in next(batches)] == [0]
    finally:
        release.set()
        reader.close()


def test_no_read_starts_while_too_many_bytes_wait():
    rows = [FakeRow(f"http://h/{i}") for i in range(50)]
    started = []

    def fetch(url):
        started.append(url)
        return bytes(100)

    reader = RowReader(FetchConfig(concurrency=4, per_host=4), 1024, fetch=fetch, max_buffered_bytes=1000)
    try:
        batches = reader.batches(rows, 1, 1 << 20)
        next(batches)
        time.sleep(0.2)
        # About 1000 bytes wait (plus the reads in flight when the cap was reached), not 50 rows' worth.
        assert len(started) <= 1000 // 100 + 4 + 1
        assert sum(len(batch) for batch in batches) == 49
    finally:
        reader.close()


def test_a_batch_stays_within_its_byte_limit_but_a_single_large_row_still_passes():
    rows = [FakeRow(f"http://h/{i}") for i in range(6)]
    reader = RowReader(FetchConfig(concurrency=1, per_host=1), 1 << 20,
                       fetch=lambda url: bytes(300 if url.endswith("/5") else 100))
    try:
        batches, _ = read_all(reader, rows, max_rows=8, max_bytes=250)
    finally:
        reader.close()
    for batch in batches:
        sizes = [len(item) for _, _, item, _ in batch]
        assert len(batch) == 1 or sum(sizes) <= 250


def test_an_unexpected_error_fails_only_its_row_with_the_url_and_no_password():
    def fetch(url):
        if url.endswith("/1"):
            raise RuntimeError(f"boom at {url}")
        return b"ok"

    reader = RowReader(FetchConfig(concurrency=2, per_host=2), 1024, fetch=fetch)
    try:
        _, by_position = read_all(reader, [FakeRow(f"http://u:***@h/{i}", fetch_url=f"http://u:pw-secret@h/{i}")
                                           for i in range(3)])
    finally:
        reader.close()
    assert by_position[0][1] == by_position[2][1] == b"ok"
    failure = by_position[1][1]
    assert failure.reason == failures.UNEXPECTED and "boom at http://u:***@h/1" in failure.detail
    assert failure.fields == {"url": "http://u:***@h/1", "http_status": None, "attempts": None}


def test_a_url_row_comes_with_its_fetch_fields_whether_it_was_fetched_or_failed(loopback, tmp_path):
    """The fields errors.jsonl keeps of a URL row travel with its bytes too (issue 55: a row failing after its
    download lost them); a file row has none."""
    import http_server as serve

    loopback.route("/reader/a.jpg", serve.image(b"not decoded here"))
    (tmp_path / "f.bin").write_bytes(b"file")
    rows = [FakeRow(loopback.url("/reader/a.jpg")), FakeRow(loopback.url("/reader/missing")),
            FakeRow(str(tmp_path / "f.bin")), FakeRow("http://u:***@127.0.0.1:1/x", fetch_url="http://u:pw@127.0.0.1:1/x")]
    reader = RowReader(FetchConfig(concurrency=2, per_host=2, allow_private=True, max_attempts=1, connect_timeout=1.0,
                                   total_timeout=2.0), 1024)
    try:
        fields = fields_of(reader, rows)
    finally:
        reader.close()
    assert fields[0] == {"url": loopback.url("/reader/a.jpg"), "http_status": 200, "attempts": 1}
    assert fields[1] == {"url": loopback.url("/reader/missing"), "http_status": 404, "attempts": 1}
    assert fields[2] == {}
    assert fields[3] == {"url": "http://u:***@127.0.0.1:1/x", "http_status": None, "attempts": 1}


def test_the_fetch_gets_the_url_with_its_password_and_nothing_else_does():
    seen = []
    reader = RowReader(FetchConfig(concurrency=1, per_host=1), 1024, fetch=lambda url: seen.append(url) or b"x")
    try:
        read_all(reader, [FakeRow("http://u:***@h/a", fetch_url="http://u:pw@h/a")])
    finally:
        reader.close()
    assert seen == ["http://u:pw@h/a"]
