"""Every dashboard panel and every rule expression answers from a real Prometheus scraping the exporter.

Static tests prove that rules and dashboards parse and read names the exporter can produce;
promtool proves the rules against hand-written series. Neither proves that the series the
exporter really serves, scraped by the Prometheus users run (Debian's 2.42), make the panels show
something and the alert conditions hold. Here one Prometheus (1 s scrapes, our rule files loaded)
scrapes a small fleet of simulated nodes, each built to light up part of the rules:

* ``zoo``: tests/fixtures/alert-zoo.yaml, one node with every GPU alert condition (its comments
  list which GPU shows what), MIG, time-slicing and Kubernetes attribution;
* ``storm``: the built-in ``xid-storm`` scenario (100 application Xids in one second);
* ``nodriver``: the built-in ``no-driver`` scenario (NVML cannot load);
* ``kubeless``: Kubernetes attribution pointed at a kubelet socket that does not exist and an API
  server that does not answer;
* ``hang``: the built-in ``hang`` scenario (an NVML call blocks; the watchdog reports the stall);
* a scrape target where nothing listens (the exporter-down alert);
* a stand-in for kube-state-metrics (its own job) with one cordoned and one labelled node, for the
  maintenance helper rule.

Grafana's part is played faithfully: each dashboard's ``label_values`` variables are resolved
against this Prometheus in order, a single-value variable takes the zoo node, a multi-value one
gets all of its values as the regex Grafana sends. Then every panel query (ours and dcgm-exporter's
own dashboard's) and every rule expression (alerts: the ``expr``, not whether the ``for`` elapsed)
must return at least one series.

Two things are substituted, explicitly:

* Grafana's built-ins: ``$__rate_interval`` = 15s (Grafana takes at least 4 scrape intervals;
  15 s holds about 15 scrapes at 1 s), ``$__interval`` = 5s, ``$__range`` = 5m.
* The three "in the time range" team panels sum a recording rule over ``[$__range:5m]``: a
  subquery whose points sit on absolute multiples of 5 minutes, so with a minute of data it is
  empty unless the test happens to cross such a boundary. Their resolution is shortened to 5s
  (``SHORTENED_SUBQUERY``); the test asserts exactly which queries that touched.

Rule windows are not shortened: counters in the zoo step up every second, so ``increase(...[5m])``,
``[10m]`` and ``[1h]`` are non-empty after a few scrapes, and the "first seen" branches
(``X unless X offset 5m``) hold because nothing existed 5 minutes ago. ``GpuPodExporterAbsent``
(``absent(up{...})``) is empty while targets are scraped and is shown to answer by evaluating it at
a time before Prometheus scraped anything. Each alternative of an ``A or B`` rule is also run on its
own; two need minutes of data and run with an explicit substitution (``BRANCH_SUBSTITUTIONS``):
the thermal-violation ``rate(...[5m]) > 0.5`` and the ``time() - last_sample > 120`` staleness.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dashboards.dashboard_queries import (
    BUILTIN_VARIABLES,
    QueryVariable,
    dashboard_queries,
    dcgm_exporter_queries,
    dcgm_exporter_variables,
    grafana_regex_value,
    load_dashboards,
    query_variables,
    substitute,
)
from tests.dashboards.exporter_metrics import EXTERNAL_METRICS, exporter_metric_entries
from tests.dashboards.promql_names import names_in, or_branches, recorded_names, rule_groups
from tests.e2e.exporter_process import REPO_ROOT, ExporterProcess, free_port
from tests.e2e.prometheus_harness import RULE_FILES, PrometheusHarness, Sample, require_prometheus, serve_metrics

pytestmark = pytest.mark.e2e

FIXTURES = REPO_ROOT / "tests" / "fixtures"
ZOO_SCENARIO = FIXTURES / "alert-zoo.yaml"
COUNTERS = FIXTURES / "rules-dashboards-counters.csv"
ZOO_NODE = "zoo-node"
STORM_NODE = "storm-node"

# Grafana built-ins for a Prometheus that scrapes every second (see the module docstring).
GRAFANA_BUILTINS = {**BUILTIN_VARIABLES, "__rate_interval": "15s", "__interval": "5s", "__interval_ms": "5000",
                    "__range": "5m", "__range_s": "300", "__range_ms": "300000"}
# Single-value variables: the value a user picks (the node built to show everything).
CHOSEN = {"Hostname": ZOO_NODE}
SHORTENED_SUBQUERY = (re.compile(r"(\[[^\[\]:]+):5m\]"), r"\1:5s]")
KUBE_STATE_METRICS = """\
# TYPE kube_node_spec_unschedulable gauge
kube_node_spec_unschedulable{node="zoo-node"} 0
kube_node_spec_unschedulable{node="cordoned-node"} 1
# TYPE kube_node_labels gauge
kube_node_labels{node="zoo-node"} 1
kube_node_labels{node="labelled-node",label_maintenance="true"} 1
"""
ANSWER_DEADLINE_S = 75.0


@dataclass(frozen=True)
class Check:
    """One PromQL expression that must return at least one series."""

    where: str  # "<dashboard uid> panel 'X' query A", "rule GpuXidFatal", ...
    expr: str


@dataclass
class Fleet:
    """The running exporters, the extra targets and the Prometheus that scrapes them."""

    prometheus: PrometheusHarness
    exporters: dict[str, ExporterProcess]
    down_target: str
    started_at: float  # Unix time just before Prometheus started
    answers: dict[Check, int] = field(default_factory=dict)  # series count when first non-empty (0: never)

    def instance(self, role: str) -> str:
        return f"127.0.0.1:{self.exporters[role].port}"


def serve_text(text: str) -> AbstractContextManager[str]:
    """A fixed Prometheus text exposition (a stand-in for another exporter); yields host:port."""
    body = text.encode()
    return serve_metrics(lambda: body)


def unreachable_kubeconfig(path: Path) -> Path:
    """A kubeconfig whose API server is a local port where nothing listens."""
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "broken",
              "clusters": [{"name": "broken", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
              "users": [{"name": "broken", "user": {"token": "unused"}}],
              "contexts": [{"name": "broken", "context": {"cluster": "broken", "user": "broken"}}]}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def exporter_arguments(workdir: Path) -> dict[str, list[str]]:
    fast = ["--collect-interval", "200"]
    return {
        "zoo": ["--simulate", str(ZOO_SCENARIO), "--collectors", str(COUNTERS), *fast],
        "storm": ["--simulate", "xid-storm", "--collectors", str(COUNTERS), "--node-name", STORM_NODE, *fast],
        "nodriver": ["--simulate", "no-driver", "--node-name", "nodriver-node", *fast],
        "kubeless": ["--simulate", str(FIXTURES / "attribution-node.yaml"), "--node-name", "kubeless-node",
                     "--kubernetes", "--pod-resources-kubelet-socket", str(workdir / "missing" / "kubelet.sock"),
                     "--kubeconfig", str(unreachable_kubeconfig(workdir / "kubeconfig")), *fast],
        "hang": ["--simulate", "hang", "--node-name", "hang-node", *fast],
    }


# ------------------------------------------------------------------------------------- the queries
def resolve_variables(prometheus: PrometheusHarness, variables: Sequence[QueryVariable],
                      base: Mapping[str, str]) -> dict[str, str]:
    """Grafana's variable resolution against the running Prometheus: each variable in order, its
    selector with the earlier variables filled in; multi-value ones get all values (as a regex)."""
    values = dict(base)
    for variable in variables:
        selector = substitute(variable.selector, values)
        samples = prometheus.wait_for(selector, lambda s, label=variable.label: any(label in x.labels for x in s))
        found = sorted({s.labels[variable.label] for s in samples if variable.label in s.labels})
        if variable.multi:
            values[variable.name] = grafana_regex_value(found)
        else:
            assert CHOSEN[variable.name] in found, (variable.name, found)
            values[variable.name] = CHOSEN[variable.name]
    return values


def shorten_subquery_resolution(expr: str) -> str:
    pattern, replacement = SHORTENED_SUBQUERY
    return pattern.sub(replacement, expr)


def dashboard_checks(prometheus: PrometheusHarness) -> list[Check]:
    """Every query of our dashboards and of dcgm-exporter's, as Grafana would send it here."""
    base = {"datasource": "prometheus", **GRAFANA_BUILTINS}
    checks: list[Check] = []
    for dashboard in load_dashboards().values():
        values = resolve_variables(prometheus, query_variables(dashboard), base)
        checks += [Check(f"{query.dashboard} {query.source}", shorten_subquery_resolution(query.resolved(values)))
                   for query in dashboard_queries(dashboard)]
    values = resolve_variables(prometheus, dcgm_exporter_variables(), base)
    checks += [Check(f"{query.dashboard} {query.source}", query.resolved(values)) for query in dcgm_exporter_queries()]
    return checks


