"""A default install feeds every shipped alert, recording rule and dashboard panel.

Nothing here comes from tests/fixtures. Everything the exporter and Prometheus get comes from what a
user applies (tests/e2e/installed.py):

* the Helm chart rendered by Helm's own engine with its **default values**, for a cluster that serves
  the Prometheus Operator's APIs; ``deploy/manifests/`` is checked to carry exactly the same exporter
  arguments, environment, counters CSV, rule groups and dashboards, so every result below holds for it
  too (``test_the_plain_manifests_install_exactly_what_the_chart_installs``);
* each exporter runs with exactly the rendered container's ``args`` and ``env`` (the counters CSV read
  from the rendered ConfigMap's projected copy, ``NODE_NAME`` set as the kubelet sets it), plus
  ``--simulate <built-in scenario>`` and a listen address of its own (one machine, many "pods");
* Prometheus loads exactly the rendered PrometheusRule groups; the dashboards are the rendered
  Grafana ConfigMaps' JSON.

Two Prometheus servers per engine (Debian's 2.42 and Prometheus 3, ``prometheus_harness.ENGINES``) scrape
them, every second, all launched before the exporters listen; every test taking ``deployment`` runs once
per engine, and the tests at the end compare the engines query by query:

* **healthy**: only the ``default`` scenario's node (8 H100s, training, inference, a sweep, pods and
  teams). There, every dashboard query must answer (c), except panels listed below with a reason:
  event panels a healthy node leaves empty, and the panels that need process attribution, which the
  chart leaves off by default (``hostPID``); each listed panel must answer on the fault side instead.
* **faults**: nodes built to trip the alerts: the built-in ``alert-zoo`` (one GPU per GPU alert),
  ``xid-storm``, ``no-driver``, ``hang``; the ``default`` and ``shared-gpus`` scenarios installed with
  the one non-default value some shipped rules need, ``processAttribution.enabled=true``; a scrape target
  where nothing listens; a kube-state-metrics stand-in for the maintenance helper rule. Every alert
  must become active there (b), each on exactly the GPUs or targets built for it; alerts without
  ``for:`` must fire. Nodes without a ``kubernetes:`` section run with the chart's kubelet socket and
  in-cluster API settings, which do not exist on this machine: the kubelet and API alerts fire there,
  as on a node whose kubelet socket is not mounted.

(a) Every metric name that a shipped alert, recording rule or dashboard query reads must be served by
at least one exporter; the test prints the name -> scenario table. Only the process-attribution
names (``PROCESS_ATTRIBUTION_NAMES``) may need the non-default value.

Substituted, explicitly: scrape and rule evaluation every 1 s (the ServiceMonitor says 15 s); an
alert with ``for:`` counts as shown when it is pending (its condition holds; waiting out 5 to 30
minutes would not make it more true: promtool tests the ``for:`` durations, deploy/rules/tests);
Grafana's built-ins ``$__rate_interval`` = 15s, ``$__interval`` = 5s, ``$__range`` = 5m; the three
"in the time range" team panels sum a recording rule over ``[$__range:5m]``, a subquery whose points
sit on absolute 5-minute boundaries, so their resolution is shortened to 5s (``SHORTENED_SUBQUERY``;
the test asserts which queries that touched); ``GpuPodExporterAbsent`` (``absent(up{...})``) is
evaluated at a time before Prometheus scraped anything; two ``or`` branches that need minutes of data
run with an explicit substitution (``BRANCH_SUBSTITUTIONS``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.dashboards.dashboard_queries import (
    BUILTIN_VARIABLES,
    DashboardQuery,
    QueryVariable,
    dashboard_queries,
    dcgm_exporter_queries,
    dcgm_exporter_variables,
    grafana_regex_value,
    query_variables,
    substitute,
)
from tests.dashboards.exporter_metrics import EXTERNAL_METRICS, exporter_metric_entries
from tests.dashboards.promql_names import names_in, or_branches, recorded_names, rule_groups
from tests.e2e.installed import Install, container_environment, helm_install, manifests_install
from tests.support.exporter_process import ExporterProcess
from tests.support.polling import settle
from tests.support.ports import free_port
from tests.support.prometheus import (
    ENGINES,
    PrometheusHarness,
    Sample,
    engine_version,
    prometheus_engine,
    require_prometheus,
    serve_metrics,
)

pytestmark = pytest.mark.e2e

PROCESS_ATTRIBUTION = {"processAttribution": {"enabled": True}}


@dataclass(frozen=True)
class Node:
    """One simulated GPU node running the installed exporter."""

    role: str
    scenario: str  # a built-in scenario (simulator/scenarios/)
    hostname: str  # spec.nodeName; scenarios with a kubernetes: section simulate a node of that name
    process_attribution: bool = False  # installed with processAttribution.enabled=true

    @property
    def label(self) -> str:
        return self.scenario + (" (processAttribution.enabled=true)" if self.process_attribution else "")


HEALTHY = Node("healthy", "default", "hgx-node-01")
ZOO = Node("zoo", "alert-zoo", "zoo-node")
STORM = Node("storm", "xid-storm", "storm-node")
NODRIVER = Node("nodriver", "no-driver", "nodriver-node")
HANG = Node("hang", "hang", "hang-node")
ATTRIBUTED = Node("attributed", "default", "hgx-node-01", process_attribution=True)
SHARED = Node("shared", "shared-gpus", "shared-node", process_attribution=True)
FAULT_NODES = (ZOO, STORM, NODRIVER, HANG, ATTRIBUTED, SHARED)

# Grafana built-ins for a Prometheus that scrapes every second (see the module docstring).
GRAFANA_BUILTINS = {**BUILTIN_VARIABLES, "__rate_interval": "15s", "__interval": "5s", "__interval_ms": "5000",
                    "__range": "5m", "__range_s": "300", "__range_ms": "300000"}
SHORTENED_SUBQUERY = (re.compile(r"(\[[^\[\]:]+):5m\]"), r"\1:5s]")
KUBE_STATE_METRICS = """\
# TYPE kube_node_spec_unschedulable gauge
kube_node_spec_unschedulable{node="zoo-node"} 0
kube_node_spec_unschedulable{node="cordoned-node"} 1
# TYPE kube_node_labels gauge
kube_node_labels{node="zoo-node"} 1
kube_node_labels{node="labelled-node",label_maintenance="true"} 1
# TYPE kube_resourcequota gauge
kube_resourcequota{namespace="research",resource="requests.nvidia.com/gpu",resourcequota="gpus",type="hard"} 64
kube_resourcequota{namespace="research",resource="requests.nvidia.com/gpu",resourcequota="gpus",type="used"} 3
kube_resourcequota{namespace="ml-training",resource="requests.nvidia.com/gpu",resourcequota="gpus",type="hard"} 64
kube_resourcequota{namespace="ml-training",resource="requests.cpu",resourcequota="gpus",type="hard"} 256
"""
# The quota rules (group gpu-pod-exporter.gpu-quota) look back a week: their expressions are checked
# here over the last minute, without the week-old offset (promtool tests the week:
# deploy/rules/tests/gpu-quota.test.yaml).
WEEK_SUBSTITUTIONS = (("[7d]", "[1m]"), (" offset 7d", ""))


def live(expr: str) -> str:
    for old, new in WEEK_SUBSTITUTIONS:
        expr = expr.replace(old, new)
    return expr
ANSWER_DEADLINE_S = 90.0



@dataclass(frozen=True)
class Quiet:
    """A panel the healthy default node may leave empty: why, and the fault node that shows it."""

    kind: str  # EVENT: empty on a healthy node; TIMED: only while the scenario's event runs; PROCESS: needs
    reason: str  # process attribution (processAttribution.enabled, off by default: hostPID, host /proc)
    shown_on: str = ZOO.hostname


EVENT, TIMED, PROCESS = "event", "timed", "process attribution"
_UNHEALTHY = Quiet(EVENT, "no GPU is unhealthy")
_NO_ALERT = Quiet(EVENT, "no alert fires")
_NO_MIG = Quiet(EVENT, "the default node has no MIG-partitioned GPU (the zoo's GPU 8 has two instances)")
_MEMORY_BY_CONTAINER = Quiet(PROCESS, "GPU memory per container comes from process attribution",
                             ATTRIBUTED.hostname)
_THERMAL_WINDOW = Quiet(TIMED, "default.yaml's GPU 2 is in HW thermal slowdown from 90 s for 20 s (every 10 min)")
OVERVIEW, NODE, TEAMS = "gpu-pod-exporter-overview", "gpu-pod-exporter-node", "gpu-pod-exporter-teams"
# Every panel query a healthy default install may leave empty; each must answer on the fault side.
# (The overview has two panels titled 'Unhealthy GPUs': a stat, then the table, whose queries carry "(#2)".)
QUIET_ON_A_HEALTHY_NODE: dict[tuple[str, str], Quiet] = {
    (OVERVIEW, "panel 'Unhealthy GPUs' query A (#2)"): _UNHEALTHY,
    **{(OVERVIEW, f"panel 'Unhealthy GPUs' query {ref}"): _UNHEALTHY for ref in "BCDEF"},
    (OVERVIEW, "panel 'Unhealthy GPUs by reason' query A"): _UNHEALTHY,
    (OVERVIEW, "panel 'Xid events (per 5 minutes)' query A"): Quiet(EVENT, "no Xid happened"),
    **{(OVERVIEW, f"panel 'ECC errors (new, per interval)' query {ref}"): Quiet(EVENT, "no new ECC error")
       for ref in "ABC"},
    (OVERVIEW, "panel 'Thermal and power-brake throttling' query A"): _THERMAL_WINDOW,
    (OVERVIEW, "panel 'Thermal and power-brake throttling' query B"): Quiet(EVENT, "no power brake"),
    (OVERVIEW, "panel 'Exporter targets up' query B"): Quiet(EVENT, "no exporter is down"),
    (OVERVIEW, "panel 'Allocated vs idle devices' query C"): Quiet(
        TIMED, "allocated and idle: only the sweep on GPU 5 in its first 30 s (it ramps from 0 %)"),
    (OVERVIEW, "panel 'Aggregate framebuffer memory' query C"): Quiet(
        PROCESS, "memory held by processes of no pod comes from process attribution"),
    (OVERVIEW, "annotation 'Firing GPU alerts'"): _NO_ALERT,
    (NODE, "panel 'Memory by container' query A"): _MEMORY_BY_CONTAINER,
    (NODE, "panel 'Memory by container' query B"): _MEMORY_BY_CONTAINER,
    (NODE, "panel 'Memory by container' query C"): _MEMORY_BY_CONTAINER,  # each container's peak
    **{(NODE, f"panel 'Clock event (throttle) reasons active' query {ref}"): Quiet(
        EVENT, f"no GPU is held by {reason}") for ref, reason in
       (("A", "a power cap"), ("C", "sync boost"), ("D", "SW thermal slowdown"), ("F", "the power brake"))},
    (NODE, "panel 'Clock event (throttle) reasons active' query B"): _THERMAL_WINDOW,
    (NODE, "panel 'Clock event (throttle) reasons active' query E"): _THERMAL_WINDOW,
    (NODE, "panel 'Clock events started (per interval)' query A"): _THERMAL_WINDOW,
    (NODE, "panel 'Xid timeline' query A"): Quiet(EVENT, "no Xid happened"),
    (NODE, "panel 'Xid timeline' query B"): Quiet(EVENT, "no Xid happened"),
    (NODE, "panel 'Pending retirement, remap and failures' query A"): Quiet(
        EVENT, "H100s remap rows; page retirement is pre-Ampere (the zoo's GPU 5 is a V100)"),
    (NODE, "panel 'MIG instance memory used' query A"): _NO_MIG,
    (NODE, "panel 'MIG instance activity' query A"): _NO_MIG,
    (NODE, "panel 'MIG instances' query A"): _NO_MIG,
    (NODE, "panel 'MIG instances' query B"): _NO_MIG,
    (NODE, "annotation 'Firing GPU alerts'"): _NO_ALERT,
    (NODE, "panel 'Shared GPUs: who is busy' query A"): Quiet(
        PROCESS, "per-container utilisation comes from process attribution", ATTRIBUTED.hostname),
    (NODE, "panel 'Shared GPUs: who is busy' query B"): Quiet(
        PROCESS, "utilisation of processes of no pod on a shared GPU: process attribution", SHARED.hostname),
    (TEAMS, "panel 'Top pods by GPU memory' query A"): _MEMORY_BY_CONTAINER,
    (TEAMS, "panel 'GPU memory per namespace' query A"): _MEMORY_BY_CONTAINER,
    (TEAMS, "annotation 'Firing GPU alerts'"): _NO_ALERT,
}
NEEDS_PROCESS_ATTRIBUTION = {panel for panel, quiet in QUIET_ON_A_HEALTHY_NODE.items() if quiet.kind == PROCESS}
PROCESS_ATTRIBUTION_NAMES = {"DCGM_EXP_CONTAINER_FB_USED", "DCGM_EXP_CONTAINER_FB_USED_PEAK",
                             "DCGM_EXP_UNATTRIBUTED_FB_USED",
                             "DCGM_EXP_CONTAINER_SM_UTIL", "DCGM_EXP_UNATTRIBUTED_SM_UTIL"}


@dataclass(frozen=True)
class Check:
    """One PromQL expression that must return at least one series."""

    dashboard: str  # dashboard uid, "rule" or "dcgm-exporter"
    source: str  # "panel 'X' query A", "GpuXidFatal", ...
    node: str  # the node chosen for single-value variables ("" where none)
    expr: str

    @property
    def where(self) -> str:
        node = f"[{self.node}]" if self.node else ""
        return f"{self.dashboard}{node} {self.source}"

    @property
    def panel(self) -> tuple[str, str]:
        return self.dashboard, self.source


@dataclass
class Side:
    """One Prometheus, the exporters it scrapes, and what its checks answered."""

    prometheus: PrometheusHarness
    exporters: dict[str, ExporterProcess]
    nodes: dict[str, Node]
    answers: dict[Check, int] = field(default_factory=dict)  # series count when first non-empty (0: never)

    def instance(self, role: str) -> str:
        return f"127.0.0.1:{self.exporters[role].port}"

    def unanswered(self, prefix: str) -> list[str]:
        return [f"{check.where}: {' '.join(check.expr.split())}" for check, count in self.answers.items()
                if check.where.startswith(prefix) and count == 0]


@dataclass
class Deployment:
    """What one Prometheus engine (2.42 or 3.x) sees of the install: its healthy and fault sides."""

    engine: str  # "2.42" or "3" (prometheus_harness.ENGINES)
    version: str  # what that prometheus --version says
    install: Install
    rule_file: Path
    healthy: Side
    faults: Side
    down_target: str
    started_at: float  # Unix time just before the Prometheus servers started


@dataclass
class Installed:
    """The exporters, scraped at the same time by a healthy/faults pair of Prometheus servers per engine."""

    deployments: dict[str, Deployment]  # engine -> what it saw (an engine missing locally is absent)
    exporters: dict[str, ExporterProcess]
    scrape_requests: list[dict[str, str]]  # the headers of each scrape of the kube-state-metrics stand-in


# ------------------------------------------------------------------------------------- the queries
OPTIONAL_LABELS = {"cluster"}  # absent where Prometheus holds one cluster (docs/fleet.md)


def resolve_variables(prometheus: PrometheusHarness, variables: Sequence[QueryVariable],
                      base: Mapping[str, str], chosen: str | Mapping[str, str]) -> dict[str, str]:
    """Grafana's variable resolution against the running Prometheus: each variable in order, its
    selector with the earlier variables filled in; multi-value ones get all values (as a regex), the
    single-value ones what ``chosen`` picks (a node name for Hostname, or a value per variable name).

    A label that no series carries (``OPTIONAL_LABELS``: ``cluster`` on a single-cluster Prometheus)
    gets Grafana's "None" option, whose value is "".
    """
    values = dict(base)
    for variable in variables:
        selector = substitute(variable.selector, values)
        label = substitute(variable.label, values)  # ${host_label}: the node label's spelling
        if label in OPTIONAL_LABELS:
            samples = prometheus.wait_for(selector, bool)
        else:
            samples = prometheus.wait_for(selector, lambda s, label=label: any(label in x.labels for x in s))
        found = sorted({s.labels[label] for s in samples if label in s.labels})
        if not found and not variable.multi:
            values[variable.name] = ""
        elif variable.multi:
            values[variable.name] = grafana_regex_value(found)
        else:
            pick = chosen if isinstance(chosen, str) else chosen[variable.name]
            assert pick in found, (variable.name, found)
            values[variable.name] = pick
    return values


def shorten_subquery_resolution(expr: str) -> str:
    pattern, replacement = SHORTENED_SUBQUERY
    return pattern.sub(replacement, expr)


def single_value_variables(dashboard: dict[str, Any]) -> bool:
    """Whether the dashboard shows one node (a single-value variable other than the optional cluster)."""
    return any(not variable.multi and variable.label not in OPTIONAL_LABELS for variable in query_variables(dashboard))


def dashboard_checks(prometheus: PrometheusHarness, dashboards: Sequence[dict[str, Any]], chosen: str,
                     only: Collection[tuple[str, str]] | None = None) -> list[Check]:
    """Every query of the installed dashboards (or ``only`` these panels), as Grafana would send it here,
    with ``chosen`` picked for a single-value node variable."""
    base = {"datasource": "prometheus", **GRAFANA_BUILTINS}
    checks: list[Check] = []
    for dashboard in dashboards:
        queries = dashboard_queries(dashboard)
        if only is not None:
            queries = [query for query, source in zip(queries, distinct_sources(queries), strict=True)
                       if (query.dashboard, source) in only]
        if not queries:
            continue
        values = resolve_variables(prometheus, query_variables(dashboard), base, chosen)
        label = chosen if single_value_variables(dashboard) else ""
        checks += [Check(query.dashboard, source, label, shorten_subquery_resolution(query.resolved(values)))
                   for query, source in zip(queries, distinct_sources(queries), strict=True)]
    return checks


def distinct_sources(queries: Sequence[DashboardQuery]) -> list[str]:
    """Each query's source, with " (#2)", " (#3)" added where panels of one dashboard share a title."""
    seen: dict[str, int] = {}
    sources = []
    for query in queries:
        seen[query.source] = seen.get(query.source, 0) + 1
        sources.append(query.source + (f" (#{seen[query.source]})" if seen[query.source] > 1 else ""))
    return sources


