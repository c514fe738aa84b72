"""The webhook listener: ``POST /alerts`` from Alertmanager, ``GET /metrics`` and ``GET /health``.

A small standard-library HTTP server, deliberately separate from the exporter's listener (the
exporter's hot path stays as it is), that takes its TLS, mTLS, basic-auth users, response headers
and rate limit from the same web config file (exporter-toolkit format, ``exporter.web.security``).
It adds what a webhook needs and a scrape endpoint does not:

* a **bearer token** (``--bearer-token-file``), which is what Alertmanager's
  ``http_config.authorization`` sends: ``POST /alerts`` and ``POST /breaker/close`` (a person closing
  the latched circuit breaker) require it, or one of the web config's
  basic-auth users. The basic-auth users guard ``/metrics`` too, as they do the exporter's; the
  token does not (Prometheus scrapes with the web config's credentials, and the counts it reads
  are no secret). ``/health`` never asks (kubelet probes cannot authenticate);
* bounded work for hostile clients: at most ``max_connections`` connections are served at once
  (further ones wait in the listen backlog), each with a 10 s socket timeout, the TLS handshake in
  the worker thread, and bodies over ``MAX_BODY_BYTES`` refused with 413 before they are read.
"""

from __future__ import annotations

import contextlib
import hmac
import http.server
import json
import socket
import ssl
import threading
from typing import Any

from exporter import __version__
from exporter.logs import get_logger
from exporter.remediate.alerts import PayloadError, parse_notification
from exporter.remediate.controller import Remediator
from exporter.remediate.selfmetrics import RemediationMetrics

log = get_logger("remediate.http")

