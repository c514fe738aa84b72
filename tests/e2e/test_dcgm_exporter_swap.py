"""The swap: a dcgm-exporter DaemonSet's container, args and environment unchanged, run against this
exporter (under --simulate, the only change), scraped by a real Prometheus (Debian's 2.42, which asks
for OpenMetrics first). dcgm-exporter's own dashboard answers, and Prometheus stores every counter of
the counters list as a counter.

What the container gets is what Kubernetes would give it: the args, every ``value`` env entry, and
NODE_NAME as the downward API fills it (the simulated node's name). One thing differs, on purpose:
the port in DCGM_EXPORTER_LISTEN is a free one instead of 9400, because this machine runs other test
suites at the same time; the form (``:<port>``, all addresses) is the spec's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.metrics.counters import load_counters
from exporter.metrics.upstream_paths import resolve_collectors
from tests.dashboards.dashboard_queries import dcgm_exporter_queries, dcgm_exporter_variables, grafana_regex_value
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_for
from tests.support.ports import free_port
from tests.support.processes import stop_process
from tests.support.prometheus import PrometheusHarness

pytestmark = pytest.mark.e2e

DAEMONSET = REPO_ROOT / "tests" / "fixtures" / "dcgm-exporter-daemonset.yaml"
DAEMONSET_4_8_3 = REPO_ROOT / "tests" / "fixtures" / "dcgm-exporter-4.8.3-daemonset.yaml"
# Each generation's DaemonSet, the node label its consumers read (4.8.3 renamed it, pull request 655), and what
# the migration guide says to add besides the image: for 4.8.2 and earlier the release to match (the process
# cannot tell a 4.8.2 DaemonSet from a 4.8.4 one; "auto" is the newest release, hostname).
GENERATIONS = {"4.8.2": (DAEMONSET, "Hostname", {"GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT": "4.8.2"}),
               "4.8.3": (DAEMONSET_4_8_3, "hostname", {})}
NODE = "hgx-node-01"  # the simulated node; the downward API would give the node the pod runs on


@dataclass
class Swapped:
    process: subprocess.Popen[bytes]
    log_path: Path
    target: str
    prometheus: PrometheusHarness
    args: list[str]
    host_label: str  # the node label this generation's consumers read

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def container_spec(daemonset: Path = DAEMONSET) -> tuple[list[str], dict[str, str]]:
    """The DaemonSet container's args and its environment as the kubelet would set it."""
    spec: dict[str, Any] = yaml.safe_load(daemonset.read_text(encoding="utf-8"))
    [container] = spec["spec"]["template"]["spec"]["containers"]
    env: dict[str, str] = {}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif item["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName":
            env[item["name"]] = NODE
    return [str(arg) for arg in container["args"]], env


@pytest.fixture(scope="module", params=sorted(GENERATIONS))
def swapped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Swapped]:
    daemonset, host_label, added = GENERATIONS[request.param]
    args, env = container_spec(daemonset)
    env |= added
    assert env["DCGM_EXPORTER_LISTEN"] == ":9400"
    port = free_port()
    env["DCGM_EXPORTER_LISTEN"] = f":{port}"  # see the module docstring
    log_path = tmp_path_factory.mktemp("swap") / "exporter.log"
    environ = {key: value for key, value in os.environ.items()
               if not key.startswith(("DCGM_", "GPU_POD_EXPORTER_", "KUBERNETES_", "NVIDIA_"))}
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "exporter", *args, "--simulate"], cwd=REPO_ROOT,
                                   env={**environ, **env, "PYTHONUNBUFFERED": "1"}, stdout=log,
                                   stderr=subprocess.STDOUT)
    try:
        def healthy() -> bool:
            assert process.poll() is None, log_path.read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        wait_for(healthy, 60.0, "the swapped exporter's /health")
        with PrometheusHarness([f"127.0.0.1:{port}"]) as prometheus:
            prometheus.wait_for_targets_up(deadline_s=60.0)
            yield Swapped(process, log_path, f"127.0.0.1:{port}", prometheus, args, host_label)
    finally:
        stop_process(process)