def rule_checks() -> list[Check]:
    """Every alerting and recording rule's expression, except absent(), which is checked on its own."""
    return [Check(f"rule {rule.get('alert') or rule.get('record')}", str(rule["expr"]))
            for _, rule in rule_groups(RULE_FILES) if "absent(" not in str(rule["expr"])]


def answer_all(prometheus: PrometheusHarness, checks: Sequence[Check], deadline_s: float) -> dict[Check, int]:
    """Evaluate the checks until each has returned a series once (or the deadline passes).

    Data arrives over the first seconds (Xids from 5 s, the hang at 5 s, a GPU lost at 10 s, the
    second sample that increase() needs), so unanswered checks are asked again each round.
    """
    answers = dict.fromkeys(checks, 0)
    end = time.monotonic() + deadline_s
    while True:
        for check in [c for c, count in answers.items() if count == 0]:
            answers[check] = len(prometheus.query(check.expr))
        if all(answers.values()) or time.monotonic() >= end:
            return answers
        time.sleep(0.5)


# ------------------------------------------------------------------------------------------ fixture
@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    require_prometheus()
    workdir = tmp_path_factory.mktemp("fleet")
    with ExitStack() as stack:
        exporters: dict[str, ExporterProcess] = {}
        for role, arguments in exporter_arguments(workdir).items():  # all start in parallel
            exporters[role] = ExporterProcess(arguments)
            stack.callback(exporters[role].stop)
        kube_state_metrics = stack.enter_context(serve_text(KUBE_STATE_METRICS))
        for exporter in exporters.values():
            exporter.wait_listening(deadline_s=30)
        down_target = f"127.0.0.1:{free_port()}"
        started_at = time.time()
        prometheus = stack.enter_context(PrometheusHarness(
            [*(f"127.0.0.1:{e.port}" for e in exporters.values()), down_target], rule_files=RULE_FILES,
            extra_jobs={"kube-state-metrics": [kube_state_metrics]}))
        fleet = Fleet(prometheus, exporters, down_target, started_at)
        prometheus.wait_for('up{job="gpu-pod-exporter"} == 1', lambda s: len(s) == len(exporters), deadline_s=30)
        prometheus.wait_for_rules_evaluated()
        # Grafana offers the values present when the dashboard loads: wait until the zoo's pods are
        # known (kubelet and API watched, cost rules evaluated) before resolving the variables.
        prometheus.wait_for("team:gpu_allocated:sum", lambda s: len(s) == 4, deadline_s=30)
        fleet.answers = answer_all(prometheus, [*dashboard_checks(prometheus), *rule_checks()], ANSWER_DEADLINE_S)
        yield fleet


