"""The HTTP listener: /metrics from the exposition cache, /health, and a landing page.

Built on the standard library's ``http.server`` with two changes that matter under load:

* bounded concurrency — at most ``max_requests`` requests are served at once by a fixed pool of
  worker threads; when all are busy the accept loop waits, so further connections queue in the
  kernel's listen backlog (1024) instead of spawning unbounded threads or being refused;
* the TLS handshake (when a web config enables TLS) runs in the worker, never in the accept loop,
  so one slow or plain-HTTP client cannot block others.

A scrape does no I/O besides the socket: it picks the cached bytes for the negotiated format
(OpenMetrics or text 0.0.4, gzip or not; ``exporter.metrics.exposition.wants_openmetrics`` keeps
dcgm-exporter's counters typed ``counter``) and writes them. Connections close after each response
(HTTP/1.0 semantics): Prometheus reconnects cheaply, and idle keep-alive connections cannot pin
the bounded worker pool.
"""

from __future__ import annotations

import contextlib
import html
import http.server
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from exporter import __version__
from exporter.logs import get_logger
from exporter.metrics.exposition import wants_openmetrics
from exporter.web.cache import ExpositionCache
from exporter.web.health import HealthReport

log = get_logger("web")

REQUEST_TIMEOUT_S = 10.0


class WebSecurity:
    """What the listener asks about each connection and request; this base is plain HTTP, open to all.

    ``exporter.web.security.FileWebSecurity`` implements it from the exporter-toolkit web config.
    Every method runs in a worker thread, never in the accept loop.
    """

    def ssl_context(self) -> ssl.SSLContext | None:
        """Per connection: the context to wrap it in (may reload changed certificates); None = HTTP."""
        return None

    def peer_allowed(self, connection: ssl.SSLSocket) -> bool:
        """After the TLS handshake: may this client (its verified certificate) talk to us?"""
        return True

    def allow_request(self) -> bool:
        """Rate limit: False answers 429 before any authentication work."""
        return True

    def authenticate(self, headers: Any) -> str | None:
        """None to allow, else the realm for a 401 (``headers``: case-insensitive http.client.HTTPMessage)."""
        return None

    def headers(self) -> Mapping[str, str]:
        """Extra headers for every response (http_server_config.headers)."""
        return {}


_PLAIN_HTTP_BODY = b"Client sent an HTTP request to an HTTPS server; use https://.\n"
PLAIN_HTTP_TO_TLS_PORT = (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                          b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_PLAIN_HTTP_BODY),
                                                                                   _PLAIN_HTTP_BODY))
TLS_HANDSHAKE_RECORD = 0x16


