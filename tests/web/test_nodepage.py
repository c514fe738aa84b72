"""The node page as the listener serves it: same-origin files, a strict CSP, the same auth as /metrics."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.core import Metric

from exporter.web.cache import ExpositionCache, node_view_json
from exporter.web.health import HealthReport
from exporter.web.nodepage import CONTENT_SECURITY_POLICY
from exporter.web.server import ExporterHTTPServer, WebSecurity


class Locked(WebSecurity):
    """Basic auth stand-in: every request without the right header gets a 401."""

    def authenticate(self, headers: Any) -> str | None:
        return None if headers.get("Authorization") == "Basic b2s6b2s=" else "gpu-pod-exporter"


def families() -> list[Metric]:
    util = Metric("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gauge")
    util.add_sample("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "UUID": "GPU-1", "modelName": "H100",
                                             "Hostname": "<script>alert(1)</script>"}, 42)
    return [util]


def serve(security: WebSecurity | None = None) -> tuple[ExporterHTTPServer, ExpositionCache]:
    cache = ExpositionCache(families)
    cache.refresh()
    server = ExporterHTTPServer("127.0.0.1:0", cache, lambda: HealthReport(True, "OK <fine>"), security)
    server.start()
    return server, cache


@pytest.fixture
def served() -> Iterator[tuple[ExporterHTTPServer, ExpositionCache]]:
    server, cache = serve()
    yield server, cache
    server.stop()


def get(server: ExporterHTTPServer, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str],
                                                                                                 bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", path, headers=headers or {})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, dict(response.getheaders()), body


def test_the_page_loads_only_same_origin_files_under_a_strict_csp(served: tuple[ExporterHTTPServer, Any]) -> None:
    server, _ = served
    status, headers, page = get(server, "/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "default-src 'none'" in CONTENT_SECURITY_POLICY and "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert b'src="static/node.js"' in page and b"<script>" not in page.replace(b'<script src="static/node.js" defer>',
                                                                               b"")
    assert b"OK &lt;fine&gt;" in page  # the health line is escaped
    assert b"http" not in page.replace(b'http-equiv', b"")  # nothing from another origin
    for path, content_type in (("/static/node.js", "text/javascript; charset=utf-8"),
                               ("/static/node.css", "text/css; charset=utf-8"),
                               ("/static/icon.svg", "image/svg+xml")):
        status, headers, body = get(server, path)
        assert (status, headers["Content-Type"]) == (200, content_type) and body
        assert b"http://" not in body.replace(b"http://www.w3.org/2000/svg", b"")
    _, _, script = get(server, "/static/node.js")
    for sink in (b".innerHTML", b".outerHTML", b"insertAdjacentHTML", b"document.write", b"eval("):
        assert sink not in script


def test_gpus_json_is_built_once_per_exposition_and_escapes_hostile_labels(
        served: tuple[ExporterHTTPServer, ExpositionCache]) -> None:
    server, cache = served
    status, headers, body = get(server, "/gpus.json")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert b"<script>" not in body
    view = json.loads(body)
    assert view["node"] == "<script>alert(1)</script>" and view["gpus"][0]["utilization_percent"] == 42
    first = cache.current.node_view_ready
    again = json.loads(get(server, "/gpus.json")[2])
    assert first is not None and again["served_at"] >= view["served_at"]  # stamped with the server's clock
    assert {**again, "served_at": None} == {**view, "served_at": None}  # the same view otherwise
    assert cache.current.node_view_ready is first  # the second request built nothing
    cache.refresh()
    assert cache.current.node_view_ready is None  # a new exposition: built again on the next request
    assert json.loads(get(server, "/gpus.json")[2])["generation"] == view["generation"] + 1


def test_the_page_and_its_data_need_the_same_credentials_as_metrics() -> None:
    server, _ = serve(Locked())
    try:
        for path in ("/", "/gpus.json", "/static/node.js", "/metrics"):
            assert get(server, path)[0] == 401
            assert get(server, path, {"Authorization": "Basic b2s6b2s="})[0] == 200
    finally:
        server.stop()


def test_every_render_feeds_the_counter_history_so_a_page_opened_later_knows_recent_errors() -> None:
    """Nobody asks for /gpus.json while two expositions are rendered; the page opened afterwards still
    reports the uncorrectable ECC error that arrived between them (as Prometheus, scraping all along)."""
    errors = iter((0.0, 1.0, 1.0))
    sampled = iter((5_000.0, 5_001.0, 5_002.0))
    gpu = {"gpu": "0", "UUID": "GPU-render-history", "Hostname": "n"}

    def render() -> list[Metric]:
        up = Metric("gpu_pod_exporter_device_up", "up", "gauge")
        up.add_sample("gpu_pod_exporter_device_up", gpu, 1)
        ecc = Metric("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "dbe", "counter")
        ecc.add_sample("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu, next(errors))
        stamp = Metric("gpu_pod_exporter_last_sample_timestamp_seconds", "t", "gauge")
        stamp.add_sample("gpu_pod_exporter_last_sample_timestamp_seconds", {}, next(sampled))
        return [up, ecc, stamp]

    cache = ExpositionCache(render)
    cache.refresh()
    cache.refresh()
    cache.refresh()
    view = json.loads(node_view_json(cache.current.node_view("test"), 5_002.5, 1.0))
    assert [c["text"] for c in view["gpus"][0]["conditions"]] == [
        "1 new uncorrectable ECC errors (volatile) in the last 2 s"]