def check_at(fleet: Fleet, where: str) -> Check:
    """The query found at ``where`` (as Grafana sends it here)."""
    [check] = [c for c in fleet.answers if c.where == where]
    return check


def unanswered(fleet: Fleet, prefix: str) -> list[str]:
    return [f"{check.where}: {' '.join(check.expr.split())}" for check, count in fleet.answers.items()
            if check.where.startswith(prefix) and count == 0]


# -------------------------------------------------------------------------------------------- tests
def test_every_dashboard_panel_query_returns_series(fleet: Fleet) -> None:
    ours = [c for c in fleet.answers if c.where.startswith("gpu-pod-exporter-")]
    assert len(ours) > 100  # panels (also in collapsed rows), variables and annotations of three dashboards
    assert unanswered(fleet, "gpu-pod-exporter-") == []


def test_only_the_time_range_panels_needed_a_shorter_subquery_resolution(fleet: Fleet) -> None:
    shortened = sorted(c.where for c in fleet.answers if ":5s]" in c.expr)
    assert shortened == [
        "gpu-pod-exporter-teams panel 'Energy in the time range (selected teams)' query A",
        "gpu-pod-exporter-teams panel 'Energy per team in the time range' query A",
        "gpu-pod-exporter-teams panel 'GPU-hours in the time range (selected namespaces)' query A",
    ]


