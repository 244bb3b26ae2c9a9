"""A real HTTP server on loopback for the URL-row tests: real images and hostile answers, by path.

    server = LoopbackServer()                  # started on 127.0.0.1, a free port, in daemon threads
    server.route("/cat.jpg", image(jpeg_bytes))
    url = server.url("/cat.jpg")
    server.requests("/cat.jpg")                # how many requests that path received
    server.close()

Each behaviour is a function (handler, request number on that path) -> None that writes the whole
answer itself, so the tests can send what no well-behaved server would: a body longer than its
Content-Length, a reset mid-body, a 2 GB Content-Length with a short body, a trickle.

Every way an answer can end has a behaviour too (`ending(data, way)`, the ways in `ENDINGS`): kept
alive, `Connection: close`, HTTP/1.0 with and without Content-Length (the body ends at EOF), chunked,
and a kept-alive connection that the server closes just as the next request on it goes out.
"""

from __future__ import annotations

import gzip
import http
import http.server
import socket
import struct
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable

Behaviour = Callable[[http.server.BaseHTTPRequestHandler, int], None]


class LoopbackServer:
    """A ThreadingHTTPServer on 127.0.0.1 with per-path behaviours and counters."""

    def __init__(self) -> None:
        self._routes: dict[str, Behaviour] = {}
        self._counts: Counter[str] = Counter()
        self._headers: dict[str, list[dict[str, str]]] = {}
        self._lock = threading.Lock()
        self.connections = 0
        self.dropped = 0  # Requests that came on a connection the server had decided to close (`drops_idle`).
        self.in_flight: Counter[str] = Counter()
        self.peak_in_flight: Counter[str] = Counter()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.connections += 1

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name.
                pass

            def do_GET(self) -> None:  # noqa: N802 - the base class's name.
                if getattr(self, "drop_next", None) is not None:
                    # The idle connection is closed as this request arrives: no answer (a FIN, or a reset).
                    with server._lock:
                        server.dropped += 1
                    if self.drop_next == "reset":
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        self.connection.close()
                    self.close_connection = True
                    return
                path = urllib.parse.urlsplit(self.path).path if "://" in self.path else self.path.split("?")[0]
                with server._lock:
                    server._counts[path] += 1
                    number = server._counts[path]
                    server._headers.setdefault(path, []).append(dict(self.headers.items()))
                    group = path.split("/")[1] if path.count("/") > 1 else ""
                    server.in_flight[group] += 1
                    server.peak_in_flight[group] = max(server.peak_in_flight[group], server.in_flight[group])
                try:
                    behaviour = server._routes.get(path)
                    if behaviour is None:
                        status(404)(self, number)
                    else:
                        behaviour(self, number)
                finally:
                    with server._lock:
                        server.in_flight[group] -= 1

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # Clients that give up mid-answer are what these tests are about.

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def route(self, path: str, behaviour: Behaviour) -> str:
        """Serves `behaviour` at `path` (quoted as sent on the wire); returns the URL."""
        self._routes[path] = behaviour
        return self.url(path)

    def url(self, path: str, userinfo: str = "") -> str:
        """The http URL of `path` on this server."""
        return f"http://{userinfo}127.0.0.1:{self.port}{path}"

    def requests(self, path: str) -> int:
        """How many requests `path` received."""
        with self._lock:
            return self._counts[path]

    def headers(self, path: str) -> list[dict[str, str]]:
        """The headers of every request to `path`."""
        with self._lock:
            return list(self._headers.get(path, []))

    def close(self) -> None:
        """Stops serving."""
        self._server.shutdown()
        self._server.server_close()


def _answer(handler: http.server.BaseHTTPRequestHandler, code: int, body: bytes = b"",
            headers: dict[str, str] | None = None, length: int | None = None) -> None:
    handler.send_response(code)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body) if length is None else length))
    handler.end_headers()
    handler.wfile.write(body)
    handler.wfile.flush()


