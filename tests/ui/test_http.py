"""The UI over HTTP, against its real server process: what a bad request gets, and that it keeps answering.

Marked slow: the session's `ui_inputs` and `ui_server` (tests/conftest.py) run the job, an export and the
predict command line into the embedded PostgreSQL, and start the UI's server process.
"""

import concurrent.futures
import io
import os
import re
import socket
import struct
import subprocess
import time
import zlib

import httpx
import numpy as np
import pytest

import imaging
import in_process
import postgres_servers
import said
import scaleout
import ui_run
from conftest import UI_UPLOAD_TIMEOUT

pytestmark = pytest.mark.slow
UPLOAD_TIMEOUT = UI_UPLOAD_TIMEOUT


def get(url, path, **kwargs):
    return httpx.get(url + path, timeout=30, **kwargs)


def upload(url, data, name="query.jpg", k=None):
    params = {"k": k} if k is not None else None
    return httpx.post(url + "/search", files={"image": (name, data)}, params=params, timeout=60)


def message(response):
    """The readable message of an error page."""
    found = re.search(r'id="message">([^<]*)<', response.text)
    return found.group(1) if found else ""


def assert_readable_error(response, status):
    assert response.status_code == status, (response.status_code, response.text[:500])
    assert response.headers["content-type"].startswith("text/html")
    assert "Traceback" not in response.text and 'File "' not in response.text
    assert message(response)