def dcgm_exporter_checks(prometheus: PrometheusHarness) -> list[Check]:
    """dcgm-exporter's own dashboard (grafana.com 12239), all instances and GPUs selected."""
    base = {"datasource": "prometheus", **GRAFANA_BUILTINS}
    values = resolve_variables(prometheus, dcgm_exporter_variables(), base, "")
    return [Check("dcgm-exporter", query.source, "", query.resolved(values)) for query in dcgm_exporter_queries()]


def rule_checks(rule_file: Path) -> list[Check]:
    """Every alerting and recording rule's expression, except absent(), which is checked on its own."""
    return [Check("rule", str(rule.get("alert") or rule.get("record")), "", live(str(rule["expr"])))
            for _, rule in rule_groups([rule_file]) if "absent(" not in str(rule["expr"])]


def answer_all(prometheus: PrometheusHarness, checks: Sequence[Check], deadline_s: float,
               may_stay_empty: Collection[tuple[str, str]] = ()) -> dict[Check, int]:
    """Evaluate the checks until each has returned a series once (or the deadline passes); the panels
    in ``may_stay_empty`` are asked every round too, but not waited for.

    Data arrives over the first seconds (Xids from 5 s, the hang at 5 s, a GPU lost at 10 s, the
    second sample that increase() needs), so unanswered checks are asked again each round.
    """
    answers = dict.fromkeys(checks, 0)

    def waiting() -> list[Check]:
        for check in [c for c, count in answers.items() if count == 0]:
            answers[check] = len(prometheus.query(check.expr))
        return [c for c, count in answers.items() if count == 0 and c.panel not in may_stay_empty]

    settle(waiting, deadline_s, 0.5, accept=lambda still: not still)
    return answers


