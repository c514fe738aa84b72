"""docs/migrate-from-dcgm-exporter.md lists every dcgm-exporter flag, variable and chart key of every release
in the corpus (upstream/dcgm-exporter/), and what its tables claim ("Same", "Differs", "Warns") holds."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.config import OPTIONS, Config, Option
from exporter.metrics.selection import effective_selection
from upstream.matrix import BUILTIN_FLAGS, releases

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "migrate-from-dcgm-exporter.md"
CHART_CI = REPO / "deploy" / "helm" / "gpu-pod-exporter" / "ci"
UPSTREAM_VALUES = (*(CHART_CI / f"dcgm-exporter-{r['release']}-values.yaml" for r in releases()),
                   CHART_CI / "dcgm-exporter-customised-values.yaml")


def _upstream_flags() -> dict[str, dict[str, Any]]:
    """Every flag of every release (help and version included): name -> {aliases, env (all), since}."""
    flags: dict[str, dict[str, Any]] = {}
    for record in releases():
        for flag in [*record["flags"], *BUILTIN_FLAGS]:
            known = flags.setdefault(flag["name"], {**flag, "env": [], "since": record["exporter_version"]})
            known["env"] = sorted({*known["env"], *flag["env"]})
            known["default"] = flag.get("default", known.get("default"))
    return flags


UPSTREAM_FLAGS = _upstream_flags()
VERDICTS = ("Same", "Differs", "Warns")


def _table(heading: str) -> list[list[str]]:
    section = DOC.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows[1:]]


def _keys(cell: str) -> set[str]:
    """`a.b`, `.c` -> {a.b, a.c}: a leading dot continues the previous key's parent."""
    found: set[str] = set()
    parent = ""
    for token in re.findall(r"`([^`]+)`", cell):
        if token.startswith("."):
            found.add(parent + token)
        else:
            found.add(token)
            parent = token.rpartition(".")[0]
    return found


def _leaves(values: Any, prefix: str = "") -> set[str]:
    if isinstance(values, dict) and values:
        return set().union(*(_leaves(value, f"{prefix}{key}.") for key, value in values.items()))
    return {prefix.rstrip(".")}


def test_every_flag_alias_and_variable_has_a_row_saying_what_it_does_here() -> None:
    rows = _table("Flags and environment variables")
    for name, flag in UPSTREAM_FLAGS.items():
        matching = [row for row in rows if f"`--{name}`" in row[0]]
        assert len(matching) == 1, name
        [flag_cell, env_cell, _since, here] = matching[0]
        assert all(f"`-{alias}`" in flag_cell for alias in flag["aliases"]), name
        assert env_cell == (", ".join(f"`{env}`" for env in flag["env"]) or "—"), name
        assert here, name


def test_every_chart_key_has_a_row() -> None:
    documented = set().union(*(_keys(row[0]) for row in _table("Helm chart values")))
    for path in UPSTREAM_VALUES:
        keys = _leaves(yaml.safe_load(path.read_text(encoding="utf-8")))
        # A key is covered by its own row or by a row for the whole object (securityContext, resources).
        missing = {key for key in keys if not any(".".join(key.split(".")[:depth]) in documented
                                                  for depth in range(1, key.count(".") + 2))}
        assert missing == set(), path.name


def _flag_cell(name: str, flag: dict[str, Any]) -> str:
    return ", ".join([*(f"`-{alias}`" for alias in flag["aliases"]), f"`--{name}`"])


def test_the_flag_table_is_generated_from_the_corpus() -> None:
    """Flag, aliases, variables and first release of every row come from the corpus, in name order."""
    expected = [[_flag_cell(name, flag), ", ".join(f"`{env}`" for env in flag["env"]) or "—", flag["since"]]
                for name, flag in sorted(UPSTREAM_FLAGS.items())]
    expected.append(["—", "`NODE_NAME`", "4.8.0"])
    assert [row[:3] for row in _table("Flags and environment variables")] == expected


def _option(name: str) -> Option:
    return next(option for option in OPTIONS if option.long_flag == f"--{name}")


@pytest.mark.parametrize("name", sorted(set(UPSTREAM_FLAGS) - {"help", "version", "config-file"}))
def test_each_same_differs_or_warns_claim_holds(name: str) -> None:
    flag = UPSTREAM_FLAGS[name]
    [row] = [row for row in _table("Flags and environment variables") if f"`--{name}`" in row[0]]
    here = row[3]
    verdict = re.split(r"[ :;(.,]", here, maxsplit=1)[0]
    assert verdict in VERDICTS, here
    option = _option(name)
    # "Warns" exactly for the flags that are accepted without effect (one warning line at start)
    assert (verdict == "Warns") == bool(option.no_effect), name
    default = flag.get("default")
    if default not in (None, "", []) and verdict != "Warns":
        same_default = option.parse(default) == option.default
        if option.attr == "devices":  # without -d, --mig-chip-series decides what is rendered
            same_default = effective_selection(option.default, Config().mig_chip_series) == option.parse(default)
        # a different default is said in the row; "Same" is only written where the default is the same
        assert same_default == ("Differs (default)" not in here), (name, default, option.default)


def test_the_mig_setting_the_guide_names_exists_everywhere_it_says() -> None:
    """"MIG: the same series as dcgm-exporter by default": its table's flag, variable, config key and chart
    value are the exporter's and the default is per-instance."""
    section = DOC.read_text(encoding="utf-8").split("- **MIG: the same series as dcgm-exporter by default.**", 1)[1]
    section = section.split("\n- **", 1)[0]
    rows = {cells[0]: cells[1] for cells in ([cell.strip() for cell in line.strip().strip("|").split(" | ")]
                                             for line in section.splitlines() if line.strip().startswith("| "))}
    [option] = [option for option in OPTIONS if option.attr == "mig_chip_series"]
    assert rows["flag"] == f"`{option.long_flag} per-instance\\|once`"
    assert rows["environment"] == f"`{option.env}`"
    assert rows["config file"] == f"`{option.yaml_key}: once`"
    assert Config().mig_chip_series == "per-instance" == option.default
    chart = yaml.safe_load((REPO / "deploy" / "helm" / "gpu-pod-exporter" / "values.yaml").read_text(encoding="utf-8"))
    assert rows["chart"].startswith("`exporter.migChipSeries`") and chart["exporter"]["migChipSeries"] == "per-instance"
    # the chart passes it on: tests/deploy/test_helm_chart.py::test_mig_chip_series_is_per_instance_by_default_...
