"""The listener's WebSecurity hook: order of checks (rate limit, then auth) and headers on every answer."""

from __future__ import annotations

import http.client
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from prometheus_client.core import Metric

from exporter.web.cache import ExpositionCache
from exporter.web.health import HealthReport
from exporter.web.server import ExporterHTTPServer, WebSecurity


class Recording(WebSecurity):
    def __init__(self) -> None:
        self.allow = True
        self.realm: str | None = None
        self.authenticated = 0

    def allow_request(self) -> bool:
        return self.allow

    def authenticate(self, headers: Any) -> str | None:
        self.authenticated += 1
        return self.realm

    def headers(self) -> Mapping[str, str]:
        return {"X-Content-Type-Options": "nosniff"}


@pytest.fixture
def served() -> Iterator[tuple[ExporterHTTPServer, Recording]]:
    def render() -> list[Metric]:
        metric = Metric("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge")
        metric.add_sample("DCGM_FI_DEV_GPU_TEMP", {"gpu": "0"}, 40)
        return [metric]

    cache = ExpositionCache(render)
    cache.refresh()
    security = Recording()
    server = ExporterHTTPServer("127.0.0.1:0", cache, lambda: HealthReport(True, "OK"), security)
    server.start()
    yield server, security
    server.stop()


def get(server: ExporterHTTPServer, path: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", path)
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


def test_over_the_rate_limit_is_429_without_any_authentication_work(
        served: tuple[ExporterHTTPServer, Recording]) -> None:
    server, security = served
    security.allow = False
    response = get(server, "/metrics")
    assert response.status == 429
    assert security.authenticated == 0


def test_refused_credentials_are_401_with_a_basic_challenge_and_the_configured_headers(
        served: tuple[ExporterHTTPServer, Recording]) -> None:
    server, security = served
    security.realm = "gpu-pod-exporter"
    response = get(server, "/metrics")
    assert response.status == 401
    assert response.getheader("WWW-Authenticate") == 'Basic realm="gpu-pod-exporter", charset="UTF-8"'
    assert response.getheader("X-Content-Type-Options") == "nosniff"


@pytest.mark.parametrize(("path", "status"), [("/metrics", 200), ("/health", 200), ("/", 200), ("/nope", 404)])
def test_configured_headers_are_on_every_response(served: tuple[ExporterHTTPServer, Recording], path: str,
                                                  status: int) -> None:
    server, _ = served
    response = get(server, path)
    assert response.status == status
    assert response.getheader("X-Content-Type-Options") == "nosniff"