def test_dcgm_exporter_dashboard_queries_answer_from_every_exporter(fleet: Fleet) -> None:
    assert len([c for c in fleet.answers if c.where.startswith("dcgm-exporter")]) == 10
    assert unanswered(fleet, "dcgm-exporter") == []
    by_source = {c.where.split()[-1]: c for c in fleet.answers if c.where.startswith("dcgm-exporter")}
    temperature, sm_clock = by_source["dcgm_exporter_queries.txt:8"], by_source["dcgm_exporter_queries.txt:12"]
    assert temperature.expr.startswith("DCGM_FI_DEV_GPU_TEMP{instance=~\"(127\\\\.0\\\\.0\\\\.1:")
    # All instances selected: the GPUs of every node with GPUs answer (the zoo, the storm, the hung
    # node, the node without Kubernetes); the MHz clock is scaled to Hz as the dashboard expects.
    at = time.time()
    nodes = {s.labels["Hostname"] for s in fleet.prometheus.query(temperature.expr, at=at)}
    assert nodes == {ZOO_NODE, STORM_NODE, "hang-node", "kubeless-node"}
    scaled = {(s.labels["instance"], s.labels["gpu"]): s.value for s in fleet.prometheus.query(sm_clock.expr, at=at)}
    raw = {(s.labels["instance"], s.labels["gpu"]): s.value
           for s in fleet.prometheus.query("DCGM_FI_DEV_SM_CLOCK", at=at)}
    assert scaled == {key: value * 1e6 for key, value in raw.items()}


def test_every_rule_expression_returns_series(fleet: Fleet) -> None:
    rules = [c for c in fleet.answers if c.where.startswith("rule ")]
    assert len(rules) == len(rule_groups(RULE_FILES)) - 1  # all but GpuPodExporterAbsent, checked below
    assert unanswered(fleet, "rule ") == []


def test_exporter_absent_answers_only_while_no_exporter_is_scraped(fleet: Fleet) -> None:
    [absent] = [str(rule["expr"]) for _, rule in rule_groups(RULE_FILES) if rule.get("alert") == "GpuPodExporterAbsent"]
    assert fleet.prometheus.query(absent) == []
    # Before Prometheus scraped anything, no exporter target existed: that is what the alert reports.
    assert fleet.prometheus.query(absent, at=fleet.started_at - 60) == [Sample({}, 1.0)]


def alert_expr(name: str) -> str:
    [expr] = [str(rule["expr"]) for _, rule in rule_groups(RULE_FILES) if rule.get("alert") == name]
    return expr


def subject(sample: Sample) -> str:
    """What an alert is about: a GPU ("node/gpu", "/MIG instance" added) or a scrape target."""
    labels = sample.labels
    if "gpu" in labels:
        mig = f"/{labels['GPU_I_ID']}" if labels.get("GPU_I_ID") else ""
        return f"{labels['Hostname']}/{labels['gpu']}{mig}"
    return labels["instance"]


# Which GPUs (or targets) each alert expression must select, and no others (see alert-zoo.yaml).
EXPECTED_GPU_SUBJECTS: dict[str, set[str]] = {
    "GpuFallenOffBus": {"zoo-node/7"},
    "GpuUnhealthy": {"zoo-node/4", "zoo-node/5", "zoo-node/6"},
    "GpuXidFatal": {"zoo-node/4", "zoo-node/7"},
    "GpuXidNeedsReset": {"zoo-node/4"},
    "GpuXidBurst": {"zoo-node/4", "zoo-node/6", "storm-node/0", "storm-node/1"},  # zoo GPU 4: Xids every 5 s
    "GpuEccUncorrectableError": {"zoo-node/4"},
    "GpuEccCorrectableErrorsRising": {"zoo-node/4"},
    "GpuRetiredPagesPending": {"zoo-node/5"},
    "GpuRowRemapPending": {"zoo-node/4"},
    "GpuRowRemapFailure": {"zoo-node/6"},
    "GpuTemperatureHigh": {"zoo-node/2"},
    "GpuTemperatureNearSlowdown": {"zoo-node/2"},
    "GpuThermalThrottling": {"zoo-node/2"},
    "GpuPowerBrakeThrottling": {"zoo-node/3"},
    "GpuAllocatedButIdle": {"zoo-node/0", "zoo-node/8/3"},  # a whole GPU and a MIG instance
    "GpuSharedShareIdle": {"zoo-node/10"},  # standby-0 holds a share of the time-sliced GPU and runs nothing
    "GpuMemoryNearlyFull": {"zoo-node/1"},
    "GpuMemoryUnattributed": {"zoo-node/9"},
    "GpuMemoryHeldWithoutAllocation": {"zoo-node/9"},
}
EXPECTED_TARGET_SUBJECTS: dict[str, Callable[[Fleet], set[str]]] = {
    "GpuPodExporterDown": lambda fleet: {fleet.down_target},
    "GpuPodExporterSamplesStale": lambda fleet: {fleet.instance("hang")},
    "GpuPodExporterNvmlDown": lambda fleet: {fleet.instance("nodriver")},
    "GpuPodExporterKubeletDown": lambda fleet: {fleet.instance("kubeless")},
    "GpuPodExporterKubeApiDown": lambda fleet: {fleet.instance("kubeless")},
}


