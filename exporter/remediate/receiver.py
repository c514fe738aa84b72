"""The webhook listener: ``POST /alerts`` from Alertmanager, ``GET /metrics`` and ``GET /health``.

Served by the same event-loop core as the exporter's ``/metrics`` (``exporter.web.server``), so it
has the same deadlines (TLS handshake and request head within 5 s, the body within the same read
deadline, the response read within 30 s), the same cap on open connections (the oldest idle one
makes room), the same bounded bcrypt pool and the same rate-limited connection log: an idle
socket or a slowloris client costs a file descriptor, never a worker that Alertmanager's deliveries
queue behind (the thread-per-connection server this replaced had 16 slots: 16 idle sockets made
``/health`` take 9.5 s). It takes its TLS, mTLS, basic-auth users, response headers and rate
limit from the same web config file (exporter-toolkit format, ``exporter.web.security``), and adds
what a webhook needs and a scrape endpoint does not:

* a **bearer token** (``--bearer-token-file``), which is what Alertmanager's
  ``http_config.authorization`` sends: ``POST /alerts`` and ``POST /breaker/close`` (a person closing
  the latched circuit breaker) require it, or one of the web config's
  basic-auth users. The basic-auth users guard ``/metrics`` too, as they do the exporter's; the
  token does not (Prometheus scrapes with the web config's credentials, and the counts it reads
  are no secret). ``/health`` never asks (kubelet probes cannot authenticate);
* a request body, read only once the request is authorized, and refused with 413 before it is read
  when its ``Content-Length`` is over ``MAX_BODY_BYTES`` (411 without one).

The answers themselves run in a small thread pool, never on the event loop: the remediator's lock
may be held by its worker across a Kubernetes API call.
"""

from __future__ import annotations

import hmac
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from exporter import __version__
from exporter.logs import get_logger
from exporter.remediate.alerts import PayloadError, parse_notification
from exporter.remediate.controller import Remediator
from exporter.remediate.selfmetrics import RemediationMetrics
from exporter.web.request import RequestHead
from exporter.web.server import DEFAULT_MAX_CONNECTIONS, Decision, EventLoopHTTPServer, Response

log = get_logger("remediate.http")

MAX_BODY_BYTES = 8 * 1024 * 1024
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
ANSWER_WORKERS = 4
REALM = "gpu-pod-exporter-remediate"
WEBHOOK_PATHS = ("/alerts", "/")
POST_PATHS = (*WEBHOOK_PATHS, "/breaker/close")
GUARDED_GET_PATHS = ("/metrics", "/")
# What the remediator counts (gpu_pod_exporter_remediation_webhooks_total{result}) for each refusal.
_REFUSAL_RESULTS = {"rate_limited": "rate_limited", "unauthorized": "unauthorized", "length_required": "invalid",
                    "too_large": "too_large"}


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

    def decide(self, headers: Any, *, webhook: bool) -> Decision:
        """May this request post alerts (``webhook``) or read /metrics? None to allow, a realm to
        refuse, or the basic-auth check (bcrypt) as a job for the server's pool."""
        value = headers.get("Authorization", "") or ""
        scheme, _, token = value.strip().partition(" ")
        if webhook:
            if not self.required:
                return None
            if self.bearer is not None and scheme.lower() == "bearer" and \
                    hmac.compare_digest(token.strip().encode("utf-8"), self.bearer):
                return None
        elif not self.basic:
            return None
        if not self.basic or scheme.lower() != "basic":
            return REALM
        decision: Decision = self.security.decide(headers)
        return decision

    def challenge(self) -> str:
        realm = f'realm="{REALM}"'
        return f"Basic {realm}" if self.basic else f"Bearer {realm}"


class _WebhookServer(EventLoopHTTPServer):
    """The event-loop core with the webhook's methods, credentials and answers."""

    methods = ("GET", "POST")
    max_body_bytes = MAX_BODY_BYTES
    server_header = f"gpu-pod-exporter-remediate/{__version__}"

    def __init__(self, address: str, owner: WebhookReceiver, max_connections: int) -> None:
        super().__init__(address, owner.security, max_connections=max_connections, logger=log,
                         thread_name="remediate-http")
        self.owner = owner
        self._answers = ThreadPoolExecutor(max_workers=ANSWER_WORKERS, thread_name_prefix="remediate-answer")

    def stop(self) -> None:
        super().stop()
        self._answers.shutdown(wait=False, cancel_futures=True)

    def guarded(self, head: RequestHead) -> bool:
        """Probes and unknown paths are answered (200 or 404) without the rate limit or credentials."""
        return head.path in (POST_PATHS if head.method == "POST" else GUARDED_GET_PATHS)

    def decide(self, head: RequestHead) -> Decision:
        return self.owner.credentials.decide(head.headers, webhook=head.method == "POST")

    def challenge(self, realm: str) -> str:
        return self.owner.credentials.challenge()

    def refused(self, reason: str) -> None:
        self.owner.metrics.webhooks.labels(_REFUSAL_RESULTS[reason]).inc()

    def wants_body(self, head: RequestHead) -> bool:
        return head.method == "POST" and head.path in WEBHOOK_PATHS

    def answer(self, connection: Any, head: RequestHead, body: bytes) -> None:
        self.answer_later(self._answers, connection, head, lambda: self._response(head, body, connection.peer))

    def _response(self, head: RequestHead, body: bytes, peer: str) -> Response:
        owner = self.owner
        path = head.path
        if head.method == "POST":
            if path == "/breaker/close":
                closed = owner.remediator.close_breaker(peer)
                return Response(200, b"circuit breaker closed\n" if closed else b"circuit breaker was not open\n")
            if path not in WEBHOOK_PATHS:
                return Response(404, b"not found; Alertmanager posts to /alerts\n")
            try:
                notification = parse_notification(body)
            except PayloadError as exc:
                owner.metrics.webhooks.labels("invalid").inc()
                return Response(400, f"not an Alertmanager v4 webhook payload: {exc}\n".encode())
            counts = owner.remediator.receive(notification)
            owner.metrics.webhooks.labels("accepted").inc()
            return Response(200, json.dumps({"status": "accepted", **counts}).encode() + b"\n", "application/json")
        if path in ("/health", "/healthz"):
            healthy, reason = owner.remediator.health()
            return Response(200 if healthy else 503, (reason + "\n").encode())
        if path == "/metrics":
            return Response(200, owner.metrics.exposition(), PROMETHEUS_TEXT)
        if path == "/":
            return Response(200, b"gpu-pod-exporter remediate: POST /alerts (Alertmanager webhook), "
                                 b"POST /breaker/close, GET /metrics, GET /health\n")
        return Response(404, b"not found; try /metrics or /health\n")


class WebhookReceiver:
    """Owns the listener (the shared event-loop core) for the remediator."""

    def __init__(self, address: str, remediator: Remediator, metrics: RemediationMetrics, security: Any, *,
                 bearer_token: str | None = None, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        self.remediator = remediator
        self.metrics = metrics
        self.security = security
        self.credentials = Credentials(security, bearer_token)
        parse_listen_address(address)
        self._server = _WebhookServer(address, self, max_connections)

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def open_connections(self) -> int:
        return self._server.open_connections

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop()
