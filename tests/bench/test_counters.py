"""The before/after counters report: medians, paired ratios, changed symbols and the budget verdict."""

from __future__ import annotations

from typing import Any

from bench import counters


def run(variant: str, repetition: int, calls: dict[str, float], entries: float, driver_s: float) -> dict[str, Any]:
    total = sum(calls.values())
    return {"variant": variant, "repetition": repetition, "gpus": 2, "errors": [],
            "idle": {"nvml_calls_per_gpu_per_cycle": total / 2, "calls_per_cycle_by_symbol": calls,
                     "field_entries_per_cycle": entries, "driver_latency_per_cycle_s": driver_s,
                     "cpu_excl_nvml_per_cycle_s": 0.002, "nvml_thread_cpu_per_cycle_s": 0.004},
            "exposition": {"series": 100 if variant == "before" else 140, "text_bytes": 9000}}


def results(after_calls: dict[str, float]) -> dict[str, Any]:
    before_calls = {"nvmlDeviceGetFieldValues": 2.0, "nvmlDeviceGetPowerUsage": 2.0}
    return {"gpus": 2, "started": "2026-12-03T00:00:00Z", "commit": "abc", "duration_s": 120.0,
            "settings": {"repetitions": 2, "idle_s": 30.0, "interval_ms": 1000},
            "variants": {"before": "a.csv", "after": "b.csv"},
            "runs": [run("before", 0, before_calls, 10, 0.001), run("after", 0, after_calls, 30, 0.0012),
                     run("after", 1, after_calls, 30, 0.0012), run("before", 1, before_calls, 10, 0.001)]}


def test_report_compares_per_gpu_figures_and_names_the_calls_that_changed() -> None:
    text = counters.report(results({"nvmlDeviceGetFieldValues": 2.0, "nvmlDeviceGetPowerUsage": 2.0,
                                     "nvmlDeviceGetPowerManagementLimit": 0.5}))
    assert "| NVML calls per GPU per cycle | 2.0 | 2.2 | 1.12 |" in text
    assert "| field-value entries per GPU per cycle | 5.0 | 15.0 | 3.00 |" in text
    assert "| driver time per cycle (realistic latencies), ms | 1.000 | 1.200 | 1.20 |" in text
    assert "`nvmlDeviceGetPowerManagementLimit` 0 -> 0.25" in text
    assert "x1.12, within the budget of x1.25 (+25 %)" in text


def test_report_says_when_the_budget_is_broken() -> None:
    text = counters.report(results({"nvmlDeviceGetFieldValues": 2.0, "nvmlDeviceGetPowerUsage": 4.0}))
    assert "x1.50, OVER the budget" in text
