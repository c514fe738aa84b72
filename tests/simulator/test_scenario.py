"""Scenario files: every shipped one loads; every mistake names file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config import ConfigError
from exporter.units import parse_quantity_duration
from simulator.models import GIB, PRESETS
from simulator.patterns import Constant, Jittered, Sine
from simulator.scenario import (
    REALISTIC_LATENCY_S,
    SCENARIO_DIR,
    ScenarioError,
    builtin_scenarios,
    load_scenario,
    parse_pci_bus_id,
)

REQUIRED = {"default", "consumer-gpu", "gpu-lost", "hang", "no-driver", "init-recovers", "realistic-latency"}


def write(tmp_path: Path, text: str, name: str = "bad.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def error_for(tmp_path: Path, text: str) -> ScenarioError:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    return caught.value


@pytest.mark.parametrize("name", builtin_scenarios())
def test_every_shipped_scenario_loads_and_says_what_it_shows(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.name == name
    assert scenario.gpus
    text = (SCENARIO_DIR / f"{name}.yaml").read_text(encoding="utf-8")
    assert text.startswith("# ")
    assert scenario.description


def test_the_required_scenarios_are_shipped() -> None:
    assert set(builtin_scenarios()) >= REQUIRED


def test_default_scenario_shape() -> None:
    scenario = load_scenario("default")
    assert len(scenario.gpus) == 8
    assert {gpu.model.key for gpu in scenario.gpus} == {"H100-SXM5-80GB"}
    assert [gpu.index for gpu in scenario.gpus] == list(range(8))
    assert scenario.gpus[2].clock_events[0].reason == "hw_thermal_slowdown"
    assert scenario.gpus[1].processes[0].pid == 41002  # merge key: GPU 1 reuses GPU 0's settings
    assert scenario.gpus[1].nvlink_tx is not None
    assert scenario.latency == {}


def test_realistic_latency_profile_uses_the_measured_figures() -> None:
    scenario = load_scenario("realistic-latency")
    assert scenario.latency["nvmlDeviceGetGraphicsRunningProcesses_v3"] == pytest.approx(4.491e-3)
    assert scenario.latency["nvmlDeviceGetFanSpeed"] == pytest.approx(137e-6)
    assert scenario.latency["nvmlDeviceGetMemoryInfo"] == pytest.approx(11.6e-6)
    assert scenario.latency["nvmlDeviceGetUtilizationRates"] == pytest.approx(2.5e-6)
    assert scenario.field_value_latency > 0
    assert set(scenario.latency) <= set(REALISTIC_LATENCY_S)


def test_load_by_path_and_latency_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, """
latency_profile: realistic
latency: {nvmlDeviceGetFanSpeed: 1ms, nvmlDeviceGetUtilizationRates: 0, field_value: 7us}
""", "mine.yaml")
    scenario = load_scenario(path)
    assert scenario.name == "mine"
    assert scenario.latency["nvmlDeviceGetFanSpeed"] == pytest.approx(1e-3)
    assert "nvmlDeviceGetUtilizationRates" not in scenario.latency
    assert scenario.field_value_latency == pytest.approx(7e-6)


def test_units_are_converted_to_nvml_units(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, """
gpu_count: 2
gpu_defaults:
  model: A100-SXM4-80GB
  memory_used: 25%
  power: 0.25kW
  nvlink_tx: 1.5GiB/s
  pstate: P2
  power_limit: 300W
gpus:
  1: {memory_used: 10GiB, power: 250000mW, load: 45%}
"""))
    first, second = scenario.gpus
    total = PRESETS["A100-SXM4-80GB"].memory_total
    assert first.memory_used == Constant(total * 0.25)
    assert second.memory_used == Constant(10 * GIB)
    assert first.power == second.power == Constant(250_000.0)
    assert first.nvlink_tx == Constant(1.5 * GIB)
    assert first.pstate == Constant(2.0)
    assert second.load == Constant(45.0)
    assert first.power_limit_mw == 300_000


def test_patterns_with_jitter(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, """
gpu_defaults:
  load: {pattern: sine, low: 10, high: 90, period: 1m, phase: 15s, jitter: 3, jitter_period: 500ms}
