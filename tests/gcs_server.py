"""A real GCS protocol server on loopback for the gs:// tests: gcp-storage-emulator behind one front port.

    server = gcs_server.start(folder)          # its own process, recorded PID; stop with server.stop()
    env = server.env()                         # what every client needs, see below
    server.create_bucket("bucket")

Two kinds of client speak to it, and both reach it through the front port (127.0.0.1, a free port):

- Google's Python clients (Beam's gcsio, google-cloud-storage) honour `STORAGE_EMULATOR_HOST`: plain
  HTTP to the front port, passed on to the emulator.
- TensorFlow's own GCS filesystem (tf.io.gfile, TFRecordDataset, SavedModel, tensorflow-transform's
  writes) has no endpoint setting: it always calls https://www.googleapis.com and
  https://storage.googleapis.com. It uses libcurl, which honours `https_proxy`, and TensorFlow
  honours `CURL_CA_BUNDLE` and `GOOGLE_AUTH_TOKEN_FOR_TESTING` (no credentials looked up). So the
  front port is also an HTTPS proxy: a `CONNECT` to one of those two names is answered with TLS under
  a certificate for them signed by a throwaway CA (`ca.pem` in the folder), and the requests inside
  go to the same emulator. Nothing resolves Google's names; nothing leaves loopback.

The front adds what the emulator lacks and real GCS has, each small and named here:
- `GET /storage/v1/b/BUCKET/storageLayout` (TensorFlow asks it before renaming a folder) answers as a
  bucket without hierarchical namespace does;
- `Expect: 100-continue` is answered at once (the emulator speaks HTTP/1.0: curl would wait a second);
- a request that came through the tunnel is passed on with `Host` set to the front port, so that the
  resumable-upload `Location` the emulator builds from it leads back here;
- an empty media upload stores an empty object (`_fill_emulator_gaps`);
- `POST /token` answers an access token (TOKEN): the token endpoint of the credentials file `start` writes;
- for the kill tests, `/_test/hold?match=TEXT&allowed=N` holds every GET whose path holds TEXT after the first N
  until `/_test/release` (`/_test/held` counts them): a run cannot finish while one is held;
- buckets named with `--forbidden` answer 403 to everything, with GCS's error body: IAM the emulator
  does not have, for the permission-error tests.
Each request is logged (`tls|http METHOD PATH -> STATUS`) to the server's log, which says which
endpoints each client used.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import socket
import socketserver
import ssl
import sys
import threading
from pathlib import Path

GOOGLE_HOSTS = ("www.googleapis.com", "storage.googleapis.com")
CA_FILE = "ca.pem"
CREDENTIALS_FILE = "credentials.json"
TOKEN = "gcs-emulator-test-token"  # GOOGLE_AUTH_TOKEN_FOR_TESTING: TensorFlow sends it; the emulator ignores it.
_HEAD_LIMIT = 64 * 1024


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a certificate for Google's two storage names; returns (ca.pem, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "beam-image-pipeline test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, GOOGLE_HOSTS[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in GOOGLE_HOSTS]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = folder / CA_FILE, folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


def _rsa_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


class _Head:
    """A request's first line and headers, as read from the client."""

    def __init__(self, raw: bytes) -> None:
        lines = raw.decode("latin-1").split("\r\n")
        self.method, self.target, self.version = lines[0].split(" ", 2)
        self.headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                self.headers.append((name.strip(), value.strip()))

    def get(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def without(self, *names: str) -> list[tuple[str, str]]:
        lowered = {n.lower() for n in names}
        return [(k, v) for k, v in self.headers if k.lower() not in lowered]


def _read_head(stream, buffer: bytearray) -> bytes | None:
    """Reads up to the blank line; returns the head (None at EOF); what came after stays in `buffer`."""
    while b"\r\n\r\n" not in buffer:
        chunk = stream.recv(65536)
        if not chunk:
            return None
        buffer += chunk
        if len(buffer) > _HEAD_LIMIT:
            raise ValueError("request head too long")
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    buffer[:] = rest
    return head


def _read_exactly(stream, buffer: bytearray, size: int) -> bytes:
    while len(buffer) < size:
        chunk = stream.recv(65536)
        if not chunk:
            raise ConnectionError("client closed mid-body")
        buffer += chunk
    data = bytes(buffer[:size])
    del buffer[:size]
    return data


def _read_line(stream, buffer: bytearray) -> bytes:
    while b"\r\n" not in buffer:
        chunk = stream.recv(65536)
        if not chunk:
            raise ConnectionError("client closed mid-body")
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\r\n")
    buffer[:] = rest
    return line


def _read_body(stream, buffer: bytearray, head: _Head) -> bytes:
    if (head.get("Transfer-Encoding") or "").lower() == "chunked":
        body = bytearray()
        while True:
            size = int(_read_line(stream, buffer).split(b";")[0], 16)
            if size == 0:
                while _read_line(stream, buffer):  # Trailers, up to the blank line.
                    pass
                return bytes(body)
            body += _read_exactly(stream, buffer, size)
            _read_line(stream, buffer)
    return _read_exactly(stream, buffer, int(head.get("Content-Length") or 0))


def _answer(stream, status: int, reason: str, body: dict) -> None:
    data = json.dumps(body).encode()
    stream.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; charset=UTF-8\r\n"
                   f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)


