"""Two clusters with the same node names behind Thanos: every rule, dashboard and report keeps them apart.

The architecture of docs/fleet.md, all real processes on loopback:

* cluster ``a`` and cluster ``b``: each runs the chart-installed exporter (default values, process
  attribution on, so the per-container panels answer too) on the same simulated node (the built-in
  ``alert-zoo``: Hostname ``zoo-node``, the same GPU UUIDs, pods and teams) and a kube-state-metrics
  stand-in, scraped every second by its own **Prometheus 3** whose only mark of its cluster is the
  external label ``cluster`` (nothing in its TSDB carries it), loading the chart's rule groups, with
  a **Thanos sidecar**;
* one **Thanos Query** in front of both sidecars and the ruler;
* one **Thanos Ruler** evaluating the chart's recording groups once for the fleet, through the Query.

Node names and GPU UUIDs collide completely, so a rule that joined ``on (Hostname, UUID)`` without
``cluster`` fails ("many-to-many matching not allowed") or merges the clusters, and one that summed
``by (namespace)`` adds them up. What is shown:

* the ruler's recorded series equal each cluster's own, **sample for sample**: both evaluate each
  recording group at the same instants (each cluster's group gets a ``query_offset`` that moves its
  instants onto the ruler's: tests/e2e/thanos_fleet.py ``align_evaluations``) and read the same
  scrapes (each evaluates far enough in the past that every scrape it reads is written);
* every dashboard query, with the ``cluster`` variable set as Grafana sets it, answers through the
  Query for each cluster, with only that cluster's series, and through the sidecars with **exactly
  what that cluster's own Prometheus answers** at the same instant (``cluster`` "None" there); for a
  cluster that does not exist it answers nothing;
* ``gpu-pod-exporter report --prometheus <Query>`` gives for each cluster the figures that cluster's
  Prometheus gives, and across both their sum (over a window where every evaluator recorded every
  instant, so that deduplication takes each instant's sample from either, equal, copy).

The ruler's recorded series carry its own external label ``rule_replica="fleet"``, and the Query
deduplicates on it (``--query.replica-label=rule_replica``): here each cluster also evaluates the
rules, as the chart installs them, so the same series exist twice, once from each evaluator. The
label keeps them apart for the comparison (``dedup=false``), and deduplication shows dashboards
and the report one series, not a doubled sum. docs/fleet.md says when to run which.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from exporter.report.cli import main as report_main
from tests.dashboards.dashboard_queries import dashboard_queries, load_dashboards, query_variables
from tests.e2e.installed import helm_install
from tests.e2e.test_default_install import (
    GRAFANA_BUILTINS,
    PROCESS_ATTRIBUTION,
    Check,
    answer_all,
    resolve_variables,
    shorten_subquery_resolution,
)
from tests.e2e.thanos_fleet import (
    ALLOCATION,
    CLUSTER_QUERY_OFFSET_S,
    CLUSTERS,
    INTERVAL_S,
    REL,
    RULER_LABELS,
    ZOO_NODE,
    Fleet,
    Key,
    local_samples,
    ruler_samples,
    two_clusters,
)
from tests.support.polling import wait_for
from tests.support.prometheus import PrometheusHarness, Sample, prometheus_engine
from tests.support.thanos import require_thanos

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with two_clusters(prometheus_engine("3"), require_thanos(), tmp_path_factory.mktemp("two-clusters")) as running:
        yield running


def recorded(fleet: Fleet) -> list[str]:
    return sorted(str(rule["record"]) for group in fleet.recording_groups for rule in group["rules"])


def by_cluster(samples: Sequence[Sample]) -> dict[str, set[frozenset[tuple[str, str]]]]:
    """Each cluster's series (labels without ``cluster``, ``instance`` and the replica label)."""
    found: dict[str, set[frozenset[tuple[str, str]]]] = {}
    for sample in samples:
        labels = {k: v for k, v in sample.labels.items() if k not in ("instance", *RULER_LABELS)}
        cluster = labels.pop("cluster", "")
        found.setdefault(cluster, set()).add(frozenset(labels.items()))
    return found


