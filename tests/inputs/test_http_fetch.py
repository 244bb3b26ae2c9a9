"""HttpFetcher against a real HTTP server on loopback: every hostile answer ends in its reason code.

Timeouts are short (a second or less) and backoff tiny, so the whole file takes a few seconds.
"""

import threading
import time

import pytest

import http_server as serve
from beam_pipeline.inputs.http_fetch import HttpFetcher, user_agent
from beam_pipeline.inputs.urls import FetchConfig
from imaging import encode, quadrants
from tf_serving_input import failures

JPEG = encode(quadrants(), "JPEG")
PNG = encode(quadrants(), "PNG")
FAST = FetchConfig(concurrency=8, per_host=4, connect_timeout=1.0, read_timeout=0.5, total_timeout=1.5,
                   max_attempts=3, max_redirects=3, retry_after_max=2.0, allow_private=True, backoff_base=0.01)


@pytest.fixture(scope="module")
def fetcher():
    fetcher = HttpFetcher(FAST, max_bytes=64 * 1024)
    yield fetcher
    fetcher.close()


def failure_of(fetcher, url):
    with pytest.raises(failures.RowFailure) as caught:
        fetcher.fetch(url)
    return caught.value


def test_images_come_back_byte_for_byte_plain_chunked_gzip_and_non_ascii(loopback, fetcher):
    assert fetcher.fetch(loopback.route("/ok/a.jpg", serve.image(JPEG))) == JPEG
    assert fetcher.fetch(loopback.route("/ok/b.png", serve.chunked(PNG, piece=100))) == PNG
    assert fetcher.fetch(loopback.route("/ok/c.jpg", serve.gzipped(JPEG))) == JPEG
    # Non-ASCII path and query: sent percent-encoded as UTF-8, a valid %XX kept as it is.
    loopback.route("/ok/%C3%BC%20x.jpg", serve.image(JPEG))
    assert fetcher.fetch(loopback.url("/ok/ü x.jpg?q=é%41")) == JPEG
    headers = loopback.headers("/ok/a.jpg")[0]
    assert headers["User-Agent"] == user_agent() and "beam-image-pipeline/" in headers["User-Agent"]
    assert headers["Accept-Encoding"] == "gzip, deflate"


@pytest.mark.parametrize("code, reason", [(404, failures.HTTP_404), (403, failures.HTTP_403),
                                          (410, failures.HTTP_410), (401, failures.HTTP_4XX),
                                          (451, failures.HTTP_4XX)])
def test_client_errors_fail_at_once_with_their_code(loopback, fetcher, code, reason):
    url = loopback.route(f"/status/{code}", serve.status(code))
    failure = failure_of(fetcher, url)
    assert (failure.reason, failure.fields["http_status"], failure.fields["attempts"]) == (reason, code, 1)
    assert loopback.requests(f"/status/{code}") == 1  # Never retried.
    assert failure.fields["url"] == url


def test_a_5xx_then_200_is_retried_until_it_wins(loopback, fetcher):
    url = loopback.route("/flaky/500", serve.flaky(2, 500, serve.image(JPEG)))
    assert fetcher.fetch(url) == JPEG
    assert loopback.requests("/flaky/500") == 3


def test_always_5xx_and_always_429_fail_after_max_attempts(loopback, fetcher):
    failure = failure_of(fetcher, loopback.route("/always/503", serve.status(503)))
    assert (failure.reason, failure.fields["http_status"], failure.fields["attempts"]) == (failures.HTTP_5XX, 503, 3)
    assert loopback.requests("/always/503") == 3
    failure = failure_of(fetcher, loopback.route("/always/429", serve.status(429)))
    assert (failure.reason, failure.fields["attempts"]) == (failures.HTTP_429, 3)


def test_retry_after_is_honoured_up_to_its_cap(loopback):
    fetcher = HttpFetcher(FetchConfig(**{**FAST.__dict__, "total_timeout": 5.0}), max_bytes=64 * 1024)
    try:
        url = loopback.route("/retry_after/1", serve.flaky(1, 429, serve.image(JPEG)))
        started = time.monotonic()
        # The 429 of the first request says Retry-After 1 second.
        loopback.route("/retry_after/1", lambda handler, number: (
            serve.status(429, {"Retry-After": "1"}) if number == 1 else serve.image(JPEG))(handler, number))
        assert fetcher.fetch(url) == JPEG
        assert time.monotonic() - started >= 1.0
        # Over --url_retry_after_max: fails at once, after one attempt.
        url = loopback.route("/retry_after/3600", serve.status(429, {"Retry-After": "3600"}))
        failure = failure_of(fetcher, url)
        assert (failure.reason, failure.fields["attempts"]) == (failures.HTTP_429, 1)
        assert "Retry-After" in failure.detail
    finally:
        fetcher.close()


