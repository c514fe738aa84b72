"""Which metrics and labels a PromQL expression reads, checked against the metric contract.

Why: rules and dashboards name metrics as strings. Prometheus accepts any name and answers an
unknown one with an empty result, so a typo (`DCGM_FI_DEV_GPU_UTILL`) or a label in the wrong case
(`hostname`) silently turns an alert off. Parsing every expression with a real PromQL parser
(the `promql-parser` package) and comparing each name with the contract catches that at test
time. Metric names come from the exporter's own registries (`exporter_metrics.py`); label names
from `known_labels.txt` beside this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

try:
    import promql_parser
except ImportError as error:  # a test dependency: say how to get it rather than only what is missing
    raise ImportError("the rule and dashboard tests need promql-parser: pip install -e '.[test]'") from error

HERE = Path(__file__).resolve().parent
KNOWN_LABELS_FILE = HERE / "known_labels.txt"


class PromQLSyntaxError(ValueError):
    """The expression does not parse as PromQL."""


class UnverifiableSelectorError(ValueError):
    """A selector picks metrics by a regular expression on __name__, so its names cannot be checked."""


@dataclass
class ExprNames:
    """The names one expression reads, and how it reads each metric."""

    metrics: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)
    # Metrics read as plain values (instant vectors, not inside a range selector). first_seen is
    # True inside the "first seen" pattern `X unless on (...) X offset <w>`.
    value_reads: list[ValueRead] = field(default_factory=list)


@dataclass(frozen=True)
class ValueRead:
    """One instant-vector read of a metric."""

    metric: str
    offset: bool
    first_seen: bool


@dataclass(frozen=True)
class MetricEntry:
    """A metric name and its Prometheus type."""

    name: str
    kind: str  # gauge, counter, info or untyped


def parse(expr: str) -> promql_parser.Expr:
    """Parse PromQL, turning the parser's error into PromQLSyntaxError with the expression."""
    try:
        return promql_parser.parse(expr)
    except ValueError as error:
        raise PromQLSyntaxError(f"{error}: {expr}") from error


def _selector_name(selector: promql_parser.VectorSelector) -> str:
    if selector.name:
        return str(selector.name)
    for matcher in selector.matchers.matchers:
        if matcher.name == "__name__":
            if str(matcher.op) != "MatchOp.Equal":
                raise UnverifiableSelectorError(f"metric chosen by {matcher.op} on __name__: {selector}")
            return str(matcher.value)
    raise UnverifiableSelectorError(f"selector without a metric name: {selector}")


def _offset_reads(node: promql_parser.Expr) -> set[str]:
    """Metrics read with an offset anywhere in ``node`` (the right side of a first-seen check)."""
    names = ExprNames()
    _visit(node, names, in_range=False, first_seen=frozenset())
    return {read.metric for read in names.value_reads if read.offset}


def _visit(node: promql_parser.Expr, names: ExprNames, in_range: bool, first_seen: frozenset[str]) -> None:
    if isinstance(node, promql_parser.VectorSelector):
        name = _selector_name(node)
        names.metrics.add(name)
        names.labels.update(m.name for m in node.matchers.matchers if m.name != "__name__")
        if not in_range:
            names.value_reads.append(ValueRead(name, node.offset is not None, name in first_seen))
    elif isinstance(node, promql_parser.MatrixSelector):
        _visit(node.vector_selector, names, True, first_seen)
    elif isinstance(node, promql_parser.SubqueryExpr | promql_parser.ParenExpr | promql_parser.UnaryExpr):
        # A subquery evaluates its inner expression as instant vectors at each step.
        _visit(node.expr, names, False, first_seen)
    elif isinstance(node, promql_parser.AggregateExpr):
        if node.modifier is not None:
            names.labels.update(node.modifier.labels)
        if node.param is not None:
            _visit(node.param, names, False, first_seen)
        _visit(node.expr, names, False, first_seen)
    elif isinstance(node, promql_parser.BinaryExpr):
        modifier = node.modifier
        if modifier is not None:
            if modifier.matching is not None:
                names.labels.update(modifier.matching.labels)
            if modifier.group_labels:
                names.labels.update(modifier.group_labels)
        inner = first_seen
        if str(node.op) == "unless":
            inner = first_seen | frozenset(_offset_reads(node.rhs))
        _visit(node.lhs, names, False, inner)
        _visit(node.rhs, names, False, inner)
    elif isinstance(node, promql_parser.Call):
        function = node.func.name
        args = list(node.args)
        if function == "label_replace" and len(args) == 5:
            names.labels.update(str(a.val) for a in (args[1], args[3]))
        elif function == "label_join" and len(args) >= 3:
            names.labels.update(str(a.val) for a in args[1:2] + args[3:])
        for arg in args:
            _visit(arg, names, False, first_seen)
    # Number and string literals read no names.


