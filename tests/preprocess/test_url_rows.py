"""URL rows through the real job (in this process) against a real HTTP server on loopback.

One CSV mixes files, their URL twins (plain, chunked, gzip, non-ASCII, behind a password) and every
hostile answer: each row is written or failed with its reason, a URL row's record equals its file
twin's but for source and key, and the password is in no file. Then --retry_failed fetches again only
what failed transiently and gives the shards a fresh run would have written.
"""

import os

import pytest

import http_server as serve
import imaging
import outputs
from beam_pipeline.preprocess import cli as main
from tf_serving_input import failures, features

PASSWORD = "s3cret-Pw"
FAST_FLAGS = ["--url_connect_timeout", "1", "--url_read_timeout", "0.5", "--url_timeout", "1.5",
              "--url_max_attempts", "2", "--url_retry_after_max", "2", "--url_concurrency", "8",
              "--url_per_host", "4"]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """{name: bytes} of four small images, written to a folder too: (folder, images)."""
    folder = tmp_path_factory.mktemp("url_images")
    made = {}
    for index, (name, fmt) in enumerate([("a.jpg", "JPEG"), ("b.png", "PNG"), ("c.jpg", "JPEG"),
                                         ("d.png", "PNG")]):
        picture = imaging.quadrants(20 + 4 * index, 24)
        picture[..., index % 3] = 60 * index
        made[name] = imaging.encode(picture, fmt)
        (folder / name).write_bytes(made[name])
    return folder, made


def run_job(csv_path, out, *flags):
    return main.run(["--input_csv", str(csv_path), "--output_dir", str(out), "--image_size", "16",
                     "--num_shards", "2", "--no_progress", "--max_error_rate", "1", *FAST_FLAGS, *flags,
                     "--direct_num_workers", "1", "--direct_running_mode", "in_memory"])


def comparable(example):
    return {key: value for key, value in example.items()
            if key not in (features.IMAGE_SOURCE, features.IMAGE_KEY, "pixels")}


