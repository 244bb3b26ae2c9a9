"""Fetching one image URL, politely and safely: `HttpFetcher(config).fetch(url) -> bytes`, or a RowFailure.

`get(url)` returns the body with the fields errors.jsonl keeps of a URL row (`Fetched`), so a row that fails
later (its bytes are not an image) still names its URL, its last status and its attempts.

What one fetch does, within `config.total_timeout` for everything:
- resolve the host (cached a minute), and refuse the row as bad_url when any address it resolves to is
  loopback, private or link-local (unless --url_allow_private); then connect to that checked address
  only (the Host header, SNI and the certificate name stay the host name), so a DNS answer that
  changes between the check and the connect is never used;
- send an honest User-Agent, Basic credentials from the URL's user:password (to its own origin only);
- follow up to `max_redirects` redirects, each checked like the first URL;
- retry connection failures, timeouts, 429 and 5xx with jittered exponential backoff, honouring
  Retry-After up to `retry_after_max`; never another 4xx;
- refuse an X-Robots-Tag opt-out before reading the body, a Content-Length over the cap at once,
  and a body (after gzip/deflate decoding) once it passes the cap while it streams;
- read an answer to its end however it ends: its Content-Length, its last chunk, or (HTTP/1.0, or
  `Connection: close` without a length) the server closing the connection; a body that stops short of
  its Content-Length is a connection failure, tried again, never a truncated image;
- keep connections alive per (host, port, address), dropping one that has bytes pending (a body
  longer than its Content-Length) or that the server closed; a kept-alive connection that the server
  closes just as the next request goes out is replaced once by a fresh one, within the same try.

A watchdog thread shuts down the socket of a request past its deadline, so a server that trickles
its headers or body one byte at a time cannot hold a row past `total_timeout`.

Proxies come only from the standard environment variables (http_proxy, https_proxy, no_proxy):
nothing else (no ~/.netrc, no system settings) is read. Through a proxy, the proxy resolves and
connects, so the address check applies to what this process resolves, not to where the proxy goes.

Every failure's detail and fields name the URL without its password.
"""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import errno
import heapq
import http.client
import importlib.metadata
import itertools
import random
import select
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence

from beam_pipeline.common.redact import MASK, redact, redact_url
from beam_pipeline.inputs import urls
from beam_pipeline.inputs.urls import FetchConfig, Target
from tf_serving_input import failures

REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024
_ERROR_BODY_DRAIN = 64 * 1024
_DNS_TTL = 60.0
_DNS_NEGATIVE_TTL = 10.0
_MAX_BACKOFF = 8.0
_ACCEPT = "image/jpeg,image/png,image/webp,image/gif,image/bmp;q=0.9,*/*;q=0.5"
# Images barely compress (JPEG, PNG, WebP ~1x; BMP and TIFF a few times): a body that decodes to more than
# this many times its size on the wire is a decompression bomb, refused before it fills memory.
MAX_DECODE_RATIO = 100
# (host, port, Proxy-Authorization or None) of the proxy from the environment.
Proxy = tuple[str, int, str | None]
# (host, port) -> the IP addresses to connect to.
Resolver = Callable[[str, int], Sequence[str]]


def user_agent(extra: str = "") -> str:
    """The User-Agent every request sends: the project's token and version, then `extra`."""
    try:
        version = importlib.metadata.version(urls.USER_AGENT_TOKEN)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    agent = f"{urls.USER_AGENT_TOKEN}/{version} (image dataset builder; honours X-Robots-Tag noai)"
    return f"{agent} {extra.strip()}" if extra.strip() else agent


def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses, from the operating system's resolver."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclasses.dataclass(frozen=True)
class Fetched:
    """A URL's body and what errors.jsonl tells of the fetch (`url` without its password, `http_status`,
    `attempts`): the fields a row that fails after its download still carries."""

    body: bytes
    fields: dict[str, object]