def parse_address(address: str) -> tuple[str, int]:
    """``:9400`` -> ("", 9400); ``[::1]:9400`` -> ("::1", 9400); ``127.0.0.1:0`` -> ("127.0.0.1", 0)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def accepts_gzip(accept_encoding: str) -> bool:
    for part in accept_encoding.split(","):
        coding, *params = (piece.strip() for piece in part.split(";"))
        if coding.lower() in {"gzip", "*"}:
            return not any(param.replace(" ", "") in {"q=0", "q=0.0", "q=0.00", "q=0.000"} for param in params)
    return False


LANDING_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>gpu-pod-exporter</title></head>
<body>
<h1>gpu-pod-exporter {version}</h1>
<p>NVIDIA GPU metrics with DCGM-compatible names, attributed to Kubernetes pods.</p>
<ul>
<li><a href="metrics">/metrics</a> &mdash; Prometheus metrics</li>
<li><a href="health">/health</a> &mdash; {health}</li>
</ul>
</body></html>
"""


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _BoundedHTTPServer
    protocol_version = "HTTP/1.0"
    # TCP_NODELAY: the body written after the head leaves at once instead of waiting for the
    # client's (possibly delayed) ACK of the head.
    disable_nagle_algorithm = True
    server_version = f"gpu-pod-exporter/{__version__}"
    sys_version = ""
    timeout = REQUEST_TIMEOUT_S

    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def _method_not_allowed(self) -> None:
        self._send(405, "text/plain; charset=utf-8", b"method not allowed\n", head=False, extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _method_not_allowed

    def _respond(self, head: bool) -> None:
        owner = self.server.owner
        if not owner.security.allow_request():
            self._send(429, "text/plain; charset=utf-8", b"Too Many Requests\n", head)
            return
        realm = owner.security.authenticate(self.headers)
        if realm is not None:
            self._send(401, "text/plain; charset=utf-8", b"Unauthorized\n", head,
                       extra={"WWW-Authenticate": f'Basic realm="{realm}", charset="UTF-8"'})
            return
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            exposition = owner.cache.current
            openmetrics = wants_openmetrics(self.headers.get("Accept", ""),
                                            counters_need_text=exposition.counters_need_text)
            compressed = accepts_gzip(self.headers.get("Accept-Encoding", ""))
            body = exposition.body(openmetrics, compressed)
            extra = {"Vary": "Accept, Accept-Encoding"}
            if compressed:
                extra["Content-Encoding"] = "gzip"
            self._send(200, exposition.content_type(openmetrics), body, head, extra)
        elif path in {"/health", "/healthz"}:
            report = owner.health()
            self._send(200 if report.healthy else 503, "text/plain; charset=utf-8",
                       (report.reason + "\n").encode("utf-8"), head)
        elif path == "/":
            report = owner.health()
            page = LANDING_PAGE.format(version=html.escape(__version__), health=html.escape(report.reason))
            self._send(200, "text/html; charset=utf-8", page.encode("utf-8"), head)
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found; try /metrics or /health\n", head)

    def _send(self, code: int, content_type: str, body: bytes, head: bool,
              extra: Mapping[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in {**self.server.owner.security.headers(), **(extra or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("request " + format, *args)


class _BoundedHTTPServer(http.server.HTTPServer):
    """HTTPServer whose requests run on a fixed worker pool; the accept loop waits when all are busy."""

    request_queue_size = 1024
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, owner: ExporterHTTPServer,
                 workers: int, listener: socket.socket | None = None) -> None:
        self.address_family = family
        self.owner = owner
        self._slots = threading.BoundedSemaphore(workers)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="http")
        self._closing = threading.Event()
        super().__init__(address, _Handler, bind_and_activate=False)
        if listener is not None:  # already bound and listening (systemd socket activation)
            self.socket.close()
            self.socket = listener
            self.server_address = listener.getsockname()
            return
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):  # a platform without dual-stack sockets keeps IPv6 only
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        try:
            self.server_bind()
            self.server_activate()
        except BaseException:
            self.server_close()
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        while not self._slots.acquire(timeout=0.5):
            if self._closing.is_set():
                self.shutdown_request(request)
                return
        self._pool.submit(self._serve, request, client_address)

    def _serve(self, request: socket.socket, client_address: Any) -> None:
        try:
            security = self.owner.security
            context = security.ssl_context()
            if context is not None:
                request.settimeout(REQUEST_TIMEOUT_S)
                if _sent_plain_http(request):
                    _refuse_plain_http(request)
                    return
                request = context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
                try:
                    request.do_handshake()
                except (ssl.SSLError, OSError) as exc:
                    log.debug("TLS handshake failed", extra={"fields": {"client": client_address[0],
                                                                        "error": str(exc)}})
                    return
                if not security.peer_allowed(request):
                    log.debug("client certificate not allowed (client_allowed_sans)",
                              extra={"fields": {"client": client_address[0]}})
                    return
            self.finish_request(request, client_address)
        except (ConnectionError, TimeoutError):
            pass  # the client went away; nothing to answer
        except Exception:
            log.exception("request failed")
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def server_close(self) -> None:
        self._closing.set()
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


def _sent_plain_http(connection: socket.socket) -> bool:
    """Peek at the first byte: a TLS client starts with a handshake record, an HTTP client with a letter."""
    try:
        first = connection.recv(1, socket.MSG_PEEK)
    except OSError:
        return False  # let the handshake report it
    return bool(first) and first[0] != TLS_HANDSHAKE_RECORD and first.isalpha()


def _refuse_plain_http(connection: socket.socket) -> None:
    """Answer a plain-HTTP request on the TLS port with a readable 400, as Go's servers do.

    The request head is read first: closing a socket with unread data makes the kernel send a
    reset, and the client would see "connection reset" instead of the explanation.
    """
    received = b""
    connection.settimeout(1.0)
    with contextlib.suppress(OSError):
        while b"\r\n\r\n" not in received and len(received) < 16384:
            chunk = connection.recv(4096)
            if not chunk:
                break
            received += chunk
        connection.sendall(PLAIN_HTTP_TO_TLS_PORT)
    log.debug("plain HTTP request on the TLS port refused")


class ExporterHTTPServer:
    """Owns the listening socket and the serving thread."""

    def __init__(self, address: str, cache: ExpositionCache, health: Callable[[], HealthReport],
                 max_requests: int = 32, security: WebSecurity | None = None, *,
                 listener: socket.socket | None = None) -> None:
        self.cache = cache
        self.health = health
        self.security = security or WebSecurity()
        self._thread: threading.Thread | None = None
        if listener is not None:  # --web-systemd-socket: exporter.web.socket_activation
            self._server = _BoundedHTTPServer(("", 0), listener.family, self, max_requests, listener)
            return
        host, port = parse_address(address)
        family = socket.AF_INET6 if (":" in host or host == "") and socket.has_ipv6 else socket.AF_INET
        bind_host = host if host else ("::" if family == socket.AF_INET6 else "0.0.0.0")  # noqa: S104 - ":9400" means all
        try:
            self._server = _BoundedHTTPServer((bind_host, port), family, self, max_requests)
        except OSError:
            if host or family != socket.AF_INET6:
                raise
            self._server = _BoundedHTTPServer(("0.0.0.0", port), socket.AF_INET, self, max_requests)  # noqa: S104

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="http-accept", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
