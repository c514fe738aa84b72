"""`top`'s sources: one Prometheus query per refresh with filters pushed down; one exporter per node."""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from promql_parser import parse

from exporter.prometheus.client import Connection
from exporter.top.lastseen import LastSeen
from exporter.top.model import Filters
from exporter.top.sources import QUERY_FAMILIES, ExporterSource, PrometheusSource, read_all, selector
from exporter.top.table import node_conditions, status_lines
from tests.support.ports import free_port
from tests.support.prometheus import serve_metrics

LABELS = {"gpu": "0", "UUID": "GPU-1", "modelName": "NVIDIA H100", "Hostname": "node-a", "instance": "10.0.0.1:9400"}


class FakePrometheus:
    """Answers query_range with fixed series and records every query it was asked, and its headers."""

    def __init__(self, result: list[dict[str, Any]]) -> None:
        self.queries: list[str] = []
        self.headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                outer.queries.append(urllib.parse.parse_qs(body)["query"][0])
                outer.headers.append(dict(self.headers.items()))
                answer = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(answer.encode())

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    def series(name: str, value: str, **labels: str) -> dict[str, Any]:
        return {"metric": {"__name__": name, **LABELS, "cluster": "east", **labels}, "values": [[1, value]]}

    fake = FakePrometheus([
        series("DCGM_FI_DEV_GPU_UTIL", "3"),
        series("gpu_pod_exporter_device_up", "1", Hostname=""),  # the exporter's own gauge: no Hostname
        series("DCGM_EXP_GPU_ALLOCATION_INFO", "1", namespace="ml", pod="p-0", container="c"),
    ])
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def test_one_refresh_is_one_query_and_the_filters_are_matchers_in_it(prometheus: FakePrometheus) -> None:
    source = PrometheusSource(Connection(url=prometheus.url, retries=0, timeout_s=5), clock=lambda: 1000.0)
    for _ in range(3):
        reading = source.read(cluster="east", node='we"ird')
    assert source.queries == len(prometheus.queries) == 3
    assert (reading.prometheus_queries, reading.cost()) == (1, "1 Prometheus query")  # what the title bar shows
    assert prometheus.queries[0] == selector("east", 'we"ird')
    parse(prometheus.queries[0])  # valid PromQL, quotes escaped
    assert all(name in prometheus.queries[0] for name in QUERY_FAMILIES)
    assert reading.errors == []
    [node] = reading.nodes  # one target (instance), its own gauges included
    assert (node.cluster, node.node) == ("east", "node-a")
    [gpu] = node.view["gpus"]
    assert (gpu["utilization_percent"], gpu["up"], [c["pod"] for c in gpu["containers"]]) == (3.0, True, ["p-0"])


def test_an_exporter_prometheus_cannot_scrape_any_more_is_a_line_of_its_own() -> None:
    down = {"metric": {"__name__": "up", "job": "gpu", "instance": "10.0.0.9:9400", "cluster": "west"},
            "values": [[1, "0"]]}
    fake = FakePrometheus([down])
    try:
        reading = PrometheusSource(Connection(url=fake.url, retries=0, timeout_s=5)).read()
    finally:
        fake.server.shutdown()
        fake.server.server_close()
    assert reading.nodes == []
    assert [(e.source, e.message) for e in reading.errors] == [
        ("exporter west/10.0.0.9:9400", "Prometheus cannot scrape it (up == 0, job gpu): no current data of its GPUs")]
    assert " or (up == 0 and on (cluster, job, instance) group by (cluster, job, instance) " \
           "(last_over_time(DCGM_FI_DEV_GPU_UTIL[1h])))" in fake.queries[0]


def test_a_prometheus_that_is_down_is_a_line_not_a_crash() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    reading = PrometheusSource(Connection(url=url, retries=0, timeout_s=2)).read()
    assert reading.nodes == [] and len(reading.errors) == 1
    assert reading.errors[0].source == url and reading.errors[0].message.startswith(f"cannot reach {url}")


def test_exporters_are_read_one_node_each_and_a_dead_one_does_not_hide_the_others() -> None:
    text = ('# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="node-a"} 42\n'
            "# TYPE gpu_pod_exporter_device_up gauge\n" 'gpu_pod_exporter_device_up{gpu="0"} 1\n')
    with serve_metrics(text.encode) as target:
        alive = ExporterSource(Connection(url=f"http://{target}"), cluster="lab")
        dead = ExporterSource(Connection(url=f"http://127.0.0.1:{free_port()}/metrics", timeout_s=2))
        reading = read_all([alive, dead])
    [node] = reading.nodes
    assert (node.cluster, node.node, node.view["gpus"][0]["utilization_percent"]) == ("lab", "node-a", 42.0)
    assert [error.source for error in reading.errors] == [dead.name]
    assert reading.cost() == "2 /metrics reads"
    assert "cannot reach the exporter" in reading.errors[0].message
    assert alive.name == f"http://{target}/metrics"


