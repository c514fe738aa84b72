"""Readings the sampler takes for other components: the needs of CSV rows and the health gauge's flags."""

from __future__ import annotations

from typing import Any

from exporter.health.wiring import health_dependencies
from exporter.metrics.counters import parse_counters
from exporter.nvml.sampler import Sampler, SamplingPlan
from tests.simulator.conftest import FixedClock

CLOCK_ROWS = "DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, c\nDCGM_EXP_CLOCK_EVENTS_TOTAL, counter, t\n"


def plan_for(csv: str, *, health: bool = False) -> SamplingPlan:
    counters = parse_counters(csv, "c.csv")
    return SamplingPlan.for_specs(counters.field_specs(), health_dependencies() if health else ())


def test_clock_event_rows_make_the_sampler_read_the_reasons_bitmask_once() -> None:
    plan = plan_for(CLOCK_ROWS)
    assert plan.queries == ("clock_event_reasons",)
    assert [spec.name for spec in plan.dependencies] == ["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]
    both = plan_for(CLOCK_ROWS + "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, r\n")
    assert both.queries == ("clock_event_reasons",) and both.dependencies == ()


def test_health_flags_ride_in_the_batched_field_call() -> None:
    plan = plan_for("DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_ROW_REMAP_FAILURE, gauge, f\n", health=True)
    assert sorted(key for key, _scope in plan.field_keys) == [31, 144, 145]
    assert [spec.name for spec in plan.dependencies] == ["DCGM_FI_DEV_RETIRED_PENDING",
                                                         "DCGM_FI_DEV_ROW_REMAP_PENDING"]


def test_dependencies_are_read_but_not_reported_as_unsupported_fields(nvml: Any, clock: FixedClock) -> None:
    nvml("gpu_count: 2\ngpus:\n  0: {model: A100-SXM4-80GB, remapped_rows: {pending: true}}\n"
         "  1: {model: V100-SXM2-32GB, retired_pages: {pending: true}}\n", init=False)
    counters = parse_counters("DCGM_FI_DEV_GPU_TEMP, gauge, t\n" + CLOCK_ROWS, "c.csv")
    sampler = Sampler(counters.field_specs(), 1.0, clock=clock, dependencies=health_dependencies())
    assert sampler.initialise()
    snapshot = sampler.run_cycle()
    a100, v100 = snapshot.devices
    assert a100.values["DCGM_FI_DEV_ROW_REMAP_PENDING"] == 1 and a100.values["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 0
    assert "DCGM_FI_DEV_RETIRED_PENDING" not in a100.values  # A100 replaced page retirement by row remapping
    assert v100.values["DCGM_FI_DEV_RETIRED_PENDING"] == 1 and "DCGM_FI_DEV_ROW_REMAP_PENDING" not in v100.values
    assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" in a100.values
    assert snapshot.status.unsupported_fields == ()


def test_the_memory_errors_scenario_is_read_through_the_new_rows(nvml: Any, clock: FixedClock) -> None:
    nvml("memory-errors", init=False)
    clock.t = 320.0
    counters = parse_counters(
        "".join(f"{name}, gauge, x\n" for name in (
            "DCGM_FI_DEV_ECC_CURRENT", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "DCGM_FI_DEV_RETIRED_SBE",
            "DCGM_FI_DEV_RETIRED_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_THERMAL_VIOLATION")), "c.csv")
    sampler = Sampler(counters.field_specs(), 1.0, clock=clock)
    assert sampler.initialise()
    gpu0, gpu1, _gpu2, gpu3 = sampler.run_cycle().devices
    assert gpu0.values["DCGM_FI_DEV_ECC_CURRENT"] == 1
    assert gpu0.values["DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"] == 1200 + gpu0.values["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"]
    assert gpu1.values["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 1 and gpu1.values["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 1
    assert gpu1.values["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] == 1
    assert gpu3.values["DCGM_FI_DEV_RETIRED_SBE"] == 4 and gpu3.values["DCGM_FI_DEV_RETIRED_PENDING"] == 1
    assert "DCGM_FI_DEV_RETIRED_SBE" not in gpu1.values  # A100: page retirement not supported, omitted
    assert gpu0.values["DCGM_FI_DEV_THERMAL_VIOLATION"] == 0  # read, and no thermal throttling in this scenario


def test_a_new_counters_csv_keeps_the_health_gauges_readings(nvml: Any, clock: FixedClock) -> None:
    """A reload (SIGHUP) swaps the plan as the app does: the health flags stay read whatever the new CSV says."""
    nvml("gpu_count: 1\ngpus:\n  0: {model: A100-SXM4-80GB, remapped_rows: {pending: true}}\n", init=False)
    sampler = Sampler(parse_counters("DCGM_FI_DEV_GPU_TEMP, gauge, t\n", "c.csv").field_specs(), 1.0, clock=clock,
                      dependencies=health_dependencies())
    assert sampler.initialise()
    sampler.set_specs(parse_counters("DCGM_FI_DEV_POWER_USAGE, gauge, p\n", "new.csv").field_specs(),
                      health_dependencies())
    values = sampler.run_cycle().devices[0].values
    assert set(values) == {"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE"}
    assert values["DCGM_FI_DEV_ROW_REMAP_PENDING"] == 1
