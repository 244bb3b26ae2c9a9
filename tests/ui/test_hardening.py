"""The UI hardened (issue 42, item 4) and search results that name their dataset (item 5).

The protocol tests (HEAD, Host, the Content-Security-Policy, uploads that stall or trickle) speak HTTP, often
over a raw socket, to the session's real server process (`ui_server`). The page tests render every page of a
run whose labels, sources and failures hold bidi-override and zero-width characters, and of a table holding two
datasets, through the UI's real start-up (`startup.load_state`) and app, in this process (Starlette's
TestClient): seconds, where another server process would cost its start-up. Marked slow: they build on the
session's `ui_inputs` (job, export, predict into PostgreSQL, quality).
"""

import glob
import json
import pathlib
import re
import shutil
import socket
import time

import httpx
import pytest

import imaging
import in_process
import scaleout
import ui_run
from conftest import UI_UPLOAD_READ_TIMEOUT, UI_UPLOAD_TIMEOUT
from tf_serving_input.layout import PredictionLayout

pytestmark = pytest.mark.slow

# Characters a reader does not see, or that reorder what follows: bidi embeddings and overrides (U+202A-202E),
# isolates (U+2066-2069), zero-width space / non-joiner / joiner, marks (U+200B-200F), word joiner, BOM.
INVISIBLE = [*map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A)), *map(chr, range(0x200B, 0x2010)),
             "\u2060", "\ufeff"]