class _Transient(Exception):
    """A failure the fetch may try again: connection, timeout, 429, 5xx."""

    def __init__(self, reason: str, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.retry_after = retry_after


@dataclasses.dataclass
class _Progress:
    """What errors.jsonl tells of a URL row: the last status and the attempts made."""

    shown: str
    status: int | None = None
    attempts: int = 0


class _Watchdog:
    """Shuts down the sockets of requests past their deadline (one thread per fetcher)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._heap: list[tuple[float, int, socket.socket]] = []
        self._live: set[int] = set()
        self._ids = itertools.count()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="url-watchdog", daemon=True)
        self._thread.start()

    def watch(self, sock: socket.socket, deadline: float) -> int:
        """Registers `sock` until `unwatch`; returns the ticket."""
        with self._lock:
            ticket = next(self._ids)
            heapq.heappush(self._heap, (deadline, ticket, sock))
            self._live.add(ticket)
            self._lock.notify()
            return ticket

    def unwatch(self, ticket: int) -> None:
        """The request is over: its socket is no longer watched."""
        with self._lock:
            self._live.discard(ticket)

    def close(self) -> None:
        """Stops the thread."""
        with self._lock:
            self._closed = True
            self._lock.notify()

    def _run(self) -> None:
        with self._lock:
            while not self._closed:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._lock.wait()
                    continue
                deadline, ticket, sock = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._lock.wait(wait)
                    continue
                heapq.heappop(self._heap)
                self._live.discard(ticket)
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # Already closed.


class _Response(http.client.HTTPResponse):
    """http.client's answer, skipping every interim 1xx answer (103 Early Hints, ...), not only 100 Continue."""

    def _read_status(self) -> tuple[str, int, str]:
        while True:
            version, status, reason = super()._read_status()  # type: ignore[misc]
            if not 100 < status < 200:
                return version, status, reason
            http.client._read_headers(self.fp)  # type: ignore[attr-defined]


class _Connection(http.client.HTTPConnection):
    """An HTTP(S) connection to one checked address, speaking to the host by name (Host, SNI, certificate)."""

    response_class = _Response

    def __init__(self, target: Target, address: str, timeout: float, tls: ssl.SSLContext | None,
                 proxy: Proxy | None = None) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self.address = address
        self.tls = tls
        self.proxy = proxy
        self.pool_key = (target.scheme, target.host, target.port, address, proxy)
        self.used = False  # A request went over it: a failure before any answer may mean the server closed it.

    def connect(self) -> None:
        """TCP to the checked address (or the proxy), then TLS for the host name."""
        host, port = self.proxy[:2] if self.proxy else (self.address, self.port)
        self.sock = socket.create_connection((host, port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.proxy is not None and self.tls is not None:
            self._connect_tunnel()
        if self.tls is not None:
            self.sock = self.tls.wrap_socket(self.sock, server_hostname=self.host)

    def _connect_tunnel(self) -> None:
        """CONNECT host:port through the proxy, for https."""
        target = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        credentials = f"Proxy-Authorization: {self.proxy[2]}\r\n" if self.proxy and self.proxy[2] else ""
        self.sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{credentials}\r\n".encode("ascii"))
        answer = http.client.HTTPResponse(self.sock, method="CONNECT")
        answer.begin()
        if answer.status != 200:
            raise ConnectionError(f"the proxy refused CONNECT with {answer.status} {answer.reason}")


def _dropped(sock: socket.socket | None) -> bool:
    """Whether an idle keep-alive socket is closed, or holds bytes no request asked for."""
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class _Pool:
    """Idle keep-alive connections by (scheme, host, port, address, proxy); at most `limit` in all."""

    def __init__(self, limit: int) -> None:
        self._idle: OrderedDict[int, _Connection] = OrderedDict()
        self._lock = threading.Lock()
        self._limit = limit

    def take(self, key: tuple[object, ...]) -> _Connection | None:
        """An idle connection for `key` that is still usable, or None."""
        while True:
            with self._lock:
                found = next((ident for ident, conn in self._idle.items() if conn.pool_key == key), None)
                if found is None:
                    return None
                conn = self._idle.pop(found)
            if not _dropped(conn.sock):
                return conn
            conn.close()

    def give(self, conn: _Connection) -> None:
        """Keeps `conn` for the next request to its key, closing the oldest idle one past the limit."""
        with self._lock:
            self._idle[id(conn)] = conn
            while len(self._idle) > self._limit:
                _, oldest = self._idle.popitem(last=False)
                oldest.close()

    def close(self) -> None:
        """Closes every idle connection."""
        with self._lock:
            for conn in self._idle.values():
                conn.close()
            self._idle.clear()


class HttpFetcher:
    """Fetches image URLs (thread-safe): `fetch(url)` returns the body's bytes or raises RowFailure.

    `resolver` and `exempt` exist for tests: a resolver with scripted answers, and (address, port)
    pairs reachable even without allow_private (the tests' loopback server), so that a redirect to
    another private address is still refused.
    """

    def __init__(self, config: FetchConfig, max_bytes: int, resolver: Resolver = system_resolver,
                 exempt: frozenset[tuple[str, int]] = frozenset()) -> None:
        self._config = config
        self._max_bytes = max_bytes
        self._resolver = resolver
        self._exempt = exempt
        self._user_agent = user_agent(config.user_agent_extra)
        self._tls = ssl.create_default_context()
        self._pool = _Pool(limit=max(16, 2 * config.concurrency))
        self._watchdog = _Watchdog()
        self._dns: dict[tuple[str, int], tuple[float, list[str] | BaseException]] = {}
        self._dns_lock = threading.Lock()
        # getaddrinfo cannot be interrupted: it runs here, and the row waits only until its deadline.
        self._resolvers = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="url-dns")
        self._proxies = urllib.request.getproxies_environment()

    def close(self) -> None:
        """Closes the pooled connections and stops the helper threads."""
        self._pool.close()
        self._watchdog.close()
        self._resolvers.shutdown(wait=False, cancel_futures=True)

    def fetch(self, url: str) -> bytes:
        """The body of `url` (decoded), or raises RowFailure with `url`, `http_status` and `attempts` fields."""
        return self.get(url).body

    def get(self, url: str) -> Fetched:
        """The body of `url` (decoded) with its fields, or raises RowFailure with the same fields.

        Never raises anything else: an exception no branch foresaw (a bug) is the row's `unexpected`
        failure, with the fields.
        """
        progress = _Progress(shown=redact_url(url.strip()))
        password = None
        try:
            target = urls.parse(url)  # bad_url for what urlsplit refuses: the password below is then readable.
            password = urllib.parse.urlsplit(url.strip()).password
            body = self._fetch(target, progress)
        except failures.RowFailure as failure:
            raise failures.RowFailure(failure.reason, _unsaid(failure.detail, password), _fields(progress)) from None
        except Exception as error:  # noqa: BLE001 - a bug: the row's failure, never the worker's.
            detail = _unsaid(f"{progress.shown}: {type(error).__name__}: {error}", password)
            raise failures.RowFailure(failures.UNEXPECTED, redact(detail), _fields(progress)) from None
        return Fetched(body, _fields(progress))

    def _fetch(self, target: Target, progress: _Progress) -> bytes:
        config = self._config
        deadline = time.monotonic() + config.total_timeout
        # The URL's own credentials, to its own origin only: never to another host a redirect names, and
        # never credentials a redirect's Location carries.
        origin, credentials = target.origin, target.authorization
        redirects, tries = 0, 0
        while True:
            progress.attempts += 1
            authorization = credentials if target.origin == origin else None
            try:
                outcome = self._attempt(target, authorization, deadline, progress)
            except _Transient as transient:
                tries += 1
                self._wait_before_retry(transient, tries, deadline, target)
                continue
            if isinstance(outcome, bytes):
                return outcome
            redirects += 1
            if redirects > config.max_redirects:
                raise failures.RowFailure(failures.TOO_MANY_REDIRECTS,
                                          f"{target.shown}: more than --url_max_redirects={config.max_redirects} "
                                          f"redirects")
            try:
                target = urls.redirect_target(target, outcome)
            except failures.RowFailure as failure:
                raise failures.RowFailure(failures.BAD_URL, f"redirected to {failure.detail}") from None
            # `tries` goes on across hops: --url_max_attempts bounds the failed tries of the whole URL.

    def _wait_before_retry(self, transient: _Transient, tries: int, deadline: float, target: Target) -> None:
        """Sleeps before the next try, or raises the transient failure as the row's when no try is left."""
        config = self._config
        if transient.reason == failures.TIMEOUT and time.monotonic() >= deadline:
            raise failures.RowFailure(failures.TIMEOUT, f"{target.shown}: the whole fetch took longer than "
                                                        f"--url_timeout={config.total_timeout:g} s")
        if tries >= config.max_attempts:
            raise failures.RowFailure(transient.reason, f"{transient.detail} (after {tries} attempts)")
        wait = random.uniform(0, min(_MAX_BACKOFF, config.backoff_base * 2 ** (tries - 1)))
        if transient.retry_after is not None:
            if transient.retry_after > config.retry_after_max:
                raise failures.RowFailure(transient.reason, f"{transient.detail}: Retry-After "
                                                            f"{transient.retry_after:g} s is over "
                                                            f"--url_retry_after_max={config.retry_after_max:g} s")
            wait = max(wait, transient.retry_after)
        if time.monotonic() + wait >= deadline:
            raise failures.RowFailure(transient.reason, f"{transient.detail} (no time left for another attempt "
                                                        f"within --url_timeout={config.total_timeout:g} s)")
        time.sleep(wait)

    # One request -------------------------------------------------------------------------------

    def _attempt(self, target: Target, authorization: str | None, deadline: float,
                 progress: _Progress) -> bytes | str:
        """One request: the body, or a redirect's Location; raises RowFailure, or _Transient to try again."""
        proxy = self._proxy_for(target)
        addresses = self._checked_addresses(target, deadline) if proxy is None or not self._config.allow_private \
            else [target.host]
        if proxy is not None and target.scheme == "http":
            request_target = f"http://{target.netloc}{target.request_target}"
        else:
            request_target = target.request_target
        for address in addresses:
            conn = self._pool.take((target.scheme, target.host, target.port, address, proxy))
            if conn is None:
                continue
            try:
                return self._exchange(conn, target, request_target, authorization, deadline, progress)
            except _StaleConnection:
                conn.close()  # A kept-alive connection the server had closed: once more on a fresh one.
            break
        conn = self._connect_any(target, addresses, proxy, deadline)
        return self._exchange(conn, target, request_target, authorization, deadline, progress)

    def _connect_any(self, target: Target, addresses: list[str], proxy: Proxy | None,
                     deadline: float) -> _Connection:
        """A new connection to the first of the checked addresses that answers (a dual-stack host whose
        IPv6 address is unreachable from here is still fetched over IPv4)."""
        failure = _Transient(failures.CONNECTION_FAILED, f"{target.shown}: no address to connect to")
        for address in addresses if proxy is None else addresses[:1]:
            try:
                return self._new_connection(target, address, proxy, deadline)
            except _Transient as transient:
                failure = transient
                if time.monotonic() >= deadline:
                    break
        raise failure

    def _proxy_for(self, target: Target) -> Proxy | None:
        proxy_url = self._proxies.get(target.scheme)
        if not proxy_url or urllib.request.proxy_bypass_environment(  # type: ignore[attr-defined]
                target.host, self._proxies):
            return None
        try:
            parts = urllib.parse.urlsplit(proxy_url if "://" in proxy_url else f"http://{proxy_url}")
            port = parts.port
        except ValueError:
            return None
        if not parts.hostname:
            return None
        authorization = None
        if parts.username is not None:
            user, password = urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or "")
            authorization = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        return parts.hostname, port or 80, authorization

    def _checked_addresses(self, target: Target, deadline: float) -> list[str]:
        """The host's addresses, each of them checked (bad_url when any is refused): the only ones connected to."""
        addresses = self._resolve(target, deadline)
        if not self._config.allow_private:
            for address in addresses:
                if (address, target.port) in self._exempt:
                    continue
                why = urls.refused_address(address)
                if why is not None:
                    raise failures.RowFailure(failures.BAD_URL, f"{target.shown}: {target.host} resolves to {address},"
                                                                f" {why}; pass --url_allow_private to fetch it")
        return addresses

    def _resolve(self, target: Target, deadline: float) -> list[str]:
        key = (target.host, target.port)
        now = time.monotonic()
        with self._dns_lock:
            cached = self._dns.get(key)
        if cached is not None and cached[0] > now:
            answer = cached[1]
        else:
            future = self._resolvers.submit(self._resolver, target.host, target.port)
            try:
                answer = list(future.result(timeout=max(0.0, min(self._config.connect_timeout, deadline - now))))
                ttl = _DNS_TTL
            except concurrent.futures.TimeoutError:
                raise _Transient(failures.TIMEOUT, f"{target.shown}: resolving {target.host} took too long") from None
            except socket.gaierror as error:
                if error.errno == socket.EAI_AGAIN:
                    raise _Transient(failures.DNS_FAILED, f"{target.shown}: {target.host}: {error.strerror}") \
                        from None
                answer, ttl = error, _DNS_NEGATIVE_TTL
            except (OSError, UnicodeError) as error:
                answer, ttl = error, _DNS_NEGATIVE_TTL
            with self._dns_lock:
                if len(self._dns) > 4096:
                    self._dns.clear()
                self._dns[key] = (now + ttl, answer)
        if isinstance(answer, BaseException):
            words = getattr(answer, "strerror", None) or str(answer) or type(answer).__name__
            raise failures.RowFailure(failures.DNS_FAILED, f"{target.shown}: {target.host} does not resolve: {words}")
        if not answer:
            raise failures.RowFailure(failures.DNS_FAILED, f"{target.shown}: {target.host} has no address")
        return answer

    def _new_connection(self, target: Target, address: str, proxy: Proxy | None,
                        deadline: float) -> _Connection:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Transient(failures.TIMEOUT, f"{target.shown}: no time left to connect")
        conn = _Connection(target, address, timeout=min(self._config.connect_timeout, remaining),
                           tls=self._tls if target.scheme == "https" else None, proxy=proxy)
        try:
            conn.connect()
        except ssl.SSLError as error:
            conn.close()
            raise failures.RowFailure(failures.TLS_FAILED, f"{target.shown}: TLS with {target.host} failed: "
                                                           f"{error.reason or error}") from None
        except ssl.CertificateError as error:
            conn.close()
            raise failures.RowFailure(failures.TLS_FAILED, f"{target.shown}: {error}") from None
        except TimeoutError:
            conn.close()
            limit = ("--url_timeout" if time.monotonic() >= deadline else
                     f"--url_connect_timeout={self._config.connect_timeout:g} s")
            raise _Transient(failures.TIMEOUT, f"{target.shown}: connecting to {target.host} took longer than "
                                               f"{limit}") from None
        except OSError as error:
            conn.close()
            raise _Transient(failures.CONNECTION_FAILED, f"{target.shown}: cannot connect to {target.host}: "
                                                         f"{_words(error)}") from None
        return conn

    def _exchange(self, conn: _Connection, target: Target, request_target: str, authorization: str | None,
                  deadline: float, progress: _Progress) -> bytes | str:
        """Sends the request on `conn` and reads the answer; the connection goes back to the pool when clean."""
        # The socket, held here: http.client hands it to the response and sets conn.sock to None when the
        # answer will close the connection (HTTP/1.0, Connection: close), and the body is read from it still.
        sock = conn.sock
        if sock is None:  # A connection the pool handed out closed (never expected): a fresh one instead.
            raise _StaleConnection()
        reused, conn.used = conn.used, True
        ticket = self._watchdog.watch(sock, deadline)
        keep = False
        response: http.client.HTTPResponse | None = None
        try:
            sock.settimeout(self._read_timeout(deadline))
            headers = {"User-Agent": self._user_agent, "Accept": _ACCEPT, "Accept-Encoding": "gzip, deflate"}
            if authorization:
                headers["Authorization"] = authorization
            if conn.proxy and conn.proxy[2] and conn.tls is None:  # Plain http through the proxy: it reads this.
                headers["Proxy-Authorization"] = conn.proxy[2]
            try:
                conn.request("GET", request_target, headers=headers)
                response = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    ConnectionAbortedError) as error:
                if reused and time.monotonic() < deadline:
                    raise _StaleConnection() from error
                raise
            progress.status = response.status
            body, keep = self._answer(response, sock, target, deadline)
            return body
        except (failures.RowFailure, _Transient, _StaleConnection):
            raise
        except ssl.SSLError as error:
            raise failures.RowFailure(failures.TLS_FAILED, f"{target.shown}: {error.reason or error}") from None
        except (TimeoutError, OSError, http.client.HTTPException) as error:
            if time.monotonic() >= deadline:
                raise _Transient(failures.TIMEOUT, "stopped at the deadline") from None
            if isinstance(error, TimeoutError):
                raise _Transient(failures.TIMEOUT, f"{target.shown}: no answer for --url_read_timeout="
                                                   f"{self._config.read_timeout:g} s") from None
            raise _Transient(failures.CONNECTION_FAILED, f"{target.shown}: the connection broke: "
                                                         f"{_words(error)}") from None
        finally:
            self._watchdog.unwatch(ticket)
            if keep and not conn.proxy:
                self._pool.give(conn)
            else:
                if response is not None:
                    response.close()  # A closing answer owns the socket: conn.close() alone leaves it open.
                conn.close()

    def _read_timeout(self, deadline: float) -> float:
        return max(0.001, min(self._config.read_timeout, deadline - time.monotonic()))

    def _answer(self, response: http.client.HTTPResponse, sock: socket.socket, target: Target,
                deadline: float) -> tuple[bytes | str, bool]:
        """(body or Location, whether the connection may be kept) for an answer; raises for failures."""
        status = response.status
        shown = target.shown
        if status in REDIRECTS:
            location = response.getheader("Location")
            keep = _drain(response)
            if not location:
                raise failures.RowFailure(failures.BAD_URL, f"{shown}: answered {status} without a Location")
            return location, keep
        if status == 429 or 500 <= status <= 599:
            retry_after = urls.retry_after_seconds(response.getheader("Retry-After"))
            _drain(response)
            reason = failures.HTTP_429 if status == 429 else failures.HTTP_5XX
            raise _Transient(reason, f"{shown}: answered {status} {response.reason}", retry_after)
        if not 200 <= status <= 299:
            _drain(response)
            code = {403: failures.HTTP_403, 404: failures.HTTP_404, 410: failures.HTTP_410}.get(status)
            if code is None:
                code = failures.HTTP_4XX if 400 <= status <= 499 else failures.BAD_URL
            raise failures.RowFailure(code, f"{shown}: answered {status} {response.reason}")
        robots = response.headers.get_all("X-Robots-Tag") or []
        if urls.opted_out(robots):
            raise failures.RowFailure(failures.OPTED_OUT, f"{shown}: X-Robots-Tag: {', '.join(robots)}")
        length = response.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > self._max_bytes:
            raise failures.RowFailure(failures.TOO_LARGE, f"{shown}: Content-Length {int(length)} is more than "
                                                          f"--max_file_bytes={self._max_bytes}")
        encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip", "x-gzip", "deflate"):
            raise failures.RowFailure(failures.UNSUPPORTED_FORMAT, f"{shown}: Content-Encoding {encoding!r} is not "
                                                                   "decoded (gzip and deflate are)")
        decoder = None if encoding == "identity" else zlib.decompressobj(16 + zlib.MAX_WBITS if "gzip" in encoding
                                                                         else zlib.MAX_WBITS)
        parts, size, wire = [], 0, 0
        # isclosed: the body ended (its last chunk, or EOF) and http.client closed its file; a closing
        # answer's socket is then closed too, and no longer takes a timeout.
        while not response.isclosed():
            sock.settimeout(self._read_timeout(deadline))
            chunk = response.read1(_CHUNK)
            if not chunk:
                break
            wire += len(chunk)
            if decoder is not None:
                limit = min(self._max_bytes, MAX_DECODE_RATIO * wire) + 1 - size
                try:
                    chunk = decoder.decompress(chunk, max(1, limit))
                except zlib.error as error:
                    raise failures.RowFailure(failures.CORRUPT, f"{shown}: the {encoding} body cannot be "
                                                                f"decoded: {error}") from None
                if size + len(chunk) > MAX_DECODE_RATIO * wire:
                    raise failures.RowFailure(failures.TOO_LARGE, f"{shown}: the {encoding} body decodes to more "
                                                                  f"than {MAX_DECODE_RATIO}x its size (a "
                                                                  "decompression bomb)")
            size += len(chunk)
            if size > self._max_bytes:
                raise failures.RowFailure(failures.TOO_LARGE, f"{shown}: the body is more than --max_file_bytes="
                                                              f"{self._max_bytes} bytes")
            parts.append(chunk)
        if time.monotonic() >= deadline:  # The watchdog ended a body read until the connection closes.
            raise _Transient(failures.TIMEOUT, "stopped at the deadline")
        if response.length:  # http.client ends a read at EOF quietly, however much Content-Length promised.
            raise _Transient(failures.CONNECTION_FAILED, f"{shown}: the connection closed before the whole body came "
                                                         f"({wire} of {wire + response.length} bytes)")
        if decoder is not None and not decoder.eof:
            raise failures.RowFailure(failures.CORRUPT, f"{shown}: the {encoding} body ends early")
        keep = not response.will_close
        response.close()  # Read to its end: read1 never marks it closed, and the connection waits for that.
        body = b"".join(parts)
        if not body:
            raise failures.RowFailure(failures.EMPTY_FILE, f"{shown}: answered {status} with 0 bytes")
        return body, keep


class _StaleConnection(Exception):
    """A kept-alive connection failed before any answer: the server had closed it."""


def _drain(response: http.client.HTTPResponse) -> bool:
    """Reads a small error body so the connection can be kept; whether it can."""
    try:
        data = response.read(_ERROR_BODY_DRAIN + 1)
    except (OSError, http.client.HTTPException):
        return False
    return len(data) <= _ERROR_BODY_DRAIN and not response.will_close and response.isclosed()


def _fields(progress: _Progress) -> dict[str, object]:
    """What errors.jsonl keeps of a URL row's fetch."""
    return {"url": progress.shown, "http_status": progress.status, "attempts": progress.attempts}


def _unsaid(detail: str, password: str | None) -> str:
    """`detail` without the URL's password, as it is and percent-decoded."""
    for secret in {password, urllib.parse.unquote(password or "")} - {None, ""}:
        if len(str(secret)) >= 3:  # As redact: a one- or two-character one would blank out ordinary words.
            detail = detail.replace(str(secret), MASK)
    return detail


def _words(error: BaseException) -> str:
    if isinstance(error, OSError) and error.errno is not None and error.errno in errno.errorcode:
        return f"{error.strerror or type(error).__name__} ({errno.errorcode[error.errno]})"
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