def test_the_daemonset_runs_unchanged_and_says_what_it_ignores(swapped: Swapped) -> None:
    assert swapped.process.poll() is None
    log = swapped.log()
    assert [line for line in log.splitlines() if line.split()[1:2] == ["error"]] == []
    ignored = [line for line in log.splitlines() if "has no effect here" in line]
    assert len(ignored) == 1 and "DCGM_REMOTE_HOSTENGINE_INFO" in ignored[0]  # one line, saying why
    if swapped.host_label == "hostname":  # auto: the newest release's behaviour, and the log says so
        assert "dcgm-exporter 4.8.4 behaviour (auto: the newest dcgm-exporter release known here (4.6.1-4.8.4); " \
               "--dcgm-exporter-compat=4.8.2 keeps the Hostname label of 4.8.2 and earlier): the node label is " \
               "hostname" in log
    if not Path("/etc/dcgm-exporter/dcp-metrics-included.csv").exists():  # the image has the file itself
        assert "/etc/dcgm-exporter/dcp-metrics-included.csv does not exist on this machine" in log


def test_dcgm_exporters_dashboard_answers(swapped: Swapped) -> None:
    prometheus = swapped.prometheus
    values = {"datasource": "prometheus"}
    for variable in dcgm_exporter_variables():
        samples = prometheus.wait_for(variable.selector, bool, deadline_s=60.0)
        values[variable.name] = grafana_regex_value(sorted({s.labels[variable.label] for s in samples}))
    assert values["instance"] == swapped.target.replace(".", "\\\\.")
    assert values["gpu"] == "(0|1|2|3|4|5|6|7)"
    for query in dcgm_exporter_queries():
        expr = query.resolved(values)
        result = prometheus.wait_for(expr, bool, deadline_s=60.0)
        if not expr.startswith(("avg(", "sum(")):
            assert {sample.labels["gpu"] for sample in result} == {str(gpu) for gpu in range(8)}, expr
    # -k from DCGM_EXPORTER_KUBERNETES: the GPUs carry the pods that hold them.
    held = prometheus.wait_for('DCGM_FI_DEV_GPU_TEMP{pod!=""}', bool)
    assert {sample.labels[swapped.host_label] for sample in held} == {NODE}


def test_a_consumer_of_this_generations_node_label_answers_and_only_that_spelling_exists(swapped: Swapped) -> None:
    """A 4.8.2 consumer groups by Hostname; a 4.8.3 one (Slurm joins, its dashboards) by hostname."""
    other = "hostname" if swapped.host_label == "Hostname" else "Hostname"
    per_node = swapped.prometheus.wait_for(f"count by ({swapped.host_label}) (DCGM_FI_DEV_GPU_TEMP)", bool)
    assert [(sample.labels, sample.value) for sample in per_node] == [({swapped.host_label: NODE}, 8.0)]
    assert swapped.prometheus.query(f'count({{__name__=~"DCGM_.+", {other}!=""}})') == []


def test_prometheus_stores_every_counter_as_a_counter(swapped: Swapped) -> None:
    """Prometheus asks for OpenMetrics first; /api/v1/metadata shows what it stored from the answer."""
    resolved = resolve_collectors(swapped.args[1], Path(swapped.args[1]).exists())
    rows = load_counters(resolved.path).metrics
    counters = [row.name for row in rows if row.prom_type == "counter"]
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in counters

    def metadata() -> dict[str, Any] | None:
        data: dict[str, Any] = swapped.prometheus.api("metadata")
        return data if all(name in data for name in counters) else None

    stored = wait_for(metadata, 60.0, "metadata of every counter row")
    for row in rows:
        if row.name in stored:
            assert [entry["type"] for entry in stored[row.name]] == [row.prom_type], row.name
    assert [entry["type"] for entry in stored["gpu_pod_exporter_nvml_calls_total"]] == ["counter"]