def image(data: bytes, content_type: str = "image/jpeg", headers: dict[str, str] | None = None) -> Behaviour:
    """200 with the image's bytes."""
    return lambda handler, _: _answer(handler, 200, data, {"Content-Type": content_type, **(headers or {})})


def status(code: int, headers: dict[str, str] | None = None) -> Behaviour:
    """A bare status with a short text body."""
    return lambda handler, _: _answer(handler, code, f"status {code}\n".encode(), headers)


def flaky(failures: int, code: int, then: Behaviour) -> Behaviour:
    """`code` for the first `failures` requests, then `then`."""
    return lambda handler, number: status(code)(handler, number) if number <= failures else then(handler, number)


def redirect(location: str, code: int = 302) -> Behaviour:
    """A redirect to `location`."""
    return status(code, {"Location": location})


def slow(seconds: float, then: Behaviour) -> Behaviour:
    """Waits, then answers (a server that is slow but not hostile)."""
    def behave(handler: http.server.BaseHTTPRequestHandler, number: int) -> None:
        time.sleep(seconds)
        then(handler, number)
    return behave


def trickle(data: bytes, every: float = 0.2) -> Behaviour:
    """Sends the body one byte per `every` seconds: each read arrives in time, the whole never does."""
    def behave(handler: http.server.BaseHTTPRequestHandler, _: int) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.flush()
        try:
            for byte in data:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                time.sleep(every)
        except OSError:
            pass  # The client gave up, as it should.
    return behave


def stall(seconds: float = 30.0) -> Behaviour:
    """Accepts the request and never answers (until `seconds` pass)."""
    def behave(handler: http.server.BaseHTTPRequestHandler, _: int) -> None:
        time.sleep(seconds)
        handler.close_connection = True
    return behave


