"""The per-process utilization bench: its arithmetic, its report section, and the simulator claim the
README makes from it (time-sliced sums track the GPU's utilization, MPS sums exceed it)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from bench.process_utilization import (
    END,
    START,
    UTILIZATION_SYMBOLS,
    replace_section,
    run_sums,
    section,
    summarise_cost,
    variant_scenario,
)


def idle(calls: float, utilization: float, driver_ms: float, cpu_ms: float) -> dict[str, Any]:
    by_symbol = {"nvmlDeviceGetUtilizationRates": calls - utilization}
    if utilization:
        by_symbol[UTILIZATION_SYMBOLS[0]] = utilization
    return {"nvml_calls_per_cycle": calls, "calls_per_cycle_by_symbol": by_symbol,
            "driver_latency_per_cycle_s": driver_ms / 1e3, "cpu_per_cycle_s": cpu_ms / 1e3,
            "cpu_excl_nvml_per_cycle_s": cpu_ms / 2e3}


def test_the_added_cost_is_the_median_difference_of_neighbouring_runs() -> None:
    runs = [
        {"variant": "with", "repetition": 0, "idle": idle(96.0, 3.2, 26.5, 15.0), "errors": []},
        {"variant": "without", "repetition": 0, "idle": idle(92.8, 0.0, 23.3, 14.0), "errors": []},
        {"variant": "without", "repetition": 1, "idle": idle(92.8, 0.0, 23.3, 30.0), "errors": []},  # noisy
        {"variant": "with", "repetition": 1, "idle": idle(96.0, 3.2, 26.5, 31.0), "errors": []},
        {"variant": "with", "repetition": 2, "idle": {}, "errors": ["TimeoutError: x"]},  # no partner: left out
        {"variant": "without", "repetition": 2, "idle": idle(92.8, 0.0, 23.3, 14.0), "errors": []},
    ]
    summary = summarise_cost(runs, gpus=8)
    assert summary["pairs"] == 2
    figures = summary["figures"]
    assert math.isclose(figures["nvml_calls_per_cycle"]["added"], 3.2)
    assert math.isclose(figures["utilization_calls_per_cycle"]["added_per_gpu"], 0.4)
    assert math.isclose(figures["driver_latency_per_cycle_ms"]["added"], 3.2)
    assert math.isclose(figures["cpu_per_cycle_ms"]["added"], 1.0)  # paired: the noisy pair moved together


def test_the_without_variant_is_a_driver_lacking_both_calls(tmp_path: Path) -> None:
    document = yaml.safe_load(variant_scenario(tmp_path, 2, 4, "without").read_text())
    assert document["library"] == {"missing_symbols": list(UTILIZATION_SYMBOLS)}
    assert "kubernetes" not in document and document["gpu_count"] == 2
    assert "library" not in yaml.safe_load(variant_scenario(tmp_path, 2, 4, "with").read_text())


def test_in_the_simulator_time_sliced_sums_track_the_gpu_and_mps_sums_exceed_it() -> None:
    cases = {(case["scenario"], case["gpu"]): case for case in run_sums(seconds=120)}
    for key in (("shared-gpus", 0), ("default", 4)):  # time-sliced
        assert cases[key]["reads"] == 23
        assert cases[key]["mean_abs_difference"] < 2.0 and cases[key]["max_abs_difference"] < 5.0, cases[key]
    mps = cases[("shared-gpus", 1)]
    assert mps["mean_difference"] > 15.0 and mps["mean_sum_of_processes"] > mps["mean_device_util"] * 1.2


def test_the_section_replaces_only_its_own_part() -> None:
    figures = {name: {"with": 1.0, "without": 0.5, "added": 0.5, "added_per_gpu": 0.0625}
               for name in ("nvml_calls_per_cycle", "utilization_calls_per_cycle", "driver_latency_per_cycle_ms",
                            "cpu_per_cycle_ms", "cpu_excl_nvml_per_cycle_ms")}
    data = {"started": "2027-01-01T00:00:00Z", "commit": "abc1234", "duration_s": 240.0,
            "machine": {"cpus": 2, "cpu_model": "x", "python": "3.11.7"}, "settings": {"idle_s": 30.0},
            "cost": {"pods": 24, "summary": {"gpus": 8, "pairs": 3, "figures": figures}},
            "sums": [{"scenario": "shared-gpus", "gpu": 1, "what": "MPS", "reads": 359, "mean_device_util": 69.7,
                      "mean_sum_of_processes": 93.6, "mean_difference": 23.8, "mean_abs_difference": 23.8,
                      "max_abs_difference": 43.8}]}
    generated = section(data)
    assert generated.startswith(START) and generated.endswith(END)
    assert "| NVML calls | 1.00 | 0.50 | 0.50 | 0.06 |" in generated
    assert "| `shared-gpus` GPU 1 (MPS) | 359 | 69.7 % | 93.6 % | +23.8 | 23.8 | 43.8 |" in generated
    document = f"# Benchmarks\n\nbefore\n\n{START}\nold\n{END}\n\nafter\n"
    assert replace_section(document, generated) == f"# Benchmarks\n\nbefore\n\n{generated}\n\nafter\n"