# ------------------------------------------------------------------------------- the architecture
def test_the_engines_are_prometheus_3_and_thanos(fleet: Fleet) -> None:
    print(f"\nengines: Prometheus {fleet.prometheus_version} per cluster; Thanos {fleet.thanos_version} "
          "(sidecar, query, rule)")
    assert fleet.prometheus_version.startswith("3.") and fleet.thanos_version.startswith("0.")
    stores = fleet.query.stores()
    labels = sorted(json.dumps(store.get("labelSets") or store.get("labels")) for store in stores)
    assert len(stores) == 3, stores
    assert any('"cluster": "a"' in text for text in labels) and any('"cluster": "b"' in text for text in labels)
    assert any('"rule_replica": "fleet"' in text for text in labels)


def test_nothing_in_a_cluster_s_own_tsdb_carries_the_cluster_label(fleet: Fleet) -> None:
    """The external label is added on the way out (sidecar), so each cluster alone looks as before."""
    for server in fleet.clusters.values():
        assert server.query("count(DCGM_FI_DEV_FB_USED{cluster!=\"\"})") == []
        assert server.query("count(DCGM_FI_DEV_FB_USED)")[0].value > 0


def test_both_clusters_have_the_same_node_and_gpus(fleet: Fleet) -> None:
    gpus = by_cluster(fleet.query.query("max by (cluster, hostname, UUID) (DCGM_FI_DEV_FB_USED)"))
    assert set(gpus) == set(CLUSTERS)
    assert gpus["a"] == gpus["b"]  # a complete collision: same hostname, same UUIDs
    assert {dict(labels)["hostname"] for labels in gpus["a"]} == {ZOO_NODE}


def test_every_rule_evaluates_without_errors(fleet: Fleet) -> None:
    problems = [(cluster, rule["name"], rule.get("lastError")) for cluster, server in fleet.clusters.items()
                for group in server.rules() for rule in group["rules"] if rule["health"] != "ok"]
    groups = fleet.ruler.get("/api/v1/rules")["groups"]
    problems += [("ruler", rule["name"], rule.get("lastError")) for group in groups for rule in group["rules"]
                 if rule["health"] != "ok"]
    assert problems == []
    assert sorted(rule["name"] for group in groups for rule in group["rules"]) == recorded(fleet)


# ------------------------------------------------------------------------------------ the ruler
def by_time(series: Mapping[Key, Mapping[float, float]]) -> dict[float, dict[Key, float]]:
    """Samples regrouped per evaluation: timestamp -> {labels: value}."""
    found: dict[float, dict[Key, float]] = {}
    for key, points in series.items():
        for t, value in points.items():
            found.setdefault(t, {})[key] = value
    return found


def latest(series: Mapping[Key, Mapping[float, float]]) -> dict[float, dict[Key, float]]:
    """Only each series' latest sample, by time."""
    return by_time({key: {max(points): points[max(points)]} for key, points in series.items() if points})


def test_the_ruler_evaluates_at_the_clusters_instants(fleet: Fleet) -> None:
    """The condition for comparing sample for sample: the same evaluation instants within the second."""
    at = time.time()
    name = "team:gpu_allocated:sum"
    ruler = ruler_samples(fleet, name, at, 30)
    for cluster, server in fleet.clusters.items():
        local = latest(local_samples(server, f"{name}[10s]", at))  # since the fleet was aligned
        mine = by_time(ruler[cluster])
        assert mine and local
        assert {round(t % INTERVAL_S, 3) for t in mine} == {round(t % INTERVAL_S, 3) for t in local}


RECORDS = sorted(str(rule["record"]) for group in helm_install(PROCESS_ATTRIBUTION).rule_groups
                 for rule in group["rules"] if all("record" in r for r in group["rules"]))
SHARED_EVALUATIONS = 5