# ------------------------------------------------------------------------------------------ fixture
def serve_text(text: str, requests: list[dict[str, str]] | None = None) -> AbstractContextManager[str]:
    """A fixed Prometheus text exposition (a stand-in for another exporter); yields host:port. The
    headers of each scrape go to ``requests`` when given."""
    body = text.encode()
    return serve_metrics(lambda: body, requests)


def start_exporter(install: Install, node: Node, workdir: Path) -> ExporterProcess:
    """The install's container on ``node``: its args and env exactly, plus the scenario."""
    args, env = install.launch(workdir / node.role, node.hostname)
    return ExporterProcess([*args, "--simulate", node.scenario], env=container_environment(env),
                           inherit_environment=False)


def available_engines() -> dict[str, str]:
    """engine -> prometheus binary, for each engine present. Locally an engine that is not built is
    left out (its tests skip with the reason, from ``deployment``); under CI=true every one is required."""
    binaries: dict[str, str] = {}
    for engine in ENGINES:
        try:
            binaries[engine] = prometheus_engine(engine)
        except pytest.skip.Exception:
            continue
    return binaries


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """One set of exporters for the module; every engine's two Prometheus servers scrape the same ones
    from the same moment, so both engines see the same events and their answers can be compared."""
    require_prometheus()
    binaries = available_engines()
    workdir = tmp_path_factory.mktemp("default-install")
    install, attributed = helm_install(), helm_install(PROCESS_ATTRIBUTION)
    assert attributed.rule_groups == install.rule_groups and attributed.dashboards == install.dashboards
    rule_file = install.write_rule_file(workdir / "prometheusrule-groups.yaml")
    with ExitStack() as stack:
        exporters: dict[str, ExporterProcess] = {}
        for node in (HEALTHY, *FAULT_NODES):  # all start in parallel
            exporters[node.role] = start_exporter(attributed if node.process_attribution else install, node, workdir)
            stack.callback(exporters[node.role].stop)
        scrape_requests: list[dict[str, str]] = []
        kube_state_metrics = stack.enter_context(serve_text(KUBE_STATE_METRICS, scrape_requests))
        down_target = f"127.0.0.1:{free_port()}"
        extra_jobs = {"kube-state-metrics": [kube_state_metrics]}
        deployments: dict[str, Deployment] = {}
        started_at = time.time()
        # Every Prometheus is launched before the exporters listen and before any is waited for, so each
        # engine scrapes from the exporters' first exposition on: the zoo loses GPU 7 ten seconds after
        # its start, and an engine that came up later would hold fewer samples of it than the other.
        for engine, binary in binaries.items():
            healthy = Side(PrometheusHarness(
                [f"127.0.0.1:{exporters[HEALTHY.role].port}"], rule_files=[rule_file], extra_jobs=extra_jobs,
                prometheus_binary=binary),
                {HEALTHY.role: exporters[HEALTHY.role]}, {HEALTHY.role: HEALTHY})
            faults = Side(PrometheusHarness(
                [*(f"127.0.0.1:{exporters[node.role].port}" for node in FAULT_NODES), down_target],
                rule_files=[rule_file], extra_jobs=extra_jobs, prometheus_binary=binary),
                {node.role: exporters[node.role] for node in FAULT_NODES}, {node.role: node for node in FAULT_NODES})
            for side in (healthy, faults):
                stack.callback(side.prometheus.stop)
                side.prometheus.launch()
            deployments[engine] = Deployment(engine, engine_version(binary), install, rule_file, healthy, faults,
                                             down_target, started_at)
        sides = [side for d in deployments.values() for side in (d.healthy, d.faults)]
        for side in sides:
            side.prometheus.wait_ready()
        for exporter in exporters.values():
            exporter.wait_listening(deadline_s=60)
        for side in sides:
            targets = len(side.exporters)
            side.prometheus.wait_for('up{job="gpu-pod-exporter"} == 1', lambda s, n=targets: len(s) == n,
                                     deadline_s=60)
            side.prometheus.wait_for_rules_evaluated(deadline_s=60)
            # Grafana offers the values present when the dashboard loads: wait until the pods are known
            # (kubelet and API watched, cost rules evaluated) before resolving the variables.
            side.prometheus.wait_for("team:gpu_allocated:sum", lambda s: len(s) >= 3, deadline_s=60)
        dashboards = list(install.dashboards.values())
        # The fault sides first: the hang and the lost GPU are events in time. The node dashboard is
        # shown for the zoo, and for the process-attribution node its process-attribution panels.
        # Each engine resolves the dashboards' variables itself, one right after the other.
        fault_checks = {engine: [
            *dashboard_checks(d.faults.prometheus, dashboards, ZOO.hostname),
            *(check for node in (ATTRIBUTED, SHARED) for check in dashboard_checks(
                d.faults.prometheus, dashboards, node.hostname, only=NEEDS_PROCESS_ATTRIBUTION)),
            *dcgm_exporter_checks(d.faults.prometheus), *rule_checks(rule_file)] for engine, d in deployments.items()}
        for engine, deployment in deployments.items():
            deployment.faults.answers = answer_all(deployment.faults.prometheus, fault_checks[engine],
                                                   ANSWER_DEADLINE_S, may_stay_empty=NEEDS_PROCESS_ATTRIBUTION)
        healthy_checks = {engine: [
            *dashboard_checks(d.healthy.prometheus, dashboards, HEALTHY.hostname),
            *dcgm_exporter_checks(d.healthy.prometheus)] for engine, d in deployments.items()}
        for engine, deployment in deployments.items():
            deployment.healthy.answers = answer_all(deployment.healthy.prometheus, healthy_checks[engine],
                                                    ANSWER_DEADLINE_S, may_stay_empty=set(QUIET_ON_A_HEALTHY_NODE))
        yield Installed(deployments, exporters, scrape_requests)