def test_every_alert_is_covered_by_an_expected_subject() -> None:
    alerts = {str(rule["alert"]) for _, rule in rule_groups(RULE_FILES) if "alert" in rule}
    assert alerts == set(EXPECTED_GPU_SUBJECTS) | set(EXPECTED_TARGET_SUBJECTS) | {"GpuPodExporterAbsent"}


@pytest.mark.parametrize("alert", sorted(EXPECTED_GPU_SUBJECTS))
def test_gpu_alert_expression_selects_exactly_the_gpus_built_for_it(fleet: Fleet, alert: str) -> None:
    expected = EXPECTED_GPU_SUBJECTS[alert]
    fleet.prometheus.wait_for(alert_expr(alert), lambda s: {subject(x) for x in s} == expected, 20)


@pytest.mark.parametrize("alert", sorted(EXPECTED_TARGET_SUBJECTS))
def test_exporter_alert_expression_selects_exactly_the_broken_target(fleet: Fleet, alert: str) -> None:
    expected = EXPECTED_TARGET_SUBJECTS[alert](fleet)
    fleet.prometheus.wait_for(alert_expr(alert), lambda s: {subject(x) for x in s} == expected, 20)


def test_xid_storm_counts_every_xid_as_a_burst_but_none_as_fatal(fleet: Fleet) -> None:
    """100 application Xids (31 and 43 on GPU 0, 13 on GPU 1) in one second: a burst, not a reset case."""
    burst = fleet.prometheus.wait_for(f'({alert_expr("GpuXidBurst")}) and on (Hostname) {{Hostname="{STORM_NODE}"}}',
                                      lambda s: len(s) == 2, 20)
    assert {s.labels["gpu"]: s.value for s in burst} == {"0": 60.0, "1": 40.0}
    storm_xids = f'gpu_xid:dcgm_exp_xid_errors:increase5m{{Hostname="{STORM_NODE}"}}'
    assert {(s.labels["gpu"], s.labels["xid"]): s.value for s in fleet.prometheus.query(storm_xids)} == {
        ("0", "31"): 50.0, ("0", "43"): 10.0, ("1", "13"): 40.0}
    for alert in ("GpuXidFatal", "GpuXidNeedsReset"):
        assert STORM_NODE not in {s.labels["Hostname"] for s in fleet.prometheus.query(alert_expr(alert))}
    fired = fleet.prometheus.wait_for(
        f'ALERTS{{alertname="GpuXidBurst", alertstate="firing", Hostname="{STORM_NODE}"}}', lambda s: len(s) == 2, 20)
    assert {s.labels["severity"] for s in fired} == {"warning"}


def test_alerts_without_for_fire_naming_the_gpu_and_its_pod(fleet: Fleet) -> None:
    firing = fleet.prometheus.wait_for(
        'ALERTS{alertstate="firing", alertname=~"GpuFallenOffBus|GpuXidFatal", Hostname="zoo-node"}',
        lambda s: len(s) == 3, 20)
    by_alert = {(s.labels["alertname"], s.labels["gpu"], s.labels.get("xid", "")): s.labels for s in firing}
    assert set(by_alert) == {("GpuFallenOffBus", "7", ""), ("GpuXidFatal", "4", "48"), ("GpuXidFatal", "7", "79")}
    lost = by_alert[("GpuFallenOffBus", "7", "")]
    assert (lost["pod"], lost["namespace"], lost["team"], lost["severity"]) == (
        "lost-trainer-0", "research", "research", "critical")