def png_bomb(width=30_000, height=30_000):
    """A valid PNG header claiming 900 M pixels, with a tiny body: refused from its header, never decoded."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + \
        chunk(b"IEND", b"")


def a_key(url):
    return re.search(r"/item/([0-9a-f]+)", get(url, "/gallery").text).group(1)


def test_pages_answer_and_every_part_is_lit(ui_server, ui_inputs):
    url, _ = ui_server
    overview = get(url, "/")
    assert overview.status_code == 200
    assert "<svg" in overview.text and "not_an_image" in overview.text and "file_not_found" in overview.text
    assert 'href="/search"' in overview.text and 'href="/quality"' in overview.text
    for path in ("/gallery", "/gallery?split=validation", "/gallery?label=cat&split=train", "/failures",
                 "/search", "/quality", f"/item/{a_key(url)}"):
        assert get(url, path).status_code == 200, path
    failures = get(url, "/failures").text
    assert "notes.txt" in failures and "missing.jpg" in failures


def test_thumbnail_is_the_stored_image_as_png(ui_server):
    url, _ = ui_server
    response = get(url, f"/image/{a_key(url)}")
    assert response.status_code == 200 and response.headers["content-type"] == "image/png"
    from PIL import Image

    assert Image.open(io.BytesIO(response.content)).size == (ui_run.SIZE, ui_run.SIZE)
    small = get(url, f"/image/{a_key(url)}?size=64")
    assert small.status_code == 200  # Never scaled up past the stored 32 px.
    assert Image.open(io.BytesIO(small.content)).size == (ui_run.SIZE, ui_run.SIZE)
    for size in ("0", "100", "5000", "x"):
        assert_readable_error(get(url, f"/image/{a_key(url)}?size={size}"), 400)


@pytest.mark.parametrize("path", [
    "/image/../../../../etc/passwd",
    "/image/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
    "/image/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/image/%252e%252e%252fetc%252fpasswd",
    "/image/..%5C..%5Cetc%5Cpasswd",
    "/item/..%2F..%2Fmanifest.json",
    "/../../../../etc/passwd",
    "/%2e%2e/%2e%2e/etc/passwd",
    "/static/../../etc/passwd",
    "/image/%2Fetc%2Fpasswd",
])
def test_path_traversal_reads_no_file(ui_server, path):
    url, _ = ui_server
    # Sent as written: httpx would normalize the dots away, and a raw socket keeps them.
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    status = int(raw.split(b" ", 2)[1])
    assert status in (400, 404), raw[:300]
    assert b"root:" not in raw and b'"rows"' not in raw and b"Traceback" not in raw


def test_unknown_key_is_404(ui_server):
    url, _ = ui_server
    for path in ("/image/0123456789abcdef", "/item/0123456789abcdef", "/search?key=0123456789abcdef",
                 "/image/" + "f" * 300):
        assert_readable_error(get(url, path), 404)
    assert "0123456789abcdef" in message(get(url, "/image/0123456789abcdef"))


@pytest.mark.parametrize("query", ["k=0", "k=101", "k=-3", "k=abc", "k=1e9", "k=99999999999999999999"])
def test_k_out_of_range_is_400(ui_server, query):
    url, _ = ui_server
    key = a_key(url)
    for path in (f"/item/{key}?{query}", f"/search?key={key}&{query}"):
        response = get(url, path)
        assert_readable_error(response, 400)
        assert message(response).startswith("k:")
    assert_readable_error(upload(url, b"x", k=query.split("=")[1]), 400)


@pytest.mark.parametrize("query,status", [("page=0", 400), ("page=-1", 400), ("page=x", 400), ("page=999", 404),
                                          ("split=nosuch", 400), ("label=%3Cscript%3E", 400),
                                          ("split=" + "a" * 500, 400)])
def test_gallery_filters_and_pages_are_validated(ui_server, query, status):
    url, _ = ui_server
    response = get(url, f"/gallery?{query}")
    assert_readable_error(response, status)
    assert "<script>" not in response.text


def test_a_non_image_upload_is_refused_with_its_reason(ui_server):
    url, _ = ui_server
    response = upload(url, b"<html>not a picture</html>", name="page.html")
    assert_readable_error(response, 415)
    assert message(response).startswith("not_an_image")
    empty = upload(url, b"", name="empty.jpg")
    assert_readable_error(empty, 400)
    assert message(empty).startswith("empty_file")
    truncated = upload(url, imaging.encode(imaging.quadrants(64, 64), "JPEG")[:200])
    assert_readable_error(truncated, 422)
    assert message(truncated).split(":")[0] in ("truncated", "corrupt")


def test_a_decompression_bomb_is_refused_from_its_header(ui_server):
    url, _ = ui_server
    response = upload(url, png_bomb(), name="bomb.png")
    assert_readable_error(response, 422)
    assert message(response).startswith("too_many_pixels") and "30000x30000" in message(response)


def test_uploads_over_max_file_bytes_are_refused(ui_server):
    url, _ = ui_server
    response = upload(url, b"\xff\xd8\xff" + b"\0" * 1_200_000)  # --max_file_bytes 1,000,000
    assert_readable_error(response, 413)
    assert message(response).startswith("too_large_file")
    wrong_field = httpx.post(url + "/search", files={"picture": ("a.jpg", b"\xff\xd8\xff")}, timeout=30)
    assert_readable_error(wrong_field, 400)
    def chunks():
        yield b"--x\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.jpg\"\r\n\r\n"
        yield b"\xff\xd8\xff" + b"\0" * 1000  # Small: the refusal is for having no length, not its size.

    chunked = httpx.post(url + "/search", content=chunks(), timeout=30,
                         headers={"content-type": "multipart/form-data; boundary=x"})
    assert_readable_error(chunked, 411)
    not_multipart = httpx.post(url + "/search", content=b"image=1", timeout=30,
                               headers={"content-type": "application/x-www-form-urlencoded"})
    assert_readable_error(not_multipart, 400)


def test_an_upload_that_stalls_is_answered_408_and_frees_its_connection(ui_server):
    """A client that declares a body and stops sending must not hold a connection (and a task) forever."""
    url, _ = ui_server
    host, port = url.removeprefix("http://").split(":")
    head = (f"POST /search HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: multipart/form-data; boundary=x\r\n"
            f"Content-Length: 5000\r\n\r\n--x\r\nContent-Disposition: form-data; name=\"image\"; "
            f"filename=\"a.jpg\"\r\n\r\n\xff\xd8\xff").encode("latin-1")
    with socket.create_connection((host, int(port)), timeout=UPLOAD_TIMEOUT * 4) as stalled:
        stalled.sendall(head)  # Then nothing: the other ~4,900 bytes never come.
        answer = ui_run.read_answer_head(stalled)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
        assert b"connection: close" in answer.lower(), answer[:300]
        try:
            stalled.sendall(b"x")  # A byte more after the answer kept a keep-alive connection open for good.
            while stalled.recv(65536):  # The server closes it: b"" or a reset (a timeout here fails the test).
                pass
        except ConnectionResetError:
            pass  # Closed: the byte reached a socket the server had already closed.
    assert get(url, "/").status_code == 200


def test_a_client_that_drops_mid_upload_logs_no_traceback(ui_server):
    url, log = ui_server
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as dropped:
        dropped.sendall(f"POST /search HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: multipart/form-data; boundary=x"
                        f"\r\nContent-Length: 5000\r\n\r\n--x\r\n".encode("latin-1"))
        time.sleep(1)  # The request is being read when the client goes away.
    time.sleep(2)
    assert get(url, "/").status_code == 200
    assert "Traceback" not in log.read_text() and "Exception in ASGI" not in log.read_text(), log.read_text()[-3000:]


def test_an_uploaded_photo_finds_itself_first(ui_server, ui_inputs):
    url, _ = ui_server
    with open(ui_inputs["photos"][5], "rb") as f:
        response = upload(url, f.read(), k=5)
    assert response.status_code == 200, message(response)
    distances = [float(d) for d in re.findall(r'<div class="muted">([0-9.]+)</div>', response.text)]
    assert len(distances) == 5 and distances[0] < 1e-4 and distances == sorted(distances)


def test_search_filters_keep_to_one_split_and_label(ui_server, ui_inputs):
    url, _ = ui_server
    with open(ui_inputs["photos"][5], "rb") as f:
        photo = f.read()

    def captions(response):
        assert response.status_code == 200, message(response)
        return re.findall(r'<div class="tile"><a href="/item/[0-9a-f]+"><img[^>]*></a>\s*<div>([^<]*)</div>',
                          response.text)

    by_label = httpx.post(url + "/search", params={"k": 3}, files={"image": ("q.jpg", photo)},
                          data={"label": "rocket"}, timeout=60)
    assert captions(by_label) == ["rocket"] * 3  # Filtered, and still k rows.
    key = a_key(url)
    by_key = get(url, f"/search?key={key}&k=2&split=validation&label=cat")
    assert captions(by_key) and set(captions(by_key)) == {"cat"}
    assert_readable_error(httpx.post(url + "/search", files={"image": ("q.jpg", photo)}, data={"split": "nosuch"},
                                     timeout=60), 400)
    assert_readable_error(get(url, f"/search?key={key}&label=%27%3B%20DROP%20TABLE%20x"), 400)


def test_the_kept_columns_reach_the_predictions_the_table_and_the_pages_and_filter_a_search(ui_server, ui_inputs):
    """Issue 52 item 8: the job's --column values in the predictions' Parquet (`columns`, JSON), in the table
    (jsonb, read with psql), on the image page (escaped), and as a search's --where / the UI's `where`."""
    import glob
    import json
    import subprocess

    import pyarrow.parquet as pq

    from beam_pipeline.database.server import EmbeddedServer
    from ui_run import TABLE, kept_cells

    url, _ = ui_server
    table = pq.read_table(sorted(glob.glob(f"{ui_inputs['predictions']}/predictions/*.parquet"))).to_pylist()
    by_key = {row["key"]: json.loads(row["columns"]) for row in table}
    some = next(iter(by_key.values()))
    assert set(some) == {"caption", "tags", "score"} and some["tags"][0] in ("even", "odd")
    index = int(some["score"])
    assert some["caption"] == kept_cells(index, some["tags"][1])[0]
    evens = sorted(key for key, columns in by_key.items() if "even" in columns["tags"])
    out = subprocess.run([EmbeddedServer.psql(), ui_inputs["database"], "-At", "-c",
                          f"SELECT key FROM {TABLE} WHERE columns->'tags' ? 'even' ORDER BY key"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == evens
    key = next(key for key, columns in by_key.items() if int(columns["score"]) == index)
    page = get(url, f"/item/{key}").text
    assert "&lt;b&gt;" in page and "<b>" + some["tags"][1] not in page  # The caption's markup is text.
    assert "\\u202e" in page  # Its bidi override is shown escaped, like every stored text.
    found = re.findall(r"/item/([0-9a-f]+)", get(url, f"/search?key={key}&k=5&where=tags%3Deven").text)
    assert found and set(found) - {key} <= set(evens)
    numbers = re.findall(r"/item/([0-9a-f]+)", get(url, f"/search?key={key}&k=5&where=score%3E%3D10").text)
    assert numbers and all(by_key[k]["score"] >= 10 for k in set(numbers) - {key})
    assert_readable_error(get(url, f"/search?key={key}&where=score%3E%3Dhigh"), 400)


def test_50_concurrent_requests_are_all_answered_and_it_keeps_answering(ui_server):
    url, log = ui_server
    key = a_key(url)
    paths = ["/", "/gallery", f"/image/{key}", f"/item/{key}", "/image/nosuch", "/gallery?page=0"] * 9

    def fetch(path):
        return get(url, path).status_code

    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        statuses = list(pool.map(fetch, paths[:50]))
    assert len(statuses) == 50
    assert all(status in (200, 400, 404) for status in statuses), statuses
    assert statuses.count(200) == sum(1 for p in paths[:50] if p in ("/", "/gallery", f"/image/{key}",
                                                                      f"/item/{key}"))
    assert get(url, "/").status_code == 200  # Still answering after every bad request above.
    assert "Traceback" not in log.read_text()


def test_it_binds_to_loopback_by_default_and_warns_for_every_address(ui_inputs, tmp_path):
    process, url = ui_run.start_ui("--input_dir", ui_inputs["job"], log_path=tmp_path / "default.log")
    try:
        port = int(url.rsplit(":", 1)[1])
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
        local = [line.split()[3] for line in listening.splitlines()]  # State, Recv-Q, Send-Q, local address, peer
        assert local == [f"127.0.0.1:{port}"], listening
        outside = _an_address_not_loopback()
        if outside:
            assert not scaleout.accepts_connections(outside, port)
        assert get(url, "/").status_code == 200
        assert get(url, "/search").status_code == 404  # No predictions given: no search.
        assert get(url, "/quality").status_code == 404
        printed = (tmp_path / "default.log").read_text()
        assert f"on {url}/" in printed and "warning" not in printed
    finally:
        ui_run.stop_ui(process)
    port = scaleout.free_port()
    process, _ = ui_run.start_ui("--input_dir", ui_inputs["job"], "--host", "0.0.0.0", port=port,
                                 log_path=tmp_path / "all.log")
    try:
        assert "warning: --host 0.0.0.0" in (tmp_path / "all.log").read_text()
    finally:
        ui_run.stop_ui(process)


def _an_address_not_loopback():
    """An IPv4 address of this machine other than loopback, or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # No packet is sent: only the route is chosen.
            address = s.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