def reset_mid_body(data: bytes) -> Behaviour:
    """Sends half the body, then resets the connection (SO_LINGER 0)."""
    def behave(handler: http.server.BaseHTTPRequestHandler, _: int) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data[:len(data) // 2])
        handler.wfile.flush()
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()
        handler.close_connection = True
    return behave


def claims_length(length: int, data: bytes = b"\xff\xd8\xff short") -> Behaviour:
    """A Content-Length of `length` with a short body."""
    def behave(handler: http.server.BaseHTTPRequestHandler, _: int) -> None:
        _answer(handler, 200, data, {"Content-Type": "image/jpeg"}, length=length)
        handler.close_connection = True
    return behave


def longer_than_length(data: bytes, extra: bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nBAD") -> Behaviour:
    """The image with its true Content-Length, then more bytes on the connection (a smuggled answer)."""
    def behave(handler: http.server.BaseHTTPRequestHandler, _: int) -> None:
        _answer(handler, 200, data + extra, {"Content-Type": "image/jpeg"}, length=len(data))
    return behave


def chunked(data: bytes, piece: int = 4096) -> Behaviour:
    """The image in chunked transfer encoding, with no Content-Length."""
    def behave(handler: http.server.BaseHTTPRequestHandler, _: int) -> None:
        handler.send_response(200)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for start in range(0, len(data), piece):
            part = data[start:start + piece]
            handler.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
    return behave


def gzipped(data: bytes) -> Behaviour:
    """The image with Content-Encoding: gzip."""
    packed = gzip.compress(data)
    return lambda handler, _: _answer(handler, 200, packed, {"Content-Type": "image/jpeg", "Content-Encoding": "gzip"})


def html() -> Behaviour:
    """An HTML error page served with 200."""
    return lambda handler, _: _answer(handler, 200, b"<!doctype html><html><body>Oops</body></html>",
                                      {"Content-Type": "text/html"})


def basic_auth(user: str, password: str, then: Behaviour) -> Behaviour:
    """401 unless the request carries these Basic credentials."""
    import base64

    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def behave(handler: http.server.BaseHTTPRequestHandler, number: int) -> None:
        if handler.headers.get("Authorization") == expected:
            then(handler, number)
        else:
            status(401, {"WWW-Authenticate": 'Basic realm="test"'})(handler, number)
    return behave


def early_hints(then: Behaviour) -> Behaviour:
    """A 103 Early Hints interim answer, then `then`'s answer on the same connection."""
    def behave(handler: http.server.BaseHTTPRequestHandler, number: int) -> None:
        handler.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
        handler.wfile.flush()
        then(handler, number)
    return behave


def raw_gzip(packed: bytes) -> Behaviour:
    """Already gzipped bytes (a bomb, say) with Content-Encoding: gzip."""
    return lambda handler, _: _answer(handler, 200, packed, {"Content-Type": "image/png", "Content-Encoding": "gzip"})


def short_body(data: bytes) -> Behaviour:
    """The whole body's Content-Length, half the body, then the connection closed (a FIN, not a reset)."""
    def behave(handler: http.server.BaseHTTPRequestHandler, _: int) -> None:
        _answer(handler, 200, data[:len(data) // 2], {"Content-Type": "image/jpeg"}, length=len(data))
        handler.close_connection = True
    return behave


def _raw(handler: http.server.BaseHTTPRequestHandler, head: str, body: bytes) -> None:
    handler.wfile.write(head.encode("latin-1") + b"\r\n" + body)
    handler.wfile.flush()


def ending(data: bytes, way: str) -> Behaviour:
    """`data` (an image) in an answer that ends one of the `ENDINGS` ways."""
    if way == "keep-alive":
        return image(data)
    if way == "connection-close":
        def close(handler: http.server.BaseHTTPRequestHandler, _: int) -> None:
            _answer(handler, 200, data, {"Content-Type": "image/jpeg", "Connection": "close"})
            handler.close_connection = True
        return close
    if way in ("http10-length", "http10-eof"):
        return http10(200, data, {"Content-Type": "image/jpeg"}, length=way == "http10-length")
    if way == "chunked":
        return chunked(data, piece=max(1, len(data) // 3))
    if way == "chunked-close":
        def chunked_close(handler: http.server.BaseHTTPRequestHandler, _: int) -> None:
            pieces = b"".join(f"{len(data[i:i + 100]):x}\r\n".encode() + data[i:i + 100] + b"\r\n"
                              for i in range(0, len(data), 100))
            head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
            _raw(handler, head, pieces + b"0\r\n\r\n")
            handler.close_connection = True
        return chunked_close
    if way in ("drops-idle", "drops-idle-reset"):
        return drops_idle(image(data), reset=way == "drops-idle-reset")
    raise ValueError(way)


def http10(code: int, body: bytes = b"", headers: dict[str, str] | None = None, length: bool = True) -> Behaviour:
    """As `python -m http.server` answers: HTTP/1.0, with or without Content-Length, the connection closed after
    the body."""
    lines = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    lines += f"Content-Length: {len(body)}\r\n" if length else ""

    def behave(handler: http.server.BaseHTTPRequestHandler, _: int) -> None:
        _raw(handler, f"HTTP/1.0 {code} {http.HTTPStatus(code).phrase}\r\nServer: SimpleHTTP/0.6\r\n{lines}", body)
        handler.close_connection = True
    return behave


def drops_idle(then: Behaviour, reset: bool = False) -> Behaviour:
    """`then`'s answer kept alive; the next request on that connection finds it closed (no answer: a FIN, or a
    reset), as when a server's idle timeout fires just as the client reuses the connection."""
    def behave(handler: http.server.BaseHTTPRequestHandler, number: int) -> None:
        then(handler, number)
        handler.drop_next = "reset" if reset else "close"  # type: ignore[attr-defined]
    return behave


# Every way an answer can end, as `ending` names them.
ENDINGS = ("keep-alive", "connection-close", "http10-length", "http10-eof", "chunked", "chunked-close",
           "drops-idle", "drops-idle-reset")