def test_redirects_are_followed_and_a_loop_stops(loopback, fetcher):
    loopback.route("/redirect/target.jpg", serve.image(JPEG))
    assert fetcher.fetch(loopback.route("/redirect/one", serve.redirect("/redirect/target.jpg", 301))) == JPEG
    loopback.route("/redirect/loop-a", serve.redirect("/redirect/loop-b"))
    loopback.route("/redirect/loop-b", serve.redirect("/redirect/loop-a"))
    failure = failure_of(fetcher, loopback.url("/redirect/loop-a"))
    assert failure.reason == failures.TOO_MANY_REDIRECTS
    failure = failure_of(fetcher, loopback.route("/redirect/ftp", serve.redirect("ftp://127.0.0.1/x.jpg")))
    assert failure.reason == failures.BAD_URL and "ftp" in failure.detail
    failure = failure_of(fetcher, loopback.route("/redirect/no-location", serve.status(302)))
    assert failure.reason == failures.BAD_URL


def test_private_addresses_are_refused_without_the_flag_even_after_a_redirect(loopback):
    strict = FetchConfig(**{**FAST.__dict__, "allow_private": False})
    # The tests' own server is exempt (an argument for tests, not a flag): only the redirect is judged.
    fetcher = HttpFetcher(strict, max_bytes=64 * 1024, exempt=frozenset({("127.0.0.1", loopback.port)}))
    refused = HttpFetcher(strict, max_bytes=64 * 1024)
    try:
        before = loopback.connections
        failure = failure_of(refused, loopback.url("/private/direct.jpg"))
        assert failure.reason == failures.BAD_URL and "loopback" in failure.detail
        assert "--url_allow_private" in failure.detail
        assert loopback.connections == before  # Never connected.
        for target in ("http://10.0.0.1/x.jpg", "http://127.0.0.2/x.jpg", "http://[::1]/x.jpg",
                       "http://169.254.169.254/latest/meta-data"):
            path = f"/private/to-{abs(hash(target))}"
            failure = failure_of(fetcher, loopback.route(path, serve.redirect(target)))
            assert failure.reason == failures.BAD_URL, target
    finally:
        fetcher.close()
        refused.close()


def test_the_checked_address_is_the_one_connected_to(loopback):
    """DNS rebinding: the name resolves once per hop, to a checked address, and the connection goes there."""
    answers = []

    def resolver(host, port):
        answers.append(host)
        return ["127.0.0.1"] if len(answers) == 1 else ["10.0.0.1"]

    loopback.route("/rebind/a.jpg", serve.image(JPEG))
    fetcher = HttpFetcher(FAST, max_bytes=64 * 1024, resolver=resolver)
    try:
        url = f"http://rebind.example:{loopback.port}/rebind/a.jpg"
        assert fetcher.fetch(url) == JPEG
        assert answers == ["rebind.example"]
        assert loopback.headers("/rebind/a.jpg")[0]["Host"] == f"rebind.example:{loopback.port}"
    finally:
        fetcher.close()


def test_unresolvable_names_fail_as_dns_failed(loopback):
    import socket

    def resolver(host, port):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    fetcher = HttpFetcher(FAST, max_bytes=64 * 1024, resolver=resolver)
    try:
        failure = failure_of(fetcher, "http://no-such-host.invalid/a.jpg")
        assert failure.reason == failures.DNS_FAILED and "no-such-host.invalid" in failure.detail
    finally:
        fetcher.close()


