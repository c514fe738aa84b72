"""The fake's GPU fabric information (nvmlDeviceGetGpuFabricInfoV), through pynvml's real wrapper and structs."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import pynvml
import pytest

from simulator.fakenvml import FakeNvmlLibrary
from simulator.scenario import ScenarioError

from .conftest import scenario_from

SCENARIO = "gpu_count: 3\ngpus:\n  0: {fabric: healthy}\n  1: {fabric: degraded}\n"


def _fabric(index: int, struct: Any) -> Any:
    info = struct()
    pynvml.nvmlDeviceGetGpuFabricInfoV(pynvml.nvmlDeviceGetHandleByIndex(index), ctypes.byref(info))
    return info


def test_the_scenario_knob_sets_the_fabric_health_nvml_reports(nvml: Callable[..., FakeNvmlLibrary]) -> None:
    nvml(SCENARIO)
    healthy = _fabric(0, pynvml.c_nvmlGpuFabricInfo_v3_t)
    assert healthy.state == pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    assert healthy.healthSummary == pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY
    degraded = _fabric(1, pynvml.c_nvmlGpuFabricInfo_v3_t)
    assert degraded.healthSummary == pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY
    bandwidth = (degraded.healthMask >> pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW) \
        & pynvml.NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW
    assert bandwidth == pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE
    assert _fabric(0, pynvml.c_nvmlGpuFabricInfo_v2_t).healthMask == healthy.healthMask  # v2: no summary


def test_a_gpu_on_no_nvlink_fabric_answers_not_supported(nvml: Callable[..., FakeNvmlLibrary]) -> None:
    nvml(SCENARIO)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        _fabric(2, pynvml.c_nvmlGpuFabricInfo_v3_t)


def test_an_unknown_struct_version_is_a_version_mismatch(nvml: Callable[..., FakeNvmlLibrary]) -> None:
    nvml(SCENARIO)
    info = pynvml.c_nvmlGpuFabricInfo_v3_t()
    info.version = 0x09000028
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlDeviceGetGpuFabricInfoV(pynvml.nvmlDeviceGetHandleByIndex(0), ctypes.byref(info))


def test_an_unknown_fabric_state_names_the_line() -> None:
    with pytest.raises(ScenarioError, match=r"inline\.yaml:3.*fabric health"):
        scenario_from("gpu_count: 1\ngpus:\n  0: {fabric: broken}\n")
