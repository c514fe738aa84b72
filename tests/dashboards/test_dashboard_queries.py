"""The dashboard query extractor: finds queries everywhere Grafana keeps them, and catches typos."""

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.dashboards.dashboard_queries import (
    QueryVariable,
    UnknownVariableError,
    all_queries,
    dashboard_queries,
    dcgm_exporter_variables,
    grafana_regex_value,
    iter_panels,
    load_dashboards,
    query_variables,
    substitute,
    variable_query_to_promql,
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
from tests.dashboards.test_dashboards import RULE_FILES

KNOWN = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED", "ALERTS"}
LABELS = {"Hostname", "gpu", "alertstate", "alertname"}


def small_dashboard() -> dict[str, Any]:
    return {
        "uid": "test",
        "panels": [
            {"type": "timeseries", "title": "Top", "targets": [
                {"refId": "A", "expr": 'DCGM_FI_DEV_GPU_UTIL{Hostname="$Hostname"}'}]},
            {"type": "row", "title": "Collapsed", "collapsed": True, "panels": [
                {"type": "timeseries", "title": "Nested", "targets": [
                    {"refId": "A", "expr": 'rate(DCGM_FI_DEV_GPU_TEMP{gpu=~"$gpu"}[$__rate_interval])'},
                    {"refId": "B", "expr": "DCGM_FI_DEV_FB_USED", "instant": True}]}]},
            {"type": "text", "title": "No queries"},
        ],
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus"},
            {"name": "Hostname", "type": "query",
             "query": {"query": "label_values(DCGM_FI_DEV_FB_USED, Hostname)"}},
            {"name": "gpu", "type": "query",
             "query": 'label_values(DCGM_FI_DEV_FB_USED{Hostname="$Hostname", gpu!=""}, gpu)'},
            {"name": "any", "type": "query", "query": "label_values(Hostname)"},
        ]},
        "annotations": {"list": [{"name": "alerts", "expr": 'ALERTS{alertstate="firing"}'}]},
    }


def test_queries_are_found_in_panels_collapsed_rows_variables_and_annotations() -> None:
    found = {(q.source, q.expr, q.instant) for q in dashboard_queries(small_dashboard())}
    assert found == {
        ("panel 'Top' query A", 'DCGM_FI_DEV_GPU_UTIL{Hostname="$Hostname"}', False),
        ("panel 'Nested' query A", 'rate(DCGM_FI_DEV_GPU_TEMP{gpu=~"$gpu"}[$__rate_interval])', False),
        ("panel 'Nested' query B", "DCGM_FI_DEV_FB_USED", True),
        ("variable Hostname", "DCGM_FI_DEV_FB_USED", True),
        ("variable gpu", 'DCGM_FI_DEV_FB_USED{Hostname="$Hostname", gpu!=""}', True),
        ("annotation 'alerts'", 'ALERTS{alertstate="firing"}', False),
    }


@pytest.mark.parametrize(("query", "expr"), [
    ("label_values(DCGM_FI_DEV_GPU_TEMP, instance)", "DCGM_FI_DEV_GPU_TEMP"),
    ('label_values(up{job=~"a,b"}, instance)', 'up{job=~"a,b"}'),
    ("query_result(topk(5, DCGM_FI_DEV_GPU_UTIL))", "topk(5, DCGM_FI_DEV_GPU_UTIL)"),
    ("label_values(Hostname)", None),
    ("label_names()", None),
    ("metrics(DCGM_.*)", None),
])
def test_variable_queries_become_promql(query: str, expr: str | None) -> None:
    assert variable_query_to_promql(query) == expr


def test_a_typo_in_any_panel_of_a_real_dashboard_is_caught() -> None:
    dashboard = next(iter(load_dashboards().values()))
    broken = copy.deepcopy(dashboard)
    values = {"cluster": "", "Hostname": "a", "gpu": "0", "modelName": "m", "team": "t", "namespace": "n"}
    panel = next(p for p in iter_panels(broken["panels"]) if p.get("targets"))
    target = panel["targets"][0]
    metric = sorted(names_in(substitute(target["expr"], values)).metrics)[0]
    typo = metric[:-1] + metric[-1] * 2  # e.g. DCGM_FI_DEV_GPU_UTILL
    target["expr"] = target["expr"].replace(metric, typo, 1)

    def problems(d: dict[str, Any]) -> list[str]:
        known = set(known_metric_entries()) | recorded_names(RULE_FILES)
        return unknown_names([(q.source, q.resolved(values)) for q in dashboard_queries(d)], known,
                             load_label_names())

    assert problems(dashboard) == []
    found = problems(broken)
    assert len(found) == 1, found
    assert found[0].startswith(f"panel {panel['title']!r} query")
    assert found[0].endswith(f"unknown metric {typo}")


