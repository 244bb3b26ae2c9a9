"""file: URL cells (RFC 8089): read as local files, percent-decoded; a host other than localhost refused."""

import json
import os
import urllib.parse

import pytest

from beam_pipeline.inputs import rows as source
from tf_serving_input import failures

JPEG = b"\xff\xd8\xff\xe0" + bytes(range(64))


def url_of(path, prefix="file://"):
    return prefix + urllib.parse.quote(str(path))


def failure(url):
    with pytest.raises(failures.RowFailure) as caught:
        source.read_image_bytes(url)
    record = source.failure_record(source.Row(0, 2, url, url, "", "train", source.row_key(0, url)), caught.value)
    json.dumps(record, ensure_ascii=False).encode("utf-8")  # What errors.jsonl and the status files do.
    return record


@pytest.mark.parametrize("prefix", ["file://", "file://localhost", "FILE://LocalHost", "File://", "file:"])
def test_a_file_url_is_read_as_the_local_file_it_names(tmp_path, prefix):
    path = tmp_path / "größe 大きい #1, 100%.jpg"
    path.write_bytes(JPEG)
    assert source.read_image_bytes(url_of(path, prefix)) == JPEG


def test_percent_escapes_decode_to_the_names_bytes_even_when_they_are_not_utf8(tmp_path):
    name = os.fsencode(str(tmp_path)) + b"/caf\xe9.jpg"  # A Latin-1 name: no UTF-8 CSV can spell it as a path.
    with open(name, "wb") as f:
        f.write(JPEG)
    assert source.read_image_bytes("file://" + urllib.parse.quote(str(tmp_path)) + "/caf%E9.jpg") == JPEG
    missing = failure("file://" + urllib.parse.quote(str(tmp_path)) + "/caf%E9%FF.jpg")
    assert missing["reason"] == failures.FILE_NOT_FOUND
    assert "caf\\xe9\\xff.jpg" in missing["detail"], missing  # The bytes shown, not a lone surrogate.


def test_a_missing_file_names_the_decoded_path(tmp_path):
    record = failure(url_of(tmp_path / "no such.jpg"))
    assert record["reason"] == failures.FILE_NOT_FOUND
    assert record["detail"].startswith(str(tmp_path / "no such.jpg")), record


@pytest.mark.parametrize("url, reason, words", [
    ("file://example.com/data/a.jpg", "remote_file_url", "example.com"),
    ("file://127.0.0.1/data/a.jpg", "remote_file_url", "127.0.0.1"),
    ("file://localhost:80/a.jpg", "remote_file_url", "localhost:80"),
    ("file://user@localhost/a.jpg", "remote_file_url", "user@localhost"),
    ("file:relative/a.jpg", failures.BAD_URL, "absolute"),
    ("file:a.jpg", failures.BAD_URL, "absolute"),
    ("file://", failures.BAD_URL, "names no file"),
    ("file:///", failures.IS_A_DIRECTORY, "/"),
    ("file:///tmp/a%00.jpg", failures.BAD_URL, "NUL"),
    ("file:///tmp/a%2Fb.jpg", failures.BAD_URL, "%2F"),
    ("file:///tmp/a%2fb.jpg", failures.BAD_URL, "%2F"),
    ("file:///tmp/a.jpg?size=2", failures.BAD_URL, "%3F"),
    ("file:///tmp/a.jpg#top", failures.BAD_URL, "%23"),
])
def test_hostile_file_urls_fail_their_row_with_a_reason(url, reason, words):
    record = failure(url)
    assert (record["reason"], words in record["detail"]) == (reason, True), record
    if reason in (failures.BAD_URL, "remote_file_url"):
        assert record["url"] == url


def test_a_very_long_file_url_is_path_too_long(tmp_path):
    record = failure(url_of(tmp_path / ("n" * 5000 + ".jpg")))
    assert record["reason"] == failures.PATH_TOO_LONG, record["reason"]


def test_a_file_url_cell_is_stripped_like_a_url_and_keeps_its_key(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(JPEG)
    cell = f"  {url_of(path)}  "
    csv_path = tmp_path / "in.csv"
    csv_path.write_text(f'path,label\n"{cell}",x\nfile:b.jpg,y\n', encoding="utf-8")
    row, other = source.iter_rows(str(csv_path))
    assert (row.source, row.path, row.key) == (cell, url_of(path), source.row_key(0, cell))
    assert source.read_image_bytes(row.path) == JPEG
    assert other.path == "file:b.jpg"  # Not a relative file named 'file:b.jpg': a file: URL, refused at read.
    assert failure(other.path)["reason"] == failures.BAD_URL


def test_a_file_url_naming_a_fifo_is_refused_without_being_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe.jpg")
    record = failure(url_of(tmp_path / "pipe.jpg"))
    assert record["reason"] == failures.READ_ERROR and "FIFO" in record["detail"]