@pytest.mark.parametrize("record", RECORDS)
def test_the_ruler_records_what_each_cluster_records(fleet: Fleet, record: str) -> None:
    """Per cluster, at every instant both evaluated (at least 5 within 30 s), the ruler recorded the
    cluster's own series of ``record`` (same labels, plus ``cluster``) with the same values."""
    def compare() -> list[str] | None:
        at = time.time()
        ruler = ruler_samples(fleet, record, at, 30)
        problems: list[str] = []
        shared_counts = []
        for cluster, server in fleet.clusters.items():
            local = by_time(local_samples(server, f"{record}[30s]", at))
            mine = by_time(ruler.get(cluster, {}))
            shared = sorted(set(local) & set(mine))
            shared_counts.append(len(shared))
            for t in shared:
                if mine[t].keys() != local[t].keys():
                    problems.append(f"{cluster} at {t}: ruler {sorted(map(dict, mine[t]))}, "
                                    f"cluster {sorted(map(dict, local[t]))}")
                problems += [f"{cluster} {dict(key)} at {t}: ruler {value} != cluster {local[t][key]}"
                             for key, value in mine[t].items() if key in local[t]
                             and not math.isclose(value, local[t][key], rel_tol=REL, abs_tol=1e-12)]
        if problems:
            return problems
        return [] if min(shared_counts) >= SHARED_EVALUATIONS else None

    assert wait_for(lambda: (result := compare()) is not None and (result or ["equal"]), 90,
                    f"{SHARED_EVALUATIONS} evaluations of {record} by the ruler and both clusters", 0.5) == ["equal"]


def test_allocation_is_counted_once_per_cluster(fleet: Fleet) -> None:
    """Through the Query, deduplicated: research holds 5 GPUs in each cluster, not 10 (nor 20)."""
    allocated = fleet.query.query("team:gpu_allocated:sum")
    for cluster in CLUSTERS:
        assert {s.labels["team"]: s.value for s in allocated if s.labels["cluster"] == cluster} == \
            pytest.approx(ALLOCATION)
    assert len(allocated) == len(CLUSTERS) * len(ALLOCATION)
    energy = fleet.query.query("cluster:gpu_energy_joules:increase5m")
    assert sorted(s.labels["cluster"] for s in energy) == list(CLUSTERS)


# ----------------------------------------------------------------------------------- dashboards
def dashboard_checks(server: PrometheusHarness, cluster: str) -> list[Check]:
    """Every query of our dashboards with the variables Grafana would set for ``cluster``."""
    base = {"datasource": "prometheus", **GRAFANA_BUILTINS}
    checks = []
    for dashboard in load_dashboards().values():
        variables = query_variables(dashboard)
        assert variables[0].name == "cluster"
        offered = {s.labels["cluster"] for s in server.query(variables[0].selector)}
        assert offered == set(CLUSTERS)  # the variable offers both clusters
        values = resolve_variables(server, variables, base, {"cluster": cluster, "Hostname": ZOO_NODE})
        checks += [Check(query.dashboard, query.source, cluster, shorten_subquery_resolution(query.resolved(values)))
                   for query in dashboard_queries(dashboard)]
    return checks


@pytest.fixture(scope="module")
def dashboards(fleet: Fleet) -> dict[str, list[Check]]:
    """Each cluster's dashboard queries, once every one has answered through the Query."""
    checks = {cluster: dashboard_checks(fleet.query, cluster) for cluster in CLUSTERS}
    for cluster in CLUSTERS:
        answers = answer_all(fleet.query, checks[cluster], 75.0)
        assert [check.where for check, count in answers.items() if count == 0] == []
        print(f"\ndashboard queries answered through Thanos Query {fleet.thanos_version} for cluster {cluster}: "
              f"{sum(1 for count in answers.values() if count)} of {len(answers)}")
    return checks


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_dashboard_query_answers_from_the_chosen_cluster_only(fleet: Fleet, dashboards: dict[str, list[Check]],
                                                                   cluster: str) -> None:
    checks = dashboards[cluster]
    assert len(checks) > 100
    foreign = {}
    for check in checks:
        if check.where.endswith("variable cluster"):  # the one query that lists every cluster, by design
            continue
        clusters = {s.labels["cluster"] for s in fleet.query.query(check.expr) if "cluster" in s.labels}
        if clusters - {cluster}:
            foreign[check.where] = clusters
    assert foreign == {}