@pytest.fixture(scope="module", params=ENGINES, ids=[f"prometheus-{engine}" for engine in ENGINES])
def deployment(installed: Installed, request: pytest.FixtureRequest) -> Deployment:
    """The install as one engine saw it: every test taking this fixture runs on 2.42 and on 3.x."""
    engine = str(request.param)
    if engine not in installed.deployments:
        prometheus_engine(engine)  # skips with how to build it (or builds it under CI)
        pytest.fail(f"Prometheus {engine} appeared after the module started; run the module again")
    deployment = installed.deployments[engine]
    assert f"{deployment.version}.".startswith(f"{engine}."), (engine, deployment.version)
    return deployment


def alert_rules(deployment: Deployment) -> dict[str, dict[str, Any]]:
    return {str(rule["alert"]): rule for _, rule in rule_groups([deployment.rule_file]) if "alert" in rule}


def alert_expr(deployment: Deployment, name: str) -> str:
    return str(alert_rules(deployment)[name]["expr"])


def subject(sample: Sample) -> str:
    """What an alert is about: a GPU ("node/gpu", "/MIG instance" added) or a scrape target."""
    labels = sample.labels
    if "gpu" in labels:
        mig = f"/{labels['GPU_I_ID']}" if labels.get("GPU_I_ID") else ""
        return f"{labels['hostname']}/{labels['gpu']}{mig}"
    return labels["instance"]


# ------------------------------------------------------------------------------ the install itself
def test_the_plain_manifests_install_exactly_what_the_chart_installs(deployment: Deployment) -> None:
    """deploy/manifests/ carries the same defaults: container args and env, counters CSV, rule groups,
    dashboards and honorLabels are identical, so every result of this module holds for it as well."""
    assert manifests_install().essentials() == deployment.install.essentials()


def test_the_exporters_ran_with_the_installed_settings(deployment: Deployment) -> None:
    """The chart's own environment reached the processes: its collect interval, Kubernetes mode, the
    counters from the ConfigMap; and the CSV is the product default (the packaged file)."""
    from exporter.metrics.counters import default_counters_text  # noqa: PLC0415

    assert deployment.install.counters_csv() == default_counters_text()
    log = deployment.healthy.exporters[HEALTHY.role].log()
    assert "collect_interval_ms=1000" in log
    assert "/healthy/counters/counters.csv" in log  # the projected ConfigMap, not the built-in default
    assert "Kubernetes attribution on" in log