def test_cost_rules_split_the_zoo_gpus_between_teams(fleet: Fleet) -> None:
    """Whole GPUs count 1, the MIG instance 1, the time-sliced GPU 1/3 per pod (team from pod label first)."""
    allocated = fleet.prometheus.wait_for("team:gpu_allocated:sum", lambda s: len(s) == 4, 20)
    assert {s.labels["team"]: s.value for s in allocated} == pytest.approx({
        "research": 5.0,  # GPUs 0, 1, 7 and MIG instances 1 and 3 of GPU 8
        "vision": 3.0,  # GPUs 2, 3, 4
        "serving": 2 / 3, "search": 1 / 3,  # GPU 10, time-sliced by 3; embed-0's own team label wins
    })
    exclusive = {s.labels["team"]: s.value for s in fleet.prometheus.query("team:gpu_allocated_exclusive:count")}
    assert exclusive == {"research": 5.0, "vision": 3.0}


def test_maintenance_helper_reads_kube_state_metrics(fleet: Fleet) -> None:
    samples = fleet.prometheus.query("hostname:gpu_node_maintenance:max")
    assert {s.labels["Hostname"]: s.value for s in samples} == {"cordoned-node": 1.0, "labelled-node": 1.0}


def test_rules_evaluate_without_errors_on_live_data(fleet: Fleet) -> None:
    groups = fleet.prometheus.rules()
    problems = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"]
    assert problems == []


def stored_metric_names(prometheus: PrometheusHarness) -> set[str]:
    return set(prometheus.api("label/__name__/values"))


PROMETHEUS_OWN = re.compile(r"^(scrape_.*|up|ALERTS|ALERTS_FOR_STATE)$")


def test_every_name_dashboards_and_rules_read_was_scraped_or_is_external(fleet: Fleet) -> None:
    stored = stored_metric_names(fleet.prometheus)
    recorded = recorded_names(RULE_FILES)
    read: dict[str, str] = {}
    for check in fleet.answers:
        for name in names_in(check.expr).metrics:
            read.setdefault(name, check.where)
    for _, rule in rule_groups(RULE_FILES):
        for name in names_in(str(rule["expr"])).metrics:
            read.setdefault(name, f"rule {rule.get('alert') or rule.get('record')}")
    missing = {name: where for name, where in read.items()
               if name not in stored and name not in recorded and name not in EXTERNAL_METRICS}
    assert missing == {}
    # the external names really are somebody else's: Prometheus and the kube-state-metrics stand-in
    assert set(EXTERNAL_METRICS) <= stored


def test_every_name_the_exporters_served_is_in_the_exporters_registry(fleet: Fleet) -> None:
    """The static name checks use the catalog and the owned-metric registry; this proves they are complete."""
    stored = stored_metric_names(fleet.prometheus)
    served = {name for name in stored if not PROMETHEUS_OWN.match(name)} - recorded_names(RULE_FILES) - set(
        EXTERNAL_METRICS)
    assert served - set(exporter_metric_entries()) == set()
    assert len(served) > 50


def test_unhealthy_gpus_table_counts_every_xid_of_the_day(fleet: Fleet) -> None:
    """The table's "Xids (24 h)" column: a code seen for the first time counts too (its total is born at
    1, which increase() alone cannot see), so the GPU with its one Xid 79 shows 1, not 0."""
    column = check_at(fleet, "gpu-pod-exporter-overview panel 'Unhealthy GPUs' query B")
    at = time.time()
    shown = {s.labels["gpu"]: s.value for s in fleet.prometheus.query(column.expr, at=at)
             if s.labels["Hostname"] == ZOO_NODE}
    # Every Xid counter was born during this test, so the last 24 h hold all of it.
    totals = {s.labels["gpu"]: s.value for s in fleet.prometheus.query(
        f'sum by (gpu) (DCGM_EXP_XID_ERRORS_TOTAL{{Hostname="{ZOO_NODE}"}})', at=at)}
    assert set(shown) == {"4", "6", "7"}  # unhealthy GPUs with Xids (GPU 5 has none)
    assert shown == {gpu: totals[gpu] for gpu in shown}
    assert shown["4"] >= 2.0 and shown["7"] == 1.0  # Xids 48 + 63 (recurring); the one Xid 79


