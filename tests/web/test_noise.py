"""Connection-level trouble is logged at most once per kind per interval, with a count: no client can
flood the log (before, garbage after a TLS handshake logged an error-level traceback per connection)."""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.core import Metric

from exporter.logs import RateLimitedLog
from exporter.web.cache import ExpositionCache
from exporter.web.health import HealthReport
from exporter.web.server import ExporterHTTPServer, WebSecurity
from tests.support.polling import wait_for
from tests.web.certs import CertificateAuthority
from tests.web.test_security import Clock, logs  # noqa: F401 - the fixture


def test_one_line_per_kind_per_interval_then_the_count() -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("test.noise")
    logger.addHandler(Keep())
    clock = Clock()
    clock.now = 0.0
    noise = RateLimitedLog(logger, 60.0, clock)
    for _ in range(1000):
        noise.event("handshake-failed", logging.WARNING, "TLS handshake failed")
    noise.event("head-timeout", logging.WARNING, "slow head")
    assert len(records) == 2
    clock.now = 61.0
    noise.event("handshake-failed", logging.WARNING, "TLS handshake failed")
    assert records[-1].fields == {"kind": "handshake-failed", "more_since_last_line": 999}  # type: ignore[attr-defined]
    assert noise.counts["handshake-failed"] == 1001


class Tls(WebSecurity):
    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context

    def ssl_context(self) -> ssl.SSLContext | None:
        return self.context


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[ExporterHTTPServer]:
    ca = CertificateAuthority("noise CA")
    cert, key = ca.issue("exporter").write_pair(tmp_path, "tls")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    cache = ExpositionCache(lambda: [Metric("x", "x", "gauge")])
    cache.refresh()
    server = ExporterHTTPServer("127.0.0.1:0", cache, lambda: HealthReport(True, "OK"), security=Tls(context))
    server.start()
    yield server
    server.stop()


def test_a_hundred_garbage_handshakes_log_one_line_and_no_traceback(
        tls_server: ExporterHTTPServer, logs: list[logging.LogRecord]) -> None:  # noqa: F811
    for _ in range(100):
        with socket.create_connection(("127.0.0.1", tls_server.port)) as sock:
            sock.sendall(b"\x16\x03\x01\x00\x05garbage that is no ClientHello" * 4)
            sock.settimeout(5)
            try:
                while sock.recv(4096):
                    pass
            except OSError:
                pass
    wait_for(lambda: tls_server.open_connections == 0 or None, 10, "every connection closed")
    handshakes = [record for record in logs if getattr(record, "fields", {}).get("kind") == "handshake-failed"]
    assert len(handshakes) == 1
    assert not any(record.exc_info for record in logs)