# ------------------------------------------------------------------------- (a) every name is served
def read_names(deployment: Deployment) -> dict[str, str]:
    """Metric name -> one place that reads it: every rule and every installed dashboard query."""
    read: dict[str, str] = {}
    for _, rule in rule_groups([deployment.rule_file]):
        for name in names_in(str(rule["expr"])).metrics:
            read.setdefault(name, f"rule {rule.get('alert') or rule.get('record')}")
    for side in (deployment.healthy, deployment.faults):
        for check in side.answers:
            if check.dashboard.startswith("gpu-pod-exporter"):
                for name in names_in(check.expr).metrics:
                    read.setdefault(name, check.where)
    return read


def served_names(side: Side) -> dict[str, set[str]]:
    """Metric name -> the scenarios (node labels) whose exporter served it at any time."""
    by_instance = {side.instance(role): node.label for role, node in side.nodes.items()}
    samples = side.prometheus.query('group by (__name__, instance) (last_over_time({job="gpu-pod-exporter"}[1h]))')
    served: dict[str, set[str]] = {}
    for sample in samples:
        if sample.labels.get("instance") in by_instance:
            served.setdefault(sample.labels["__name__"], set()).add(by_instance[sample.labels["instance"]])
    return served


def test_every_name_a_shipped_rule_or_panel_reads_is_served_in_a_builtin_scenario(deployment: Deployment) -> None:
    served: dict[str, set[str]] = {}
    for side in (deployment.healthy, deployment.faults):
        for name, scenarios in served_names(side).items():
            served.setdefault(name, set()).update(scenarios)
    recorded = recorded_names([deployment.rule_file])
    read = {name: where for name, where in read_names(deployment).items()
            if name not in recorded and name not in EXTERNAL_METRICS}
    width = max(len(name) for name in read)
    print("\nmetric read by a shipped rule or dashboard -> built-in scenarios serving it (default install)")
    for name in sorted(read):
        print(f"  {name:<{width}}  {', '.join(sorted(served.get(name, set()))) or 'NONE'}   ({read[name]})")
    assert {name: where for name, where in read.items() if not served.get(name)} == {}
    # Only the process-attribution names need the one non-default value; everything else is fed by
    # the default install.
    attributed = {node.label for node in FAULT_NODES if node.process_attribution}
    needs_value = {name for name in read if served[name] <= attributed}
    assert needs_value == PROCESS_ATTRIBUTION_NAMES
    assert len(read) > 40


def test_the_external_names_really_are_somebody_elses(deployment: Deployment) -> None:
    stored = set(deployment.faults.prometheus.api("label/__name__/values"))
    assert set(EXTERNAL_METRICS) <= stored  # Prometheus' own and the kube-state-metrics stand-in's


PROMETHEUS_OWN = re.compile(r"^(scrape_.*|up|ALERTS|ALERTS_FOR_STATE)$")


def test_every_name_the_exporters_served_is_in_the_exporters_registry(deployment: Deployment) -> None:
    """The static name checks use the catalog and the owned-metric registry; this proves they are complete."""
    recorded = recorded_names([deployment.rule_file])
    served: set[str] = set()
    for side in (deployment.healthy, deployment.faults):
        served |= {name for name in side.prometheus.api("label/__name__/values") if not PROMETHEUS_OWN.match(name)}
    served -= recorded | set(EXTERNAL_METRICS)
    assert served - set(exporter_metric_entries()) == set()
    assert len(served) > 50


# ------------------------------------------------------------------------ (c) the healthy node
def test_a_healthy_node_answers_every_panel_but_the_listed_ones(deployment: Deployment) -> None:
    checks = [c for c in deployment.healthy.answers if c.dashboard.startswith("gpu-pod-exporter")]
    assert len(checks) > 100  # panels (also in collapsed rows), variables and annotations of three dashboards
    empty = {check.panel for check in checks if deployment.healthy.answers[check] == 0}
    unexpected = "\n".join(f"{dashboard} {source}"
                           for dashboard, source in sorted(empty - set(QUIET_ON_A_HEALTHY_NODE)))
    assert not unexpected, f"panels a healthy default install leaves empty:\n{unexpected}"
    always_quiet = {panel for panel, quiet in QUIET_ON_A_HEALTHY_NODE.items() if quiet.kind != TIMED}
    answering = "\n".join(f"{dashboard} {source}" for dashboard, source in sorted(always_quiet - empty))
    assert not answering, f"listed as empty, but they answer (take them off the list):\n{answering}"


@pytest.mark.parametrize("panel", sorted(QUIET_ON_A_HEALTHY_NODE), ids=" ".join)
def test_each_panel_a_healthy_node_leaves_empty_answers_in_its_fault_scenario(deployment: Deployment,
                                                                              panel: tuple[str, str]) -> None:
    node = QUIET_ON_A_HEALTHY_NODE[panel].shown_on
    answered = [count for check, count in deployment.faults.answers.items()
                if check.panel == panel and check.node in ("", node)]
    assert answered and all(answered), (panel, node)


def test_only_the_time_range_panels_needed_a_shorter_subquery_resolution(deployment: Deployment) -> None:
    shortened = sorted({check.where for check in deployment.healthy.answers if ":5s]" in check.expr})
    assert shortened == [
        "gpu-pod-exporter-teams panel 'Energy in the time range (selected teams)' query A",
        "gpu-pod-exporter-teams panel 'Energy per team in the time range' query A",
        "gpu-pod-exporter-teams panel 'GPU-hours in the time range (selected namespaces)' query A",
    ]


def test_cost_rules_split_the_default_nodes_gpus_between_teams(deployment: Deployment) -> None:
    """Training GPUs 0-3 (team from the namespace), GPU 4 time-sliced by three inference pods (1/3 each),
    the sweep on GPU 5 (team from its own pod label)."""
    prometheus = deployment.healthy.prometheus
    allocated = prometheus.wait_for("team:gpu_allocated:sum", lambda s: len(s) == 3, 20)
    assert {s.labels["team"]: round(s.value, 6) for s in allocated} == {"research": 4.0, "serving": 1.0,
                                                                        "recsys": 1.0}
    exclusive = {s.labels["team"]: s.value for s in prometheus.query("team:gpu_allocated_exclusive:count")}
    assert exclusive == {"research": 4.0, "recsys": 1.0}


def test_dcgm_exporter_dashboard_queries_answer_from_every_exporter(deployment: Deployment) -> None:
    for side in (deployment.healthy, deployment.faults):
        assert len([c for c in side.answers if c.dashboard == "dcgm-exporter"]) == 10
        assert side.unanswered("dcgm-exporter") == []
    by_source = {c.source: c for c in deployment.faults.answers if c.dashboard == "dcgm-exporter"}
    temperature, sm_clock = by_source["dcgm_exporter_queries.txt:8"], by_source["dcgm_exporter_queries.txt:12"]
    assert temperature.expr.startswith("DCGM_FI_DEV_GPU_TEMP{instance=~\"(127\\\\.0\\\\.0\\\\.1:")
    # All instances selected: the GPUs of every node with GPUs answer; the MHz clock is scaled to Hz.
    prometheus = deployment.faults.prometheus
    at = time.time()
    nodes = {s.labels["hostname"] for s in prometheus.query(temperature.expr, at=at)}
    assert nodes == {ZOO.hostname, STORM.hostname, HANG.hostname, ATTRIBUTED.hostname, SHARED.hostname}
    scaled = {(s.labels["instance"], s.labels["gpu"]): s.value for s in prometheus.query(sm_clock.expr, at=at)}
    raw = {(s.labels["instance"], s.labels["gpu"]): s.value for s in prometheus.query("DCGM_FI_DEV_SM_CLOCK", at=at)}
    assert scaled == {key: value * 1e6 for key, value in raw.items()}