"""))
    assert scenario.gpus[0].load == Jittered(Sine(10.0, 90.0, 60.0, 15.0), 3.0, 0.5)


@pytest.mark.parametrize("text", ["1.5", "1500ms", "1500000us", "0.025m"])
def test_durations(text: str) -> None:
    assert parse_quantity_duration(text) == pytest.approx(1.5)


def test_pci_bus_id_forms() -> None:
    assert parse_pci_bus_id("00000000:3B:00.0") == (0, 0x3B, 0)
    assert parse_pci_bus_id("0001:3b:00.0") == (1, 0x3B, 0)
    assert parse_pci_bus_id("3b:00.0") == (0, 0x3B, 0)


def test_kubernetes_section_is_kept_raw_with_its_line(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, """
gpu_count: 1
kubernetes:
  pods:
    - {name: trainer, namespace: ml, gpus: [0]}
"""))
    section = scenario.kubernetes
    assert section is not None
    assert section.line == 4
    assert section.data == {"pods": [{"name": "trainer", "namespace": "ml", "gpus": [0]}]}
    pods = section.reader("kubernetes").mapping({"pods"})["pods"]
    with pytest.raises(ScenarioError, match=r"bad\.yaml:5: kubernetes\.pods\[0\]\.name: expected an integer"):
        pods.sequence()[0].mapping({"name", "namespace", "gpus"})["name"].integer()


def test_defaults_are_checked_even_when_every_gpu_overrides_them(tmp_path: Path) -> None:
    error = error_for(tmp_path, """
gpu_count: 1
gpu_defaults:
  load: {pattern: sinus}
gpus:
  0: {load: 5}
