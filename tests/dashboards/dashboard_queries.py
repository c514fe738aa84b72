"""Every PromQL query in our Grafana dashboards, and Grafana's template-variable substitution.

Why this exists: dashboards are JSON that nothing compiles. A renamed metric, a typo or a variable
that no longer exists shows up as an empty panel long after the change. The static tests
(tests/dashboards) read every query through this module and check its names against the metric
contract; the end-to-end tests (tests/e2e) use the same extraction to run every query against a
real Prometheus scraping the exporter. Both must see the same list of queries, so the walk over
panels, collapsed rows, template variables and annotations lives here once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = REPO_ROOT / "deploy" / "dashboards"

# Grafana's built-in variables, with values suitable for a Prometheus that scrapes every second
# or every few seconds. Callers override any of them.
BUILTIN_VARIABLES: dict[str, str] = {
    "__rate_interval": "1m",
    "__interval": "30s",
    "__interval_ms": "30000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
}

# Variables that Grafana derives from the data rather than from a user's choice, with the value
# they take on this exporter's default output. ``host_label`` is the node label's spelling
# (``label_names()`` filtered to Hostname|hostname): ``hostname`` by default (dcgm-exporter 4.8.3 on); a
# test of the 4.8.2 spelling passes ``{"host_label": "Hostname"}``.
DERIVED_VARIABLES: dict[str, str] = {"host_label": "hostname"}

# ${name}, ${name:format}, [[name]], [[name:format]] and $name (Grafana's three syntaxes).
_VARIABLE = re.compile(r"\$\{(\w+)(?::[\w-]+)?\}|\[\[(\w+)(?::[\w-]+)?\]\]|\$(\w+)")
_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<args>.*)\)\s*$", re.DOTALL)
_QUERY_RESULT = re.compile(r"^\s*query_result\((?P<expr>.*)\)\s*$", re.DOTALL)


class UnknownVariableError(KeyError):
    """A query uses a template variable that the caller gave no value for."""


@dataclass(frozen=True)
class DashboardQuery:
    """One PromQL expression found in a dashboard, with where it was found."""

    dashboard: str  # the dashboard's uid
    source: str  # e.g. "panel 'GPU utilization' query A", "variable gpu", "annotation 'Firing GPU alerts'"
    expr: str  # PromQL, Grafana variables not yet substituted
    instant: bool  # an instant query (tables, stats) rather than a range query

    def resolved(self, values: Mapping[str, str]) -> str:
        """The expression with every template variable replaced (see `substitute`)."""
        return substitute(self.expr, values)


def load_dashboards(directory: Path = DASHBOARD_DIR) -> dict[Path, dict[str, Any]]:
    """Every ``*.json`` dashboard in ``directory``, parsed, keyed by path."""
    dashboards: dict[Path, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        with path.open(encoding="utf-8") as handle:
            dashboards[path] = json.load(handle)
    return dashboards


def iter_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """All panels, depth first, including those nested in (collapsed) rows."""
    for panel in panels:
        yield panel
        yield from iter_panels(panel.get("panels", []))


def variable_query_to_promql(query: str) -> str | None:
    """The PromQL behind a Prometheus template-variable query, or None when it has none.

    ``label_values(selector, label)`` reads ``selector``; ``query_result(expr)`` runs ``expr``;
    ``label_values(label)``, ``label_names()`` and ``metrics(regex)`` read no series expression.
    """
    match = _LABEL_VALUES.match(query)
    if match:
        args = match.group("args")
        selector, _, _label = args.rpartition(",")
        return selector.strip() or None
    match = _QUERY_RESULT.match(query)
    if match:
        return match.group("expr").strip()
    return None


def _variable_query_text(variable: dict[str, Any]) -> str:
    query = variable.get("query", "")
    if isinstance(query, dict):
        return str(query.get("query", ""))
    return str(query)


def dashboard_queries(dashboard: dict[str, Any]) -> list[DashboardQuery]:
    """Every PromQL expression of one dashboard: panel targets, query variables, annotations."""
    uid = str(dashboard.get("uid", "?"))
    queries: list[DashboardQuery] = []
    for panel in iter_panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            expr = target.get("expr")
            if expr:
                queries.append(DashboardQuery(
                    uid, f"panel {panel.get('title', '?')!r} query {target.get('refId', '?')}", expr,
                    bool(target.get("instant")) and not target.get("range")))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        expr = variable_query_to_promql(_variable_query_text(variable))
        if expr:
            queries.append(DashboardQuery(uid, f"variable {variable.get('name', '?')}", expr, True))
    for annotation in dashboard.get("annotations", {}).get("list", []):
        expr = annotation.get("expr") or annotation.get("target", {}).get("expr")
        if expr:
            queries.append(DashboardQuery(uid, f"annotation {annotation.get('name', '?')!r}", expr, False))
    return queries


@dataclass(frozen=True)
class QueryVariable:
    """A template variable whose values come from Prometheus: ``label_values(selector, label)``."""

    name: str
    selector: str  # PromQL (Grafana variables not yet substituted) whose series carry the values
    label: str
    multi: bool  # several values, or All, can be selected: Grafana inserts a regex alternation


def label_values_arguments(query: str) -> tuple[str, str] | None:
    """(selector, label) of ``label_values(selector, label)``; None for any other variable query."""
    match = _LABEL_VALUES.match(query)
    if not match:
        return None
    selector, _, label = match.group("args").rpartition(",")
    if not selector.strip():
        return None
    return selector.strip(), label.strip()


def query_variables(dashboard: dict[str, Any]) -> list[QueryVariable]:
    """The dashboard's ``label_values`` variables, in the order Grafana resolves them (list order)."""
    found: list[QueryVariable] = []
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        arguments = label_values_arguments(_variable_query_text(variable))
        if arguments is not None:
            found.append(QueryVariable(str(variable["name"]), *arguments,
                                       bool(variable.get("multi") or variable.get("includeAll"))))
    return found