def answer(samples: Sequence[Sample]) -> dict[Key, float]:
    return {frozenset((k, v) for k, v in s.labels.items() if k != "cluster"): s.value for s in samples}


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_dashboard_query_through_thanos_equals_the_cluster_s_own_prometheus(
        fleet: Fleet, dashboards: dict[str, list[Check]], cluster: str) -> None:
    """At one instant, each panel shows through the Query for cluster ``cluster`` exactly what that
    cluster's Prometheus shows on its own (where no series has a cluster label: Grafana's "None", "").

    Asked of the sidecars only (``storeMatch[]``): with the ruler in, deduplication may take an instant's
    recorded sample from the ruler, equal to the cluster's where both evaluated that instant (the
    ruler tests above), but the first seconds, before the fleet was aligned, hold samples of each
    at other instants, which the 5-minute "in the time range" panels still read."""
    server = fleet.clusters[cluster]
    sidecars = [sidecar.grpc_address for sidecar in fleet.sidecars.values()]
    at = time.time() - CLUSTER_QUERY_OFFSET_S - 1  # every scrape and evaluation up to here is written
    different = {}
    compared = 0
    for check in dashboards[cluster]:
        if check.where.endswith("variable cluster"):
            continue
        through_thanos = answer(fleet.query.query_stores(check.expr, at, sidecars))
        alone = answer(server.query(check.expr.replace(f'cluster="{cluster}"', 'cluster=""'), at=at))
        compared += 1
        if through_thanos.keys() != alone.keys() or any(not math.isclose(value, alone[key], rel_tol=REL, abs_tol=1e-9)
                                                         for key, value in through_thanos.items()):
            different[check.where] = (sorted(through_thanos.items())[:3], sorted(alone.items())[:3])
    assert different == {}
    assert compared > 100


def test_a_cluster_that_does_not_exist_shows_nothing(fleet: Fleet, dashboards: dict[str, list[Check]]) -> None:
    """Every selector of every query is filtered by the variable: nothing leaks in from the others."""
    shown = {}
    for check in dashboards["a"]:
        expr = check.expr.replace('cluster="a"', 'cluster="nowhere"')
        assert expr != check.expr or check.where.endswith("variable cluster"), check.where
        if check.where.endswith("variable cluster"):
            continue
        samples = [s for s in fleet.query.query(expr) if s.labels or s.value != 0]  # `or vector(0)` is nothing
        if samples:
            shown[check.where] = samples[:2]
    assert shown == {}


def test_alerts_keep_the_cluster(fleet: Fleet) -> None:
    """GPU 7 of the zoo falls off the bus in both clusters: two alerts through the Query, one per cluster."""
    lost = fleet.query.wait_for('ALERTS{alertname="GpuFallenOffBus", alertstate="firing"}', lambda s: len(s) == 2,
                                deadline_s=60)
    assert sorted(s.labels["cluster"] for s in lost) == list(CLUSTERS)


# --------------------------------------------------------------------------------------- report
REPORT_POINTS = 20
REPORT_GROUP_SERIES = ("gpu_container:gpu_allocation_share:ratio", "namespace:gpu_utilization_weighted:sum",
                       "gpu:gpu_fraction:ratio")  # one series name of each recording group the report reads


