"""The migration guide's release table is what the corpus and the product give, and nothing upstream
ships is refused."""

from __future__ import annotations

from typing import Any

import pytest

from upstream import matrix
from upstream.matrix import releases


def test_the_guides_release_table_is_generated_from_the_corpus() -> None:
    current = matrix.GUIDE.read_text(encoding="utf-8")
    assert matrix.regenerate(current) == current, "run: python -m upstream.matrix --write"
    assert matrix.main(["--check"]) == 0


def test_the_table_has_a_column_per_release_and_a_row_per_flag_variable_key_and_field() -> None:
    table = matrix.render()
    header = next(line for line in table.splitlines() if line.startswith("| flag |"))
    assert [cell.strip() for cell in header.strip("|").split("|")][2:-1] == [r["exporter_version"] for r in releases()]
    for record in releases():
        for flag in record["flags"]:
            assert f"| `--{flag['name']}` |" in table
            for env in flag["env"]:
                assert f"| `{env}` |" in table
        for key in matrix.value_leaves(record["chart"]["values"]):
            assert f"| `{key}` |" in table
        for name in matrix.csv_fields(record):
            assert f"| `{name}` |" in table


@pytest.mark.parametrize("record", releases(), ids=lambda r: r["release"])
def test_every_values_key_of_the_release_has_a_verdict(record: dict[str, Any]) -> None:
    missing = [key for key in matrix.value_leaves(record["chart"]["values"]) if matrix.values_verdict(key) is None]
    assert not missing, f"add these keys to upstream/values-verdicts.yaml: {missing}"


@pytest.mark.parametrize("record", releases(), ids=lambda r: r["release"])
def test_nothing_the_release_ships_is_refused(record: dict[str, Any]) -> None:
    refused = []
    for flag in matrix.flags_of(record):
        verdict = matrix.flag_verdict(flag)
        if verdict.kind == "refused":
            refused.append(f"--{flag['name']}: {verdict.reason}")
        for env in flag["env"]:
            if (verdict := matrix.env_verdict(env, flag)).kind == "refused":
                refused.append(f"{env}: {verdict.reason}")
    for key in matrix.value_leaves(record["chart"]["values"]):
        verdict = matrix.values_verdict(key)
        if verdict is not None and verdict.kind == "refused":
            refused.append(f"values {key}: {verdict.reason}")
    for name, (prom_type, help_text) in matrix.csv_fields(record).items():
        if (verdict := matrix.csv_verdict(name, prom_type, help_text)).kind == "refused":
            refused.append(f"CSV {name}: {verdict.reason}")
    assert not refused


def test_a_refused_item_shows_as_refused_with_the_exporters_own_message() -> None:
    verdict = matrix.flag_verdict({"name": "not-a-dcgm-flag", "aliases": [], "env": [], "type": "string",
                                   "default": "x"})
    assert verdict.kind == "refused" and "unrecognized arguments: --not-a-dcgm-flag" in verdict.reason
    assert matrix.env_verdict("NOT_A_VARIABLE", {"name": "x", "type": "bool"}).kind == "refused"
    assert matrix.csv_verdict("dcgm fi dev gpu temp", "gauge", "t").kind == "refused"