def test_the_prometheus_source_sends_the_credentials_and_shows_no_password(prometheus: FakePrometheus) -> None:
    host = prometheus.url.removeprefix("http://")
    in_url = PrometheusSource(Connection(url=f"http://alice:s3cret-pw@{host}", retries=0))
    bearer = PrometheusSource(Connection(url=prometheus.url, bearer_token="tok-123", tenant="team-a", retries=0))
    in_url.read()
    bearer.read()
    assert prometheus.headers[0]["Authorization"] == "Basic " + base64.b64encode(b"alice:s3cret-pw").decode()
    assert (prometheus.headers[1]["Authorization"], prometheus.headers[1]["X-Scope-OrgID"]) == ("Bearer tok-123",
                                                                                              "team-a")
    assert in_url.name == prometheus.url  # what titles and errors show: no user, no password


def test_an_exporter_url_with_credentials_sends_them_and_shows_none() -> None:
    seen: list[dict[str, str]] = []
    text = b'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="node-a"} 1\n'
    with serve_metrics(lambda: text, seen) as target:
        source = ExporterSource(Connection(url=f"http://scraper:pa%3Ass@{target}/metrics"))
        reading = source.read()
    assert [node.node for node in reading.nodes] == ["node-a"]
    assert seen[0]["Authorization"] == "Basic " + base64.b64encode(b"scraper:pa:ss").decode()
    assert source.name == f"http://{target}/metrics"


def test_a_target_that_goes_down_keeps_its_rows_and_no_line_says_they_are_hidden() -> None:
    """Over Prometheus, an exporter that stops answering: top keeps its last rows (STALE, last seen) and the
    SOURCE DOWN line must not say its GPUs are not shown while they are on screen."""
    gpu = {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "job": "gpu", "instance": "10.0.0.9:9400", "gpu": "0",
                      "UUID": "GPU-9", "Hostname": "node-b", "modelName": "NVIDIA H100 80GB HBM3"},
           "values": [[1, "50"]]}
    down = {"metric": {"__name__": "up", "job": "gpu", "instance": "10.0.0.9:9400"}, "values": [[1, "0"]]}
    series = [gpu]
    fake = FakePrometheus(series)
    try:
        memory = LastSeen(lambda filters: PrometheusSource(Connection(url=fake.url, retries=0, timeout_s=5)).read())
        assert [node.node for node in memory(Filters()).nodes] == ["node-b"]
        series[:] = [down]
        reading = memory(Filters())
    finally:
        fake.server.shutdown()
        fake.server.server_close()
    assert [node.node for node in reading.nodes] == ["node-b"]  # kept, stale
    lines = [text for _, text in status_lines(reading.errors, memory.missing())]
    assert any(line.startswith("SOURCE DOWN exporter 10.0.0.9:9400: Prometheus cannot scrape it") for line in lines)
    assert any(line.startswith("STALE node-b: last seen") for line in lines), lines
    assert not [line for line in lines if "not shown" in line], lines


# An exporter whose series carry no node label: no GPU at all (NVML down: its own gauges only), or --no-hostname.
NO_NODE_LABEL = ('gpu_pod_exporter_nvml_up 0\n'
                 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",modelName="NVIDIA H100 80GB HBM3"} 10\n')


def test_an_exporter_without_a_node_label_is_named_by_its_address_and_two_are_told_apart() -> None:
    """Two such exporters read together: each node is its host:port (never blank), so its NODE lines say
    which node NVML is down on, and LastSeen can keep one's rows while the other answers."""
    with serve_metrics(NO_NODE_LABEL.encode) as first, serve_metrics(NO_NODE_LABEL.encode) as second:
        sources = [ExporterSource(Connection(url=f"http://{target}")) for target in (first, second)]
        reading = read_all(sources)
    assert sorted(node.node for node in reading.nodes) == sorted([first, second])
    lines = [text for _, text in status_lines([], node_conditions=node_conditions(reading.nodes))]
    assert f"NODE {first} CRITICAL: NVML is unavailable: no GPU of this node is read [GpuPodExporterNvmlDown]" \
        in lines, lines