# --------------------------------------------------------------------------- (b) alerts on the faults
# Which GPUs (or targets) each alert expression must select, and no others (see alert-zoo.yaml and
# default.yaml: hgx-node-01 is the default node installed with process attribution).
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
    # debug-0 holds an MPS share of shared-node's GPU 1 and runs nothing (per-container utilisation:
    # process attribution; the zoo's standby-0 on GPU 10 shows it only with that on, too)
    "GpuSharedShareIdle": {"shared-node/1"},
    "GpuMemoryNearlyFull": {"zoo-node/1"},
    # 9 GiB held by processes of no pod: zoo GPU 9 (no process attribution there, so only the
    # allocation-based alert) and hgx-node-01's GPU 7 (with it, both).
    "GpuMemoryUnattributed": {"hgx-node-01/7"},
    "GpuMemoryHeldWithoutAllocation": {"zoo-node/9", "hgx-node-01/7"},
}
EXPECTED_TARGET_SUBJECTS: dict[str, Callable[[Side, str], set[str]]] = {
    "GpuPodExporterDown": lambda side, down: {down},
    "GpuPodExporterSamplesStale": lambda side, down: {side.instance(HANG.role)},
    "GpuPodExporterNvmlDown": lambda side, down: {side.instance(NODRIVER.role)},
    # The chart's kubelet socket and in-cluster API do not exist for the nodes without a simulated
    # cluster: like a node whose pod-resources directory is not mounted.
    "GpuPodExporterKubeletDown": lambda side, down: {side.instance(n.role) for n in (STORM, NODRIVER, HANG)},
    "GpuPodExporterKubeApiDown": lambda side, down: {side.instance(n.role) for n in (STORM, NODRIVER, HANG)},
}


# Namespaces: the kube-state-metrics stand-in gives research (the zoo) and ml-training (the default
# scenario, on the process-attribution node) a quota of 64 GPUs, of which they use a few.
EXPECTED_NAMESPACE_SUBJECTS: dict[str, set[str]] = {"GpuQuotaMostlyUnused": {"research", "ml-training"}}


def test_every_alert_is_covered_by_an_expected_subject(deployment: Deployment) -> None:
    assert set(alert_rules(deployment)) == (set(EXPECTED_GPU_SUBJECTS) | set(EXPECTED_TARGET_SUBJECTS)
                                            | set(EXPECTED_NAMESPACE_SUBJECTS) | {"GpuPodExporterAbsent"})


@pytest.mark.parametrize("alert", sorted(EXPECTED_NAMESPACE_SUBJECTS))
def test_quota_alert_expression_selects_the_namespaces_with_mostly_unused_quota(deployment: Deployment,
                                                                               alert: str) -> None:
    """Over the last minute instead of a week (WEEK_SUBSTITUTIONS); live it needs a week-old quota, so it
    is not active here (test_every_alert_is_active... expects exactly the others)."""
    expected = EXPECTED_NAMESPACE_SUBJECTS[alert]
    deployment.faults.prometheus.wait_for(live(alert_expr(deployment, alert)),
                                          lambda s: {x.labels["namespace"] for x in s} == expected, 30)


@pytest.mark.parametrize("alert", sorted(EXPECTED_GPU_SUBJECTS))
def test_gpu_alert_expression_selects_exactly_the_gpus_built_for_it(deployment: Deployment, alert: str) -> None:
    expected = EXPECTED_GPU_SUBJECTS[alert]
    deployment.faults.prometheus.wait_for(alert_expr(deployment, alert), lambda s: {subject(x) for x in s} == expected,
                                          30)


@pytest.mark.parametrize("alert", sorted(EXPECTED_TARGET_SUBJECTS))
def test_exporter_alert_expression_selects_exactly_the_broken_targets(deployment: Deployment, alert: str) -> None:
    expected = EXPECTED_TARGET_SUBJECTS[alert](deployment.faults, deployment.down_target)
    deployment.faults.prometheus.wait_for(alert_expr(deployment, alert), lambda s: {subject(x) for x in s} == expected,
                                          30)


def test_a_healthy_default_install_raises_no_hardware_alert(deployment: Deployment) -> None:
    """The healthy node's only active alerts are the usage notices its scenario is built to show:
    GPU 7 holds 9 GiB that no pod was given; the sweep on GPU 5 ramps up from 0 % (idle for its first
    30 s, when GpuAllocatedButIdle goes pending, and drops again)."""
    active = {(a["labels"]["alertname"], subject(Sample(a["labels"], 0.0)))
              for a in deployment.healthy.prometheus.alerts()}
    assert active <= {("GpuMemoryHeldWithoutAllocation", "hgx-node-01/7"), ("GpuAllocatedButIdle", "hgx-node-01/5")}


def test_exporter_absent_answers_only_while_no_exporter_is_scraped(deployment: Deployment) -> None:
    absent = alert_expr(deployment, "GpuPodExporterAbsent")
    prometheus = deployment.faults.prometheus
    assert prometheus.query(absent) == []
    # Before Prometheus scraped anything, no exporter target existed: that is what the alert reports.
    assert prometheus.query(absent, at=deployment.started_at - 60) == [Sample({}, 1.0)]


def wait_for_active_alerts(prometheus: PrometheusHarness, names: set[str],
                           deadline_s: float = 30.0) -> list[dict[str, Any]]:
    """/api/v1/alerts once every alert in ``names`` is pending or firing (and no other)."""
    def active(alerts: list[dict[str, Any]]) -> set[str]:
        return {str(a["labels"]["alertname"]) for a in alerts}

    alerts = settle(prometheus.alerts, deadline_s, 0.5, accept=lambda alerts: active(alerts) >= names)
    assert active(alerts) == names, sorted(names - active(alerts))
    return alerts


def test_every_alert_is_active_with_its_annotations_filled_from_live_labels(deployment: Deployment) -> None:
    """Each alert is pending (waiting for `for`) or firing, and one without `for` fires; its summary and
    description render from the exporter's real labels: no template error, no missing value, the GPU
    or target named."""
    rules = alert_rules(deployment)
    expected = set(EXPECTED_GPU_SUBJECTS) | set(EXPECTED_TARGET_SUBJECTS)
    alerts = wait_for_active_alerts(deployment.faults.prometheus, expected)
    for alert in alerts:
        labels, annotations = alert["labels"], alert["annotations"]
        if "for" not in rules[labels["alertname"]]:
            assert alert["state"] == "firing", alert
        text = " ".join(annotations.values())
        assert "error expanding template" not in text and "<no value>" not in text, alert
        named = f"GPU {labels['gpu']}" if "gpu" in labels else labels["instance"]
        assert named in annotations["summary"] and named in annotations["description"], alert
        if labels.get("GPU_I_ID"):
            assert f"MIG {labels['GPU_I_PROFILE']} instance {labels['GPU_I_ID']}" in annotations["description"]
        if labels.get("pod"):
            assert f"{labels['namespace']}/{labels['pod']}" in annotations["description"], alert


