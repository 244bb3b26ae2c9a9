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
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
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
      max_attempts: tries of a transient failure (connection, timeout, 429, 5xx) per hop.
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
    def origin(self) -> tuple[str, str, int]:
        """(scheme, host, port): where credentials may be sent, and what keep-alive connections are pooled by."""
        return self.scheme, self.host, self.port


def is_http_url(cell: str) -> bool:
    """Whether a path cell is an http:// or https:// URL (any case)."""
    head = cell.lstrip()[:8].lower()
    return head.startswith(("http://", "https://"))


def refused_scheme(cell: str) -> str | None:
    """The scheme of a path cell that can name no image (ftp:, data:, ...), or None."""
    match = _SCHEME.match(cell.lstrip())
    if match and match.group(1).lower() in REFUSED_SCHEMES:
        return match.group(1).lower()
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
        raise bad_url(f"{shown!r} is not a URL that can be fetched: {error}", shown) from None
    scheme = parts.scheme.lower()
    if scheme not in HTTP_SCHEMES:
        raise bad_url(f"{shown!r}: the scheme {scheme or '(none)'}: is not fetched, only http and https", shown)
    if not host:
        raise bad_url(f"{shown!r} names no host", shown)
    try:
        ascii_host = ipaddress.ip_address(host).compressed if _is_ip(host) else _idna(host)
    except UnicodeError:
        raise bad_url(f"{shown!r}: the host name is not a valid internationalized name", shown) from None
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
    """The Target a redirect's Location names, relative to `current` (its fragment dropped); raises bad_url."""
    base = f"{current.scheme}://{_netloc(current)}{current.request_target}"
    joined = urllib.parse.urljoin(base, location.strip())
    return parse(urllib.parse.urldefrag(joined).url)


def _netloc(target: Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    default = 443 if target.scheme == "https" else 80
    return host if target.port == default else f"{host}:{target.port}"


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
            if colon and name.strip().lower() not in {"unavailable_after", "max-snippet", "max-image-preview",
                                                      "max-video-preview"}:
                agent, part = name.strip().lower(), rest.strip()
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