_BUCKET = re.compile(r"^(?:https?://[^/]+)?(?:/(?:upload|download|batch))?(?:/storage/v1)?/b/([^/?]+)"
                     r"|^(?:https?://[^/]+)?/([^/?]+)/")


class Front(socketserver.ThreadingTCPServer):
    """The front port: plain HTTP for Google's Python clients, CONNECT + TLS for TensorFlow's."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, port: int, upstream: tuple[str, int], tls: ssl.SSLContext, forbidden: set[str],
                 log=sys.stdout) -> None:
        self.upstream = upstream
        self.tls = tls
        self.forbidden = forbidden
        self.log = log
        # A hold (`/_test/hold`): matching requests past the first `allowed` wait until `/_test/release`.
        self.hold: tuple[str, int] | None = None
        self.matched = 0
        self.held = 0
        self.released = threading.Event()
        self.hold_lock = threading.Lock()
        # The emulator serves one request at a time; queueing here spares its listen backlog (5).
        self.upstream_lock = threading.Lock()
        super().__init__(("127.0.0.1", port), _Handler)

    def note(self, line: str) -> None:
        print(line, file=self.log, flush=True)


class _Handler(socketserver.BaseRequestHandler):
    server: Front

    def control(self, stream, path: str) -> None:
        """The tests' controls: `/_test/hold?match=TEXT&allowed=N`, `/_test/release`, `/_test/held`."""
        import urllib.parse

        front = self.server
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(path).query))
        with front.hold_lock:
            if path.startswith("/_test/hold"):
                front.hold, front.matched, front.held = (query["match"], int(query.get("allowed", 0))), 0, 0
                front.released.clear()
            elif path.startswith("/_test/release"):
                front.hold = None
                front.released.set()
            _answer(stream, 200, "OK", {"held": front.held, "matched": front.matched})

    def maybe_hold(self, method: str, path: str) -> None:
        """Holds a GET whose decoded path holds the hold's text, past the first `allowed`, until released."""
        import urllib.parse

        front = self.server
        with front.hold_lock:
            if front.hold is None or method != "GET" or front.hold[0] not in urllib.parse.unquote(path):
                return
            front.matched += 1
            if front.matched <= front.hold[1]:
                return
            front.held += 1
        front.note(f"holding {method} {path}")
        front.released.wait(600)

    def handle(self) -> None:
        stream, buffer, tunnelled = self.request, bytearray(), False
        try:
            raw = _read_head(stream, buffer)
            if raw is None:
                return
            head = _Head(raw)
            if head.method == "CONNECT":
                host = head.target.rsplit(":", 1)[0]
                if host not in GOOGLE_HOSTS:
                    _answer(stream, 403, "Forbidden", {"error": f"this proxy serves only {GOOGLE_HOSTS}"})
                    self.server.note(f"refused CONNECT {head.target}")
                    return
                stream.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                stream = self.server.tls.wrap_socket(stream, server_side=True)
                buffer, tunnelled = bytearray(), True
                raw = _read_head(stream, buffer)
                if raw is None:
                    return
                head = _Head(raw)
            self.serve(stream, buffer, head, tunnelled)
        except (OSError, ValueError, ConnectionError) as e:
            self.server.note(f"connection ended: {type(e).__name__}: {e}")
        finally:
            try:
                stream.close()
            except OSError:
                pass

    def serve(self, stream, buffer: bytearray, head: _Head, tunnelled: bool) -> None:
        kind = "tls" if tunnelled else "http"
        if (head.get("Expect") or "").lower() == "100-continue":
            stream.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = _read_body(stream, buffer, head)
        path = head.target
        if path.startswith("/_test/") and not tunnelled:
            self.control(stream, path)
            return
        self.maybe_hold(head.method, path)
        match = _BUCKET.match(path)
        bucket = match and (match.group(1) or match.group(2))
        if bucket in self.server.forbidden:
            _answer(stream, 403, "Forbidden", {"error": {
                "code": 403, "message": f"tester@example.iam.gserviceaccount.com does not have storage.objects.get "
                                        f"access to the Google Cloud Storage bucket {bucket}.",
                "errors": [{"domain": "global", "reason": "forbidden", "message": "Permission denied."}]}})
            self.server.note(f"{kind} {head.method} {path} -> 403 (forbidden bucket)")
            return
        if head.method == "POST" and path == "/token":
            _answer(stream, 200, "OK", {"access_token": TOKEN, "expires_in": 3600, "token_type": "Bearer"})
            self.server.note(f"{kind} {head.method} {path} -> 200 (answered by the front)")
            return
        if head.method == "GET" and re.search(r"/b/[^/?]+/storageLayout(\?|$)", path):
            _answer(stream, 200, "OK", {"kind": "storage#storageLayout", "bucket": bucket, "location": "US",
                                        "locationType": "multi-region"})
            self.server.note(f"{kind} {head.method} {path} -> 200 (answered by the front)")
            return
        headers = head.without("Expect", "Transfer-Encoding", "Content-Length", "Connection", "Proxy-Connection")
        if tunnelled:
            headers = [(k, v) for k, v in headers if k.lower() != "host"]
            headers.append(("Host", f"127.0.0.1:{self.server.server_address[1]}"))
        if body or head.method in ("POST", "PUT", "PATCH"):
            headers.append(("Content-Length", str(len(body))))
        headers.append(("Connection", "close"))
        if path.startswith("http://") or path.startswith("https://"):
            path = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else "/"
        request = f"{head.method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
        with self.server.upstream_lock:
            response = bytearray()
            with socket.create_connection(self.server.upstream) as upstream:
                upstream.sendall(request.encode("latin-1") + body)
                while chunk := upstream.recv(65536):
                    response += chunk
        stream.sendall(bytes(response))
        status = bytes(response[:64]).split(b"\r\n", 1)[0].decode("latin-1")
        self.server.note(f"{kind} {head.method} {path} -> {status}")