def test_every_rule_expression_returns_series(deployment: Deployment) -> None:
    rules = [c for c in deployment.faults.answers if c.dashboard == "rule"]
    assert len(rules) == len(rule_groups([deployment.rule_file])) - 1  # all but GpuPodExporterAbsent
    assert deployment.faults.unanswered("rule ") == []


def test_the_fault_side_answers_every_panel(deployment: Deployment) -> None:
    """With the nodes built for the alerts, every panel shows something (the node dashboard on the zoo,
    except the process-attribution panels, shown for the node installed with it)."""
    unanswered = [line for line in deployment.faults.unanswered("gpu-pod-exporter-")
                  if not line.startswith((f"gpu-pod-exporter-node[{ATTRIBUTED.hostname}]",
                                          f"gpu-pod-exporter-node[{SHARED.hostname}]"))
                  and not any(line.startswith(f"gpu-pod-exporter-node[{ZOO.hostname}] {source}:")
                              for _, source in NEEDS_PROCESS_ATTRIBUTION)]
    assert unanswered == []


def test_rules_evaluate_without_errors_on_live_data(deployment: Deployment) -> None:
    for side in (deployment.healthy, deployment.faults):
        groups = side.prometheus.rules()
        assert [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"] == []


def test_xid_storm_counts_every_xid_as_a_burst_but_none_as_fatal(deployment: Deployment) -> None:
    """100 application Xids (31 and 43 on GPU 0, 13 on GPU 1) in one second: a burst, not a reset case."""
    prometheus = deployment.faults.prometheus
    burst = prometheus.wait_for(f'({alert_expr(deployment, "GpuXidBurst")}) and on (hostname) '
                                f'{{hostname="{STORM.hostname}"}}', lambda s: len(s) == 2, 20)
    assert {s.labels["gpu"]: s.value for s in burst} == {"0": 60.0, "1": 40.0}
    storm_xids = f'gpu_xid:dcgm_exp_xid_errors:increase5m{{hostname="{STORM.hostname}"}}'
    assert {(s.labels["gpu"], s.labels["xid"]): s.value for s in prometheus.query(storm_xids)} == {
        ("0", "31"): 50.0, ("0", "43"): 10.0, ("1", "13"): 40.0}
    for alert in ("GpuXidFatal", "GpuXidNeedsReset"):
        assert STORM.hostname not in {s.labels["hostname"] for s in prometheus.query(alert_expr(deployment, alert))}
    fired = prometheus.wait_for(f'ALERTS{{alertname="GpuXidBurst", alertstate="firing", hostname="{STORM.hostname}"}}',
                                lambda s: len(s) == 2, 20)
    assert {s.labels["severity"] for s in fired} == {"warning"}


def test_alerts_without_for_fire_naming_the_gpu_and_its_pod(deployment: Deployment) -> None:
    firing = deployment.faults.prometheus.wait_for(
        f'ALERTS{{alertstate="firing", alertname=~"GpuFallenOffBus|GpuXidFatal", hostname="{ZOO.hostname}"}}',
        lambda s: len(s) == 3, 20)
    by_alert = {(s.labels["alertname"], s.labels["gpu"], s.labels.get("xid", "")): s.labels for s in firing}
    assert set(by_alert) == {("GpuFallenOffBus", "7", ""), ("GpuXidFatal", "4", "48"), ("GpuXidFatal", "7", "79")}
    lost = by_alert[("GpuFallenOffBus", "7", "")]
    assert (lost["pod"], lost["namespace"], lost["team"], lost["severity"]) == (
        "lost-trainer-0", "research", "research", "critical")


def test_maintenance_helper_reads_kube_state_metrics(deployment: Deployment) -> None:
    samples = deployment.faults.prometheus.query("hostname:gpu_node_maintenance:max")
    assert {s.labels["hostname"]: s.value for s in samples} == {"cordoned-node": 1.0, "labelled-node": 1.0}


def zoo_check(deployment: Deployment, source: str, dashboard: str = "gpu-pod-exporter-overview") -> Check:
    [check] = [c for c in deployment.faults.answers if c.panel == (dashboard, source) and c.node in ("", ZOO.hostname)]
    return check


def test_unhealthy_gpus_table_counts_every_xid_of_the_day(deployment: Deployment) -> None:
    """The table's "Xids (24 h)" column: a code seen for the first time counts too (its total is born at
    1, which increase() alone cannot see), so the GPU with its one Xid 79 shows 1, not 0."""
    column = zoo_check(deployment, "panel 'Unhealthy GPUs' query B")
    prometheus = deployment.faults.prometheus
    at = time.time()
    shown = {s.labels["gpu"]: s.value for s in prometheus.query(column.expr, at=at)
             if s.labels["hostname"] == ZOO.hostname}
    # Every Xid counter was born during this test, so the last 24 h hold all of it.
    totals = {s.labels["gpu"]: s.value for s in prometheus.query(
        f'sum by (gpu) (DCGM_EXP_XID_ERRORS_TOTAL{{hostname="{ZOO.hostname}"}})', at=at)}
    assert set(shown) == {"4", "6", "7"}  # unhealthy GPUs with Xids (GPU 5 has none)
    assert shown == {gpu: totals[gpu] for gpu in shown}
    assert shown["4"] >= 2.0 and shown["7"] == 1.0  # Xids 48 + 63 (recurring); the one Xid 79


def test_overview_idle_count_agrees_with_the_idle_alert(deployment: Deployment) -> None:
    """The "Allocated but idle" stat counts what GpuAllocatedButIdle would fire on: the idle whole GPU
    and the idle MIG instance (MIG instances have no GPU_UTIL; graphics-engine activity decides)."""
    prometheus = deployment.faults.prometheus
    stat = zoo_check(deployment, "panel 'Allocated but idle (< 5 %)' query A")
    graph = zoo_check(deployment, "panel 'Allocated vs idle devices' query C")
    prometheus.wait_for(stat.expr, lambda s: s == [Sample({}, 2.0)], 60)  # hgx-node-01's ramp starts at 0 %
    assert prometheus.query(graph.expr) == [Sample({}, 2.0)]


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


def test_every_alternative_of_every_rule_can_hold(deployment: Deployment) -> None:
    """Each branch of a rule's top-level `or` answers on its own, so no alternative is dead code
    (e.g. device_up == 0 for a lost GPU, the first-seen branches for counters born non-zero)."""
    branches: list[tuple[str, str]] = []
    for _, rule in rule_groups([deployment.rule_file]):
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
    prometheus = deployment.faults.prometheus
    answers = answer_all(prometheus, [Check("rule", name, "", branch) for name, branch in branches], 20)
    assert [f"{check.where}: {check.expr}" for check, count in answers.items() if count == 0] == []
    [stale] = [branch for name, branch in branches if name == "GpuPodExporterSamplesStale" and "> 5" in branch]
    assert {subject(s) for s in prometheus.query(stale)} == {deployment.faults.instance(HANG.role)}


# ------------------------------------------------------------------- Prometheus 2.42 and 3.x agree
# Both engines scrape the same exporters from the same moment (the ``installed`` fixture). Prometheus 3
# negotiates the scrape format differently (OpenMetrics first, ``escaping=allow-utf-8``), accepts UTF-8
# names, and changed range selectors (left-open) and regex matching; these tests show that none of it
# changes what users see. docs/prometheus.md lists what differed and what was changed for it.
LEGACY_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LEGACY_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
AGREEMENT_DEADLINE_S = 45.0


def both_engines(installed: Installed) -> tuple[Deployment, Deployment]:
    """(2.42, 3.x); skips (or fails under CI) when an engine is missing."""
    for engine in ENGINES:
        if engine not in installed.deployments:
            prometheus_engine(engine)
    old, new = ENGINES
    return installed.deployments[old], installed.deployments[new]


def label_sets(prometheus: PrometheusHarness, expr: str, at: float) -> set[tuple[tuple[str, str], ...]]:
    return {tuple(sorted(sample.labels.items())) for sample in prometheus.query(expr, at=at)}


def test_both_engines_answer_every_query_with_the_same_series(installed: Installed) -> None:
    """Every dashboard query, rule expression and dcgm-exporter panel returns the same series (label sets)
    on both engines at the same instant. Each engine resolved the dashboards' variables itself (the
    engine tests above); here both answer the same text, 2.42's. Values may differ: the two engines
    scrape at different moments of the simulator's clock. A query whose series change with time (a
    threshold crossed, an alert going from pending to firing) is asked again until both agree, within
    a deadline."""
    old, new = both_engines(installed)
    for side_old, side_new in ((old.healthy, new.healthy), (old.faults, new.faults)):
        by_where_old = {check.where: check.expr for check in side_old.answers}
        assert {check.where for check in side_new.answers} == set(by_where_old)  # the same panels and rules
        pending = sorted(by_where_old.items())

        def differing_now(old_side: Side = side_old, new_side: Side = side_new) -> list[tuple[str, str]]:
            nonlocal pending
            at = time.time()
            pending = [(where, expr) for where, expr in pending
                       if label_sets(old_side.prometheus, expr, at) != label_sets(new_side.prometheus, expr, at)]
            return pending

        differing = settle(differing_now, AGREEMENT_DEADLINE_S, 1.0, accept=lambda still: not still)
        at = time.time()
        report = []
        for where, expr in differing:
            found_old, found_new = label_sets(side_old.prometheus, expr, at), label_sets(side_new.prometheus, expr, at)
            report.append(f"{where}\n  only on {old.version}: {sorted(found_old - found_new)}\n"
                          f"  only on {new.version}: {sorted(found_new - found_old)}")
        assert not report, "\n".join(report)
    print(f"\nsame series on Prometheus {old.version} and {new.version}: "
          f"{len(old.healthy.answers)} healthy-side and {len(old.faults.answers)} fault-side queries")


def exporter_names(side: Side) -> set[str]:
    samples = side.prometheus.query('group by (__name__) (last_over_time({job="gpu-pod-exporter"}[1h]))')
    return {sample.labels["__name__"] for sample in samples}


def same_names(side_old: Side, side_new: Side) -> set[str]:
    """The exporter names both engines stored, once they agree. Each engine scrapes its own exporters,
    so a series that appears with an event (a fault the simulator fires on its clock) may reach one
    engine a scrape before the other: asked again until both agree, within a deadline, and a name that
    stays on one side fails with that name."""
    names_old, names_new = settle(lambda: (exporter_names(side_old), exporter_names(side_new)),
                                  AGREEMENT_DEADLINE_S, 1.0, accept=lambda names: names[0] == names[1])
    assert names_new == names_old
    return names_old


def test_both_engines_store_the_same_names_with_the_same_types(installed: Installed) -> None:
    """Scraped with each engine's default protocols, every exporter metric keeps its name (no ``_total``
    added or removed) and its TYPE (a counter stays a counter in /api/v1/metadata, which Grafana's
    metric browser and rate() hints read)."""
    old, new = both_engines(installed)
    registry = exporter_metric_entries()
    typed_counters: set[str] = set()
    for side_old, side_new in ((old.healthy, new.healthy), (old.faults, new.faults)):
        names = same_names(side_old, side_new)
        metadata_old, metadata_new = side_old.prometheus.api("metadata"), side_new.prometheus.api("metadata")
        types_old = {name: {m["type"] for m in metadata_old.get(name, [])} for name in names}
        types_new = {name: {m["type"] for m in metadata_new.get(name, [])} for name in names}
        assert types_new == types_old
        counters = {name for name in names if registry.get(name) and registry[name].kind == "counter"}
        assert {name: types_new[name] for name in counters} == {name: {"counter"} for name in counters}
        typed_counters |= counters
    # dcgm-exporter's counters without _total, ours with the upper-case _TOTAL, the self-metrics' _total:
    assert {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_EXP_XID_ERRORS_TOTAL"} <= typed_counters
    assert any(name.startswith("gpu_pod_exporter_") and name.endswith("_total") for name in typed_counters)


def test_prometheus_3_default_scrape_protocols_get_the_text_format_with_counters_typed(installed: Installed) -> None:
    """What Prometheus 3 asks for by default (captured from its scrapes of a stand-in target): OpenMetrics
    first, and UTF-8 escaping allowed. dcgm-exporter's counters have no ``_total``, which OpenMetrics
    would type ``unknown``, so the exporter answers that request in text format 0.0.4, as it answers 2.42."""
    old, new = both_engines(installed)
    accept = {engine: [headers.get("Accept", "") for headers in installed.scrape_requests
                       if headers.get("User-Agent", "").startswith(f"Prometheus/{deployment.version}")]
              for engine, deployment in installed.deployments.items()}
    assert accept[new.engine] and accept[old.engine]
    asked = accept[new.engine][-1]
    assert asked.split(",")[0].startswith("application/openmetrics-text"), asked
    assert "escaping=allow-utf-8" in asked, asked  # 3.x offers UTF-8 names; ours need none
    assert "escaping" not in accept[old.engine][-1]
    exporter = installed.exporters[HEALTHY.role]
    for engine in (old.engine, new.engine):
        response = exporter.get("/metrics", {"Accept": accept[engine][-1]})
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8", engine
        assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in response.text
        assert " unknown\n" not in response.text and " untyped\n" not in response.text


def test_nothing_stored_needs_utf8_names(installed: Installed) -> None:
    """Every metric and label name Prometheus 3 stored is a legacy (pre-UTF-8) name, so queries need no
    quoting ({"name"}), and a Prometheus running with metric_name_validation_scheme: legacy, or 2.42,
    stores the same."""
    _, new = both_engines(installed)
    for side in (new.healthy, new.faults):
        names = set(side.prometheus.api("label/__name__/values"))
        labels = set(side.prometheus.api("labels"))
        assert {name for name in names if not LEGACY_METRIC_NAME.match(name)} == set()
        assert {label for label in labels if not LEGACY_LABEL_NAME.match(label)} == set()
        assert len(names) > 50 and {"gpu", "UUID", "hostname", "pod", "namespace"} <= labels