def test_overview_idle_count_agrees_with_the_idle_alert(fleet: Fleet) -> None:
    """The "Allocated but idle" stat counts what GpuAllocatedButIdle would fire on: the idle whole GPU
    and the idle MIG instance (MIG instances have no GPU_UTIL; graphics-engine activity decides)."""
    stat = check_at(fleet, "gpu-pod-exporter-overview panel 'Allocated but idle (< 5 %)' query A")
    graph = check_at(fleet, "gpu-pod-exporter-overview panel 'Allocated vs idle devices' query C")
    assert fleet.prometheus.query(stat.expr) == [Sample({}, 2.0)]
    assert fleet.prometheus.query(graph.expr) == [Sample({}, 2.0)]


def wait_for_active_alerts(fleet: Fleet, names: set[str], deadline_s: float = 20.0) -> list[dict[str, Any]]:
    """/api/v1/alerts once every alert in ``names`` is pending or firing (and no other)."""
    end = time.monotonic() + deadline_s
    while True:
        alerts = fleet.prometheus.alerts()
        active = {str(a["labels"]["alertname"]) for a in alerts}
        if active >= names or time.monotonic() >= end:
            assert active == names, sorted(names - active)
            return alerts
        time.sleep(0.5)


def test_every_alert_is_active_with_its_annotations_filled_from_live_labels(fleet: Fleet) -> None:
    """Pending (waiting for `for`) or firing, each alert's summary and description render from the
    exporter's real labels: no template error, no missing value, the GPU or target named."""
    expected = set(EXPECTED_GPU_SUBJECTS) | set(EXPECTED_TARGET_SUBJECTS)
    alerts = wait_for_active_alerts(fleet, expected)
    for alert in alerts:
        labels, annotations = alert["labels"], alert["annotations"]
        text = " ".join(annotations.values())
        assert "error expanding template" not in text and "<no value>" not in text, alert
        named = f"GPU {labels['gpu']}" if "gpu" in labels else labels["instance"]
        assert named in annotations["summary"] and named in annotations["description"], alert
        if labels.get("GPU_I_ID"):
            assert f"MIG {labels['GPU_I_PROFILE']} instance {labels['GPU_I_ID']}" in annotations["description"]
        if labels.get("pod"):
            assert f"{labels['namespace']}/{labels['pod']}" in annotations["description"], alert



# Branches of "A or B" rules whose condition needs more time than this test has, run with an explicit
# substitution (the only ones; the test fails if a substitution no longer applies):
# - rate(THERMAL_VIOLATION[5m]) > 0.5: rate() divides by the whole 5 minutes, so a GPU throttled
#   100 % of the time passes 0.5 only after 2.5 minutes of data; a 10 s window shows the same condition.
# - time() - last_sample > 120: the hung exporter stopped sampling 5 s after start; a 5 s threshold
#   shows that the branch picks exactly the exporter whose sampler stopped.
BRANCH_SUBSTITUTIONS: dict[str, tuple[str, str]] = {
    "GpuThermalThrottling": ("[5m])", "[10s])"),
    "GpuPodExporterSamplesStale": ("> 120", "> 5"),
}


def test_every_alternative_of_every_rule_can_hold(fleet: Fleet) -> None:
    """Each branch of a rule's top-level `or` answers on its own, so no alternative is dead code
    (e.g. device_up == 0 for a lost GPU, the first-seen branches for counters born non-zero)."""
    branches: list[tuple[str, str]] = []
    for _, rule in rule_groups(RULE_FILES):
        name = str(rule.get("alert") or rule.get("record"))
        alternatives = or_branches(str(rule["expr"]))
        if len(alternatives) < 2:
            continue
        for branch in alternatives:
            old, new = BRANCH_SUBSTITUTIONS.get(name, ("", ""))
            branches.append((name, branch.replace(old, new) if old and old in branch else branch))
    used = {name for name, branch in branches if name in BRANCH_SUBSTITUTIONS
            and BRANCH_SUBSTITUTIONS[name][1] in branch}
    assert used == set(BRANCH_SUBSTITUTIONS)
    assert len(branches) >= 12
    answers = answer_all(fleet.prometheus, [Check(f"rule {name}", branch) for name, branch in branches], 20)
    assert [f"{check.where}: {check.expr}" for check, count in answers.items() if count == 0] == []
    [stale] = [branch for name, branch in branches if name == "GpuPodExporterSamplesStale" and "> 5" in branch]
    assert {subject(s) for s in fleet.prometheus.query(stale)} == {fleet.instance("hang")}
