"""``doctor --prometheus`` against a real Prometheus (Debian's) scraping the real exporter.

Two simulated nodes, each scraped by its own Prometheus with the shipped rules loaded and the
target labels a ServiceMonitor gives (the exporter pod's ``pod``/``namespace``/``container``):

* ``good``: ``honor_labels: true`` (the chart's ServiceMonitor) and a counters CSV with the rows
  the rules read;
* ``lost``: ``honor_labels: false`` (a ServiceMonitor without ``honorLabels``: Prometheus renames
  the workload labels to ``exported_pod``/``exported_namespace``) and the built-in default CSV.

The doctor's answers are compared with what Prometheus itself says (the oracle is a query, not a
constant).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest
import yaml

from exporter.config import Config
from exporter.doctor.prometheus_checks import SHIPPED_RULE_GROUPS, check_prometheus, needed_series
from exporter.doctor.report import Verdict
from tests.doctor.conftest import clean_environment
from tests.doctor.support import Run, doctor, undocumented_problems
from tests.prometheus.test_client import Answer, server
from tests.support.exporter_process import ExporterProcess
from tests.support.paths import REPO_ROOT
from tests.support.ports import free_port
from tests.support.prometheus import RULE_FILES, PrometheusHarness, require_prometheus

# dcgm-exporter 4.8's own list (what -f /etc/dcgm-exporter/default-counters.csv exports): it lacks rows the
# shipped rules read, which the built-in default has.
DCGM_EXPORTER_48_COUNTERS = REPO_ROOT / "exporter" / "metrics" / "data" / "dcgm-exporter" / "default-counters.csv"
NODE = "hgx-node-01"  # the default scenario's simulated node: the hostname label of every GPU series
TARGET_LABELS = {"pod": "gpu-pod-exporter-x7k2p", "namespace": "gpu-monitoring", "container": "gpu-pod-exporter"}


def test_shipped_rule_groups_are_the_ones_in_deploy_rules() -> None:
    names = [group["name"] for path in sorted((REPO_ROOT / "deploy" / "rules").glob("*.yaml"))
             for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]]
    assert sorted(names) == sorted(SHIPPED_RULE_GROUPS)


def test_needed_series_leave_out_recorded_names() -> None:
    groups = [{"name": "gpu-pod-exporter.gpu-health", "rules": [
        {"type": "recording", "name": "gpu_xid:dcgm_exp_xid_errors:increase5m",
         "query": "increase(DCGM_EXP_XID_ERRORS_TOTAL[5m])"},
        {"type": "alerting", "name": "Hot", "query": 'DCGM_FI_DEV_GPU_TEMP{job=~"x"} > 85 and on () '
                                                     "gpu_pod_exporter_nvml_up == 1"}]},
        {"name": "someone-elses", "rules": [{"type": "alerting", "query": "DCGM_FI_DEV_FB_USED > 0"}]}]
    assert needed_series(groups) == ["DCGM_EXP_XID_ERRORS_TOTAL", "DCGM_FI_DEV_GPU_TEMP", "gpu_pod_exporter_nvml_up"]


@pytest.mark.parametrize("url", ["http://admin:s3cret@127.0.0.1:{port}", "ftp://admin:s3cret@prometheus"])
def test_a_url_with_credentials_is_shown_without_its_password(url: str) -> None:
    [row] = check_prometheus(url.format(port=free_port()), Config(), None, [], 2.0)
    assert row.check == "reachable" and row.verdict == Verdict.FAILED
    assert "admin:***@" in row.detail and "s3cret" not in row.detail + row.hint


def test_a_prometheus_that_wants_credentials_says_how_to_give_them_to_the_doctor() -> None:
    with server(lambda request: Answer(401, {"status": "error", "error": "Unauthorized"})) as (url, requests):
        [row] = check_prometheus(url.replace("http://", "http://admin:s3cret@"), Config(), None, [], 2.0)
    assert requests[0].headers["Authorization"] == "Basic YWRtaW46czNjcmV0"  # admin:s3cret, from the URL
    assert row.verdict == Verdict.FAILED and "HTTP 401" in row.detail
    assert "give the credentials in the URL: https://USER:PASSWORD@HOST" in row.detail and "s3cret" not in row.detail


@dataclass
class Node:
    exporter: ExporterProcess
    prometheus: PrometheusHarness
    counters: tuple[str, ...]

    def doctor(self) -> Run:
        return doctor("--json", "--simulate", "default", *self.counters, "--timeout", "10",
                      "--address", f"127.0.0.1:{self.exporter.port}", "--prometheus", self.prometheus.url)

    def absent(self, names: list[str]) -> list[str]:
        """The oracle: which of ``names`` Prometheus has no series of for this node."""
        instance = f"127.0.0.1:{self.exporter.port}"
        return [name for name in names if not self.prometheus.query(f'count({name}{{instance="{instance}"}})')]


@pytest.fixture(scope="module")
def nodes() -> Iterator[dict[str, Node]]:
    require_prometheus()
    with ExitStack() as stack, pytest.MonkeyPatch.context() as patch:
        clean_environment(patch)
        setups = {"good": ((), True), "lost": (("-f", str(DCGM_EXPORTER_48_COUNTERS)), False)}
        started: dict[str, Node] = {}
        for name, (counters, honor) in setups.items():
            exporter = ExporterProcess(["--simulate", "default", *counters])
            stack.callback(exporter.stop)
            exporter.wait_healthy(deadline_s=60)
            prometheus = PrometheusHarness([f"127.0.0.1:{exporter.port}"], rule_files=RULE_FILES,
                                           honor_labels=honor, target_labels=TARGET_LABELS)
            stack.enter_context(prometheus)
            started[name] = Node(exporter, prometheus, counters)
        for node in started.values():
            node.prometheus.wait_for_targets_up(deadline_s=60)
            node.prometheus.wait_for(f'DCGM_FI_DEV_GPU_TEMP{{hostname="{NODE}"}}', lambda found: len(found) == 8,
                                     deadline_s=60)
        yield started


@pytest.mark.e2e
def test_a_well_scraped_node(nodes: dict[str, Node]) -> None:
    node = nodes["good"]
    run = node.doctor()
    assert run.row("prometheus", "reachable")["verdict"] == "ok"
    target = run.row("prometheus", "target")
    assert target["verdict"] == "ok", target
    assert target["data"]["targets"] == [f"http://127.0.0.1:{node.exporter.port}/metrics"]
    assert run.row("prometheus", "labels")["verdict"] == "ok"
    assert run.row("prometheus", "rules")["verdict"] == "ok"
    counters = run.row("prometheus", "counters")
    needed = counters["data"]["needed"]
    assert "DCGM_FI_DEV_GPU_TEMP" in needed and "gpu_pod_exporter_nvml_up" in needed
    absent = node.absent(needed)
    assert "gpu_pod_exporter_nvml_up" not in absent  # self-metrics carry no hostname: found by the target
    assert counters["data"].get("missing", []) == absent, counters
    # The CSV has every row the rules read; what is absent is absent by design on this node (H100s retire no
    # pages, Xid series appear with the first Xid), so the row is ok and says why.
    assert counters["verdict"] == "ok", counters
    assert "absent as expected: " in counters["detail"] or not absent
    # --simulate runs as a real install: process attribution off, its per-container families absent by design
    assert "process attribution is off (--kubernetes-process-attribution" in counters["detail"], counters


@pytest.mark.e2e
def test_a_servicemonitor_without_honor_labels_is_caught(nodes: dict[str, Node]) -> None:
    node = nodes["lost"]
    assert node.prometheus.query(f'count({{exported_pod!="", hostname="{NODE}"}})')  # what the doctor must see
    run = node.doctor()
    labels = run.row("prometheus", "labels")
    assert labels["verdict"] == "failed" and labels["data"]["series"] > 0
    assert "honorLabels: true" in labels["hint"]
    counters = run.row("prometheus", "counters")
    assert counters["verdict"] == "degraded"
    assert counters["data"]["missing"] == node.absent(counters["data"]["needed"])
    assert "not in the counters CSV: " in counters["detail"] and "counters CSV" in counters["hint"]
    assert run.code == 1
    assert not undocumented_problems([run])


@pytest.mark.e2e
def test_a_node_prometheus_does_not_scrape(nodes: dict[str, Node]) -> None:
    prometheus = nodes["good"].prometheus
    run = doctor("--json", "--simulate", "default", "--node-name", "other-node", "--timeout", "10",
                 "--address", f"127.0.0.1:{free_port()}", "--prometheus", prometheus.url)
    target = run.row("prometheus", "target")
    assert target["verdict"] == "failed" and "ServiceMonitor" in target["hint"]


@pytest.mark.e2e
def test_prometheus_not_reachable() -> None:
    run = doctor("--json", "--simulate", "default", "--timeout", "2", "--address", "127.0.0.1:0",
                 "--prometheus", f"http://127.0.0.1:{free_port()}")
    row = run.row("prometheus", "reachable")
    assert row["verdict"] == "failed" and "base URL" in row["hint"]
    assert [r["check"] for r in run.rows() if r["section"] == "prometheus"] == ["reachable"]

