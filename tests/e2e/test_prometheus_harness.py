"""Self-test of the Prometheus harness against a tiny static exposition served by http.server.

It proves now, before the exporter runs, that: the harness starts Debian's Prometheus and
scrapes a target every second; our rule files load into a real Prometheus 2.42 and evaluate
without errors; alerts with no `for` fire from scraped series (GPU unhealthy, fatal Xid from a
counter born at 1); and every dashboard query, variables substituted, is accepted by
Prometheus' own parser and evaluator.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.prometheus import (
    RULE_FILES,
    PrometheusError,
    PrometheusHarness,
    Sample,
    dashboard_panel_queries,
    require_prometheus,
    serve_metrics,
)

GPU = ('gpu="0",UUID="GPU-0a",pci_bus_id="00000000:8D:00.0",device="nvidia0",modelName="NVIDIA H200",'
       'Hostname="node-a",DCGM_FI_DRIVER_VERSION="570.86.15"')
POD = 'container="trainer",namespace="ml",pod="train-0",team="vision"'


class Exposition:
    """A fake exporter: a fixed GPU payload plus a counter that grows by one per scrape."""

    def __init__(self) -> None:
        self.scrapes = 0
        self.lock = threading.Lock()

    def render(self) -> bytes:
        with self.lock:
            self.scrapes += 1
            scrapes = self.scrapes
        lines = [
            "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
            f"DCGM_FI_DEV_GPU_TEMP{{{GPU},{POD}}} 86",
            "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
            f"DCGM_FI_DEV_GPU_UTIL{{{GPU},{POD}}} 3",
            "# TYPE DCGM_FI_DEV_FB_USED gauge",
            f"DCGM_FI_DEV_FB_USED{{{GPU},{POD}}} 40000",
            "# TYPE DCGM_FI_DEV_FB_FREE gauge",
            f"DCGM_FI_DEV_FB_FREE{{{GPU},{POD}}} 40500",
            "# TYPE DCGM_FI_DEV_FB_RESERVED gauge",
            f"DCGM_FI_DEV_FB_RESERVED{{{GPU},{POD}}} 500",
            "# TYPE DCGM_FI_DEV_SM_CLOCK gauge",
            f"DCGM_FI_DEV_SM_CLOCK{{{GPU},{POD}}} 1980",
            "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
            f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{GPU},{POD}}} {1000000 + 300000 * scrapes}",
            "# TYPE DCGM_EXP_GPU_HEALTHY gauge",
            f'DCGM_EXP_GPU_HEALTHY{{{GPU},{POD},reason="fatal_xid"}} 0',
            "# TYPE DCGM_EXP_GPU_ALLOCATED gauge",
            f"DCGM_EXP_GPU_ALLOCATED{{{GPU},{POD}}} 1",
            "# TYPE DCGM_EXP_GPU_ALLOCATION_INFO gauge",
            f"DCGM_EXP_GPU_ALLOCATION_INFO{{{GPU},{POD}}} 1",
            "# TYPE DCGM_EXP_XID_ERRORS_TOTAL counter",
            f'DCGM_EXP_XID_ERRORS_TOTAL{{{GPU},{POD},xid="79"}} 1',
            "# TYPE gpu_pod_exporter_last_sample_timestamp_seconds gauge",
            f"gpu_pod_exporter_last_sample_timestamp_seconds {time.time():.3f}",
            "# TYPE gpu_pod_exporter_scrapes counter",
            f"gpu_pod_exporter_scrapes {scrapes}",
        ]
        return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
def exposition_server() -> Iterator[tuple[str, Exposition]]:
    exposition = Exposition()
    with serve_metrics(exposition.render) as address:
        yield address, exposition


@pytest.fixture(scope="module")
def prometheus(exposition_server: tuple[str, Exposition]) -> Iterator[PrometheusHarness]:
    require_prometheus()
    target, _ = exposition_server
    with PrometheusHarness([target], rule_files=RULE_FILES, target_labels={"Hostname": "node-a"}) as prom:
        prom.wait_for_targets_up()
        yield prom


def test_the_target_is_scraped_every_second(prometheus: PrometheusHarness) -> None:
    first = prometheus.query("gpu_pod_exporter_scrapes")[0].value
    later = prometheus.wait_for("gpu_pod_exporter_scrapes", lambda s: bool(s) and s[0].value >= first + 2,
                                deadline_s=15)
    assert later[0].labels["job"] == "gpu-pod-exporter"


def test_instant_query_returns_the_exposed_series_with_honored_labels(prometheus: PrometheusHarness) -> None:
    [sample] = prometheus.query("DCGM_FI_DEV_GPU_TEMP")
    assert sample.value == 86
    assert sample.labels["pod"] == "train-0"
    assert sample.labels["Hostname"] == "node-a"
    assert prometheus.query("scalar(DCGM_FI_DEV_GPU_TEMP) * 2") == [Sample({}, 172.0)]


def test_range_query_returns_points(prometheus: PrometheusHarness) -> None:
    prometheus.wait_for("count_over_time(DCGM_FI_DEV_GPU_TEMP[1m])", lambda s: bool(s) and s[0].value >= 3,
                        deadline_s=15)
    now = time.time()
    [series] = prometheus.query_range("DCGM_FI_DEV_GPU_TEMP", now - 3, now, step=1)
    assert len(series.points) >= 3
    assert {value for _, value in series.points} == {86.0}


def test_a_bad_query_raises_with_prometheus_message(prometheus: PrometheusHarness) -> None:
    with pytest.raises(PrometheusError, match="bad_data"):
        prometheus.query("sum(rate(DCGM_FI_DEV_GPU_TEMP[5m])")


def test_wait_for_times_out_with_the_last_result(prometheus: PrometheusHarness) -> None:
    with pytest.raises(TimeoutError, match="DCGM_FI_DEV_GPU_TEMP"):
        prometheus.wait_for("DCGM_FI_DEV_GPU_TEMP", lambda samples: False, deadline_s=0.5)


def test_our_rule_files_load_and_evaluate_without_errors(prometheus: PrometheusHarness) -> None:
    groups = prometheus.wait_for_rules_evaluated()
    assert {g["name"] for g in groups} == {
        "gpu-pod-exporter.alert-helpers", "gpu-pod-exporter.exporter", "gpu-pod-exporter.gpu-health",
        "gpu-pod-exporter.gpu-usage", "gpu-pod-exporter.cost-allocation", "gpu-pod-exporter.cost-usage",
        "gpu-pod-exporter.cost-report", "gpu-pod-exporter.gpu-quota"}
    unhealthy = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"]
    assert unhealthy == []


def test_alerts_without_for_fire_from_scraped_series(prometheus: PrometheusHarness) -> None:
    firing = prometheus.wait_for('ALERTS{alertstate="firing", alertname=~"GpuUnhealthy|GpuXidFatal"}',
                                 lambda s: len(s) == 2, deadline_s=30)
    by_name = {s.labels["alertname"]: s.labels for s in firing}
    assert by_name["GpuUnhealthy"]["reason"] == "fatal_xid"
    assert by_name["GpuXidFatal"]["xid"] == "79"
    assert by_name["GpuXidFatal"]["team"] == "vision"
    # a sustained condition waits for its `for`
    pending = {a["labels"]["alertname"]: a["state"] for a in prometheus.alerts()}
    assert pending["GpuTemperatureHigh"] == "pending"


def test_recording_rules_attribute_the_gpu_to_the_team(prometheus: PrometheusHarness) -> None:
    [allocated] = prometheus.wait_for("team:gpu_allocated:sum", lambda s: len(s) == 1, deadline_s=15)
    assert allocated.labels["team"] == "vision"
    assert allocated.value == 1


def test_every_dashboard_query_is_accepted_by_prometheus(prometheus: PrometheusHarness) -> None:
    queries = dashboard_panel_queries({"Hostname": "node-a", "gpu": "0", "modelName": "NVIDIA H200",
                                       "team": "vision", "namespace": "ml", "instance": ".*"})
    assert len(queries) > 60
    answered = 0
    for query in queries:
        samples = prometheus.query(query.expr)  # raises PrometheusError on any rejected query
        answered += bool(samples)
    # the tiny exposition serves temperature, utilization, memory and clocks: those panels answer
    assert answered >= 15


def test_dcgm_exporter_dashboard_queries_answer_from_our_names(prometheus: PrometheusHarness) -> None:
    queries = [q for q in dashboard_panel_queries({"Hostname": "node-a", "gpu": "0", "modelName": ".*",
                                                   "team": ".*", "namespace": ".*", "instance": ".*"})
               if q.dashboard.startswith("dcgm-exporter")]
    answers = {q.expr: prometheus.query(q.expr) for q in queries}
    assert answers['DCGM_FI_DEV_SM_CLOCK{instance=~".*", gpu=~"0"} * 1000000'][0].value == 1980e6
    assert answers['avg(DCGM_FI_DEV_GPU_TEMP{instance=~".*", gpu=~"0"})'][0].value == 86
