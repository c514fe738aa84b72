"""The optional ``cluster`` label, statically: rules keep it in every ``by`` and ``on``, dashboards filter
every selector by a ``cluster`` variable (as the kubernetes-mixin dashboards do).

A fleet that outgrows one Prometheus sends every cluster's series to one global store (Thanos, Mimir,
VictoriaMetrics) under an external ``cluster`` label. Node names repeat between clusters (and a
simulated or cloned fleet repeats GPU UUIDs too), so a rule that joins ``on (Hostname, UUID)`` or sums
``by (namespace)`` without ``cluster`` would mix clusters there. tests/e2e/test_two_clusters.py proves the
same on a real Prometheus holding two clusters with the same node names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import promql_parser
import pytest

from tests.dashboards.dashboard_queries import (
    BUILTIN_VARIABLES,
    dashboard_queries,
    load_dashboards,
    query_variables,
    substitute,
)
from tests.dashboards.promql_names import rule_groups
from tests.rules.promtool_runner import RULE_FILES

DASHBOARDS = load_dashboards()
CLUSTER_VALUE = "VAR_CLUSTER"
VALUES = {**BUILTIN_VARIABLES, "datasource": "x", "cluster": CLUSTER_VALUE, "Hostname": "VAR_H", "gpu": "VAR_G",
          "modelName": "VAR_M", "team": "VAR_T", "namespace": "VAR_N"}


def nodes(node: Any) -> Iterator[Any]:
    """Every node of a parsed PromQL expression, depth first."""
    yield node
    for child in ("expr", "lhs", "rhs", "vector_selector", "param"):
        sub = getattr(node, child, None)
        if isinstance(sub, promql_parser.Expr):
            yield from nodes(sub)
    for argument in getattr(node, "args", None) or []:
        yield from nodes(argument)


def reads_series(node: Any) -> bool:
    """Whether ``node`` reads any stored series (a join with a table of constants reads none)."""
    return any(isinstance(each, promql_parser.VectorSelector) for each in nodes(node))


def clauses_without_cluster(expr: str) -> list[str]:
    """``by (...)`` and ``on (...)`` clauses of ``expr`` that do not list ``cluster``; a join whose other
    side is built from ``vector()`` constants (no cluster to match) is exempt."""
    missing = []
    for node in nodes(promql_parser.parse(expr)):
        if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None \
                and str(node.modifier.type).endswith("By") and "cluster" not in node.modifier.labels:
            missing.append(f"by ({', '.join(node.modifier.labels)})")
        if isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None \
                and node.modifier.matching is not None and str(node.modifier.matching.type).endswith("Include") \
                and "cluster" not in node.modifier.matching.labels and reads_series(node.lhs) \
                and reads_series(node.rhs):
            missing.append(f"on ({', '.join(node.modifier.matching.labels)})")
    return missing


def selectors_without_cluster(expr: str) -> list[str]:
    """Vector selectors of ``expr`` without ``cluster="<the variable>"``."""
    found = []
    for node in nodes(promql_parser.parse(expr)):
        if isinstance(node, promql_parser.VectorSelector):
            matchers = {(m.name, str(m.op), m.value) for m in node.matchers.matchers}
            if ("cluster", "MatchOp.Equal", CLUSTER_VALUE) not in matchers:
                found.append(str(node))
    return found


RULES = {str(rule.get("alert") or rule.get("record")): str(rule["expr"]) for _, rule in rule_groups(RULE_FILES)}


@pytest.mark.parametrize("name", sorted(RULES))
def test_every_rule_keeps_cluster_in_its_by_and_on_clauses(name: str) -> None:
    assert clauses_without_cluster(RULES[name]) == []


def test_the_check_catches_a_clause_without_cluster() -> None:
    assert clauses_without_cluster("sum by (namespace) (x) / on (cluster) y") == ["by (namespace)"]
    assert clauses_without_cluster("x * on (Hostname, UUID) group_left () y") == ["on (Hostname, UUID)"]
    assert clauses_without_cluster("sum without (xid) (x) and ignoring (pod) y") == []  # both keep cluster
    assert clauses_without_cluster('x + on (slices) group_left () label_replace(vector(1), "slices", "1", "", "")') \
        == []  # a table of constants has no cluster to match


@pytest.mark.parametrize("path", sorted(DASHBOARDS), ids=lambda p: p.name)
def test_every_dashboard_offers_a_single_cluster_variable_first(path: Any) -> None:
    variables = DASHBOARDS[path]["templating"]["list"]
    assert [v["name"] for v in variables][:2] == ["datasource", "cluster"]
    cluster = variables[1]
    # Single-select like kubernetes-mixin's: node names repeat between clusters, so "all clusters at once"
    # would merge them. With no cluster label anywhere Grafana sends "" (its None option), and
    # cluster="" matches every series of a single-cluster Prometheus.
    assert (cluster["type"], cluster["multi"], cluster["includeAll"]) == ("query", False, False)
    assert cluster["query"]["query"] == "label_values(DCGM_FI_DEV_FB_USED, cluster)"
    for variable in query_variables(DASHBOARDS[path])[1:]:
        assert selectors_without_cluster(substitute(variable.selector, VALUES)) == [], variable.name


@pytest.mark.parametrize("path", sorted(DASHBOARDS), ids=lambda p: p.name)
def test_every_dashboard_selector_is_filtered_by_the_cluster_variable(path: Any) -> None:
    problems = {}
    for query in dashboard_queries(DASHBOARDS[path]):
        if query.source == "variable cluster":
            continue
        missing = selectors_without_cluster(query.resolved(VALUES))
        if missing:
            problems[query.source] = missing
    assert problems == {}
