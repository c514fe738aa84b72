"""Every flag and environment variable of every dcgm-exporter release in the corpus, as a user would
give it (Go's single-dash syntax included), is taken by the setting of the same meaning: never exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.config import OPTIONS, load_config
from upstream.matrix import example_value, flags_of, releases

OPTION_BY_FLAG = {flag: option for option in OPTIONS for flag in option.flags}
CASES = [(record["release"], flag) for record in releases() for flag in record["flags"]]


def _given(flag: dict[str, Any], tmp_path: Path) -> str | None:
    if flag["name"] == "config-file":
        path = tmp_path / "config.yaml"
        path.write_text("version: 1\ncollection:\n  interval: 30s\n", encoding="utf-8")
        return str(path)
    return example_value(flag)


@pytest.mark.parametrize(("release", "flag"), CASES, ids=[f"{r}:--{f['name']}" for r, f in CASES])
def test_the_flag_and_its_aliases_in_go_syntax_set_the_setting_of_that_name(release: str, flag: dict[str, Any],
                                                                             tmp_path: Path) -> None:
    value = _given(flag, tmp_path)
    tail = [] if value is None else [value]
    spellings = [[f"-{flag['name']}", *tail], [f"--{flag['name']}", *tail],
                 *([f"-{alias}", *tail] for alias in flag["aliases"])]
    if value is not None:
        spellings.append([f"--{flag['name']}={value}"])
    for argv in spellings:
        config = load_config(argv, {})
        if flag["name"] == "config-file":
            assert config.config_file == value
            continue
        option = OPTION_BY_FLAG[f"--{flag['name']}"]
        assert config.sources[option.attr] == f"flag --{flag['name']}", argv


@pytest.mark.parametrize(("release", "flag"), CASES, ids=[f"{r}:--{f['name']}" for r, f in CASES])
def test_each_environment_variable_of_the_flag_sets_the_same_setting(release: str, flag: dict[str, Any],
                                                                     tmp_path: Path) -> None:
    value = _given(flag, tmp_path)
    for env in flag["env"]:
        config = load_config([], {env: "true" if value is None else value})
        if flag["name"] == "config-file":
            assert config.config_file == value
            continue
        option = OPTION_BY_FLAG[f"--{flag['name']}"]
        assert config.sources[option.attr] == f"environment variable {env}", env


@pytest.mark.parametrize("record", releases(), ids=lambda r: r["release"])
def test_version_and_help_print_and_exit_zero_as_urfave_cli_does(record: dict[str, Any],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    builtin = {flag["name"]: flag for flag in flags_of(record)}
    for argv in (["-v"], ["--version"], [f"-{builtin['help']['aliases'][0]}"]):
        with pytest.raises(SystemExit) as exited:
            load_config(argv, {})
        assert exited.value.code == 0
    assert "gpu-pod-exporter" in capsys.readouterr().out
