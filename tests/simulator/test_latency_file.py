"""A measured-latency file (written by scripts/test-gpu) replaces the realistic profile's estimates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.config import ConfigError
from simulator.latency_file import LATENCY_FORMAT, load_latency_file
from simulator.scenario import NVML_SYMBOLS, REALISTIC_LATENCY_S, ScenarioError, load_scenario

MEASURED = {
    "format": LATENCY_FORMAT,
    "measured_on": {"model": "NVIDIA H200", "gpus": 8, "driver_version": "570.00"},
    "latency_seconds": {
        "nvmlDeviceGetPowerUsage": {"median": 0.00021, "p90": 0.0003, "max": 0.001, "calls": 400},
        "nvmlDeviceGetUtilizationRates": 0.000004,
        "nvmlDeviceGetSomethingNew": {"median": 0.001},
    },
    "field_value_seconds_per_entry": 0.000007,
}


def write(tmp_path: Path, document: object, name: str = "measured.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document, indent=2) if not isinstance(document, str) else document, encoding="utf-8")
    return path


def test_medians_of_known_symbols_are_used(tmp_path: Path) -> None:
    measured = load_latency_file(write(tmp_path, MEASURED), NVML_SYMBOLS)
    assert measured.per_call == {"nvmlDeviceGetPowerUsage": 0.00021, "nvmlDeviceGetUtilizationRates": 0.000004}
    assert measured.field_value == 0.000007
    assert measured.ignored == ("nvmlDeviceGetSomethingNew",)
    assert measured.measured_on["model"] == "NVIDIA H200"


def test_a_scenario_loads_it_relative_to_itself(tmp_path: Path) -> None:
    write(tmp_path, MEASURED)
    scenario_path = tmp_path / "node.yaml"
    scenario_path.write_text("gpu_count: 1\nlatency_profile: measured.json\n", encoding="utf-8")
    scenario = load_scenario(str(scenario_path))
    assert scenario.latency["nvmlDeviceGetPowerUsage"] == 0.00021  # measured
    assert scenario.latency["nvmlDeviceGetFanSpeed"] == REALISTIC_LATENCY_S["nvmlDeviceGetFanSpeed"]  # estimate kept
    assert scenario.field_value_latency == 0.000007
    assert scenario.latency_profile == str(tmp_path / "measured.json")


@pytest.mark.parametrize(("document", "where", "message"), [
    ("{\n  \"format\": oops\n}", ":2", "not valid JSON"),
    ({"format": "something-else", "latency_seconds": {"nvmlInit_v2": 1}}, ":2", "expected 'gpu-pod-exporter"),
    ({"format": LATENCY_FORMAT, "latency_seconds": {}}, ":3", "latency_seconds"),
    ({"format": LATENCY_FORMAT, "latency_seconds": {"nvmlDeviceGetPowerUsage": {"median": -1}}}, ":4",
     "latency_seconds.nvmlDeviceGetPowerUsage"),
])
def test_bad_files_name_file_line_and_key(tmp_path: Path, document: object, where: str, message: str) -> None:
    path = write(tmp_path, document)
    with pytest.raises(ConfigError) as caught:
        load_latency_file(path, NVML_SYMBOLS)
    assert str(caught.value).startswith(f"{path}{where}: ")
    assert message in str(caught.value)


def test_a_missing_file_is_a_scenario_error(tmp_path: Path) -> None:
    scenario_path = tmp_path / "node.yaml"
    scenario_path.write_text("gpu_count: 1\nlatency_profile: nowhere.json\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot read the latency file"):
        load_scenario(str(scenario_path))
    assert issubclass(ScenarioError, ConfigError)
