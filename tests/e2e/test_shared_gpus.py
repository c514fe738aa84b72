"""``gpu-pod-exporter --simulate shared-gpus``: who is busy on a shared GPU, from the user's side.

The scenario (simulator/scenarios/shared-gpus.yaml): GPU 0 time-sliced by three pods at
~60/25/5 %, GPU 1 shared through MPS by clients at 50 % and 30 % plus a solver step 20 s of every
minute and a pod that never runs anything (debug-0), GPU 2 used 15 % by a process outside
Kubernetes. The whole chain runs: the fake NVML's per-process samples, the sampler, the fake
kubelet and API server, /proc cgroups, the join, the exposition; then a real Prometheus with the
shipped rules answers the node dashboard's "Shared GPUs: who is busy" panel, evaluates the
GpuSharedShareIdle alert, and feeds the cost report, whose busy time follows the measured use.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from exporter.report.cli import main as report_main
from exporter.report.sources import BUSY_MEASURED, MEASURED_USE_SHARE
from tests.dashboards.dashboard_queries import (
    BUILTIN_VARIABLES,
    dashboard_queries,
    grafana_regex_value,
    load_dashboards,
)
from tests.support.exporter_process import ExporterProcess, running_exporter
from tests.support.polling import wait_for
from tests.support.prometheus import RULE_FILES, PrometheusHarness, Sample

pytestmark = pytest.mark.e2e

ARGS = ["--simulate", "shared-gpus", "--collect-interval", "250", "--process-interval", "1000"]
NODE = "shared-node"
PANEL = "Shared GPUs: who is busy"
POINTS = 20
HOUR = 3600.0


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[ExporterProcess, PrometheusHarness]]:
    with running_exporter(ARGS) as exporter, \
            PrometheusHarness([f"127.0.0.1:{exporter.port}"], rule_files=RULE_FILES) as prometheus:
        exporter.wait_healthy()
        yield exporter, prometheus


def by_pod(exporter: ExporterProcess, name: str, gpu: str) -> dict[str, float]:
    return {labels["pod"]: value for labels, value in exporter.samples(name) if labels["gpu"] == gpu}


def by_gpu(exporter: ExporterProcess, name: str) -> dict[str, float]:
    return {labels["gpu"]: value for labels, value in exporter.samples(name)}


def test_each_pod_on_a_shared_gpu_shows_its_own_utilization(node: tuple[ExporterProcess, PrometheusHarness]) -> None:
    exporter, _ = node
    pods = {"chat-api-0", "embedder-0", "notebook-0"}
    wait_for(lambda: set(by_pod(exporter, "DCGM_EXP_CONTAINER_SM_UTIL", "0")) == pods
             and all(by_pod(exporter, "DCGM_EXP_CONTAINER_SM_UTIL", "0").values())
             and "team" in exporter.samples("DCGM_EXP_CONTAINER_SM_UTIL")[0][0], 30.0,
             "per-pod SM utilization of the time-sliced GPU, with teams")

    # Time-sliced GPU: each pod its own load; the GPU is busy for about the sum of theirs.
    sm = by_pod(exporter, "DCGM_EXP_CONTAINER_SM_UTIL", "0")
    assert 50 <= sm["chat-api-0"] <= 70 and 17 <= sm["embedder-0"] <= 33 and 1 <= sm["notebook-0"] <= 9, sm
    [chat] = [labels for labels, _ in exporter.samples("DCGM_EXP_CONTAINER_SM_UTIL")
              if labels.get("pod") == "chat-api-0"]
    assert (chat["namespace"], chat["container"], chat["team"], chat["modelName"]) == (
        "inference", "server", "serving", "NVIDIA H100 80GB HBM3")
    assert by_pod(exporter, "DCGM_EXP_CONTAINER_DEC_UTIL", "0")["chat-api-0"] > 0  # it decodes video
    assert by_pod(exporter, "DCGM_EXP_CONTAINER_MEM_UTIL", "0")["chat-api-0"] > 0
    device = by_gpu(exporter, "DCGM_FI_DEV_GPU_UTIL")
    assert abs(device["0"] - sum(sm.values())) <= 15, (device, sm)  # instant reading vs 1 s averages

    # MPS: the clients' kernels overlap, so their figures add up to more than the GPU's busy time.
    mps = by_pod(exporter, "DCGM_EXP_CONTAINER_SM_UTIL", "1")
    assert set(mps) == {"sim-a-0", "sim-b-0", "solver-0", "debug-0"}
    assert (mps["sim-a-0"], mps["sim-b-0"], mps["debug-0"]) == (50.0, 30.0, 0.0), mps
    assert device["1"] < sum(mps.values())

    # The GPU no pod holds: a host process's use is the share no container accounts for.
    unattributed = by_gpu(exporter, "DCGM_EXP_UNATTRIBUTED_SM_UTIL")
    assert unattributed == {"0": 0.0, "1": 0.0, "2": 15.0}
    assert by_pod(exporter, "DCGM_EXP_CONTAINER_SM_UTIL", "2") == {}

    # The families move with the workloads: chat-api-0's noisy load gives new values read after read.
    seen = {sm["chat-api-0"]}
    wait_for(lambda: seen.add(by_pod(exporter, "DCGM_EXP_CONTAINER_SM_UTIL", "0")["chat-api-0"]) or len(seen) >= 3,
             20.0, "chat-api-0's utilization to change between process reads")
    assert not [labels for labels, _ in exporter.samples("gpu_pod_exporter_field_unsupported")
                if labels["field"].startswith("DCGM_EXP_")]


def panel_queries() -> dict[str, str]:
    """The panel's queries by refId, as Grafana sends them for this node and all of its GPUs."""
    [node_dashboard] = [d for d in load_dashboards().values() if d["uid"] == "gpu-pod-exporter-node"]
    values = {**BUILTIN_VARIABLES, "datasource": "prometheus", "Hostname": NODE, "cluster": "",
              "gpu": grafana_regex_value(["0", "1", "2"])}
    return {query.source.rsplit(" ", 1)[1]: query.resolved(values) for query in dashboard_queries(node_dashboard)
            if query.source.startswith(f"panel {PANEL!r}")}


