"""RowReader: rows read concurrently with per-host caps, handed over in row order, memory bounded."""

import dataclasses
import threading
import time

from beam_pipeline.common.row_reader import RowReader
from beam_pipeline.common.urls import FetchConfig
from tf_serving_input import failures


@dataclasses.dataclass(frozen=True)
class FakeRow:
    path: str
    fetch_url: str = ""


class Recorder:
    """A fetch function that records how many fetches run at once, per host, and can hold one host back."""

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


def test_rows_come_back_in_order_with_failures_in_place_and_files_read_as_files(tmp_path):
    image = tmp_path / "a.bin"
    image.write_bytes(b"file bytes")
    rows = [FakeRow(f"http://host{i % 3}/{i}") for i in range(30)] + [FakeRow(str(image)),
                                                                      FakeRow("http://host0/missing")]
    reader = RowReader(FetchConfig(concurrency=8, per_host=2), 1024, fetch=Recorder())
    try:
        out = list(reader.reads(rows))
    finally:
        reader.close()
    assert [row for row, _ in out] == rows
    assert [item for _, item in out[:30]] == [row.path.encode() for row in rows[:30]]
    assert out[30][1] == b"file bytes"
    assert isinstance(out[31][1], failures.RowFailure) and out[31][1].reason == failures.HTTP_404


def test_one_slow_host_takes_at_most_its_share_of_the_slots():
    recorder = Recorder(delays={"slow": 0.3})
    rows = [FakeRow(f"http://slow/{i}") for i in range(8)] + [FakeRow(f"http://fast/{i}") for i in range(40)]
    reader = RowReader(FetchConfig(concurrency=6, per_host=2), 1024, fetch=recorder)
    try:
        # The first fast row is handed over only after the slow ones before it, but the fast host's rows
        # were all fetched meanwhile: the slow host held 2 slots, never all 6.
        iterator = reader.reads(rows)
        next(iterator)
        time.sleep(0.2)
        with recorder.lock:
            fast_started = sum(url.startswith("http://fast") for url in recorder.started)
        assert fast_started >= 20
        list(iterator)
    finally:
        reader.close()
    assert recorder.peak == {"slow": 2, "fast": 2}


def test_a_stuck_head_row_lets_only_a_window_of_rows_start():
    release = threading.Event()

    def fetch(url):
        if url.endswith("/0"):
            release.wait(5)
        return b"x"

    started = []
    rows = [FakeRow(f"http://h{i}/{i}") for i in range(100)]

    def counting(url):
        started.append(url)
        return fetch(url)

    reader = RowReader(FetchConfig(concurrency=4, per_host=4), 1024, fetch=counting, window=10)
    try:
        iterator = reader.reads(rows)
        waiter = threading.Thread(target=lambda: next(iterator))
        waiter.start()
        time.sleep(0.3)
        assert len(started) == 10  # The window, not the shard.
        release.set()
        waiter.join()
        assert len(list(iterator)) == 99
    finally:
        reader.close()


def test_buffered_bytes_are_capped():
    rows = [FakeRow(f"http://h/{i}") for i in range(50)]
    started = []

    def fetch(url):
        started.append(url)
        return bytes(100)

    reader = RowReader(FetchConfig(concurrency=4, per_host=4), 1024, fetch=fetch, window=50, max_buffered_bytes=1000)
    try:
        iterator = reader.reads(rows)
        next(iterator)
        time.sleep(0.2)
        # About 1000 bytes wait (plus the rows in flight when the cap was reached), not 50 rows' worth.
        assert len(started) <= 1000 // 100 + 4 + 1
        assert len(list(iterator)) == 49
    finally:
        reader.close()


def test_an_unexpected_error_fails_only_its_row():
    def fetch(url):
        if url.endswith("/1"):
            raise RuntimeError("boom")
        return b"ok"

    reader = RowReader(FetchConfig(concurrency=2, per_host=2), 1024, fetch=fetch)
    try:
        items = [item for _, item in reader.reads([FakeRow(f"http://h/{i}") for i in range(3)])]
    finally:
        reader.close()
    assert items[0] == items[2] == b"ok"
    assert items[1].reason == failures.UNEXPECTED and "boom" in items[1].detail


def test_the_fetch_gets_the_url_with_its_password_and_nothing_else_does():
    seen = []
    reader = RowReader(FetchConfig(concurrency=1, per_host=1), 1024, fetch=lambda url: seen.append(url) or b"x")
    try:
        list(reader.reads([FakeRow("http://u:***@h/a", fetch_url="http://u:pw@h/a")]))
    finally:
        reader.close()
    assert seen == ["http://u:pw@h/a"]
