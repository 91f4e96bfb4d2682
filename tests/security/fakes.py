"""Loopback servers that are not a plain Prometheus: the faults a real Prometheus cannot produce.

`http_server(handler)` serves `handler(method, path, headers) -> (status, content_type, body)` on a free
loopback port in a thread; `raw_server(reply)` accepts TCP connections and writes `reply` (a Redis-like
service that does not speak HTTP).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Handler = Callable[[str, str, dict[str, str]], tuple[int, str, bytes]]
BUILDINFO = {
    "status": "success",
    "data": {
        "version": "3.5.0",
        "revision": "x",
        "branch": "HEAD",
        "buildUser": "t",
        "buildDate": "20250101",
        "goVersion": "go1.24.0",
    },
}


def prometheus_like(method: str, path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
    """Answer the build info as a Prometheus does, on any path prefix (a tenant behind /a or /b)."""
    if path.split("?")[0].endswith("/api/v1/status/buildinfo"):
        return 200, "application/json", json.dumps(BUILDINFO).encode()
    if path.split("?")[0].endswith("/-/ready"):
        return 200, "text/plain", b"Prometheus Server is Ready.\n"
    return 404, "text/plain", b"404 page not found"


@contextlib.contextmanager
def http_server(handler: Handler) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """Yield (base URL, the headers of every request received)."""
    seen: list[dict[str, str]] = []

    class _H(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append({k.lower(): v for k, v in self.headers.items()} | {":path": self.path})
            status, kind, body = handler(self.command, self.path, dict(self.headers))
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), _H)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def raw_server(reply: bytes) -> Iterator[int]:
    """Yield the port of a TCP server that answers every connection with `reply` and closes it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn, contextlib.suppress(OSError):
                conn.recv(4096)
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=2)
        sock.close()