def test_a_typo_in_a_small_dashboard_names_the_nested_panel() -> None:
    dashboard = small_dashboard()
    dashboard["panels"][1]["panels"][0]["targets"][1]["expr"] = "DCGM_FI_DEV_FB_USEDD"
    values = {"Hostname": "a", "gpu": "0"}
    exprs = [(q.source, q.resolved(values)) for q in dashboard_queries(dashboard)]
    found = unknown_names(exprs, KNOWN, LABELS)
    assert found == ["panel 'Nested' query B: unknown metric DCGM_FI_DEV_FB_USEDD"]


def test_substitute_handles_grafana_syntaxes_and_builtins() -> None:
    expr = 'rate(x{a="$Hostname", b=~"${gpu}", c="[[team]]", d="${gpu:regex}"}[$__rate_interval])'
    assert substitute(expr, {"Hostname": "n1", "gpu": "(0|1)", "team": "t"}) == \
        'rate(x{a="n1", b=~"(0|1)", c="t", d="(0|1)"}[1m])'
    assert substitute("sum_over_time(y[$__range:5m])", {"__range": "7d"}) == "sum_over_time(y[7d:5m])"


def test_substitute_leaves_regex_references_alone() -> None:
    expr = 'label_replace(x, "Hostname", "$1", "node", "(.+)")'
    assert substitute(expr, {}) == expr
    assert variables_used(expr) == set()


def test_substitute_refuses_a_variable_without_value() -> None:
    with pytest.raises(UnknownVariableError, match=r"\$namespace"):
        substitute('x{namespace="$namespace"}', {})


def test_hard_coded_values_are_found_and_variables_accepted() -> None:
    expr = 'x{namespace="gpu-monitoring", Hostname="VAR_Hostname", pod!="", gpu="0"} and on (a) y{team=~".*"}'
    found = literal_matchers(expr, {"namespace", "Hostname", "pod", "team"}, "VAR_")
    assert found == ['namespace="gpu-monitoring"']


def test_all_queries_reads_every_dashboard_file(tmp_path: Path) -> None:
    (tmp_path / "one.json").write_text(json.dumps(small_dashboard()))
    second = small_dashboard()
    second["uid"] = "second"
    (tmp_path / "two.json").write_text(json.dumps(second))
    queries = all_queries(tmp_path)
    assert {q.dashboard for q in queries} == {"test", "second"}
    assert len(queries) == 12


def test_query_variables_are_listed_in_resolution_order_with_their_label() -> None:
    assert query_variables(small_dashboard()) == [
        QueryVariable("Hostname", "DCGM_FI_DEV_FB_USED", "Hostname", multi=False),
        QueryVariable("gpu", 'DCGM_FI_DEV_FB_USED{Hostname="$Hostname", gpu!=""}', "gpu", multi=False),
    ]
    dashboard = small_dashboard()
    dashboard["templating"]["list"][2]["includeAll"] = True
    assert query_variables(dashboard)[1].multi


def test_dcgm_exporter_dashboard_variables_are_multi_value() -> None:
    assert dcgm_exporter_variables() == [
        QueryVariable("instance", "DCGM_FI_DEV_GPU_TEMP", "instance", multi=True),
        QueryVariable("gpu", "DCGM_FI_DEV_GPU_TEMP", "gpu", multi=True),
    ]


@pytest.mark.parametrize(("values", "text"), [
    (["0"], "0"),
    (["0", "1", "10"], "(0|1|10)"),
    (["127.0.0.1:9400", "a(b)|c"], r"(127\\.0\\.0\\.1:9400|a\\(b\\)\\|c)"),
])
def test_multi_value_variables_become_an_escaped_regex_like_grafana_sends(values: list[str], text: str) -> None:
    assert grafana_regex_value(values) == text
    # inside a PromQL string the doubled backslashes become single ones: the regex matches the values
    regex = text.replace("\\\\", "\\")
    assert all(re.fullmatch(regex, value) for value in values)
