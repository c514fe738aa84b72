"""A stand-in HTTP server on 127.0.0.1 for tests and benches: a handler class in, a running server out.

One mechanism for the small servers tests write (a scrape target, a scripted Prometheus API, a fleet of
expositions): each writes only what it answers; starting on a free port, the quiet request log, the
answer's framing and the shutdown are here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that logs nothing (the test's output is its assertions) and answers whole bodies."""

    def log_message(self, format: str, *args: object) -> None:
        return

    def answer(self, status: int, body: bytes, content_type: str, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    """``handler`` served on a free port of 127.0.0.1 until the block ends (``server_address[1]``: the port)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