def test_trickle_and_stall_end_as_timeout_within_the_total(loopback, fetcher):
    loopback.route("/slow/trickle", serve.trickle(JPEG, every=0.1))
    loopback.route("/slow/stall", serve.stall(30))
    ended = {}

    def fetch(path):  # Both at once: the test waits one --url_timeout, not two.
        started = time.monotonic()
        try:
            fetcher.fetch(loopback.url(path))
        except failures.RowFailure as failure:
            ended[path] = (failure.reason, time.monotonic() - started)

    threads = [threading.Thread(target=fetch, args=(path,)) for path in ("/slow/trickle", "/slow/stall")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for path in ("/slow/trickle", "/slow/stall"):
        reason, seconds = ended[path]
        assert reason == failures.TIMEOUT, path
        assert seconds < FAST.total_timeout + 3.0, path  # Cut at --url_timeout: not after 78 s or 30 s.


def test_a_reset_mid_body_and_a_short_body_fail_as_connection_failed(loopback, fetcher):
    failure = failure_of(fetcher, loopback.route("/broken/reset", serve.reset_mid_body(JPEG)))
    assert failure.reason == failures.CONNECTION_FAILED and failure.fields["attempts"] == 3


def test_a_huge_content_length_is_refused_without_reading_and_a_long_body_never_leaks(loopback, fetcher):
    failure = failure_of(fetcher, loopback.route("/size/claims-2gb", serve.claims_length(2 * 1024 ** 3)))
    assert failure.reason == failures.TOO_LARGE and "Content-Length" in failure.detail
    big = bytes(100 * 1024)
    failure = failure_of(fetcher, loopback.route("/size/chunked-big", serve.chunked(big)))
    assert failure.reason == failures.TOO_LARGE
    # Bytes after the Content-Length never become the next request's answer on a kept-alive connection.
    loopback.route("/size/longer", serve.longer_than_length(JPEG))
    loopback.route("/size/next.png", serve.image(PNG, "image/png"))
    assert fetcher.fetch(loopback.url("/size/longer")) == JPEG
    assert fetcher.fetch(loopback.url("/size/next.png")) == PNG


def test_html_and_opt_out_headers(loopback, fetcher):
    assert fetcher.fetch(loopback.route("/content/page", serve.html())).startswith(b"<!doctype html>")  # TF says so.
    for value in ("noai", "noimageai", "beam-image-pipeline: noindex", "noimageindex, nofollow"):
        path = f"/content/robots-{abs(hash(value))}"
        failure = failure_of(fetcher, loopback.route(path, serve.image(JPEG, headers={"X-Robots-Tag": value})))
        assert failure.reason == failures.OPTED_OUT, value
    for value in ("googlebot: noai", "nofollow"):
        path = f"/content/allowed-{abs(hash(value))}"
        assert fetcher.fetch(loopback.route(path, serve.image(JPEG, headers={"X-Robots-Tag": value}))) == JPEG


def test_credentials_go_to_their_origin_only_and_appear_nowhere(loopback, fetcher):
    loopback.route("/auth/a.jpg", serve.basic_auth("reader", "s3cr:et@x", serve.image(JPEG)))
    url = loopback.url("/auth/a.jpg", userinfo="reader:s3cr%3Aet%40x@")
    assert fetcher.fetch(url) == JPEG
    failure = failure_of(fetcher, loopback.url("/auth/missing.jpg", userinfo="reader:s3cr%3Aet%40x@"))
    assert failure.reason == failures.HTTP_404
    text = f"{failure.detail} {failure.fields}"
    assert "s3cr" not in text and "reader:***@" in text


def test_tls_to_a_plain_port_and_a_closed_port(loopback, fetcher):
    failure = failure_of(fetcher, f"https://127.0.0.1:{loopback.port}/x.jpg")
    assert failure.reason == failures.TLS_FAILED
    import socket

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    failure = failure_of(fetcher, f"http://127.0.0.1:{port}/x.jpg")
    assert failure.reason == failures.CONNECTION_FAILED


def test_keep_alive_reuses_connections(loopback):
    fetcher = HttpFetcher(FAST, max_bytes=64 * 1024)
    try:
        loopback.route("/keep/a.jpg", serve.image(JPEG))
        before = loopback.connections
        for _ in range(5):
            assert fetcher.fetch(loopback.url("/keep/a.jpg")) == JPEG
        assert loopback.connections - before == 1
    finally:
        fetcher.close()


def test_concurrent_fetches_share_one_fetcher(loopback, fetcher):
    loopback.route("/many/a.jpg", serve.slow(0.05, serve.image(JPEG)))
    results = []
    threads = [threading.Thread(target=lambda: results.append(fetcher.fetch(loopback.url("/many/a.jpg"))))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [JPEG] * 8


def test_a_proxy_comes_from_the_environment_only_and_no_proxy_is_honoured(loopback, monkeypatch, tmp_path):
    # The loopback server acts as the proxy: it receives the absolute URL.
    loopback.route("/proxied/a.jpg", serve.image(JPEG))
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{loopback.port}")
    monkeypatch.setenv("no_proxy", "direct.example")
    monkeypatch.setenv("HOME", str(tmp_path))  # A ~/.netrc is never read.
    (tmp_path / ".netrc").write_text("default login intruder password leaked\n")
    fetcher = HttpFetcher(FAST, max_bytes=64 * 1024)
    try:
        assert fetcher.fetch("http://images.example/proxied/a.jpg") == JPEG
        assert loopback.headers("/proxied/a.jpg")[-1]["Host"] == "images.example"
        assert "Authorization" not in loopback.headers("/proxied/a.jpg")[-1]
        # no_proxy: the name is resolved and connected to directly (here: it does not resolve).
        failure = failure_of(fetcher, "http://direct.example/proxied/a.jpg")
        assert failure.reason in (failures.DNS_FAILED, failures.TIMEOUT, failures.CONNECTION_FAILED)
        assert loopback.requests("/proxied/a.jpg") == 1
    finally:
        fetcher.close()


def test_credentials_follow_a_redirect_on_their_origin_only_and_a_dead_address_is_skipped(loopback):
    loopback.route("/creds/final.jpg", serve.basic_auth("reader", "pw1", serve.image(JPEG)))
    loopback.route("/creds/hop", serve.redirect("/creds/final.jpg"))
    loopback.route("/creds/elsewhere.jpg", serve.image(JPEG))
    # 'elsewhere.test' is another origin (same loopback): the credentials are not sent there.
    loopback.route("/creds/away", serve.redirect(f"http://elsewhere.test:{loopback.port}/creds/elsewhere.jpg"))

    def resolver(host, port):  # 127.0.0.9 first: nothing listens there (the server is on 127.0.0.1 only).
        return ["127.0.0.9", "127.0.0.1"] if host == "elsewhere.test" else ["127.0.0.1"]

    fetcher = HttpFetcher(FAST, max_bytes=64 * 1024, resolver=resolver)
    try:
        assert fetcher.fetch(loopback.url("/creds/hop", userinfo="reader:pw1@")) == JPEG
        assert fetcher.fetch(loopback.url("/creds/away", userinfo="reader:pw1@")) == JPEG
        assert "Authorization" not in loopback.headers("/creds/elsewhere.jpg")[-1]
        assert loopback.headers("/creds/away")[-1]["Authorization"].startswith("Basic ")
    finally:
        fetcher.close()


def test_max_attempts_counts_every_hop_of_a_url(loopback, fetcher):
    """A chain of redirects whose every hop fails twice first gets --url_max_attempts tries in all, not per hop."""
    def storm(handler, number):
        hop = int(handler.path.rsplit("/", 1)[1])
        serve.flaky(2, 503, serve.redirect(f"/storm/{hop + 1}"))(handler, number)

    for hop in range(12):
        loopback.route(f"/storm/{hop}", storm)
    failure = failure_of(fetcher, loopback.url("/storm/0"))
    assert failure.reason == failures.HTTP_5XX
    # 3 failed tries in all (2 on the first hop, 1 on the second), and the one redirect between them.
    assert sum(loopback.requests(f"/storm/{hop}") for hop in range(12)) == FAST.max_attempts + 1 == \
        failure.fields["attempts"]


def test_a_gzip_bomb_is_refused_by_its_ratio_before_it_fills_memory(loopback):
    import gzip

    bomb = gzip.compress(bytes(20 * 1024 * 1024))  # ~20 KB on the wire, 20 MB decoded.
    fetcher = HttpFetcher(FAST, max_bytes=256 * 1024 * 1024)
    try:
        failure = failure_of(fetcher, loopback.route("/bomb/a.png", serve.raw_gzip(bomb)))
    finally:
        fetcher.close()
    assert failure.reason == failures.TOO_LARGE and "decodes to more than" in failure.detail


def test_an_early_hints_answer_is_skipped(loopback, fetcher):
    assert fetcher.fetch(loopback.route("/hints/a.jpg", serve.early_hints(serve.image(JPEG)))) == JPEG


def test_a_proxy_gets_its_credentials_from_its_url(loopback, monkeypatch):
    loopback.route("/proxied-auth/a.jpg", serve.image(JPEG))
    monkeypatch.setenv("http_proxy", f"http://pu:ProxyPw@127.0.0.1:{loopback.port}")
    monkeypatch.setenv("no_proxy", "")
    fetcher = HttpFetcher(FAST, max_bytes=64 * 1024)
    try:
        assert fetcher.fetch("http://images.example/proxied-auth/a.jpg") == JPEG
    finally:
        fetcher.close()
    assert loopback.headers("/proxied-auth/a.jpg")[-1]["Proxy-Authorization"] == "Basic cHU6UHJveHlQdw=="


def test_a_short_password_does_not_garble_the_detail(loopback, fetcher):
    failure = failure_of(fetcher, loopback.url("/short/404", userinfo="u:e@"))
    assert failure.reason == failures.HTTP_404 and "answered 404 Not Found" in failure.detail


@pytest.mark.parametrize("way", serve.ENDINGS)
def test_every_way_an_answer_can_end_is_read_whole_and_counts_one_attempt(loopback, way):
    """Issue 54: http.client hands a closing answer's socket to the response (conn.sock is None): the body is
    still read, to its Content-Length, its last chunk or EOF; a kept-alive connection is pooled, a closed one not."""
    fetcher = HttpFetcher(FAST, max_bytes=64 * 1024)
    path = f"/end/{way}.jpg"
    url = loopback.route(path, serve.ending(JPEG, way))
    try:
        before, dropped = loopback.connections, loopback.dropped
        for _ in range(3):
            answer = fetcher.get(url)
            assert answer.body == JPEG, way
            assert answer.fields == {"url": url, "http_status": 200, "attempts": 1}, way
    finally:
        fetcher.close()
    closes = way not in ("keep-alive", "chunked")
    if way.startswith("drops-idle"):
        # Each reuse found the connection closed as its request went out: once more on a fresh one, not a failed try.
        assert (loopback.dropped - dropped, loopback.connections - before) == (2, 3)
    else:
        assert loopback.connections - before == (3 if closes else 1), way
    assert loopback.requests(path) == 3


def test_http10_redirects_and_errors_without_a_length_end_at_eof(loopback, fetcher):
    loopback.route("/end10/target.jpg", serve.ending(JPEG, "http10-eof"))
    url = loopback.route("/end10/moved", serve.http10(301, b"moved", {"Location": "/end10/target.jpg"}, length=False))
    assert fetcher.get(url).fields == {"url": url, "http_status": 200, "attempts": 2}
    failure = failure_of(fetcher, loopback.route("/end10/missing", serve.http10(404, b"no " * 1000, length=False)))
    assert (failure.reason, failure.fields["http_status"], failure.fields["attempts"]) == (failures.HTTP_404, 404, 1)
    failure = failure_of(fetcher, loopback.route("/end10/down", serve.http10(503, b"down", length=False)))
    assert (failure.reason, failure.fields["attempts"]) == (failures.HTTP_5XX, FAST.max_attempts)


def test_a_body_shorter_than_its_content_length_is_a_connection_failure_tried_again(loopback, fetcher):
    """Issue 55: half the body, then the server closes: connection_failed (transient), not a truncated image."""
    url = loopback.route("/short/half.jpg", serve.short_body(JPEG))
    failure = failure_of(fetcher, url)
    assert failure.reason == failures.CONNECTION_FAILED and "closed before the whole body came" in failure.detail
    assert failure.reason in failures.TRANSIENT
    assert (failure.fields["http_status"], failure.fields["attempts"]) == (200, FAST.max_attempts)
    assert loopback.requests("/short/half.jpg") == FAST.max_attempts
    # Over HTTP/1.0 too, and when it comes whole on the next try.
    loopback.route("/short/http10.jpg", lambda handler, number: (
        serve.short_body(JPEG) if number == 1 else serve.ending(JPEG, "http10-length"))(handler, number))
    answer = fetcher.get(loopback.url("/short/http10.jpg"))
    assert (answer.body, answer.fields["attempts"]) == (JPEG, 2)


def test_a_bug_inside_a_fetch_fails_its_row_as_unexpected_with_the_url_fields(loopback, monkeypatch):
    """An exception the fetch did not foresee is the row's `unexpected` failure, never raised, fields kept."""
    fetcher = HttpFetcher(FAST, max_bytes=64 * 1024)
    url = loopback.route("/bug/a.jpg", serve.image(JPEG))
    monkeypatch.setattr(HttpFetcher, "_answer", lambda *args: 1 / 0)
    try:
        failure = failure_of(fetcher, loopback.url("/bug/a.jpg", userinfo="u:pw-secret@"))
    finally:
        fetcher.close()
    assert failure.reason == failures.UNEXPECTED and "ZeroDivisionError" in failure.detail
    assert failure.fields == {"url": url.replace("//", "//u:***@"), "http_status": 200, "attempts": 1}
    assert "pw-secret" not in f"{failure.detail} {failure.fields}"
