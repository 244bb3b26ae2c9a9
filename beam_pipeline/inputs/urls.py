"""What an http(s) URL cell means, before any network: parsed, quoted, checked, and its fetch settings.

Pure Python (no sockets, no Beam, no TensorFlow), so the flags' checks and the
CSV's validation stay cheap. The network side is `http_fetch.py`.

    target = parse("https://user:pw@Bücher.example/a b.jpg?q=ü")
    target.request_target   -> '/a%20b.jpg?q=%C3%BC'
    target.host             -> 'xn--bcher-kva.example'
    target.shown            -> 'https://user:***@Bücher.example/a b.jpg?q=ü'  (never the password)
"""

from __future__ import annotations

import base64
import dataclasses
import email.utils
import ipaddress
import re
import time
import urllib.parse

from beam_pipeline.common.redact import redact_url
from tf_serving_input import failures

HTTP_SCHEMES = ("http", "https")
# Schemes a path cell may not use: neither http(s) nor a filesystem (file://, gs://, s3://, ... go to
# Beam's filesystems as before). `data:` and `javascript:` have no '//', so they are named here.
REFUSED_SCHEMES = ("data", "javascript", "ftp", "ftps", "sftp", "ssh", "mailto", "ws", "wss", "gopher", "telnet")
# The opt-out directives img2dataset honours by default, in X-Robots-Tag.
OPT_OUT_DIRECTIVES = frozenset({"noai", "noimageai", "noindex", "noimageindex"})
USER_AGENT_TOKEN = "beam-image-pipeline"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(//)?")
_HOST_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
# A User-Agent token in X-Robots-Tag ('googlebot: noai'); a date's pieces ('25-Jun-10 15:00:00') are not.
_AGENT = re.compile(r"^[a-z][a-z0-9_.-]*$")
# What urllib's ValueError means, in words that quote nothing of the URL (its texts quote the netloc).
_SPLIT_ERRORS = (("Port out of range", "its port is not between 1 and 65535"),
                 ("Port could not be cast", "its port is not a number, or its user:password holds a '/', '?' or "
                                            "'#', which must be percent-encoded"),
                 ("Invalid IPv6 URL", "its IPv6 address in [brackets] is malformed"),
                 ("NFKC", "its user, password or host holds characters that change under NFKC normalization"))
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
_LONE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# Characters a request target keeps as they are (RFC 3986's reserved and unreserved, plus '%' of a valid escape).
_SAFE = "!#$%&'()*+,/:;=?@[]~"


@dataclasses.dataclass(frozen=True)
class FetchConfig:
    """How the job fetches URL rows (the --url_* flags); picklable for Beam's workers.

    Attributes:
      concurrency: requests in flight per worker.
      per_host: requests in flight per worker to one host (name and port).
      connect_timeout, read_timeout: seconds to connect, and between two reads of the answer.
      total_timeout: seconds for the whole fetch of a URL, redirects, retries and waits included.
      max_attempts: tries of a URL that fail transiently (connection, timeout, 429, 5xx), over all its redirects.
      max_redirects: redirects followed before the row fails as too_many_redirects.
      retry_after_max: the longest Retry-After honoured; a longer one fails the row at once.
      allow_private: fetch URLs that resolve to loopback, private or link-local addresses.
      user_agent_extra: appended to the User-Agent (e.g. a contact address).
      backoff_base: seconds of the first retry's backoff (doubled each try, up to 8 s, full jitter).
    """

    concurrency: int = 64
    per_host: int = 16
    connect_timeout: float = 10.0
    read_timeout: float = 10.0
    total_timeout: float = 60.0
    max_attempts: int = 3
    max_redirects: int = 10
    retry_after_max: float = 60.0
    allow_private: bool = False
    user_agent_extra: str = ""
    backoff_base: float = 0.5


@dataclasses.dataclass(frozen=True)
class Target:
    """One URL, ready to request: where to connect, what to ask for, and how to show it."""

    scheme: str
    host: str  # lower-case ASCII (IDNA) name, or an IP address without brackets
    port: int
    request_target: str  # path and query, percent-encoded ASCII
    authorization: str | None = dataclasses.field(default=None, repr=False)
    shown: str = ""  # the URL as given, its password replaced by ***

    @property
    def netloc(self) -> str:
        """host[:port] as a URL writes it (IPv6 in brackets, the scheme's default port left out)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def origin(self) -> tuple[str, str, int]:
        """(scheme, host, port): where credentials may be sent, and what keep-alive connections are pooled by."""
        return self.scheme, self.host, self.port


def is_http_url(cell: str) -> bool:
    """Whether a path cell is an http:// or https:// URL (any case)."""
    head = cell.lstrip()[:8].lower()
    return head.startswith(("http://", "https://"))


def refused_scheme(cell: str) -> str | None:
    """The scheme of a path cell that can name no image (ftp:, data:, http: without '//', ...), or None."""
    match = _SCHEME.match(cell.lstrip())
    if not match:
        return None
    scheme = match.group(1).lower()
    if scheme in REFUSED_SCHEMES or (scheme in HTTP_SCHEMES and not match.group(2)):
        return scheme
    return None


def bad_url(detail: str, shown: str) -> failures.RowFailure:
    """The bad_url failure of a URL, naming it without its password."""
    return failures.RowFailure(failures.BAD_URL, detail, {"url": shown})


def quote_target(text: str) -> str:
    """Path or query percent-encoded as UTF-8, valid %XX escapes kept and a lone '%' encoded (requests' rule)."""
    return urllib.parse.quote(_LONE_PERCENT.sub("%25", text), safe=_SAFE)


def parse(url: str) -> Target:
    """The Target of an http(s) URL; raises RowFailure(bad_url) naming what is wrong."""
    url = url.strip()
    shown = redact_url(url)
    if _CONTROL.search(url.replace(" ", "")):
        raise bad_url(f"{shown!r} holds a control character", shown)
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError as error:
        why = next((words for marker, words in _SPLIT_ERRORS if marker in str(error)),
                   "it cannot be split into scheme, host and path")
        raise bad_url(f"{shown!r} is not a URL that can be fetched: {why}", shown) from None
    scheme = parts.scheme.lower()
    if scheme not in HTTP_SCHEMES:
        raise bad_url(f"{shown!r}: the scheme {scheme or '(none)'}: is not fetched, only http and https", shown)
    if not host:
        raise bad_url(f"{shown!r} names no host", shown)
    if "%" in host:
        raise bad_url(f"{shown!r}: an IPv6 zone (%...) names a local interface; it is not fetched", shown)
    try:
        ascii_host = ipaddress.ip_address(host).compressed if _is_ip(host) else _idna(host)
    except UnicodeError:
        raise bad_url(f"{shown!r}: the host name is not a valid internationalized name", shown) from None
    if not _is_ip(ascii_host):
        labels = ascii_host.split(".")
        if len(ascii_host) > 253 or not all(_HOST_LABEL.match(label) for label in labels):
            raise bad_url(f"{shown!r}: the host name is not a valid DNS name (letters, digits, '-' and '_', "
                          "at most 63 characters a label)", shown)
    if port == 0:
        raise bad_url(f"{shown!r}: port 0 cannot be connected to", shown)
    request_target = quote_target(parts.path or "/") + (f"?{quote_target(parts.query)}" if parts.query else "")
    authorization = None
    if parts.username is not None or parts.password is not None:
        user = urllib.parse.unquote(parts.username or "")
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        authorization = f"Basic {token}"
    return Target(scheme=scheme, host=ascii_host, port=port or (443 if scheme == "https" else 80),
                  request_target=request_target, authorization=authorization, shown=shown)


def redirect_target(current: Target, location: str) -> Target:
    """The Target a redirect's Location names, relative to `current` (its fragment dropped); raises bad_url.

    `location` as http.client hands it over: decoded as Latin-1, so a Location sent in raw UTF-8 (which
    servers do) is read as UTF-8 again before it is quoted."""
    try:
        location = location.encode("latin-1").decode("utf-8")
    except UnicodeError:
        pass  # Truly Latin-1 (or already text): keep it.
    base = f"{current.scheme}://{current.netloc}{current.request_target}"
    try:
        joined = urllib.parse.urldefrag(urllib.parse.urljoin(base, location.strip())).url
    except ValueError:
        shown = redact_url(location.strip())
        raise bad_url(f"{shown!r} is not a URL that can be fetched", shown) from None
    return parse(joined)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _idna(host: str) -> str:
    if host.isascii():
        return host.lower().rstrip(".")
    return host.rstrip(".").encode("idna").decode("ascii").lower()


def refused_address(address: str) -> str | None:
    """Why the job may not connect to `address` without --url_allow_private (loopback, private, ...), or None.

    Addresses that embed an IPv4 address (IPv4-mapped, NAT64, 6to4, Teredo) are judged by it: on
    Python 3.11 some of them report themselves as global.
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    candidates: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            candidates.append(ip.ipv4_mapped)
        if ip in ipaddress.ip_network("::/96") and int(ip) > 1:  # Deprecated IPv4-compatible (::127.0.0.1).
            candidates.append(ipaddress.IPv4Address(int(ip)))
        if ip.sixtofour is not None:
            candidates.append(ip.sixtofour)
        if ip.teredo is not None:
            candidates += list(ip.teredo)
        if ip in ipaddress.ip_network("64:ff9b::/96"):
            candidates.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    for candidate in candidates:
        if candidate.is_loopback:
            return "a loopback address"
        if candidate.is_link_local:
            return "a link-local address"
        if candidate.is_multicast:
            return "a multicast address"
        if not candidate.is_global:
            return "a private or reserved address"
    return None


def opted_out(header_values: list[str], token: str = USER_AGENT_TOKEN) -> bool:
    """Whether X-Robots-Tag header values opt the image out of AI use, for all agents or for `token`.

    Each value is a comma list of directives, optionally scoped by a leading 'agent:'; a new
    'agent:' in the list starts that agent's scope (`other: noai, googlebot: none`).
    `unavailable_after: <date>` is a directive with a value, not an agent.
    """
    token = token.lower()
    for value in header_values:
        agent: str | None = None
        for part in value.split(","):
            part = part.strip()
            name, colon, rest = part.partition(":")
            name = name.strip().lower()
            if colon and _AGENT.match(name) and name not in {"unavailable_after", "max-snippet", "max-image-preview",
                                                              "max-video-preview"}:
                agent, part = name, rest.strip()
            directive = part.strip().lower()
            if directive in OPT_OUT_DIRECTIVES and agent in (None, token):
                return True
    return False


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds a Retry-After header asks to wait (delta-seconds or an HTTP-date), or None when absent or junk."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