def _fill_emulator_gaps() -> None:
    """gcp-storage-emulator 2026.7.19 fails a media upload with an empty body (a folder marker: TensorFlow's
    makedirs writes one); real GCS stores an empty object. Patched in this process only."""
    from gcp_storage_emulator.handlers import objects

    media_upload = objects._media_upload

    def _media_upload(request, response, storage):
        if request.data is None:
            request._data = b""
        return media_upload(request, response, storage)

    objects._media_upload = _media_upload


def serve(port: int, folder: Path, forbidden: set[str]) -> None:
    """Runs the emulator (in memory) and the front port until SIGTERM."""
    from gcp_storage_emulator.server import create_server

    _fill_emulator_gaps()
    _, cert, key = make_certificates(folder)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    emulator = create_server("127.0.0.1", 0, in_memory=True)
    emulator.start()
    upstream = emulator._api._httpd.server_address[:2]  # Port 0 above: the one the kernel gave.
    front = Front(port, upstream, tls, forbidden)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=front.shutdown).start())
    front.note(f"emulator on {upstream[0]}:{upstream[1]}, front on 127.0.0.1:{port}")
    try:
        front.serve_forever()
    finally:
        front.server_close()
        emulator.stop()


class Server:
    """A started server (see `start`): its front port, folder, process; `env()` for clients; `stop()`."""

    def __init__(self, process, port: int, folder: Path) -> None:
        self.process, self.port, self.folder = process, port, folder
        self.url = f"http://127.0.0.1:{port}"

    def env(self) -> dict[str, str]:
        """The environment every client needs: Google's Python clients and TensorFlow's (through the proxy)."""
        return {"STORAGE_EMULATOR_HOST": self.url,
                "GOOGLE_APPLICATION_CREDENTIALS": str(self.folder / CREDENTIALS_FILE),
                "https_proxy": self.url, "HTTPS_PROXY": self.url,
                "CURL_CA_BUNDLE": str(self.folder / CA_FILE), "GOOGLE_AUTH_TOKEN_FOR_TESTING": TOKEN,
                "no_proxy": "127.0.0.1,localhost", "NO_PROXY": "127.0.0.1,localhost",
                "GOOGLE_CLOUD_PROJECT": "test-project"}

    def create_bucket(self, name: str) -> None:
        import urllib.request

        request = urllib.request.Request(f"{self.url}/storage/v1/b?project=test-project", method="POST",
                                         data=json.dumps({"name": name}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as answer:
            answer.read()

    def control(self, action: str, **query: object) -> dict:
        """Calls a test control of the front (`hold`, `release`, `held`): returns its counts."""
        import urllib.parse
        import urllib.request

        url = f"{self.url}/_test/{action}?{urllib.parse.urlencode(query)}"
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=30) as answer:
            return json.loads(answer.read())

    def log(self) -> str:
        return (self.folder / "gcs.log").read_text(errors="replace")

    def stop(self) -> None:
        import scaleout

        scaleout.stop_server(self.process)


def start(folder: Path, forbidden: tuple[str, ...] = ()) -> Server:
    """Starts the server in its own process group (recorded PID: `Server.process`), on a free port."""
    import scaleout

    folder.mkdir(parents=True, exist_ok=True)
    port = scaleout.free_port()
    command = [sys.executable, os.path.abspath(__file__), "--port", str(port), "--folder", str(folder)]
    command += [f"--forbidden={name}" for name in forbidden]
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    process = scaleout.start_server(command, port, folder / "gcs.log", env=env, cwd=folder)
    # Application Default Credentials: Beam's gcsio looks them up first (with none it retries for ~20 s, then
    # connects anonymously). A service account's file names its token endpoint: the front (TOKEN).
    (folder / CREDENTIALS_FILE).write_text(json.dumps({
        "type": "service_account", "project_id": "test-project", "private_key_id": "1", "private_key": _rsa_key(),
        "client_email": "tester@test-project.iam.gserviceaccount.com", "client_id": "1",
        "token_uri": f"http://127.0.0.1:{port}/token"}))
    return Server(process, port, folder)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--forbidden", action="append", default=[], help="a bucket that answers 403")
    args = parser.parse_args(argv)
    serve(args.port, args.folder, set(args.forbidden))


if __name__ == "__main__":
    main()
