"""Static checks of deploy/dashboards/*.json: Grafana 10 model, portable, every query answerable.

"Answerable" here means: every expression parses as PromQL once Grafana's variables are filled
in, and every metric it reads is one the exporter produces (its field catalog and its registry of
owned metrics, see exporter_metrics.py), an allowlisted external name, or a series of our
recording rules; every label is in known_labels.txt. The e2e test
(tests/e2e/test_default_install.py) runs the same queries against a real Prometheus
scraping the exporter and requires an answer from each.
"""

from pathlib import Path
from typing import Any

import pytest

from tests.dashboards.dashboard_queries import (
    BUILTIN_VARIABLES,
    DASHBOARD_DIR,
    REPO_ROOT,
    all_queries,
    dashboard_queries,
    dcgm_exporter_queries,
    iter_panels,
    load_dashboards,
    substitute,
    variable_names,
    variables_used,
)
from tests.dashboards.exporter_metrics import known_metric_entries
from tests.dashboards.promql_names import (
    literal_matchers,
    load_label_names,
    names_in,
    recorded_names,
    unknown_names,
)

RULE_FILES = sorted((REPO_ROOT / "deploy" / "rules").glob("*.yaml"))
DASHBOARDS = load_dashboards()
EXPECTED_UIDS = {"gpu-pod-exporter-overview", "gpu-pod-exporter-node", "gpu-pod-exporter-teams"}
# Example values for every variable our dashboards define (and dcgm-exporter's `instance`).
EXAMPLE_VALUES = {"datasource": "prometheus", "cluster": "east", "Hostname": "node-a", "gpu": "0",
                  "modelName": "NVIDIA H200", "team": "vision", "namespace": "ml", "instance": "10.0.0.5:9400"}
# Labels that identify a cluster's own objects: dashboards must filter them through variables only.
SCOPED_LABELS = {"Hostname", "namespace", "pod", "container", "team", "node", "instance", "cluster", "UUID"}
MARKER = "VAR_"


def known_metric_names() -> set[str]:
    return set(known_metric_entries()) | recorded_names(RULE_FILES)