MAX_BODY_BYTES = 8 * 1024 * 1024
REQUEST_TIMEOUT_S = 10.0
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def parse_listen_address(address: str) -> tuple[str, int]:
    """``:9401`` -> ("", 9401); ``[::1]:9401`` -> ("::1", 9401); raises ValueError."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected [host]:port, got {address!r}")
    return host.strip("[]"), int(port)


class Credentials:
    """Who may post alerts and read metrics: a bearer token and/or the web config's basic-auth users."""

    def __init__(self, security: Any, bearer_token: str | None) -> None:
        self.security = security
        self.bearer = bearer_token.encode("utf-8") if bearer_token else None
        config = getattr(security, "config", None)
        self.basic = bool(getattr(config, "basic_auth_users", None))

    @property
    def required(self) -> bool:
        """Does posting alerts need credentials?"""
        return self.bearer is not None or self.basic

    def allows(self, headers: Any, *, webhook: bool) -> bool:
        """May this request post alerts (``webhook``) or read /metrics?"""
        value = headers.get("Authorization", "") or ""
        scheme, _, token = value.strip().partition(" ")
        basic_ok = self.basic and scheme.lower() == "basic" and self.security.authenticate(headers) is None
        if not webhook:
            return not self.basic or basic_ok
        if not self.required:
            return True
        if self.bearer is not None and scheme.lower() == "bearer" and \
                hmac.compare_digest(token.strip().encode("utf-8"), self.bearer):
            return True
        return basic_ok

    def challenge(self) -> str:
        realm = 'realm="gpu-pod-exporter-remediate"'
        return f"Basic {realm}" if self.basic else f"Bearer {realm}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"
    server_version = f"gpu-pod-exporter-remediate/{__version__}"
    sys_version = ""
    timeout = REQUEST_TIMEOUT_S

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path not in ("/alerts", "/", "/breaker/close"):
            self._send(404, b"not found; Alertmanager posts to /alerts\n")
            return
        if not self._admitted(webhook=True):
            return
        if path == "/breaker/close":
            closed = self.server.owner.remediator.close_breaker(self.client_address[0])
            self._send(200, b"circuit breaker closed\n" if closed else b"circuit breaker was not open\n")
            return
        metrics = self.server.owner.metrics
        length_text = self.headers.get("Content-Length")
        if length_text is None or not length_text.isdigit():
            metrics.webhooks.labels("invalid").inc()
            self._send(411, b"Content-Length required\n")
            return
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            metrics.webhooks.labels("too_large").inc()
            self._send(413, f"body larger than {MAX_BODY_BYTES} bytes\n".encode())
            return
        body = self.rfile.read(length)
        try:
            notification = parse_notification(body)
        except PayloadError as exc:
            metrics.webhooks.labels("invalid").inc()
            self._send(400, f"not an Alertmanager v4 webhook payload: {exc}\n".encode())
            return
        counts = self.server.owner.remediator.receive(notification)
        metrics.webhooks.labels("accepted").inc()
        self._send(200, json.dumps({"status": "accepted", **counts}).encode() + b"\n", "application/json")

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        owner = self.server.owner
        if path in ("/health", "/healthz"):
            healthy, reason = owner.remediator.health()
            self._send(200 if healthy else 503, (reason + "\n").encode())
            return
        if path not in ("/metrics", "/"):
            self._send(404, b"not found; try /metrics or /health\n")
            return
        if not self._admitted(webhook=False):
            return
        if path == "/metrics":
            self._send(200, owner.metrics.exposition(), PROMETHEUS_TEXT)
        else:
            self._send(200, b"gpu-pod-exporter remediate: POST /alerts (Alertmanager webhook), POST /breaker/close, "
                            b"GET /metrics, GET /health\n")

    def _method_not_allowed(self) -> None:
        self._send(405, b"method not allowed\n", extra={"Allow": "GET, POST"})

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _method_not_allowed

    def _admitted(self, *, webhook: bool) -> bool:
        owner = self.server.owner
        if not owner.security.allow_request():
            owner.metrics.webhooks.labels("rate_limited").inc()
            self._send(429, b"Too Many Requests\n")
            return False
        if not owner.credentials.allows(self.headers, webhook=webhook):
            owner.metrics.webhooks.labels("unauthorized").inc()
            self._send(401, b"Unauthorized\n", extra={"WWW-Authenticate": owner.credentials.challenge()})
            return False
        return True

    def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
              extra: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in {**self.server.owner.security.headers(), **(extra or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("request " + format, *args)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, owner: WebhookReceiver,
                 max_connections: int) -> None:
        self.address_family = family
        self.owner = owner
        self._slots = threading.BoundedSemaphore(max_connections)
        self._closing = threading.Event()
        super().__init__(address, _Handler, bind_and_activate=False)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):  # dual stack where the platform has it
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        try:
            self.server_bind()
            self.server_activate()
        except BaseException:
            self.server_close()
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        while not self._slots.acquire(timeout=0.5):  # all busy: later clients wait in the backlog
            if self._closing.is_set():
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        security = self.owner.security
        context: ssl.SSLContext | None = security.ssl_context()
        if context is None:
            request.settimeout(REQUEST_TIMEOUT_S)
            super().finish_request(request, client_address)
            return
        request.settimeout(REQUEST_TIMEOUT_S)
        try:
            secured = context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("TLS handshake failed", extra={"fields": {"client": client_address[0], "error": str(exc)}})
            return
        try:
            if security.peer_allowed(secured):
                super().finish_request(secured, client_address)
        finally:
            with contextlib.suppress(OSError):
                secured.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("request failed", exc_info=True)

    def server_close(self) -> None:
        self._closing.set()
        super().server_close()


class WebhookReceiver:
    """Owns the listening socket and its accept thread."""

    def __init__(self, address: str, remediator: Remediator, metrics: RemediationMetrics, security: Any, *,
                 bearer_token: str | None = None, max_connections: int = 16) -> None:
        self.remediator = remediator
        self.metrics = metrics
        self.security = security
        self.credentials = Credentials(security, bearer_token)
        host, port = parse_listen_address(address)
        family = socket.AF_INET6 if (":" in host or host == "") and socket.has_ipv6 else socket.AF_INET
        bind_host = host or ("::" if family == socket.AF_INET6 else "0.0.0.0")  # noqa: S104 - ":9401" means all
        try:
            self._server = _Server((bind_host, port), family, self, max_connections)
        except OSError:
            if host or family != socket.AF_INET6:
                raise
            self._server = _Server(("0.0.0.0", port), socket.AF_INET, self, max_connections)  # noqa: S104
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="remediate-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
