"""URL cells before any network: parsing, quoting, masking, refused addresses, opt-out headers, Retry-After."""

import email.utils

import pytest

from beam_pipeline.common.redact import redact_url
from beam_pipeline.inputs import urls
from tf_serving_input import failures

# Passwords that a URL parser stumbles on: each must vanish from every text the row produces.
HOSTILE_USERINFO = {
    "fullwidth": "http://u1:FwSecret\uff031@example.com/a.jpg",
    "hash": "http://u2:PwHash#xyz@example.com/a.jpg",
    "query": "http://u2:PwQuery?xyz@example.com/a.jpg",
    "slash": "http://u3:PwSlash/xyz@example.com/a.jpg",
    "digits_then_slash": "http://u4:123/PwDigits@example.com/a.jpg",
    "bad_port_words": "http://u5:PwPort@example.com:8o8o/a.jpg",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_USERINFO))
def test_a_password_never_reaches_a_shown_url_or_a_detail(kind):
    url = HOSTILE_USERINFO[kind]
    secret = url.split(":")[2].split("@")[0]
    secret_head = secret[:6]
    shown = redact_url(url)
    assert secret_head not in shown, shown
    try:
        target = urls.parse(url)
    except failures.RowFailure as failure:
        assert failure.reason == failures.BAD_URL
        assert secret_head not in failure.detail and secret_head not in str(failure.fields), failure.detail
    else:
        assert secret_head not in target.shown


def test_parse_quotes_non_ascii_and_keeps_valid_escapes():
    target = urls.parse("https://user:pw@Bücher.example/a b.jpg?q=ü%zz%20#frag")
    assert (target.scheme, target.host, target.port) == ("https", "xn--bcher-kva.example", 443)
    assert target.request_target == "/a%20b.jpg?q=%C3%BC%25zz%20"
    assert target.shown == "https://user:***@Bücher.example/a b.jpg?q=ü%zz%20#frag"
    assert target.authorization == "Basic dXNlcjpwdw=="


@pytest.mark.parametrize("url, words", [
    ("ftp://example.com/a.jpg", "scheme ftp"),
    ("http://", "no host"),
    ("http://[::1/x", "IPv6"),
    ("http://example.com:99999/", "port"),
    ("http://example.com:0/", "port 0"),
    ("http://exa mple.com/", "host"),
    ("http://[fe80::1%25lo]/x", "zone"),
    (f"http://{'a' * 70}.example/x", "63"),
    ("http://example.com/\x00", "control"),
])
def test_unusable_urls_fail_as_bad_url_naming_why(url, words):
    with pytest.raises(failures.RowFailure) as caught:
        urls.parse(url)
    assert caught.value.reason == failures.BAD_URL
    assert words in caught.value.detail


def test_a_bad_redirect_location_is_bad_url():
    current = urls.parse("http://example.com/a")
    for location in ("http://[::1/x", "ftp://example.com/x", "file:///etc/passwd"):
        with pytest.raises(failures.RowFailure) as caught:
            urls.redirect_target(current, location)
        assert caught.value.reason == failures.BAD_URL, location
    # A Location in raw UTF-8 (as http.client hands it over, decoded as Latin-1) is requested as UTF-8.
    raw = "/img/ü5".encode().decode("latin-1")
    assert urls.redirect_target(current, raw).request_target == "/img/%C3%BC5"


@pytest.mark.parametrize("cell, refused", [
    ("http:/example.com/a.jpg", True), ("https:example.com/a.jpg", True), ("data:image/png;base64,xx", True),
    ("FTP://example.com/a", True), ("label:1.jpg", False), ("gs://bucket/a.jpg", False), ("a.jpg", False)])
def test_cells_that_name_no_image(cell, refused):
    assert (urls.refused_scheme(cell) is not None) == refused


@pytest.mark.parametrize("address, refused", [
    ("8.8.8.8", False), ("2001:4860:4860::8888", False),
    ("127.0.0.1", True), ("10.1.2.3", True), ("172.16.0.1", True), ("192.168.1.1", True), ("169.254.169.254", True),
    ("100.64.0.1", True), ("0.0.0.0", True), ("224.0.0.1", True), ("::1", True), ("::", True), ("fe80::1", True),
    ("fd00::1", True), ("::ffff:10.0.0.1", True), ("64:ff9b::a00:1", True), ("2002:7f00:1::1", True),
    ("::127.0.0.1", True), ("2001:0:4136:e378:8000:63bf:80ff:fffe", True)])
def test_refused_addresses(address, refused):
    assert (urls.refused_address(address) is not None) == refused, address


@pytest.mark.parametrize("values, out", [
    (["noai"], True), (["noimageai"], True), (["noindex"], True), (["NoImageIndex, nofollow"], True),
    (["beam-image-pipeline: noai"], True), (["googlebot: noai"], False), (["other: x, noai"], False),
    (["nofollow"], False), (["noindex, unavailable_after: 25 Jun 2010 15:00:00 PST"], True),
    (["unavailable_after: Monday, 25-Jun-10 15:00:00 GMT, noai"], True),
    (["unavailable_after: Fri, 25 Jun 2010 15:00:00 GMT, noai"], True),
    (["googlebot: nofollow", "noai"], True), ([], False)])
def test_x_robots_tag_opt_out(values, out):
    assert urls.opted_out(values) is out, values


def test_retry_after_seconds_dates_and_junk():
    assert urls.retry_after_seconds("5") == 5.0
    assert urls.retry_after_seconds(None) is None
    assert urls.retry_after_seconds("-5") is None and urls.retry_after_seconds("soon") is None
    later = email.utils.formatdate(1_000_030, usegmt=True)
    assert urls.retry_after_seconds(later, now=1_000_000) == pytest.approx(30, abs=1)
    assert urls.retry_after_seconds(email.utils.formatdate(10, usegmt=True), now=1_000_000) == 0.0


@pytest.mark.parametrize("url, shown", [
    ("http://user:secret@127.0.0.1:8/e404/pw.jpg?token=secret", "http://user:***@127.0.0.1:8/e404/pw.jpg?token=***"),
    ("http://user:secret@127.0.0.1:8/pw.jpg#secret", "http://user:***@127.0.0.1:8/pw.jpg#***"),
    ("http://user:secret@127.0.0.1:8/secret/pw.jpg", "http://user:***@127.0.0.1:8/***/pw.jpg"),
    ("http://user:s%40cret@h/a.jpg?t=s@cret&u=s%40cret", "http://user:***@h/a.jpg?t=***&u=***"),
    ("http://user:pw@h/pw/a.jpg", "http://user:***@h/pw/a.jpg"),  # Under 3 characters: as `redact` leaves it.
])
def test_a_password_repeated_elsewhere_in_the_url_is_masked_everywhere(url, shown):
    assert redact_url(url) == shown


def test_a_url_row_shows_its_url_without_the_password_anywhere_and_fetches_the_real_one(tmp_path):
    from beam_pipeline.inputs.rows import iter_rows

    url = "http://user:secret@127.0.0.1:8/secret/pw.jpg?token=secret#secret"
    csv = tmp_path / "rows.csv"
    csv.write_text(f"path,label\n{url},cat\n")
    (row,) = iter_rows(str(csv))
    assert "secret" not in row.source and "secret" not in row.path, row
    assert row.fetch_url == url