def test_bad_flags_are_one_line_and_exit_2(ui_inputs):
    for flags, words in [(["--input_dir", "/nonexistent"], "is not a folder"),
                         (["--input_dir", ui_inputs["job"], "--port", "70000"], "--port must be"),
                         (["--input_dir", ui_inputs["job"], "--table", "Bad-Name"], "--table"),
                         (["--input_dir", ui_inputs["job"], "--upload_timeout", "0"], "--upload_timeout must be"),
                         (["--input_dir", ui_inputs["job"], "--upload_timeout", "inf"], "--upload_timeout must be"),
                         (["--input_dir", ui_inputs["job"], "--upload_read_timeout", "-1"],
                          "--upload_read_timeout must be"),
                         (["--input_dir", ui_inputs["job"], "--model_dir", ui_inputs["export"]], "--predictions_dir")]:
        result = subprocess.run(ui_run.ui_command(*flags), capture_output=True, text=True, timeout=120)  # The CLI.
        assert result.returncode == 2 and words in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_an_export_the_table_was_not_made_with_is_refused_at_start_up(ui_inputs, tmp_path):
    other = scaleout.export_small_model(ui_inputs["job"], tmp_path / "other", size=ui_run.SIZE, seed=9)
    result = in_process.ui_start("--input_dir", ui_inputs["job"], "--predictions_dir",
                                 ui_inputs["predictions"], "--model_dir", other, "--database",
                                 ui_inputs["database"], "--port", scaleout.free_port())
    assert result.returncode == 1, result.stderr[-2000:]
    assert "holds embeddings of the export" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    missing = in_process.ui_start("--input_dir", ui_inputs["job"], "--database", ui_inputs["database"],
                                  "--table", "nosuch", "--port", scaleout.free_port())
    assert missing.returncode == 1 and "no table nosuch of embeddings" in missing.stderr, missing.stderr[-2000:]