def raw_exchange(url, request):
    """The raw bytes a request (as written, over a socket of its own) gets back, until the server closes."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(request.encode("latin-1"))
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def status_of(answer):
    return int(answer.split(b" ", 2)[1])


def port_of(url):
    return int(url.rsplit(":", 1)[1])


# ------------------------------------------------------------------------------------------------- protocol
def test_head_is_answered_like_get_without_a_body(ui_server):
    url, _ = ui_server
    key = re.search(r"/item/([0-9a-f]+)", httpx.get(url + "/gallery").text).group(1)
    for path, kind in (("/", "text/html"), ("/gallery?label=cat", "text/html"), (f"/image/{key}", "image/png"),
                       ("/static/ui.css", "text/css")):
        got = httpx.get(url + path, timeout=30)
        answer = raw_exchange(url, f"HEAD {path} HTTP/1.1\r\nHost: 127.0.0.1:{port_of(url)}\r\n"
                                   "Connection: close\r\n\r\n")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert status_of(answer) == 200, answer[:300]
        assert body == b"", (path, body[:100])  # The headers only.
        headers = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
        assert headers[b"content-type"].decode().startswith(kind)
        assert int(headers[b"content-length"]) == len(got.content), path  # GET's length, as HTTP says.
    missing = raw_exchange(url, f"HEAD /item/0123456789abcdef HTTP/1.1\r\nHost: 127.0.0.1:{port_of(url)}\r\n"
                                "Connection: close\r\n\r\n")
    assert status_of(missing) == 404 and missing.partition(b"\r\n\r\n")[2] == b""


def test_a_host_that_is_not_this_servers_loopback_address_is_refused(ui_server):
    """DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 still sends its own Host."""
    url, _ = ui_server
    port = port_of(url)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
        answer = raw_exchange(url, f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
        assert status_of(answer) == 200, (host, answer[:300])
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", f"127.0.0.1:{port + 1}",
                 "127.0.0.1", f"localhost.:{port}", f"10.0.0.1:{port}"):
        answer = raw_exchange(url, f"GET /gallery HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
        assert status_of(answer) == 400, (host, answer[:300])
        assert b"is not this UI&#39;s address" in answer and b"/item/" not in answer, answer[-500:]
    no_host = raw_exchange(url, "GET / HTTP/1.0\r\n\r\n")
    assert status_of(no_host) == 400 and b"/gallery?split" not in no_host


def test_every_page_forbids_inline_script_and_has_none(ui_server):
    url, _ = ui_server
    key = re.search(r"/item/([0-9a-f]+)", httpx.get(url + "/gallery").text).group(1)
    for path in ("/", "/gallery", f"/item/{key}", "/failures", "/search", f"/search?key={key}", "/quality",
                 "/nosuch", f"/image/{key}"):
        response = httpx.get(url + path, timeout=30)
        policy = dict(part.strip().split(" ", 1) for part in response.headers["content-security-policy"].split(";"))
        assert policy["script-src"] == "'self'" and policy["style-src"] == "'self'", policy  # No 'unsafe-inline'.
        assert policy["default-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
        assert response.headers["x-content-type-options"] == "nosniff"
        if response.headers["content-type"].startswith("text/html"):
            # What the policy would block: the pages must not need it.
            assert not re.search(r"<script|<style|\sstyle=|\son[a-z]+=|javascript:", response.text), path
            assert '<link rel="stylesheet" href="/static/ui.css">' in response.text
    css = httpx.get(url + "/static/ui.css", timeout=30)
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css") and "nav {" in css.text


UPLOAD_HEAD = ("POST /search HTTP/1.1\r\nHost: {host}\r\nContent-Type: multipart/form-data; boundary=x\r\n"
               "Content-Length: 5000\r\n\r\n--x\r\nContent-Disposition: form-data; name=\"image\"; "
               "filename=\"a.jpg\"\r\n\r\n\xff\xd8\xff")


def test_an_upload_that_stops_sending_is_cut_off_by_the_read_timeout(ui_server):
    url, _ = ui_server
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=UI_UPLOAD_TIMEOUT * 4) as stalled:
        stalled.sendall(UPLOAD_HEAD.format(host=f"{host}:{port}").encode("latin-1"))  # Then nothing more.
        answer = ui_run.read_answer_head(stalled)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
        assert b"connection: close" in answer.lower()
        rest = b""
        while chunk := stalled.recv(65536):  # The server closes the connection: its worker is free.
            rest += chunk
    assert f"sent nothing for {UI_UPLOAD_READ_TIMEOUT:g} s (--upload_read_timeout)".encode() in answer + rest
    assert httpx.get(url + "/", timeout=30).status_code == 200


def trickle_upload(host: str, port: str) -> tuple[bytes, float]:
    """Sends UPLOAD_HEAD, then a byte every quarter of the read timeout until the UI answers (or twice its
    deadline passes): (the answer, the longest gap in seconds between this client's sends).

    The gap is the client's own evidence of silence: a loaded machine can stall this process for longer than
    the read timeout, and then the UI is right to answer for the silence instead of the deadline.
    """
    with socket.create_connection((host, int(port)), timeout=UI_UPLOAD_TIMEOUT * 4) as trickle:
        trickle.sendall(UPLOAD_HEAD.format(host=f"{host}:{port}").encode("latin-1"))
        last_send, longest_gap = time.monotonic(), 0.0
        trickle.setblocking(False)
        answer = b""
        for _ in range(int(UI_UPLOAD_TIMEOUT * 2 * 4)):  # Twice the deadline, at most: then it is never cut off.
            sent_or_refused = time.monotonic()
            longest_gap, last_send = max(longest_gap, sent_or_refused - last_send), sent_or_refused
            try:
                trickle.sendall(b"\0")
            except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                break
            time.sleep(UI_UPLOAD_READ_TIMEOUT / 4)
            try:
                answer += trickle.recv(65536)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                break
            if b"\r\n\r\n" in answer:
                break
        longest_gap = max(longest_gap, time.monotonic() - last_send)
        trickle.setblocking(True)
        try:
            while chunk := trickle.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass  # The UI closed with this client's last bytes unread: the kernel resets; the answer came first.
    return answer, longest_gap


def test_an_upload_that_trickles_is_cut_off_by_the_total_timeout(ui_server):
    """A byte every half second never trips the read timeout; the whole body's deadline still ends it."""
    url, _ = ui_server
    host, port = url.removeprefix("http://").split(":")
    gaps = []
    for _ in range(3):  # A try in which this client itself fell silent proves nothing: try again.
        answer, longest_gap = trickle_upload(host, port)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
        if longest_gap < UI_UPLOAD_READ_TIMEOUT:
            assert f"did not arrive within {UI_UPLOAD_TIMEOUT:g} s (--upload_timeout)".encode() in answer, \
                (longest_gap, answer[-600:])
            break
        gaps.append(longest_gap)  # Either answer is right for a client that fell silent: try again.
    else:
        pytest.fail(f"this machine stalled the test's client for {gaps} s, past the read timeout, in every try")
    assert httpx.get(url + "/", timeout=30).status_code == 200


# --------------------------------------------------------------------------------------- pages, in-process
def ui_client(*flags):
    """(TestClient over the UI's real start-up and app for `flags`, Resources to close)."""
    from starlette.testclient import TestClient

    from beam_pipeline.ui import cli
    from beam_pipeline.ui.app import create_app
    from beam_pipeline.ui.startup import load_state

    args = cli.build_parser().parse_args([str(flag) for flag in flags])
    state, resources = load_state(args, cli.database_choice(args))
    return TestClient(create_app(state), base_url="http://127.0.0.1:8080"), resources


HOSTILE_LABELS = ["\u202eesrever", "zero\u200bwidth", "\u2066iso\u2069", "\ufeffbom"]


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """A job output (and its quality folder) whose labels, sources and failures hold invisible characters:
    (job folder, quality folder, the CSV rows)."""
    from beam_pipeline.preprocess import cli as job
    from beam_pipeline.quality import cli as quality

    folder = tmp_path_factory.mktemp("hostile")
    rows = []
    for i, label in enumerate(HOSTILE_LABELS):
        name = f"im\u202e{i}\u200b.png"
        image = imaging.quadrants(24, 24)
        image[..., i % 3] = 60 * i
        (folder / name).write_bytes(imaging.encode(image, "PNG"))
        rows.append([name, label, "train"])
    rows.append([rows[0][0], HOSTILE_LABELS[1], "validation"])  # A leak and a label conflict: the quality page.
    rows.append(["miss\u2067ing\u200d.jpg", HOSTILE_LABELS[2], "train"])  # A failure whose source is hostile.
    imaging.write_csv(folder / "in.csv", ["path", "label", "split"], rows)
    assert job.run(["--input_csv", str(folder / "in.csv"), "--output_dir", str(folder / "job"), "--image_size",
                    "16", "--image_format", "png", "--max_error_rate", "0.5", "--no_progress",
                    "--direct_num_workers", "1", "--direct_running_mode", "in_memory"]) == 0
    assert quality.run(["--input_dir", str(folder / "job"), "--output_dir", str(folder / "quality"),
                        "--blur_variance", "100000", "--no_progress", "--direct_num_workers", "1",
                        "--direct_running_mode", "in_memory"]) == 0
    return folder / "job", folder / "quality", rows


def shown_text(html):
    """What a page shows: its HTML without a form option's value (which must stay the stored label to filter)."""
    return re.sub(r'<option value="[^"]*"', "<option", html)


def test_invisible_characters_are_shown_escaped_on_every_page(hostile_run):
    job, quality, _ = hostile_run
    client, resources = ui_client("--input_dir", job, "--quality_dir", quality)
    try:
        gallery = client.get("/gallery")
        keys = re.findall(r'href="/item/([0-9a-f]+)"', gallery.text)
        pages = {"/": None, "/gallery": None, "/failures": None, "/quality": None,
                 **{f"/item/{key}": None for key in keys},
                 "/gallery?label=" + HOSTILE_LABELS[0]: None, "/item/\u202enosuch": 404, "/search": 404}
        for path, status in pages.items():
            response = client.get(path)
            assert response.status_code == (status or 200), (path, response.text[-300:])
            text = shown_text(response.text)
            assert not [c for c in INVISIBLE if c in text], (path, [f"{ord(c):x}" for c in INVISIBLE if c in text])
        assert len(keys) == 5
        shown = {path: client.get(path).text for path in ("/", "/gallery", "/failures", "/quality")}
        for label in HOSTILE_LABELS:
            escaped = label.encode("ascii", "backslashreplace").decode()  # As terminal.escaped writes it.
            assert escaped in shown["/gallery"] and escaped in shown["/"], escaped  # Tiles; the chart.
        assert "miss\\u2067ing\\u200d.jpg" in shown["/failures"]
        assert "\\u202eesrever" in shown["/quality"] and "zero\\u200bwidth" in shown["/quality"]
        item = client.get(f"/item/{keys[0]}").text
        assert re.search(r"im\\u202e\d\\u200b\.png", item), item  # The source.
        # A filter by a hostile label still finds its images: the option's value is the stored label.
        assert f'<option value="{HOSTILE_LABELS[0]}"' in gallery.text
        assert "1 images" in client.get("/gallery", params={"label": HOSTILE_LABELS[0]}).text
    finally:
        resources.close()


# ---------------------------------------------------------------------------------- run folders that fit
def refused(*flags):
    """The UI's start-up with `flags` (in this process): it must refuse with one line, exit 2; that line."""
    result = in_process.ui_start(*flags, "--port", scaleout.free_port())
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    return lines[0]


def test_predictions_that_name_no_input_are_refused(ui_inputs, tmp_path):
    predictions = tmp_path / "predictions"
    shutil.copytree(ui_inputs["predictions"], predictions)
    manifest = json.loads((predictions / "manifest.json").read_text())
    for dataset in ({}, {"id": ""}, {"id": 7}):
        manifest["dataset"] = dataset
        (predictions / "manifest.json").write_text(json.dumps(manifest))
        line = refused("--input_dir", ui_inputs["job"], "--predictions_dir", predictions)
        assert str(predictions) in line and "names no dataset id" in line


@pytest.mark.parametrize("where", ["errors.jsonl", "shard", "predictions", "quality"])
def test_a_link_that_leads_out_of_a_run_folder_is_not_followed(ui_inputs, tmp_path, where):
    outside = tmp_path / "outside"
    outside.mkdir()
    job, predictions, quality = (tmp_path / name for name in ("job", "predictions", "quality"))
    for name, copy in (("job", job), ("predictions", predictions), ("quality", quality)):
        shutil.copytree(ui_inputs[name], copy)
    if where == "errors.jsonl":
        link = job / "errors.jsonl"
    elif where == "shard":
        manifest = json.loads((job / "manifest.json").read_text())
        link = job / manifest["shards"][0]["file"]
    elif where == "predictions":
        link = pathlib.Path(sorted(glob.glob(PredictionLayout(str(predictions)).shard_files_glob()))[0])
    else:
        link = quality / "summary.json"
    target = outside / link.name
    shutil.copyfile(link, target)  # The same bytes: only where they lie is wrong.
    link.unlink()
    link.symlink_to(target)
    flags = ["--input_dir", job]
    flags += {"predictions": ["--predictions_dir", predictions], "quality": ["--quality_dir", quality]}.get(where, [])
    line = refused(*flags)
    assert link.name in line and "leads outside the folder" in line and str(target) in line, line


# --------------------------------------------------------------------------------- item 5: which dataset
OTHER_SOURCE = "/runs/other\u202ejob"
OTHER_LABEL = "\u202eother"


@pytest.fixture(scope="module")
def two_datasets(ui_inputs):
    """Table ui_two: the UI run's predictions (its own dataset) and the same embeddings again as another
    dataset (other keys, OTHER_LABEL, from OTHER_SOURCE), loaded the predict job's way (`prepare_table`
    with append, `upsert_table`); table ui_other_only: that other dataset alone. Returns the other dataset's id."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from beam_pipeline import database
    from beam_pipeline.common.embeddings import of_bit_width

    predictions = json.loads(open(f"{ui_inputs['predictions']}/manifest.json").read())
    own = predictions["dataset"]
    shards = sorted(glob.glob(PredictionLayout(ui_inputs["predictions"]).shard_files_glob()))
    rows = pa.concat_tables(pq.read_table(path) for path in shards)
    other = dict(own, id="0123456789abcdef", source=OTHER_SOURCE)
    copies = rows.set_column(rows.schema.get_field_index("key"), "key",
                             pa.array([key[::-1] for key in rows.column("key").to_pylist()]))
    copies = copies.set_column(copies.schema.get_field_index("label"), "label",
                               pa.array([OTHER_LABEL] * copies.num_rows))
    size = rows.schema.field("embedding").type.list_size
    dtype = of_bit_width(rows.schema.field("embedding").type.value_type.bit_width).name
    url = ui_inputs["database"]
    for table, datasets in (("ui_two", [(own, rows), (other, copies)]), ("ui_other_only", [(other, copies)])):
        for i, (dataset, data) in enumerate(datasets):
            database.prepare_table(url, table, size, dtype, dataset, append=i > 0)
            with database.connect(url) as connection:
                database.upsert_table(connection, table, dataset["id"], data)
                connection.commit()
    return other["id"]


def test_search_results_name_their_dataset_when_the_table_holds_several(ui_inputs, two_datasets):
    own_id = json.loads(open(f"{ui_inputs['predictions']}/manifest.json").read())["dataset"]["id"]
    client, resources = ui_client("--input_dir", ui_inputs["job"], "--database", ui_inputs["database"],
                                  "--table", "ui_two")
    try:
        stored = re.search(r"/item/([0-9a-f]+)", client.get("/gallery").text).group(1)
        page = client.get("/search", params={"key": stored, "k": 6})
        assert page.status_code == 200, page.text[-500:]
        named = re.findall(r'<div class="dataset">([^<]*)</div>', page.text)
        # Its copy in the other dataset (distance 0) and this run's neighbours, each named by source and id.
        assert len(named) == 6 and f"/runs/other\\u202ejob ({two_datasets})" in named, named
        assert f"{ui_inputs['job']} ({own_id})" in named
        assert stored[::-1] in page.text and "\\u202eother" in page.text  # The other's key, its label escaped.
        assert not [c for c in INVISIBLE if c in shown_text(page.text)]
        assert "holds 2 datasets; searched: all of them" in page.text
        item = client.get(f"/item/{stored}")
        assert item.status_code == 200 and f"/runs/other\\u202ejob ({two_datasets})" in item.text
    finally:
        resources.close()
    client, resources = ui_client("--input_dir", ui_inputs["job"], "--predictions_dir", ui_inputs["predictions"],
                                  "--database", ui_inputs["database"], "--table", "ui_two")
    try:
        page = client.get("/search", params={"key": stored, "k": 6})
        named = re.findall(r'<div class="dataset">([^<]*)</div>', page.text)
        assert named == [f"{ui_inputs['job']} ({own_id})"] * 6, named  # Kept to --predictions_dir's dataset.
        assert f"searched: {ui_inputs['job']} ({own_id})" in page.text
    finally:
        resources.close()


def test_a_table_without_the_predictions_dataset_is_refused(ui_inputs, two_datasets):
    line = refused("--input_dir", ui_inputs["job"], "--predictions_dir", ui_inputs["predictions"], "--database",
                   ui_inputs["database"], "--table", "ui_other_only")
    assert "table ui_other_only holds no rows of --predictions_dir" in line and two_datasets in line


def test_search_page_of_a_table_with_one_dataset_names_none(ui_server):
    url, _ = ui_server
    key = re.search(r"/item/([0-9a-f]+)", httpx.get(url + "/gallery").text).group(1)
    page = httpx.get(url + "/search", params={"key": key}, timeout=30).text
    assert '<div class="dataset">' not in page and 'id="datasets"' not in page and page.count('class="tile"') == 8