@pytest.mark.slow  # A whole job run (~9 s): in the full suite, not in the quick lane.
def test_every_url_row_is_written_or_failed_with_its_reason(loopback, images, tmp_path, capsys):
    folder, data = images
    good = {
        "plain": loopback.route("/mix/a.jpg", serve.image(data["a.jpg"])),
        "chunked": loopback.route("/mix/b.png", serve.chunked(data["b.png"], piece=64)),
        "gzip": loopback.route("/mix/c.jpg", serve.gzipped(data["c.jpg"])),
        "non_ascii": loopback.url("/mix/dé jà.png?q=ü"),
        "password": loopback.url("/mix/secret.jpg", userinfo=f"reader:{PASSWORD}@"),
        # Answers that end by closing the connection (issue 54: each failed as `unexpected`), and a kept-alive
        # connection the server closes as the next request on it goes out.
        "http10_eof": loopback.route("/mix/e.jpg", serve.ending(data["c.jpg"], "http10-eof")),
        "connection_close": loopback.route("/mix/f.png", serve.ending(data["d.png"], "connection-close")),
        "chunked_close": loopback.route("/mix/g.png", serve.ending(data["b.png"], "chunked-close")),
        "drops_idle": loopback.route("/mix/h.jpg", serve.ending(data["a.jpg"], "drops-idle")),
    }
    loopback.route("/mix/d%C3%A9%20j%C3%A0.png", serve.image(data["d.png"], "image/png"))
    loopback.route("/mix/secret.jpg", serve.basic_auth("reader", PASSWORD, serve.image(data["a.jpg"])))
    twins = {"plain": "a.jpg", "chunked": "b.png", "gzip": "c.jpg", "non_ascii": "d.png", "password": "a.jpg",
             "http10_eof": "c.jpg", "connection_close": "d.png", "chunked_close": "b.png", "drops_idle": "a.jpg"}
    hostile = {
        loopback.route("/mix/404", serve.status(404)): failures.HTTP_404,
        loopback.route("/mix/410", serve.status(410)): failures.HTTP_410,
        loopback.route("/mix/500-then-ok", serve.flaky(1, 500, serve.image(data["c.jpg"]))): None,
        loopback.route("/mix/503", serve.status(503)): failures.HTTP_5XX,
        loopback.route("/mix/429", serve.status(429, {"Retry-After": "1"})): failures.HTTP_429,
        loopback.route("/mix/loop", serve.redirect("/mix/loop")): failures.TOO_MANY_REDIRECTS,
        loopback.route("/mix/trickle", serve.trickle(data["a.jpg"], every=0.1)): failures.TIMEOUT,
        loopback.route("/mix/reset", serve.reset_mid_body(data["a.jpg"])): failures.CONNECTION_FAILED,
        loopback.route("/mix/huge", serve.claims_length(2 * 1024 ** 3)): failures.TOO_LARGE,
        loopback.route("/mix/page.html", serve.html()): failures.NOT_AN_IMAGE,
        loopback.route("/mix/cut.jpg", serve.image(data["a.jpg"][:len(data["a.jpg"]) // 2])): failures.TRUNCATED,
        loopback.route("/mix/short.jpg", serve.short_body(data["a.jpg"])): failures.CONNECTION_FAILED,
        loopback.route("/mix/noai", serve.image(data["a.jpg"], headers={"X-Robots-Tag": "noai"})): failures.OPTED_OUT,
        loopback.url("/mix/404", userinfo=f"reader:{PASSWORD}@").replace("/mix/404", "/mix/nope"): failures.HTTP_404,
        # The password repeated in the path, the query and the fragment: masked in each, as in the detail.
        loopback.url("/mix/404", userinfo=f"reader:{PASSWORD}@").replace(
            "/mix/404", f"/mix/{PASSWORD}/pw.jpg?token={PASSWORD}#{PASSWORD}"): failures.HTTP_404,
        "ftp://127.0.0.1/x.jpg": failures.BAD_URL,
        "data:image/png;base64,iVBORw0KGgo=": failures.BAD_URL,
        "http://[::1/x.jpg": failures.BAD_URL,
    }
    rows = [[name, name, "train"] for name in sorted(data)]
    rows += [[url, twins[kind], "train"] for kind, url in good.items()]
    rows += [[url, "hostile", "train"] for url in hostile]
    csv_path = folder / "mixed.csv"
    imaging.write_csv(csv_path, ["path", "label", "split"], rows)
    out = tmp_path / "out"

    assert run_job(csv_path, out, "--url_allow_private") == 0
    said = capsys.readouterr()

    manifest = outputs.manifest(out)
    assert manifest["written"] + manifest["failed"] == len(rows)
    url_rows = len(good) + sum(url.startswith("http") for url in hostile)
    assert manifest["fetch"]["urls"] == url_rows
    assert manifest["fetch"]["bytes"] >= sum(len(data[name]) for name in twins.values())
    assert f"URL rows {url_rows}," in " ".join(said.out.split())  # The summary line.
    reasons = outputs.reasons_by_source(out)
    shown_password_url = good["password"].replace(PASSWORD, "***")
    for url, reason in hostile.items():
        shown = url.replace(PASSWORD, "***")
        assert reasons.get(shown) == reason, (url, reasons.get(shown))
    assert not {url for url in good.values()} & set(reasons)
    assert shown_password_url not in reasons
    assert manifest["failed"] == sum(reason is not None for reason in hostile.values())

    # A URL row's record is its file twin's, byte for byte, but for its source and key.
    by_source = {example[features.IMAGE_SOURCE].decode(): example for example in outputs.all_examples(out)}
    for kind, url in good.items():
        record = by_source[url.replace(PASSWORD, "***")]
        twin = by_source[twins[kind]]
        assert comparable(record) == comparable(twin), kind
        assert (record["pixels"] == twin["pixels"]).all(), kind

    # errors.jsonl: the URL without its password, the status and the attempts, for every failed URL row, also
    # those that failed after their download; no row failed as `unexpected` (a bug's reason, never a server's).
    entries = {entry["source"]: entry for entry in outputs.errors(out)}
    assert entries[loopback.url("/mix/503")]["http_status"] == 503
    assert entries[loopback.url("/mix/503")]["attempts"] == 2
    assert entries[loopback.url("/mix/404")]["attempts"] == 1
    assert entries["ftp://127.0.0.1/x.jpg"]["url"] == "ftp://127.0.0.1/x.jpg"
    for url in (url for url, reason in hostile.items() if reason is not None and url.startswith("http")):
        entry = entries[url.replace(PASSWORD, "***")]
        assert entry["url"] == url.replace(PASSWORD, "***") and {"http_status", "attempts"} <= set(entry), entry
    for path in ("/mix/page.html", "/mix/cut.jpg"):  # not_an_image and truncated: failed after their download.
        assert (entries[loopback.url(path)]["http_status"], entries[loopback.url(path)]["attempts"]) == (200, 1), path
    assert entries[loopback.url("/mix/short.jpg")]["attempts"] == 2  # Transient: tried again.
    assert loopback.requests("/mix/short.jpg") == 2
    assert not [entry for entry in entries.values() if entry["reason"] == failures.UNEXPECTED]

    # The password is nowhere: no file of the output, no line printed.
    for root, _, names in os.walk(out):
        for name in names:
            assert PASSWORD.encode() not in open(os.path.join(root, name), "rb").read(), name
    assert PASSWORD not in said.out + said.err
    assert loopback.headers("/mix/secret.jpg")[-1]["Authorization"].startswith("Basic ")


@pytest.mark.slow  # A job run; inputs/test_http_fetch.py checks the refusal itself in the quick lane.
def test_private_addresses_are_refused_without_the_flag(loopback, images, tmp_path):
    folder, data = images
    url = loopback.route("/private/a.jpg", serve.image(data["a.jpg"]))
    csv_path = tmp_path / "private.csv"
    imaging.write_csv(csv_path, ["path"], [[url], [str(folder / "a.jpg")]])
    assert run_job(csv_path, tmp_path / "out") == 0
    assert outputs.reasons_by_source(tmp_path / "out") == {url: failures.BAD_URL}
    assert "--url_allow_private" in outputs.errors(tmp_path / "out")[0]["detail"]
    assert loopback.requests("/private/a.jpg") == 0


@pytest.mark.slow  # Four job runs (~12 s).
def test_retry_failed_fetches_only_transient_failures_and_matches_a_fresh_run(loopback, images, tmp_path, capsys):
    folder, data = images
    state = {"down": True}

    def sometimes_down(handler, number):
        (serve.status(503) if state["down"] else serve.image(data["b.png"], "image/png"))(handler, number)

    def sometimes_short(handler, number):  # Half its Content-Length, then closed: connection_failed, transient.
        (serve.short_body(data["c.jpg"]) if state["down"] else serve.image(data["c.jpg"]))(handler, number)

    rows = [[loopback.route(f"/retry/{name}", serve.image(content)), "ok"] for name, content in sorted(data.items())]
    rows += [[loopback.route("/retry/down.png", sometimes_down), "down"],
             [loopback.route("/retry/short.jpg", sometimes_short), "short"],
             [loopback.route("/retry/gone", serve.status(404)), "gone"]]
    csv_path = tmp_path / "retry.csv"
    imaging.write_csv(csv_path, ["path", "label"], rows)
    out, fresh = tmp_path / "out", tmp_path / "fresh"

    assert run_job(csv_path, out, "--url_allow_private") == 0
    assert outputs.reasons_by_source(out) == {loopback.url("/retry/down.png"): failures.HTTP_5XX,
                                              loopback.url("/retry/short.jpg"): failures.CONNECTION_FAILED,
                                              loopback.url("/retry/gone"): failures.HTTP_404}
    assert outputs.manifest(out)["fetch"] == {"urls": len(rows), "requested": len(rows),
                                              "bytes": sum(len(content) for content in data.values())}
    assert summary_line(capsys.readouterr().out) == f"URL rows {len(rows)}, 0.0 MiB fetched"
    statuses_before = {path: open(path, "rb").read() for path in _status_files(out)}
    # Nothing recovers: the shards and their statuses stay as they were.
    assert run_job(csv_path, out, "--url_allow_private", "--retry_failed") == 0
    assert {path: open(path, "rb").read() for path in _status_files(out)} == statuses_before
    said = capsys.readouterr()
    assert "no row failed transiently" not in said.err
    # The summary and the manifest tell what this run fetched: 2 rows requested again, no image came.
    assert summary_line(said.out) == f"URL rows {len(rows)}, 2 requested in this run, 0.0 MiB fetched"
    assert outputs.manifest(out)["fetch"] == {"urls": len(rows), "requested": 2, "bytes": 0}

    state["down"] = False
    fetched = {path: loopback.requests(path) for path in ("/retry/a.jpg", "/retry/down.png", "/retry/short.jpg",
                                                          "/retry/gone")}
    assert run_job(csv_path, out, "--url_allow_private", "--retry_failed") == 0
    said = capsys.readouterr()
    notice = next(line for line in said.err.splitlines() if "--retry_failed" in line)
    assert "fetching again 2 rows that failed transiently (" in notice
    assert "http_5xx 1" in notice and "connection_failed 1" in notice
    assert loopback.requests("/retry/a.jpg") == fetched["/retry/a.jpg"]  # Written rows are not fetched again,
    assert loopback.requests("/retry/gone") == fetched["/retry/gone"]  # nor a 404,
    assert loopback.requests("/retry/down.png") == fetched["/retry/down.png"] + 1  # only the transient ones,
    assert loopback.requests("/retry/short.jpg") == fetched["/retry/short.jpg"] + 1  # a short body included.
    assert outputs.reasons_by_source(out) == {loopback.url("/retry/gone"): failures.HTTP_404}
    assert outputs.manifest(out)["fetch"] == {"urls": len(rows), "requested": 2,
                                              "bytes": len(data["b.png"]) + len(data["c.jpg"])}
    assert summary_line(said.out) == f"URL rows {len(rows)}, 2 requested in this run, 0.0 MiB fetched"
    keys = [key for shard in outputs.keys_by_shard(out).values() for key in shard]
    assert len(keys) == len(set(keys)) == len(rows) - 1

    assert run_job(csv_path, fresh, "--url_allow_private") == 0
    assert outputs.shard_bytes(out) == outputs.shard_bytes(fresh)
    assert outputs.errors(out) == outputs.errors(fresh)
    assert outputs.manifest(out)["statistics"] == outputs.manifest(fresh)["statistics"]


def test_retry_failed_with_overwrite_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main.run(["--input_csv", "x.csv", "--output_dir", str(tmp_path), "--retry_failed", "--overwrite"])
    assert exit_.value.code == 2
    assert "--retry_failed" in capsys.readouterr().err


def summary_line(out):
    """The summary's URL line, its spaces collapsed."""
    return " ".join(next(line for line in out.splitlines() if "URL rows" in line).split())


def _status_files(out):
    layout = outputs.layout(out)
    return sorted(os.path.join(layout.status_dir, name) for name in os.listdir(layout.status_dir))



def test_this_runs_fetches_come_from_its_counters_and_from_the_statuses_without_them():
    """Issue 55: a --retry_failed run reported the earlier runs' totals. The manifest's `requested` and `bytes`
    are this run's counters; a runner that reports no counters (fewer shards counted than run) falls back."""
    import apache_beam as beam
    from apache_beam.metrics import Metrics
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from beam_pipeline.preprocess.cli import fetched_this_run
    from beam_pipeline.preprocess.shard_writer import METRICS_NAMESPACE

    def count(urls):  # As WriteShardFn counts: one shard, its URL rows requested, their bytes.
        Metrics.counter(METRICS_NAMESPACE, "shards").inc()
        Metrics.counter(METRICS_NAMESPACE, "url_rows_requested").inc(urls)
        Metrics.counter(METRICS_NAMESPACE, "url_bytes_fetched").inc(1000 * urls)
        return urls

    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = pipeline | beam.Create([0, 2, 0]) | beam.Map(count)
    totals = {"urls": 417, "bytes": 2_900_000}  # The statuses': every run that wrote the shards.
    assert fetched_this_run(totals, [pipeline], shards=3) == {"urls": 417, "requested": 2, "bytes": 2000}
    assert fetched_this_run(totals, [pipeline], shards=4) == {"urls": 417, "requested": 417, "bytes": 2_900_000}
    assert fetched_this_run(totals, [], shards=3) == {"urls": 417, "requested": 417, "bytes": 2_900_000}