def test_a_table_the_predict_job_did_not_make_and_a_missing_database_dir_are_refused_at_start_up(ui_inputs,
                                                                                                   tmp_path):
    """Both bad input (exit 2, one line); the UI only reads, so a mistyped --database_dir creates nothing."""
    from beam_pipeline import database

    with database.connect(ui_inputs["database"]) as connection:  # Embeddings, but not a predictions table.
        connection.execute("CREATE TABLE IF NOT EXISTS ui_not_predictions (key text, embedding vector(3))")
        connection.commit()
    foreign = in_process.ui_start("--input_dir", ui_inputs["job"], "--database", ui_inputs["database"],
                                  "--table", "ui_not_predictions", "--port", scaleout.free_port())
    assert foreign.returncode == 2 and "not a predictions table" in foreign.stderr, foreign.stderr[-2000:]
    assert len(foreign.stderr.strip().splitlines()) == 1
    typo = in_process.ui_start("--input_dir", ui_inputs["job"], "--database_dir", tmp_path / "nodb",
                               "--port", scaleout.free_port())  # The UI only reads: it creates no database.
    assert typo.returncode == 2 and "holds no database" not in typo.stderr and "does not exist" in typo.stderr
    assert not (tmp_path / "nodb").exists()


def test_thumbnails_are_decoded_through_the_codecs_of_the_stored_format(ui_inputs):
    import tensorflow as tf
    from PIL import Image

    from beam_pipeline.ui.record_index import RecordIndex
    from tf_serving_input.layout import OutputLayout

    layout = OutputLayout(ui_inputs["job"])
    index = RecordIndex(layout, layout.load_manifest())
    entry = index.entry(0)
    key = entry.key
    stored = np.asarray(Image.open(io.BytesIO(index.thumbnail(key))))
    expected = tf.io.decode_png(tf.train.Example.FromString(index.record(key)).features.feature[
        "image/encoded"].bytes_list.value[0]).numpy()
    assert np.array_equal(stored, expected) and entry.stored_bytes > 0