def grouped(samples: list[Sample], key: str) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = {}
    for sample in samples:
        found.setdefault(sample.labels["gpu"], {})[sample.labels.get(key, "")] = sample.value
    return found


def test_the_who_is_busy_panel_answers_from_prometheus(node: tuple[ExporterProcess, PrometheusHarness]) -> None:
    _, prometheus = node
    queries = panel_queries()
    assert set(queries) == {"A", "B", "C"}
    prometheus.wait_for_targets_up(deadline_s=60)
    pods = grouped(prometheus.wait_for(queries["A"], lambda s: len(s) == 7, deadline_s=60), "pod")
    # Only the two shared GPUs; every holder, busy or not. GPU 2 (held by nobody) is not shared.
    assert set(pods) == {"0", "1"}
    assert set(pods["0"]) == {"chat-api-0", "embedder-0", "notebook-0"}
    assert pods["0"]["chat-api-0"] > pods["0"]["embedder-0"] > pods["0"]["notebook-0"] > 0
    assert set(pods["1"]) == {"sim-a-0", "sim-b-0", "solver-0", "debug-0"} and pods["1"]["debug-0"] == 0
    assert set(grouped(prometheus.query(queries["B"]), "")) == {"0", "1"}  # "used by no pod", shared GPUs only
    whole = grouped(prometheus.query(queries["C"]), "")
    assert set(whole) == {"0", "1"} and whole["1"][""] < sum(pods["1"].values())  # MPS: the stack rises above


def test_the_idle_share_alert_names_the_holder_that_runs_nothing(
        node: tuple[ExporterProcess, PrometheusHarness]) -> None:
    _, prometheus = node
    rules = [rule for path in RULE_FILES for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
             for rule in group["rules"] if rule.get("alert") == "GpuSharedShareIdle"]
    [rule] = rules
    idle = prometheus.wait_for(str(rule["expr"]), lambda s: "debug-0" in {x.labels["pod"] for x in s}, deadline_s=60)
    assert {sample.labels["pod"] for sample in idle} <= {"debug-0", "solver-0"}  # the solver between its steps
    pending = prometheus.wait_for('ALERTS{alertname="GpuSharedShareIdle"}', bool, deadline_s=30)
    assert {(s.labels["pod"], s.labels["alertstate"]) for s in pending} >= {("debug-0", "pending")}  # for: 1h


def test_the_cost_report_splits_busy_time_by_measured_use(node: tuple[ExporterProcess, PrometheusHarness]) -> None:
    """By allocation share every holder of a busy GPU would look busy; by measured use debug-0 is idle
    all along and the research team's notebook carries a small part of GPU 0's busy time."""
    _, prometheus = node
    prometheus.wait_for(MEASURED_USE_SHARE, lambda s: len(s) == 7, deadline_s=60)  # 3 + 4 holders
    [first] = prometheus.query(f"min(timestamp({MEASURED_USE_SHARE}))")
    start = math.ceil(first.value) + 1
    prometheus.wait_for("max(timestamp(namespace_team_model:gpu_busy_fraction:sum))",
                        lambda s: bool(s) and s[0].value >= start + POINTS + 1, deadline_s=120)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = report_main(["--prometheus", prometheus.url, "--start", str(start), "--end", str(start + POINTS),
                            "--step", "1s", "--format", "json"])
    assert code == 0
    report: dict[str, Any] = json.loads(out.getvalue())
    assert report["splits"]["busy"] == BUSY_MEASURED
    point = 1.0 / HOUR
    busy = {row["team"]: row["busy_gpu_hours"] for row in report["rows"]}
    # GPU 0 (~90 % busy): serving's two pods did ~85 of ~90 measured points, research's notebook ~5;
    # by allocation share it would be 2/3 against 1/3.
    assert busy["serving"] > 8 * busy["research"] > 0, busy
    # GPU 1 is busy all along (65-79 %); all of that is physics's (hpc) pods, none of it debug-0's.
    assert busy["physics"] == pytest.approx(0.72 * POINTS * point, abs=0.1 * POINTS * point)
    pods = {pod["pod"]: pod for pod in report["idle_pods"]}
    # Idle: the holder that never runs anything, and the solver between its 20 s steps (every minute).
    assert "debug-0" in pods and set(pods) <= {"debug-0", "solver-0"}, pods
    assert pods["debug-0"]["idle_gpu_hours"] == pytest.approx(POINTS * point / 4)
    assert pods["debug-0"]["busy_gpu_hours"] == 0