_REGEX_SPECIAL = re.compile(r"[\\^$*+?.()|\[\]{}']")


def grafana_regex_value(values: Sequence[str]) -> str:
    """The text Grafana puts into a Prometheus query for a multi-value variable with ``values`` selected.

    Like Grafana: each value's regex metacharacters escaped with a backslash, written doubled
    because the text lands inside a PromQL string; several values become ``(a|b|c)``.
    """
    if not values:
        raise ValueError("a multi-value variable needs at least one value")
    escaped = [_REGEX_SPECIAL.sub(lambda match: "\\\\" + match.group(0), value) for value in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def variable_names(dashboard: dict[str, Any]) -> set[str]:
    """The template variables a dashboard defines."""
    return {str(v["name"]) for v in dashboard.get("templating", {}).get("list", []) if "name" in v}


def variables_used(expr: str) -> set[str]:
    """The template variables an expression refers to (regex capture references like $1 excluded)."""
    used = set()
    for match in _VARIABLE.finditer(expr):
        name = match.group(1) or match.group(2) or match.group(3)
        if not name.isdigit():
            used.add(name)
    return used


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """Replace Grafana template variables the way Grafana does before sending a query.

    ``values`` maps variable names to the text to insert (for a multi-value variable in a regex
    matcher, pass e.g. ``"(0|1)"``); Grafana's built-ins default to BUILTIN_VARIABLES. ``$1``-style
    references (label_replace replacements) are left alone. A variable with no value raises
    UnknownVariableError, so that a test notices a query it cannot really run.
    """
    merged = {**BUILTIN_VARIABLES, **DERIVED_VARIABLES, **values}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        if name.isdigit():
            return match.group(0)
        if name not in merged:
            raise UnknownVariableError(f"no value for template variable ${name} in: {expr}")
        return merged[name]

    return _VARIABLE.sub(replace, expr)


def all_queries(directory: Path = DASHBOARD_DIR) -> list[DashboardQuery]:
    """Every query of every dashboard in ``directory``."""
    queries: list[DashboardQuery] = []
    for dashboard in load_dashboards(directory).values():
        queries.extend(dashboard_queries(dashboard))
    return queries


DCGM_EXPORTER_QUERIES_FILE = Path(__file__).resolve().parent / "dcgm_exporter_queries.txt"


def dcgm_exporter_queries(path: Path = DCGM_EXPORTER_QUERIES_FILE) -> list[DashboardQuery]:
    """The queries of dcgm-exporter's own dashboard (variables `instance`, `gpu`), which must keep working."""
    queries: list[DashboardQuery] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        expr = variable_query_to_promql(line) or line
        queries.append(DashboardQuery("dcgm-exporter:Oxed_c6Wz", f"{path.name}:{number}", expr,
                                      line.startswith("label_values(")))
    return queries


def dcgm_exporter_variables(path: Path = DCGM_EXPORTER_QUERIES_FILE) -> list[QueryVariable]:
    """The variables of dcgm-exporter's dashboard (``instance``, ``gpu``; both multi-value with All there)."""
    found: list[QueryVariable] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        arguments = label_values_arguments(raw.strip())
        if arguments is not None:
            found.append(QueryVariable(arguments[1], *arguments, multi=True))
    return found