def test_a_label_of_any_length_the_run_holds_is_a_filter_others_are_refused(ui_server):
    url, _ = ui_server
    refused = get(url, "/gallery", params={"label": "A" * 10_000})
    assert refused.status_code == 400 and "String should have at most" not in refused.text
    assert get(url, "/gallery", params={"label": "cat"}).status_code == 200


@pytest.fixture
def ui_on_its_own_database(ui_inputs, tmp_path):
    """(base URL, log, data folder) of a UI over the shared run whose database is a server of this test's own,
    loaded from a copy of the run's predictions: the test stops it, and the shared server keeps answering."""
    import shutil

    predictions = tmp_path / "predictions"
    shutil.copytree(ui_inputs["predictions"], predictions)
    with postgres_servers.embedded(str(tmp_path / "pg")) as url:
        loaded = in_process.predict("--model_dir", ui_inputs["export"], "--output_dir", predictions, "--load_only",
                                    "--database", url, "--table", ui_run.TABLE, "--no_progress")
        assert loaded.returncode == 0, loaded.stderr[-3000:]
        process, base = ui_run.start_ui("--input_dir", ui_inputs["job"], "--predictions_dir", predictions,
                                        "--database", url, log_path=tmp_path / "ui.log")
        try:
            yield base, tmp_path / "ui.log", str(tmp_path / "pg" / "pgdata")
        finally:
            ui_run.stop_ui(process)


