"""The one PromQL string quoter: every special character comes back as itself through a PromQL parser,
and the literal can neither end early nor carry a raw control character into the query."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from promql_parser import parse

from exporter.prometheus.promql import any_of, quote
from tests.rules.promtool_runner import promtool

CASES = [
    ("plain", '"plain"'),
    ("back\\slash", '"back\\\\slash"'),
    ('double"quote', '"double\\"quote"'),
    ("new\nline", '"new\\nline"'),
    ("carriage\rreturn", '"carriage\\rreturn"'),
    ("tab\there", '"tab\\there"'),
    ("bell\a backspace\b formfeed\f vtab\v", '"bell\\a backspace\\b formfeed\\f vtab\\v"'),
    ("nul\x00 esc\x1b[31m del\x7f", '"nul\\x00 esc\\x1b[31m del\\x7f"'),
    ("c1\x85 \x9b", '"c1\\u0085 \\u009b"'),
    ("line\u2028sep\u2029par", '"line\\u2028sep\\u2029par"'),
    ("unicode: Grüße, 東京, 🚀", '"unicode: Grüße, 東京, 🚀"'),
    ("single 'quote' and `backtick`", '"single \'quote\' and `backtick`"'),
    ('\\"', '"\\\\\\""'),  # a backslash before a quote cannot un-escape the quote
    ("", '""'),
]


@pytest.mark.parametrize(("value", "literal"), CASES, ids=[repr(value) for value, _ in CASES])
def test_each_special_character_is_escaped_and_parses_back_to_itself(value: str, literal: str) -> None:
    assert quote(value) == literal
    [matcher] = parse(f"up{{team={quote(value)}}}").matchers.matchers
    assert (matcher.name, matcher.value) == ("team", value)


def test_no_raw_control_character_reaches_the_query() -> None:
    every = "".join(chr(code) for code in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029])
    literal = quote(every)
    assert all(char.isprintable() for char in literal), literal
    [matcher] = parse(f"up{{node={literal}}}").matchers.matchers
    assert matcher.value == every


def test_a_value_cannot_add_a_matcher_or_end_the_selector() -> None:
    hostile = 'x", namespace=~".*'
    [matcher] = parse(f"up{{Hostname={quote(hostile)}}}").matchers.matchers
    assert (matcher.name, matcher.value) == ("Hostname", hostile)


def test_prometheus_itself_reads_every_quoted_value_back(tmp_path: Path) -> None:
    """The oracle is Prometheus' own Go lexer (promtool): a series labelled with each value is selected by
    the quoted value, and label_replace copies the value out unchanged."""
    values = [value for value, _ in CASES if value]
    tests = []
    for index, value in enumerate(values):
        literal = quote(value)
        tests.append({
            "interval": "1m",
            "input_series": [{"series": f"probe{{case=\"{index}\", team={literal}}}", "values": "1"},
                             {"series": f"probe{{case=\"{index}\", team=\"other\"}}", "values": "2"}],
            "promql_expr_test": [{"expr": f"probe{{case=\"{index}\", team={literal}}}", "eval_time": "0m",
                                  "exp_samples": [{"labels": f"probe{{case=\"{index}\", team={literal}}}",
                                                   "value": 1}]}],
        })
    (tmp_path / "empty.rules.yaml").write_text("groups: []\n", encoding="utf-8")
    (tmp_path / "quote.test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["empty.rules.yaml"], "tests": tests}, allow_unicode=True), encoding="utf-8")
    result = subprocess.run([promtool(), "test", "rules", "quote.test.yaml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# Values a cluster, node or metric name could hold that mean something to RE2, and a near miss for each.
ALTERNATIVES = ["a.b", "x|y", "(paren)", "star*", "plus+", "q?", "[set]", "{2}", "^caret$", "back\\slash",
                'dou"ble', "new\nline", "space here", "dash-1", "Grüße"]
NEAR_MISSES = ["axb", "x", "y", "paren", "sta", "starr", "plu", "q", "s", "2", "caret", "back\\\\slash", "dou",
               "new", "space", "dash", "Grusse", ""]


def test_any_of_is_one_literal_that_parses_to_the_alternatives() -> None:
    [matcher] = parse(f"up{{cluster=~{any_of(['a.b', 'c'])}}}").matchers.matchers
    assert (matcher.name, matcher.value) == ("cluster", "a\\.b|c")


def test_prometheus_selects_exactly_the_alternatives_with_any_of(tmp_path: Path) -> None:
    """Prometheus' own regex engine (promtool) is the oracle: the matcher selects every listed value, each taken
    literally, and none of the near misses that a value read as a regular expression would also select."""
    series = [{"series": f"probe{{value={quote(value)}}}", "values": "1"} for value in ALTERNATIVES + NEAR_MISSES]
    test = {"interval": "1m", "input_series": series, "promql_expr_test": [{
        "expr": f"sort(probe{{value=~{any_of(ALTERNATIVES)}}})", "eval_time": "0m",
        "exp_samples": [{"labels": f"probe{{value={quote(value)}}}", "value": 1} for value in ALTERNATIVES]}]}
    (tmp_path / "empty.rules.yaml").write_text("groups: []\n", encoding="utf-8")
    (tmp_path / "any.test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["empty.rules.yaml"], "tests": [test]}, allow_unicode=True), encoding="utf-8")
    result = subprocess.run([promtool(), "test", "rules", "any.test.yaml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
