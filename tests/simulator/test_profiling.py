"""GPM in the fake library through pynvml's real wrappers and structs: support, samples, metrics."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from simulator import profiling

from .conftest import FixedClock

GR = pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL
SM = pynvml.NVML_GPM_METRIC_SM_UTIL
TENSOR = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
FP64 = pynvml.NVML_GPM_METRIC_FP64_UTIL
PCIE_TX = pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC
NVLINK_TX = pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC


def metrics_between(first: Any, second: Any, ids: list[int]) -> dict[int, tuple[int, float, str]]:
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(ids)
    request.sample1, request.sample2 = first, second
    for slot, metric_id in enumerate(ids):
        request.metrics[slot].metricId = metric_id
    pynvml.nvmlGpmMetricsGet(request)
    result = {}
    for slot, metric_id in enumerate(ids):
        metric = request.metrics[slot]
        unit = metric.metricInfo.unit
        result[metric_id] = (metric.nvmlReturn, metric.value, unit.decode() if unit else "")
    return result


def two_samples(clock: FixedClock, take: Any, start: float, end: float) -> tuple[Any, Any]:
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    clock.t = start
    take(first)
    clock.t = end
    take(second)
    return first, second


def test_only_hopper_presets_support_gpm(nvml: Any) -> None:
    nvml("gpu_count: 4\ngpus:\n  1: {model: H200-SXM-141GB}\n  2: {model: A100-SXM4-80GB}\n  3: {model: RTX-4090}\n")
    support = [pynvml.nvmlGpmQueryDeviceSupport(pynvml.nvmlDeviceGetHandleByIndex(i)).isSupportedDevice
               for i in range(4)]
    assert support == [1, 1, 0, 0]
    a100 = pynvml.nvmlDeviceGetHandleByIndex(2)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpmSampleGet(a100, pynvml.nvmlGpmSampleAlloc())


def test_metrics_are_the_mean_rate_between_two_samples(nvml: Any, clock: FixedClock) -> None:
    nvml("gpu_defaults:\n  load: {pattern: steps, steps: [[0, 40], [1, 80]]}\n  pcie_tx: 100MiB/s\n")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    first, second = two_samples(clock, lambda s: pynvml.nvmlGpmSampleGet(handle, s), 0.5, 1.5)
    result = metrics_between(first, second, [GR, SM, TENSOR, FP64, PCIE_TX, NVLINK_TX])
    # Half a second at 40 % and half a second at 80 %: 60 %. SMs are busy 90 % of that for training.
    assert (result[GR][0], result[GR][2]) == (pynvml.NVML_SUCCESS, "%")
    assert result[GR][1] == pytest.approx(60.0)
    assert result[SM][1] == pytest.approx(54.0)
    assert result[TENSOR][1] == pytest.approx(54.0 * 0.7)
    assert result[FP64][1] == 0.0  # training uses no FP64
    assert (result[PCIE_TX][0], result[PCIE_TX][2]) == (pynvml.NVML_SUCCESS, "MiB/sec")
    assert result[PCIE_TX][1] == pytest.approx(100.0)
    assert result[NVLINK_TX][0] == pynvml.NVML_SUCCESS  # an H100 SXM has NVLink (idle here)


def test_explicit_channels_and_workload_mixes(nvml: Any, clock: FixedClock) -> None:
    nvml("gpu_defaults:\n  load: 50\n  profiling: {workload: hpc, sm_active: 30}\n")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    first, second = two_samples(clock, lambda s: pynvml.nvmlGpmSampleGet(handle, s), 1.0, 3.0)
    result = metrics_between(first, second, [GR, SM, FP64, TENSOR])
    assert [result[m][1] for m in (GR, SM)] == [pytest.approx(50.0), pytest.approx(30.0)]
    assert result[FP64][1] == pytest.approx(30.0 * profiling.WORKLOAD_MIXES["hpc"].fp64)
    assert result[TENSOR][1] <= result[SM][1] <= result[GR][1]


def test_mig_samples_follow_their_instance_and_have_no_interconnect_metrics(nvml: Any, clock: FixedClock) -> None:
    nvml("gpu_defaults:\n  mig: [{profile: 3g.40gb, load: 75}, 1g.10gb]\n")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    busy = two_samples(clock, lambda s: pynvml.nvmlGpmMigSampleGet(handle, 1, s), 1.0, 2.0)
    idle = two_samples(clock, lambda s: pynvml.nvmlGpmMigSampleGet(handle, 7, s), 1.0, 2.0)
    busy_result = metrics_between(*busy, [GR, PCIE_TX])
    assert busy_result[GR][1] == pytest.approx(75.0)
    assert busy_result[PCIE_TX][0] == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert metrics_between(*idle, [GR])[GR][1] == 0.0
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlGpmMigSampleGet(handle, 2, pynvml.nvmlGpmSampleAlloc())  # no GPU instance 2
    whole = two_samples(clock, lambda s: pynvml.nvmlGpmSampleGet(handle, s), 1.0, 2.0)
    assert metrics_between(*whole, [GR])[GR][1] == pytest.approx(75.0 * 3 / 7)


def test_misuse_is_refused_like_nvml_does(nvml: Any, clock: FixedClock) -> None:
    fake = nvml("gpu_count: 2\n")
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    first, second = two_samples(clock, lambda s: pynvml.nvmlGpmSampleGet(handles[0], s), 1.0, 2.0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        metrics_between(second, first, [GR])  # sample2 must be the later one
    other = pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(handles[1], other)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        metrics_between(first, other, [GR])  # two different GPUs
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        metrics_between(first, pynvml.nvmlGpmSampleAlloc(), [GR])  # never filled
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = 7
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlGpmMetricsGet(request)
    nvdec = pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL  # a metric the simulator does not model
    assert metrics_between(first, second, [nvdec])[nvdec][0] == pynvml.NVML_ERROR_NOT_SUPPORTED
    pynvml.nvmlGpmSampleFree(first)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpmSampleFree(first)
    clock.t = 2.05
    close = pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(handles[0], close)
    metrics_between(second, close, [GR])
    assert fake.gpm_short_intervals == 1  # counted so tests can prove production never does this


def test_gpm_values_are_deterministic_for_a_scenario_and_times(nvml: Any, clock: FixedClock) -> None:
    def measure() -> float:
        nvml("default")
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        first, second = two_samples(clock, lambda s: pynvml.nvmlGpmSampleGet(handle, s), 10.0, 11.0)
        return metrics_between(first, second, [TENSOR])[TENSOR][1]

    assert measure() == measure() > 0