def test_a_database_that_stops_answers_503_in_one_line_without_a_traceback(ui_on_its_own_database):
    from beam_pipeline.database.server import EmbeddedServer

    url, log, data_dir = ui_on_its_own_database
    item = f"/item/{a_key(url)}"
    assert get(url, item).status_code == 200
    assert os.path.exists(os.path.join(data_dir, "PG_VERSION")), data_dir
    server = EmbeddedServer(data_dir)
    subprocess.run([*server._command("pg_ctl"), "-w", "-m", "immediate", "-D", server.data_dir, "stop"],
                   check=True, capture_output=True)
    for path in (item, f"/search?key={a_key(url)}"):
        answer = get(url, path)
        assert answer.status_code == 503 and "the database is not answering" in answer.text, answer.text[-500:]
    assert "Traceback" not in log.read_text()
    assert get(url, "/").status_code == 200  # Pages that need no database still answer.


@pytest.mark.parametrize("name, damage", [("duplicate_groups.parquet", "flip"), ("summary.json", "truncate")])
def test_a_damaged_quality_folder_is_refused_at_start_up_naming_the_file(ui_inputs, tmp_path, name, damage):
    import shutil

    quality = tmp_path / "quality"
    shutil.copytree(ui_inputs["quality"], quality)
    path = quality / name
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
    else:
        del data[len(data) // 2:]
    path.write_bytes(bytes(data))
    result = in_process.ui_start("--input_dir", ui_inputs["job"], "--quality_dir", quality,
                                 "--port", scaleout.free_port())
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]
    assert str(path) in result.stderr


def test_predictions_or_quality_of_another_job_output_are_refused_at_start_up(ui_inputs, tmp_path):
    """Another dataset's top-k, duplicates and leaks must never be shown beside this run's images."""
    from beam_pipeline.preprocess import cli as job

    csv_path, _ = scaleout.make_small_dataset(tmp_path, count=4, size=ui_run.SIZE)
    other = tmp_path / "other_job"
    assert job.run(["--input_csv", str(csv_path), "--output_dir", str(other), "--image_size", str(ui_run.SIZE),
                    "--max_error_rate", "0.5", "--no_progress", "--direct_num_workers", "1",
                    "--direct_running_mode", "in_memory"]) == 0
    for flag, folder, words in [("--predictions_dir", ui_inputs["predictions"],
                                 f"holds predictions of {ui_inputs['job']}"),
                                ("--quality_dir", ui_inputs["quality"], "of another job output")]:
        result = in_process.ui_start("--input_dir", other, flag, folder, "--port", scaleout.free_port())
        # Folders that do not fit together are bad input, like a bad flag: exit 2.
        assert result.returncode == 2 and words in result.stderr, result.stderr[-2000:]
        assert len(result.stderr.strip().splitlines()) == 1 and str(other) in result.stderr, result.stderr[-2000:]
    quality = tmp_path / "quality"
    import shutil

    shutil.copytree(ui_inputs["quality"], quality)
    for damage in ("{not json", '{"input_sha256": [1]}', "fifo"):  # A FIFO's read would block start-up.
        (quality / "run.json").unlink()
        if damage == "fifo":
            os.mkfifo(quality / "run.json")
        else:
            (quality / "run.json").write_text(damage)
        result = in_process.ui_start("--input_dir", ui_inputs["job"], "--quality_dir", quality,
                                     "--port", scaleout.free_port())
        assert result.returncode == 2 and "run.json is missing or damaged" in result.stderr, result.stderr[-2000:]
    predictions = tmp_path / "predictions"
    shutil.copytree(ui_inputs["predictions"], predictions)
    (predictions / "manifest.json").write_text("[]")
    result = in_process.ui_start("--input_dir", ui_inputs["job"], "--predictions_dir", predictions,
                                 "--port", scaleout.free_port())
    assert result.returncode == 1 and "manifest.json is damaged" in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]


