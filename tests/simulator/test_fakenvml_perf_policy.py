"""The fake's perf-policy violation counters (field ids 75, 77-79) behind DCGM_FI_DEV_*_VIOLATION."""

from __future__ import annotations

from typing import Any

import pynvml

from tests.simulator.conftest import FixedClock


def counters(handle: Any, *field_ids: int) -> dict[int, int]:
    values = pynvml.nvmlDeviceGetFieldValues(handle, list(field_ids))
    assert all(value.nvmlReturn == pynvml.NVML_SUCCESS for value in values)
    return {value.fieldId: int(value.value.ullVal) for value in values}


def test_the_thermal_policy_counter_is_the_sw_thermal_slowdown_time(nvml: Any, clock: FixedClock) -> None:
    nvml("gpu_defaults:\n  load: 90\n  clock_events: [{reason: sw_thermal_slowdown, from: 10s, for: 5s}]\n")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    thermal = pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL
    sw_thermal = pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN
    clock.t = 30.0
    read = counters(handle, thermal, sw_thermal)
    assert read[thermal] == read[sw_thermal]
    assert 4.9e9 <= read[thermal] <= 5.1e9


def test_low_utilisation_time_accrues_while_idle_and_unmodelled_limiters_read_zero(
        nvml: Any, clock: FixedClock) -> None:
    nvml("gpu_defaults: {load: {pattern: steps, steps: [[0s, 0], [20s, 90]]}}\n")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    low, board, reliability = (pynvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION,
                               pynvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT, pynvml.NVML_FI_DEV_PERF_POLICY_RELIABILITY)
    clock.t = 60.0
    read = counters(handle, low, board, reliability)
    assert 19e9 <= read[low] <= 21e9  # idle for the first 20 s only
    assert read[board] == 0 and read[reliability] == 0


def test_boards_without_violation_counters_say_not_supported(nvml: Any) -> None:
    nvml("gpu_defaults: {features: {violation_counters: false}}\n")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    [value] = pynvml.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL])
    assert value.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
