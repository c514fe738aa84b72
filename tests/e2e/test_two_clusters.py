"""Two clusters with the same node names, in one real Prometheus, stay apart in every rule and dashboard.

What a global view looks like (docs/fleet.md): every cluster's series in one store (Thanos, Mimir,
VictoriaMetrics, or a Prometheus federating them) under a ``cluster`` label. Here one Prometheus
scrapes two exporters, each installed by the chart (default values, process attribution on, so the
per-container panels answer too), running the same simulated node (the built-in ``alert-zoo``: Hostname
``zoo-node``, the same GPU UUIDs, the same pods and teams) as cluster ``east`` and cluster ``west``,
and two kube-state-metrics stand-ins, one per cluster, the way relabelling or an external label
adds ``cluster`` to everything a cluster sends. Node names and GPU UUIDs collide completely, so:

* a rule that joined ``on (Hostname, UUID)`` without ``cluster`` would fail ("many-to-many matching
  not allowed") or merge the clusters, and one that summed ``by (namespace)`` would add them up:
  every rule evaluates without error, every recorded series carries its cluster, each cluster's
  allocation is counted once (research 5 GPUs in each, not 10);
* every panel query of our three dashboards, with the ``cluster`` variable set as Grafana sets it,
  answers, and only with series of the chosen cluster; with a cluster that does not exist it answers
  nothing (``or vector(0)`` zeros aside), so no part of any query reads another cluster's data.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from typing import Any

import pytest

from tests.dashboards.dashboard_queries import dashboard_queries, load_dashboards, query_variables
from tests.dashboards.promql_names import recorded_names
from tests.e2e.exporter_process import ExporterProcess, free_port
from tests.e2e.installed import helm_install
from tests.e2e.prometheus_harness import RULE_FILES, PrometheusHarness, Sample, require_prometheus
from tests.e2e.test_default_install import (
    GRAFANA_BUILTINS,
    KUBE_STATE_METRICS,
    PROCESS_ATTRIBUTION,
    ZOO,
    Check,
    answer_all,
    resolve_variables,
    serve_text,
    shorten_subquery_resolution,
    start_exporter,
)

pytestmark = pytest.mark.e2e

CLUSTERS = ("east", "west")
ALLOCATION = {"research": 5.0, "vision": 3.0, "serving": 2 / 3, "search": 1 / 3}  # the zoo's, per cluster


class TwoClusters(PrometheusHarness):
    """One Prometheus; each cluster's exporter and kube-state-metrics carry its ``cluster`` target label."""

    def __init__(self, exporters: Mapping[str, Sequence[str]], kube_state_metrics: Mapping[str, str],
                 **kwargs: Any) -> None:
        super().__init__([target for targets in exporters.values() for target in targets], **kwargs)
        self.exporters = dict(exporters)
        self.kube_state_metrics = dict(kube_state_metrics)

    def config(self) -> dict[str, Any]:
        config = super().config()
        [exporters] = config["scrape_configs"]
        exporters["static_configs"] = [{"targets": list(targets), "labels": {"cluster": cluster}}
                                       for cluster, targets in self.exporters.items()]
        config["scrape_configs"].append({
            "job_name": "kube-state-metrics",
            "static_configs": [{"targets": [target], "labels": {"cluster": cluster}}
                               for cluster, target in self.kube_state_metrics.items()]})
        return config


ZOO_NODE = ZOO.hostname


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusHarness]:
    require_prometheus()
    install = helm_install(PROCESS_ATTRIBUTION)
    rule_file = install.write_rule_file(tmp_path_factory.mktemp("two-clusters") / "prometheusrule-groups.yaml")
    assert recorded_names([rule_file]) == recorded_names(RULE_FILES)  # the records parametrized below
    with ExitStack() as stack:
        exporters: dict[str, ExporterProcess] = {}
        for cluster in CLUSTERS:
            process = start_exporter(install, ZOO, tmp_path_factory.mktemp(cluster))
            stack.callback(process.stop)
            exporters[cluster] = process
        kube_state_metrics = {cluster: stack.enter_context(serve_text(KUBE_STATE_METRICS)) for cluster in CLUSTERS}
        for process in exporters.values():
            process.wait_listening(deadline_s=30)
        # each cluster also has a target where nothing listens (the "targets down" panel shows it)
        harness = stack.enter_context(TwoClusters(
            {cluster: [f"127.0.0.1:{process.port}", f"127.0.0.1:{free_port()}"]
             for cluster, process in exporters.items()}, kube_state_metrics, rule_files=[rule_file]))
        harness.wait_for('up{job="gpu-pod-exporter"} == 1', lambda s: len(s) == 2, deadline_s=30)
        harness.wait_for_rules_evaluated()
        harness.wait_for("team:gpu_allocated:sum", lambda s: len(s) == 2 * len(ALLOCATION), deadline_s=30)
        yield harness