def panels_of(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return list(iter_panels(dashboard["panels"]))


def dashboard_by_uid(uid: str) -> dict[str, Any]:
    return next(d for d in DASHBOARDS.values() if d["uid"] == uid)


def test_the_three_dashboards_exist_with_distinct_uids() -> None:
    uids = [str(d.get("uid")) for d in DASHBOARDS.values()]
    assert sorted(uids) == sorted(EXPECTED_UIDS)


@pytest.mark.parametrize("path", sorted(DASHBOARDS), ids=lambda p: p.name)
def test_dashboard_is_grafana_10_json_with_a_datasource_variable(path: Path) -> None:
    dashboard = DASHBOARDS[path]
    assert dashboard["schemaVersion"] >= 38
    assert dashboard["title"]
    assert "gpu-pod-exporter" in dashboard["tags"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels_of(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


@pytest.mark.parametrize("path", sorted(DASHBOARDS), ids=lambda p: p.name)
def test_every_panel_and_query_uses_the_datasource_variable(path: Path) -> None:
    for panel in panels_of(DASHBOARDS[path]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    for variable in DASHBOARDS[path]["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize("path", sorted(DASHBOARDS), ids=lambda p: p.name)
def test_panels_are_time_series_stats_tables_and_bars_not_pies(path: Path) -> None:
    types = {p["type"] for p in panels_of(DASHBOARDS[path])}
    assert types <= {"row", "timeseries", "stat", "table", "bargauge"}
    assert "timeseries" in types


@pytest.mark.parametrize("path", sorted(DASHBOARDS), ids=lambda p: p.name)
def test_no_cluster_specific_value_is_hard_coded(path: Path) -> None:
    """Node, namespace, pod, team... matchers take their values from variables, or match anything."""
    dashboard = DASHBOARDS[path]
    markers = {name: f"{MARKER}{name}" for name in variable_names(dashboard)}
    for query in dashboard_queries(dashboard):
        assert literal_matchers(query.resolved(markers), SCOPED_LABELS, MARKER) == [], query.source


@pytest.mark.parametrize("path", sorted(DASHBOARDS), ids=lambda p: p.name)
def test_every_variable_a_query_uses_is_defined(path: Path) -> None:
    dashboard = DASHBOARDS[path]
    defined = variable_names(dashboard) | set(BUILTIN_VARIABLES)
    for query in dashboard_queries(dashboard):
        assert variables_used(query.expr) <= defined, query.source


def test_every_dashboard_query_parses_and_reads_only_names_the_exporter_produces() -> None:
    queries = all_queries()
    assert len(queries) > 60  # panels in rows, variables and annotations are all found
    exprs = [(f"{q.dashboard} {q.source}", q.resolved(EXAMPLE_VALUES)) for q in queries]
    assert unknown_names(exprs, known_metric_names(), load_label_names()) == []


def test_dcgm_exporter_dashboard_queries_read_only_names_the_exporter_produces() -> None:
    queries = dcgm_exporter_queries()
    assert len(queries) == 10
    exprs = [(q.source, q.resolved(EXAMPLE_VALUES)) for q in queries]
    assert unknown_names(exprs, known_metric_names(), load_label_names()) == []
    assert {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"} <= set().union(
        *(names_in(expr).metrics for _, expr in exprs))


def test_node_dashboard_has_the_detail_panels() -> None:
    node = dashboard_by_uid("gpu-pod-exporter-node")
    variables = {v["name"]: v for v in node["templating"]["list"]}
    assert {"Hostname", "gpu"} <= set(variables)
    panels = {p["title"]: p for p in panels_of(node)}
    overlay = panels["Memory, utilization and temperature"]
    metrics = set().union(*(names_in(substitute(t["expr"], {"gpu": "0", "Hostname": "a", "cluster": ""})).metrics
                            for t in overlay["targets"]))
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP"} <= metrics
    right_axis = [o for o in overlay["fieldConfig"]["overrides"]
                  if {"id": "custom.axisPlacement", "value": "right"} in o["properties"]]
    assert right_axis and right_axis[0]["matcher"] == {"id": "byFrameRefID", "options": "C"}
    for title in ("GPU utilization", "Framebuffer memory used", "Temperature", "Power", "Clocks",
                  "Clock event (throttle) reasons active", "Xid timeline", "MIG instance memory used"):
        assert title in panels


def test_overview_lists_unhealthy_gpus_with_xid_ecc_temperature_and_reason() -> None:
    overview = dashboard_by_uid("gpu-pod-exporter-overview")
    panels = {p["title"]: p for p in panels_of(overview)}
    table = panels["Unhealthy GPUs"]
    metrics = set().union(*(names_in(substitute(
        t["expr"], {"Hostname": ".*", "modelName": ".*", "cluster": ""})).metrics
                            for t in table["targets"]))
    assert {"DCGM_EXP_GPU_HEALTHY", "DCGM_EXP_XID_ERRORS_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "DCGM_FI_DEV_GPU_TEMP"} <= metrics
    assert "Unhealthy GPUs" in {p["title"] for p in panels_of(overview) if p["type"] == "stat"}


def test_team_view_has_memory_versus_utilization_and_energy() -> None:
    teams = dashboard_by_uid("gpu-pod-exporter-teams")
    panels = {p["title"]: p for p in panels_of(teams)}
    assert panels["High memory, low utilization"]["type"] == "table"
    assert panels["Top pods by GPU memory"]["type"] == "table"
    energy = [t["expr"] for p in panels_of(teams) for t in p.get("targets", [])]
    assert any("team:gpu_energy_joules:increase5m" in expr for expr in energy)


def test_team_view_draws_gpu_quota_beside_measured_need_per_namespace() -> None:
    """The quota panel reads the recorded quota and the recorded p95 of GPUs in use (group gpu-quota), per namespace."""
    teams = dashboard_by_uid("gpu-pod-exporter-teams")
    panel = {p["title"]: p for p in panels_of(teams)}["GPU quota vs measured need (p95, 7 days)"]
    exprs = sorted(t["expr"] for t in panel["targets"])
    assert exprs == ['namespace:gpu_in_use:p95_7d{cluster="$cluster", namespace=~"$namespace"}',
                     'namespace:gpu_quota:hard{cluster="$cluster", namespace=~"$namespace"}']
    assert {t["legendFormat"] for t in panel["targets"]} == {"{{namespace}} quota", "{{namespace}} need (p95 7d)"}


def _link_urls(dashboard: dict[str, Any]) -> list[str]:
    urls: list[str] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            if "url" in node and isinstance(node["url"], str):
                urls.append(node["url"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(dashboard["panels"])
    return urls


@pytest.mark.parametrize(("source", "target", "variable"), [
    ("gpu-pod-exporter-overview", "gpu-pod-exporter-node", "var-Hostname="),
    ("gpu-pod-exporter-node", "gpu-pod-exporter-teams", "var-namespace="),
    ("gpu-pod-exporter-teams", "gpu-pod-exporter-node", "var-gpu="),
])
def test_drill_down_links_carry_the_variables(source: str, target: str, variable: str) -> None:
    urls = [u for u in _link_urls(dashboard_by_uid(source)) if f"/d/{target}/" in u]
    assert urls, f"{source} has no data link to {target}"
    assert all("${datasource:queryparam}" in u and "${__url_time_range}" in u for u in urls)
    assert any(variable in u for u in urls)


@pytest.mark.parametrize("path", sorted(DASHBOARDS), ids=lambda p: p.name)
def test_dashboard_links_reach_the_others_keeping_the_time_range(path: Path) -> None:
    links = DASHBOARDS[path]["links"]
    assert any(link["type"] == "dashboards" and "gpu-pod-exporter" in link["tags"] and link["keepTime"]
               for link in links)


def test_dashboards_doc_describes_each_dashboard() -> None:
    text = (REPO_ROOT / "docs" / "dashboards.md").read_text(encoding="utf-8")
    for uid in EXPECTED_UIDS:
        assert uid in text
    assert DASHBOARD_DIR.name in text
