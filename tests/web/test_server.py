"""The HTTP listener as Prometheus and operators use it: formats, compression, health, bounded load."""

from __future__ import annotations

import gzip
import http.client
import threading
from collections.abc import Iterator

import pytest
from prometheus_client.core import Metric

from exporter.web.cache import ExpositionCache
from exporter.web.health import HealthReport
from exporter.web.server import ExporterHTTPServer, accepts_gzip, parse_address, wants_openmetrics

PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def families() -> list[Metric]:
    temp = Metric("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge")
    temp.add_sample("DCGM_FI_DEV_GPU_TEMP", {"gpu": "0", "UUID": "GPU-1"}, 41)
    return [temp]


class Served:
    def __init__(self) -> None:
        self.health = HealthReport(True, "OK: 1 GPUs")
        self.renders = 0

        def render() -> list[Metric]:
            self.renders += 1
            return families()

        self.cache = ExpositionCache(render)
        self.cache.refresh()
        self.server = ExporterHTTPServer("127.0.0.1:0", self.cache, lambda: self.health)
        self.server.start()

    def get(self, path: str, headers: dict[str, str] | None = None, method: str = "GET") -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=10)
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        response.body = response.read()  # type: ignore[attr-defined]
        conn.close()
        return response


@pytest.fixture
def served() -> Iterator[Served]:
    instance = Served()
    yield instance
    instance.server.stop()


def test_metrics_in_text_format_for_curl(served: Served) -> None:
    response = served.get("/metrics")
    assert response.status == 200
    assert response.getheader("Content-Type") == "text/plain; version=0.0.4; charset=utf-8"
    assert response.body == (  # type: ignore[attr-defined]
        b"# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        b'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 41\n'
    )


def test_prometheus_gets_openmetrics_gzipped(served: Served) -> None:
    response = served.get("/metrics", {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})
    assert response.getheader("Content-Type").startswith("application/openmetrics-text; version=1.0.0")
    assert response.getheader("Content-Encoding") == "gzip"
    assert gzip.decompress(response.body).endswith(b"# EOF\n")  # type: ignore[attr-defined]


def test_scrapes_do_not_render_again(served: Served) -> None:
    before = served.renders
    for _ in range(5):
        served.get("/metrics")
    assert served.renders == before


def test_health_answers_200_or_503_with_the_reason(served: Served) -> None:
    response = served.get("/health")
    assert (response.status, response.body) == (200, b"OK: 1 GPUs\n")  # type: ignore[attr-defined]
    served.health = HealthReport(False, "NVML not available: NVMLError_LibraryNotFound")
    response = served.get("/health")
    assert (response.status, response.body) == (503, b"NVML not available: NVMLError_LibraryNotFound\n")  # type: ignore[attr-defined]


def test_landing_page_links_metrics_and_other_paths_are_404(served: Served) -> None:
    page = served.get("/")
    assert page.status == 200 and b'href="metrics"' in page.body  # type: ignore[attr-defined]
    assert served.get("/nope").status == 404
    assert served.get("/metrics", method="POST").status == 405
    head = served.get("/metrics", method="HEAD")
    assert head.status == 200 and head.body == b"" and int(head.getheader("Content-Length")) > 0  # type: ignore[attr-defined]


def test_many_concurrent_scrapes_all_succeed() -> None:
    served = Served()
    try:
        statuses: list[int] = []
        lock = threading.Lock()

        def scrape() -> None:
            for _ in range(5):
                status = served.get("/metrics").status
                with lock:
                    statuses.append(status)

        threads = [threading.Thread(target=scrape) for _ in range(40)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert statuses == [200] * 200
    finally:
        served.server.stop()


@pytest.mark.parametrize(("accept", "expected"), [
    ("", False), ("text/plain", False), ("*/*", False), (PROMETHEUS_ACCEPT, True),
    ("application/openmetrics-text;q=0.2,text/plain;q=0.9", False), ("application/openmetrics-text", True),
])
def test_content_negotiation_follows_q_values(accept: str, expected: bool) -> None:
    assert wants_openmetrics(accept) is expected


def test_gzip_negotiation_and_addresses() -> None:
    assert accepts_gzip("gzip, deflate") and accepts_gzip("*")
    assert not accepts_gzip("identity") and not accepts_gzip("gzip;q=0")
    assert parse_address(":9400") == ("", 9400)
    assert parse_address("[::1]:9400") == ("::1", 9400)
    assert parse_address("127.0.0.1:0") == ("127.0.0.1", 0)
