"""`python latency_server.py FOLDER PORT LATENCY`: serves FOLDER's files from memory on 127.0.0.1:PORT,
each answer after LATENCY seconds (a network's round trip, costing no CPU), with keep-alive and
TCP_NODELAY (as real servers set it: without it, Nagle and delayed ACKs add ~40 ms per answer).
Prints 'ready' once listening. For url_rows.py."""

import http.server
import os
import socket
import sys
import time


def main(folder, port, latency):
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files["/" + os.path.relpath(path, folder)] = f.read()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format, *args):  # noqa: A002 - the base class's name.
            pass

        def do_GET(self):  # noqa: N802 - the base class's name.
            time.sleep(latency)
            data = files.get(self.path)
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

    server = Server(("127.0.0.1", port), Handler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