def complete_window(fleet: Fleet) -> tuple[int, int] | None:
    """The latest REPORT_POINTS seconds in which every evaluator (both clusters, the ruler) recorded
    every report group at every instant: there the deduplicated series are each cluster's own, sample
    for sample. None until there is one. (Each group has instants of its own within the second.)"""
    at = time.time()
    starts, ends = [], []
    for name in REPORT_GROUP_SERIES:
        ruler = ruler_samples(fleet, name, at, 60)
        slots: set[int] | None = None
        for cluster, server in fleet.clusters.items():
            for found in (local_samples(server, f"{name}[60s]", at), ruler.get(cluster, {})):
                times = {round(t * 1000) for points in found.values() for t in points}
                slots = times if slots is None else slots & times
        run: list[int] = []
        for slot in sorted(slots or ()):
            run = [*run, slot] if run and slot - run[-1] == INTERVAL_S * 1000 else [slot]
        if not run:
            return None
        starts.append(math.ceil(run[0] / 1000))
        ends.append(run[-1] // 1000)
    end = min(ends)
    return (end - REPORT_POINTS, end) if end - max(starts) >= REPORT_POINTS else None


def run_report(url: str, window: tuple[int, int], *extra: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = report_main(["--prometheus", url, "--start", str(window[0]), "--end", str(window[1]), "--step", "1s",
                            "--price-per-gpu-hour", "2", "--format", "json", *extra])
    assert code == 0
    return dict(json.loads(out.getvalue()))


@pytest.fixture(scope="module")
def reports(fleet: Fleet) -> dict[str, dict[str, Any]]:
    """The report over one window: through the Query (all, each cluster) and from each Prometheus."""
    window = wait_for(lambda: complete_window(fleet), 120, f"{REPORT_POINTS} s that every evaluator recorded", 0.5)
    found = {"thanos": run_report(fleet.query.url, window)}
    for cluster, server in fleet.clusters.items():
        found[f"thanos {cluster}"] = run_report(fleet.query.url, window, "--cluster", cluster)
        found[f"prometheus {cluster}"] = run_report(server.url, window)
    return found


def figures(report: Mapping[str, Any], cluster: str | None = None) -> dict[str, Any]:
    """The report's numbers for ``cluster`` (rows, capacity, reclaim, idle pods), cluster names dropped."""
    def pick(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in item.items() if k != "cluster"} for item in items
                if cluster is None or item.get("cluster", "") in (cluster, "")]
    return {part: pick(report[part]) for part in ("rows", "capacity", "reclaim", "idle_pods")}


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_the_report_through_thanos_equals_the_cluster_s_own(reports: dict[str, dict[str, Any]], cluster: str) -> None:
    alone = reports[f"prometheus {cluster}"]
    assert {row["cluster"] for row in alone["rows"]} == {""}  # on its own, a cluster has no cluster label
    assert {row["cluster"] for row in reports[f"thanos {cluster}"]["rows"]} == {cluster}
    through_thanos = figures(reports[f"thanos {cluster}"])
    assert close(through_thanos, figures(alone)), (through_thanos, figures(alone))
    assert figures(reports["thanos"], cluster) == figures(reports[f"thanos {cluster}"])
    assert {row["team"] for row in alone["rows"]} == set(ALLOCATION)


def test_the_report_across_both_clusters_is_their_sum(reports: dict[str, dict[str, Any]]) -> None:
    both = reports["thanos"]
    assert sorted({row["cluster"] for row in both["rows"]}) == list(CLUSTERS)
    for field in ("allocated_gpu_hours", "busy_gpu_hours", "idle_gpu_hours", "memory_gib_hours", "energy_kwh", "cost"):
        parts = [reports[f"prometheus {cluster}"]["total"][field] for cluster in CLUSTERS]
        if any(part is None for part in parts):
            continue
        assert both["total"][field] == pytest.approx(sum(parts), rel=REL), field
    # the same allocation in both (whole-GPU equivalents: MIG slices by their compute fraction): twice one
    allocated = [reports[f"prometheus {cluster}"]["total"]["allocated_gpu_hours"] for cluster in CLUSTERS]
    assert allocated[0] == pytest.approx(allocated[1], rel=REL) and allocated[0] > 0
    print(f"\nreport through Thanos Query, both clusters: {both['total']['allocated_gpu_hours']:.6f} GPU-hours "
          f"allocated = {' + '.join(f'{hours:.6f}' for hours in allocated)} (each cluster's Prometheus)")


def close(left: Any, right: Any) -> bool:
    """Equal structures, numbers equal within REL (two engines may add in another order)."""
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(close(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(close(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, float) or isinstance(right, float):
        return isinstance(left, int | float) and isinstance(right, int | float) and \
            math.isclose(left, right, rel_tol=REL, abs_tol=1e-12)
    return bool(left == right)
