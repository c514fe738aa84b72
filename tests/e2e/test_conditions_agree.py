"""For every built-in scenario, the node page, ``top`` and the shipped alerts name the same conditions.

Each scenario in simulator/scenarios/ runs as the Helm chart's container would run it (its args and
env exactly, as tests/e2e/test_default_install.py starts them), installed with the one non-default
value some rules need, ``processAttribution.enabled=true`` (GpuMemoryUnattributed and
GpuSharedShareIdle read per-process memory and utilisation). One real Prometheus (Debian's 2.42 or
whichever ``prometheus_harness`` finds) scrapes all of them every second with the chart's
PrometheusRule groups loaded.

Compared, as sets of (scenario, GPU or "node", alert):

* the page: every ``conditions`` entry of ``/gpus.json`` (per GPU, and the node's own);
* ``top``: the conditions of its model's rows (``exporter.top.model.gpu_rows``) fed by an
  ``ExporterSource`` on each exporter, and by a ``PrometheusSource`` on the Prometheus;
* the alerts: each alerting rule's expression, as shipped (read from the installed rule file),
  evaluated through the Prometheus query API. Substituted, explicitly: a ``for:`` duration is not
  waited out (5 to 30 minutes would not make the condition more true; promtool tests the durations,
  deploy/rules/tests), so an alert counts when its expression returns the GPU or target.

An alert on a MIG instance or a pod counts for its GPU (the page lists conditions per GPU, naming the
instance or pod in the reason). Alerts that are not about a GPU or a node's exporter are listed in
``NOT_A_GPU_OR_NODE_CONDITION`` with the reason. Scenarios change over time (an Xid at 5 s, a GPU
lost at 30 s, memory errors at 45 and 60 s), so the sets are compared from ``SETTLE_S`` after the
exporters listen (after the last event of the first minute), round after round, until every scenario
has agreed in one round (or the deadline fails the test, printing each difference).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.conditions import CONDITIONS
from exporter.prometheus.client import Connection
from exporter.top.model import NodeView, gpu_rows
from exporter.top.sources import ExporterSource, PrometheusSource
from tests.dashboards.promql_names import rule_groups
from tests.e2e.installed import container_environment, helm_install
from tests.support.exporter_process import ExporterProcess
from tests.support.paths import REPO_ROOT
from tests.support.prometheus import PrometheusHarness, require_prometheus

pytestmark = pytest.mark.e2e

SCENARIOS = sorted(path.stem for path in (REPO_ROOT / "simulator" / "scenarios").glob("*.yaml"))
PROCESS_ATTRIBUTION = {"processAttribution": {"enabled": True}}
NOT_A_GPU_OR_NODE_CONDITION = {
    "GpuPodExporterDown": "Prometheus cannot scrape the exporter: there is no page to show it on (the page "
                          "and top show the exporter gone themselves)",
    "GpuPodExporterAbsent": "no exporter is scraped at all",
    "GpuQuotaMostlyUnused": "about a namespace's quota over a week, not a GPU",
}
SETTLE_S = 62.0  # memory-errors.yaml: Xids 48 and 63 on GPU 1 at 60 s; gpu-lost.yaml loses GPU 3 at 30 s
DEADLINE_S = 60.0

Subject = tuple[str, str, str]  # (scenario, GPU index or "node", alert name)


@dataclass
class Node:
    scenario: str
    exporter: ExporterProcess

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.exporter.port}"


@dataclass
class Fleet:
    nodes: list[Node]
    prometheus: PrometheusHarness
    alerts: dict[str, str]  # alert name -> expression, as installed
    listening_since: float


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    require_prometheus()
    workdir = tmp_path_factory.mktemp("conditions")
    install = helm_install(PROCESS_ATTRIBUTION)
    rule_file = install.write_rule_file(workdir / "rules.yaml")
    alerts = {str(rule["alert"]): str(rule["expr"]) for _, rule in rule_groups([rule_file]) if "alert" in rule}
    with ExitStack() as stack:
        nodes = []
        for scenario in SCENARIOS:
            args, env = install.launch(workdir / scenario, f"{scenario}-node")
            exporter = ExporterProcess([*args, "--simulate", scenario], env=container_environment(env),
                                       inherit_environment=False)
            stack.callback(exporter.stop)
            nodes.append(Node(scenario, exporter))
        prometheus = PrometheusHarness([node.instance for node in nodes], rule_files=[rule_file])
        stack.callback(prometheus.stop)
        prometheus.launch()
        prometheus.wait_ready()
        for node in nodes:
            node.exporter.wait_listening(deadline_s=90)
        yield Fleet(nodes, prometheus, alerts, time.monotonic())


def page_subjects(fleet: Fleet) -> tuple[set[Subject], dict[str, str]]:
    """What each exporter's /gpus.json shows, and GPU UUID / node name -> scenario (to read top's views)."""
    shown: set[Subject] = set()
    where: dict[str, str] = {}
    for node in fleet.nodes:
        response = node.exporter.get("/gpus.json")
        assert response.status == 200, (node.scenario, response.text)
        view = json.loads(response.body)
        # The chart's collect interval (1000 ms) reached the page, with the bound derived from it.
        assert (view["sampling_interval_s"], view["stale_after_s"]) == (1.0, 3.0), node.scenario
        where[node.instance] = node.scenario
        if view.get("node"):
            where[str(view["node"])] = node.scenario
        shown |= {(node.scenario, "node", c["alert"]) for c in view["conditions"]}
        for gpu in view["gpus"]:
            where[gpu["uuid"]] = node.scenario
            shown |= {(node.scenario, str(gpu["gpu"]), c["alert"]) for c in gpu["conditions"]}
    return shown, where


def top_subjects(views: list[NodeView], where: dict[str, str], scenario: str | None = None) -> set[Subject]:
    shown: set[Subject] = set()
    for view in views:
        owner = scenario or where.get(view.node, f"? {view.node}")
        shown |= {(owner, "node", str(c["alert"])) for c in view.view.get("conditions", [])}
    for row in gpu_rows(views):
        owner = scenario or where.get(row.uuid, f"? {row.uuid}")
        shown |= {(owner, str(row.gpu), condition.alert) for condition in row.conditions}
    return shown


def alert_subjects(fleet: Fleet) -> set[Subject]:
    by_instance = {node.instance: node.scenario for node in fleet.nodes}
    firing: set[Subject] = set()
    for alert, expr in fleet.alerts.items():
        if alert in NOT_A_GPU_OR_NODE_CONDITION:
            continue
        for sample in fleet.prometheus.query(expr):
            scenario = by_instance.get(sample.labels.get("instance", ""), "?")
            firing.add((scenario, sample.labels.get("gpu", "node"), alert))
    return firing


def test_every_alert_is_a_condition_or_listed_as_none() -> None:
    rule_file = Path(REPO_ROOT / "deploy" / "rules" / "gpu-pod-exporter-alerts.yaml")
    alerts = {str(rule["alert"]) for _, rule in rule_groups([rule_file]) if "alert" in rule}
    assert alerts - set(NOT_A_GPU_OR_NODE_CONDITION) == {condition.alert for condition in CONDITIONS}


def test_page_top_and_alerts_name_the_same_conditions_in_every_scenario(fleet: Fleet) -> None:
    while time.monotonic() < fleet.listening_since + SETTLE_S:
        time.sleep(0.5)
    prometheus_top = PrometheusSource(Connection(fleet.prometheus.url, timeout_s=20.0, retries=1))
    exporter_tops = {node.scenario: ExporterSource(Connection(url=f"http://{node.instance}/metrics"))
                     for node in fleet.nodes}
    agreed: set[str] = set()
    differences: dict[str, dict[str, set[Subject]]] = {}
    end = time.monotonic() + DEADLINE_S
    rounds = 0
    while True:
        rounds += 1
        page, where = page_subjects(fleet)
        top_exporters: set[Subject] = set()
        for scenario, source in exporter_tops.items():
            reading = source.read()
            assert not reading.errors, reading.errors
            top_exporters |= top_subjects(reading.nodes, where, scenario)
        reading = prometheus_top.read()
        top_prometheus = top_subjects(reading.nodes, where)
        firing = alert_subjects(fleet)
        seen = {"page": page, "top (exporters)": top_exporters, "top (Prometheus)": top_prometheus,
                "alerts": firing}
        for scenario in SCENARIOS:
            mine = {name: {s for s in subjects if s[0] == scenario} for name, subjects in seen.items()}
            if all(subjects == mine["alerts"] for subjects in mine.values()):
                agreed.add(scenario)
                differences.pop(scenario, None)
            elif scenario not in agreed:
                differences[scenario] = mine
        if len(agreed) == len(SCENARIOS) or time.monotonic() > end:
            break
        time.sleep(1.0)
    report = []
    for scenario, mine in sorted(differences.items()):
        report.append(f"{scenario}:")
        for name, subjects in mine.items():
            report.append(f"  {name:18} {sorted((gpu, alert) for _, gpu, alert in subjects)}")
    print(f"\n{len(agreed)} of {len(SCENARIOS)} scenarios agreed within {rounds} rounds; the alerts of the last:")
    for scenario in SCENARIOS:
        print(f"  {scenario:22} {sorted((gpu, alert) for s, gpu, alert in firing if s == scenario)}")
    assert not differences, "\n".join(report)
    # The comparison is not vacuous: the zoo shows one GPU per GPU alert.
    assert len({alert for scenario, _, alert in firing if scenario == "alert-zoo"}) >= 19
