"""A stand-in gateway for sandbox escape tests: a plain HTTP server on a unix socket (or on the
host's loopback), answering every GET with ``"<label> <path>"`` and counting the requests it saw."""

from __future__ import annotations

import http.server
import socketserver
import threading
from pathlib import Path
from typing import Any


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the stdlib's name)
        self.server.hits.append(self.path)  # type: ignore[attr-defined]
        body = f"{self.server.label} {self.path}".encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """``http.server`` on a unix socket (its handlers need a client address: a fixed one)."""

    daemon_threads = True

    def get_request(self):
        conn, _ = super().get_request()
        return conn, ("unix", 0)


def _start(server: Any, label: str) -> Any:
    server.label, server.hits = label, []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def serve_unix(path: Path, label: str = "gateway") -> UnixHTTPServer:
    """A running server on the unix socket ``path``; ``.hits`` lists the paths asked; stop with :func:`stop`."""
    return _start(UnixHTTPServer(str(path), _Handler), label)


def serve_loopback(label: str = "host") -> http.server.ThreadingHTTPServer:
    """A running server on the host's ``127.0.0.1`` (a free port: ``.server_address[1]``)."""
    return _start(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler), label)


def stop(*servers: Any) -> None:
    for server in servers:
        server.shutdown()
        server.server_close()