""")
    assert "gpu_defaults.load" in str(error)


# --- validation messages --------------------------------------------------------------------


@pytest.mark.parametrize(("text", "line", "key", "message"), [
    ("gpu_count: 4\ngpus:\n  2:\n    load: {pattern: sinus, low: 1, high: 2}\n",
     4, "gpus[2].load", "unknown pattern 'sinus' (known: constant, noise, ramp, sine, square, steps)"),
    ("seed: 1\ncolour: blue\n", 2, "colour", "unknown key (known keys: description, driver, faults"),
    ("gpu_count: eight\n", 1, "gpu_count", "expected an integer, got 'eight'"),
    ("gpu_count: 0\n", 1, "gpu_count", "below the minimum 1"),
    ("gpu_defaults:\n  load: 150\n", 2, "gpu_defaults.load", "out of range: expected percent (0..100)"),
    ("gpu_defaults:\n  model: H300\n", 2, "gpu_defaults.model",
     "unknown GPU model 'H300' (known: A100-SXM4-80GB"),
    ("gpu_count: 2\ngpus:\n  5: {load: 1}\n", 3, "gpus[5]", "GPU index 5 out of range (gpu_count is 2)"),
    ("gpu_count: 2\ngpus:\n  1:\n    temperature: 40\n    temperature: 50\n", 5, "gpus[1].temperature",
     "duplicate key 'temperature'"),
    ("gpu_count: 2\ngpus:\n  1: {uuid: GPU-11111111-2222-3333-4444-555555555555}\n"
     "  0: {uuid: GPU-11111111-2222-3333-4444-555555555555}\n", 3, "gpus[1].uuid", "same uuid as GPU 0"),
    ("gpu_count: 2\ngpus:\n  1: {minor: 0}\n", 3, "gpus[1].minor", "same minor as GPU 0"),
    ("gpu_defaults:\n  uuid: not-a-uuid\n", 2, "gpu_defaults.uuid", "invalid UUID 'not-a-uuid'"),
    ("gpu_defaults:\n  pci_bus_id: zz:00.0\n", 2, "gpu_defaults.pci_bus_id", "invalid PCI bus id 'zz:00.0'"),
    ("latency:\n  nvmlDeviceGetFanSpeed: 4.5 parsecs\n", 2, "latency.nvmlDeviceGetFanSpeed",
     "unknown duration unit 'parsecs'"),
    ("latency:\n  nvmlDeviceGetFanSpeedy: 1ms\n", 2, "latency.nvmlDeviceGetFanSpeedy",
     "unknown key (did you mean nvmlDeviceGetFanSpeed or"),
    ("latency_profile: slow\n", 1, "latency_profile",
     "unknown latency profile 'slow' (known: none, realistic)"),
    ("faults:\n  - {type: error, symbol: nvmlDeviceGetPowerUsage, error: Kaput}\n", 2, "faults[0].error",
     "unknown NVML error 'Kaput'"),
    ("faults:\n  - {type: hang, symbol: nvmlDeviceGetPowerUsage, at: 5s}\n", 2, "faults[0]",
     "a hang fault needs 'duration'"),
    ("faults:\n  - {type: gpu_lost, gpu: 3}\n", 2, "faults[0].gpu",
     "GPU index 3 out of range (gpu_count is 1)"),
    ("faults:\n  - {type: error, symbol: nvmlDeviceGetPowerUsage, error: Unknown, from: 10s, until: 5s}\n",
     2, "faults[0].until", "'until' must be after 'from'"),
    ("faults:\n  - {type: explode}\n", 2, "faults[0].type", "unknown fault type 'explode'"),
    ("faults:\n  - {type: error, symbol: nvmlDeviceGetPowerUsage, error: Unknown, field: 82}\n", 2,
     "faults[0].field", "'field' only applies to nvmlDeviceGetFieldValues"),
    ("library:\n  missing_symbols: [nvmlDeviceGetNothing]\n", 2, "library.missing_symbols[0]",
     "unknown NVML symbol 'nvmlDeviceGetNothing'"),
    ("library:\n  init_fails: {error: DriverNotLoaded}\n", 2, "library.init_fails", "needs 'until'"),
    ("gpu_defaults:\n  load: {pattern: steps, steps: [[10s, 5], [5s, 6]]}\n", 2,
     "gpu_defaults.load.steps[1][0]", "step times must increase"),
    ("gpu_defaults:\n  load: {pattern: sine, low: 1, high: 2, period: 1s, duty: 0.5}\n", 2,
     "gpu_defaults.load.duty", "'duty' does not apply to pattern 'sine'"),
    ("gpu_defaults:\n  load: {pattern: ramp, from: 0, to: 100}\n", 2, "gpu_defaults.load",
     "pattern 'ramp' needs 'duration'"),
    ("gpu_defaults:\n  clock_events: [{reason: too_hot, from: 1s, for: 2s}]\n", 2,
     "gpu_defaults.clock_events[0].reason", "unknown clock event reason 'too_hot'"),
    ("gpu_defaults:\n  clock_events: [{reason: hw_slowdown, from: 1s, every: 60s}]\n", 2,
     "gpu_defaults.clock_events[0].every", "'every' needs a window"),
    ("gpu_defaults:\n  processes: [{used_memory: 1GiB}]\n", 2, "gpu_defaults.processes[0]", "needs 'pid'"),
    ("gpu_defaults:\n  processes: [{pid: 3, used_memory: 900GiB}]\n", 2,
     "gpu_defaults.processes[0].used_memory", "must be between 0 and"),
    ("gpu_defaults:\n  power_limit: 900W\n", 2, "gpu_defaults.power_limit", "between 200 W and 700 W"),
    ("gpu_defaults:\n  features: {ecc: maybe}\n", 2, "gpu_defaults.features.ecc", "expected true or false"),
    ("gpu_defaults:\n  ecc_errors: {corrected: -1}\n", 2, "gpu_defaults.ecc_errors.corrected",
     "below the minimum 0"),
    ("gpu_defaults:\n  nvlink_tx: 40 furlongs\n", 2, "gpu_defaults.nvlink_tx",
     "unknown rate unit 'furlongs'"),
    ("driver: {cuda_version: twelve}\n", 1, "driver.cuda_version", "expected a CUDA version like 12.4"),
    ("gpus: [1, 2]\n", 1, "gpus", "expected a mapping, got a list"),
    ("- just\n- a list\n", 1, "scenario", "expected a mapping of scenario keys"),
    ("gpu_count: [1\n", 2, "yaml", "not valid YAML"),
])
def test_mistakes_name_file_line_and_key(
        tmp_path: Path, text: str, line: int, key: str, message: str) -> None:
    error = error_for(tmp_path, text)
    path = str(tmp_path / "bad.yaml")
    assert str(error).startswith(f"{path}:{line}: {key}: "), str(error)
    assert message in str(error)
    assert isinstance(error, ConfigError)  # the command line turns it into one line and exit code 2


def test_empty_file(tmp_path: Path) -> None:
    assert "the file is empty" in str(error_for(tmp_path, ""))


def test_unknown_builtin_name_lists_the_known_ones() -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario("defualt")
    assert "unknown built-in scenario (known: alert-zoo, consumer-gpu, default," in str(caught.value)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(str(tmp_path / "missing.yaml"))
