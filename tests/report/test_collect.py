"""report's cluster restriction: one cluster an equality matcher, several one anchored alternation of literals."""

from __future__ import annotations

from promql_parser import parse

from exporter.report.collect import cluster_matcher


def _matcher(text: str) -> tuple[str, str, str]:
    [matcher] = parse(f"up{{{text}}}").matchers.matchers
    return matcher.name, str(matcher.op), matcher.value


def test_no_cluster_is_no_restriction() -> None:
    assert cluster_matcher([]) == ""


def test_one_cluster_is_an_equality_matcher() -> None:
    name, op, value = _matcher(cluster_matcher(['eu"1']))
    assert (name, op, value) == ("cluster", "MatchOp.Equal", 'eu"1')


def test_several_clusters_are_matched_literally() -> None:
    name, op, value = _matcher(cluster_matcher(["eu.1", "us|2"]))
    assert (name, op, value) == ("cluster", "MatchOp.Re", "eu\\.1|us\\|2")