def names_in(expr: str) -> ExprNames:
    """The metric and label names an expression reads (label_replace targets count as labels)."""
    names = ExprNames()
    _visit(parse(expr), names, False, frozenset())
    return names


def or_branches(expr: str) -> list[str]:
    """The alternatives of a top-level ``A or B or C`` (parentheses around them removed), as PromQL text.

    An alert that fires on any of several conditions is only proven when each condition can hold;
    an expression without a top-level ``or`` is its own single branch. Selectors come back in the
    parser's spelling (``x{}``), which Prometheus accepts.
    """

    def split(node: promql_parser.Expr) -> list[promql_parser.Expr]:
        while isinstance(node, promql_parser.ParenExpr):
            node = node.expr
        if isinstance(node, promql_parser.BinaryExpr) and str(node.op) == "or":
            return split(node.lhs) + split(node.rhs)
        return [node]

    return [str(branch) for branch in split(parse(expr))]


def counters_read_as_values(expr: str, counters: set[str]) -> list[str]:
    """Counters that the expression compares or uses as plain values rather than as deltas.

    A running total is never an alert condition: it stays above any threshold forever after the
    first event. Counters may appear inside a range selector (increase, rate, ...) or in the
    "first seen" pattern ``X unless on (...) X offset <w>`` (a series that did not exist one
    window ago). Anything else is reported.
    """
    reads = names_in(expr).value_reads
    return sorted({r.metric for r in reads if r.metric in counters and not r.first_seen})


def literal_matchers(expr: str, labels: set[str], marker: str) -> list[str]:
    """Matchers on ``labels`` whose value is a literal rather than a variable or a match-anything.

    Dashboards must not hard-code a cluster's node, namespace or pod names. Callers substitute
    each template variable with a value containing ``marker`` first; a matcher value that lacks
    the marker and is not "", ".*" or ".+" is returned as ``label<op>"value"``.
    """
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            for matcher in node.matchers.matchers:
                value = matcher.value
                if matcher.name in labels and marker not in value and value not in {"", ".*", ".+"}:
                    found.append(f'{matcher.name}="{value}"')
        for child in ("expr", "lhs", "rhs", "vector_selector", "param"):
            sub = getattr(node, child, None)
            if isinstance(sub, promql_parser.Expr):
                walk(sub)
        for arg in getattr(node, "args", None) or []:
            walk(arg)

    walk(parse(expr))
    return found


def load_label_names(path: Path = KNOWN_LABELS_FILE) -> set[str]:
    """known_labels.txt: one label name per line, ``#`` comments ignored."""
    return {line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()} - {""}


def rule_groups(paths: Iterable[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """(file, rule) for every rule of every group in plain Prometheus rule files."""
    rules: list[tuple[Path, dict[str, Any]]] = []
    for path in paths:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        for group in document.get("groups", []):
            rules.extend((path, rule) for rule in group.get("rules", []))
    return rules


def recorded_names(paths: Iterable[Path]) -> set[str]:
    """Names of the series our recording rules produce (rules and dashboards may read them)."""
    return {str(rule["record"]) for _, rule in rule_groups(paths) if "record" in rule}


def unknown_names(
    exprs: Iterable[tuple[str, str]], known_metrics: set[str], known_labels: set[str]
) -> list[str]:
    """One message per (where, expression) that reads a name outside the known sets or does not parse."""
    problems: list[str] = []
    for where, expr in exprs:
        try:
            names = names_in(expr)
        except (PromQLSyntaxError, UnverifiableSelectorError) as error:
            problems.append(f"{where}: {error}")
            continue
        for metric in sorted(names.metrics - known_metrics):
            problems.append(f"{where}: unknown metric {metric}")
        for label in sorted(names.labels - known_labels):
            problems.append(f"{where}: unknown label {label}")
    return problems