def by_cluster(samples: Sequence[Sample]) -> dict[str, set[frozenset[tuple[str, str]]]]:
    """Each cluster's series (their labels without ``cluster`` and the scrape address ``instance``);
    series without a cluster label under ""."""
    found: dict[str, set[frozenset[tuple[str, str]]]] = {}
    for sample in samples:
        labels = dict(sample.labels)
        labels.pop("instance", None)
        cluster = labels.pop("cluster", "")
        found.setdefault(cluster, set()).add(frozenset(labels.items()))
    return found


def test_both_clusters_have_the_same_node_and_gpus(prometheus: PrometheusHarness) -> None:
    gpus = by_cluster(prometheus.query("max by (cluster, Hostname, UUID) (DCGM_FI_DEV_FB_USED)"))
    assert set(gpus) == set(CLUSTERS)
    assert gpus["east"] == gpus["west"]  # a complete collision: same Hostname, same UUIDs
    assert {dict(labels)["Hostname"] for labels in gpus["east"]} == {ZOO_NODE}


def test_every_rule_evaluates_without_errors(prometheus: PrometheusHarness) -> None:
    problems = [(rule["name"], rule.get("lastError")) for group in prometheus.rules() for rule in group["rules"]
                if rule["health"] != "ok"]
    assert problems == []


@pytest.mark.parametrize("record", sorted(recorded_names(RULE_FILES)))
def test_every_recording_rule_keeps_the_clusters_apart(prometheus: PrometheusHarness, record: str) -> None:
    # The same node in each cluster: the same series, once per cluster (the two exporters started a
    # moment apart, so a counter's first increase may show in one a scrape before the other).
    samples = prometheus.wait_for(record, lambda s: set(by_cluster(s)) == set(CLUSTERS)
                                  and by_cluster(s)["east"] == by_cluster(s)["west"], deadline_s=60)
    assert set(by_cluster(samples)) == set(CLUSTERS)  # every series carries its cluster


def test_allocation_is_counted_once_per_cluster(prometheus: PrometheusHarness) -> None:
    allocated = prometheus.query("team:gpu_allocated:sum")
    for cluster in CLUSTERS:
        assert {s.labels["team"]: s.value for s in allocated if s.labels["cluster"] == cluster} == \
            pytest.approx(ALLOCATION)
    energy = prometheus.query("cluster:gpu_energy_joules:increase5m")
    assert sorted(s.labels["cluster"] for s in energy) == list(CLUSTERS)


def dashboard_checks(prometheus: PrometheusHarness, cluster: str) -> list[Check]:
    """Every query of our dashboards with the variables Grafana would set for ``cluster``."""
    base = {"datasource": "prometheus", **GRAFANA_BUILTINS}
    checks = []
    for dashboard in load_dashboards().values():
        variables = query_variables(dashboard)
        assert variables[0].name == "cluster"
        offered = {s.labels["cluster"] for s in prometheus.query(variables[0].selector)}
        assert offered == set(CLUSTERS)  # the variable offers both clusters
        values = resolve_variables(prometheus, variables, base, {"cluster": cluster, "Hostname": ZOO_NODE})
        checks += [Check(query.dashboard, query.source, cluster, shorten_subquery_resolution(query.resolved(values)))
                   for query in dashboard_queries(dashboard)]
    return checks


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_dashboard_query_answers_from_the_chosen_cluster_only(prometheus: PrometheusHarness,
                                                                   cluster: str) -> None:
    checks = dashboard_checks(prometheus, cluster)
    assert len(checks) > 100
    answers = answer_all(prometheus, checks, 75.0)
    assert [check.where for check, count in answers.items() if count == 0] == []
    foreign = {}
    for check in checks:
        if check.where.endswith("variable cluster"):  # the one query that lists every cluster, by design
            continue
        clusters = {s.labels["cluster"] for s in prometheus.query(check.expr) if "cluster" in s.labels}
        if clusters - {cluster}:
            foreign[check.where] = clusters
    assert foreign == {}


def test_a_cluster_that_does_not_exist_shows_nothing(prometheus: PrometheusHarness) -> None:
    """Every selector of every query is filtered by the variable: nothing leaks in from the others."""
    checks = dashboard_checks(prometheus, "east")
    shown = {}
    for check in checks:
        expr = check.expr.replace('cluster="east"', 'cluster="nowhere"')
        assert expr != check.expr or check.where.endswith("variable cluster"), check.where
        if check.where.endswith("variable cluster"):
            continue
        samples = [s for s in prometheus.query(expr) if s.labels or s.value != 0]  # `or vector(0)` is nothing
        if samples:
            shown[check.where] = samples[:2]
    assert shown == {}


def test_alerts_keep_the_cluster(prometheus: PrometheusHarness) -> None:
    """GPU 7 of the zoo falls off the bus in both clusters: two alerts, one per cluster."""
    lost = prometheus.wait_for('ALERTS{alertname="GpuFallenOffBus", alertstate="firing"}', lambda s: len(s) == 2,
                               deadline_s=60)
    assert sorted(s.labels["cluster"] for s in lost) == list(CLUSTERS)