# A step file that leaves a mark when any of it runs: opening a run or an export that names it must not.
MARKING_STEP = '''\
import pathlib

pathlib.Path(__file__).with_name("ran").write_text("a step file named by the export ran")

from beam_pipeline import python_step


@python_step
def mark(image):
    return image
'''


def test_an_export_that_names_a_step_never_runs_it_unless_the_user_names_it(ui_inputs, tmp_path):
    """Search and the UI load a run's Python step only from an --image_step the user gives, SHA-256 checked first:
    an export (or run) naming a step file on its own runs nothing, and says in one line what to pass (exit 2)."""
    import hashlib
    import json
    import shutil

    from tf_serving_input.serving import ExportInfo
    from tf_serving_input.steps import StepRecord

    step, marker = tmp_path / "marking.py", tmp_path / "ran"
    step.write_text(MARKING_STEP)
    export = tmp_path / "export"
    shutil.copytree(ui_inputs["export"], export)
    info = json.loads((export / ExportInfo.INFO_FILE).read_text())
    record = StepRecord(f"{step}:mark", "python", 0, hashlib.sha256(step.read_bytes()).hexdigest())
    (export / ExportInfo.INFO_FILE).write_text(json.dumps({**info, "image_steps": [record.to_dict()],
                                                          "steps_outside": True}))
    query = tmp_path / "query.png"
    query.write_bytes(imaging.encode(imaging.quadrants(ui_run.SIZE, ui_run.SIZE), "PNG"))
    # The session's database holds other tests' tables too: the UI run's is named.
    search = ("--image", query, "--model_dir", export, "--database", ui_inputs["database"], "--table", ui_run.TABLE)

    unnamed = in_process.search(*search)
    assert unnamed.returncode == 2, unnamed.stderr[-2000:]
    [line] = unnamed.stderr.strip().splitlines()
    assert f"step 1, {step}:mark, is a Python step" in line and "--image_step FILE.py:mark" in line, line
    # A file of the same name and function but other bytes is refused before any of it runs.
    other = tmp_path / "other" / "marking.py"
    other.parent.mkdir()
    other.write_text(MARKING_STEP + "# changed\n")
    changed = in_process.search(*search, "--image_step", f"{other}:mark")
    assert changed.returncode == 2 and "is not step 1 of" in changed.stderr, changed.stderr[-2000:]
    ui = in_process.ui_start("--input_dir", ui_inputs["job"], "--predictions_dir", ui_inputs["predictions"],
                             "--model_dir", export, "--database", ui_inputs["database"], "--table", ui_run.TABLE,
                             "--port", scaleout.free_port())
    assert ui.returncode == 2, ui.stderr[-2000:]
    [problem] = said.problems(ui.stderr)  # One line (the index's first-start notice aside).
    assert "--image_step FILE.py:mark" in problem, problem
    assert not marker.exists() and not (other.parent / "ran").exists()
