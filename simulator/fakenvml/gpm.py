"""GPM (Hopper+ profiling counters): sample buffers and ``nvmlGpmMetricsGet`` over ``profiling`` counters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

from simulator import profiling
from simulator.fakenvml.abi import (
    INVALID_ARGUMENT,
    NOT_FOUND,
    NOT_SUPPORTED,
    SUCCESS,
    UNINITIALIZED,
    VERSION_MISMATCH,
    c_int_value,
    c_symbol,
    handle_value,
    pointee,
    write_handle,
)
from simulator.fakenvml.device import SimulatedGpu
from simulator.fakenvml.state import LibraryState
from simulator.profiling import GpmCounters


@dataclass(frozen=True)
class GpmSample:
    """Contents of a filled GPM sample buffer: whose counters, when, and their values."""

    gpu: int
    instance: int | None  # GPU instance id for nvmlGpmMigSampleGet samples
    t: float
    counters: dict[int, float]


_MISSING = object()
_GPM_SAMPLE_BASE = 0x47504D000000  # "GPM" in ASCII



class GpmMixin(LibraryState):
    """GPM support query, sample buffers and metric computation."""

    @c_symbol("nvmlGpmQueryDeviceSupport", device=True)
    def _impl_gpm_support(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        support = pointee(out)
        if support.version != pynvml.NVML_GPM_SUPPORT_VERSION:
            return VERSION_MISMATCH
        support.isSupportedDevice = 1 if gpu.gpm is not None else 0
        return SUCCESS

    @c_symbol("nvmlGpmSampleAlloc")
    def _impl_gpm_alloc(self, t: float, out: Any) -> int:
        if not self._refcount:
            return UNINITIALIZED
        self._gpm_next_sample += 1
        handle = _GPM_SAMPLE_BASE + self._gpm_next_sample * 0x10
        self._gpm_samples[handle] = None
        write_handle(out, handle)
        return SUCCESS

    @c_symbol("nvmlGpmSampleFree")
    def _impl_gpm_free(self, t: float, sample: Any) -> int:
        if self._gpm_samples.pop(handle_value(sample) or 0, _MISSING) is _MISSING:
            return INVALID_ARGUMENT
        return SUCCESS

    def _fill_gpm_sample(self, sample: Any, gpu: int, instance: int | None, counters: GpmCounters, t: float) -> int:
        key = handle_value(sample) or 0
        if key not in self._gpm_samples:
            return INVALID_ARGUMENT
        self._gpm_samples[key] = GpmSample(gpu, instance, t, counters.sample(t))
        return SUCCESS

    @c_symbol("nvmlGpmSampleGet", device=True)
    def _impl_gpm_sample(self, gpu: SimulatedGpu, t: float, sample: Any) -> int:
        if gpu.gpm is None:
            return NOT_SUPPORTED
        return self._fill_gpm_sample(sample, gpu.index, None, gpu.gpm, t)

    @c_symbol("nvmlGpmMigSampleGet", device=True)
    def _impl_gpm_mig_sample(self, gpu: SimulatedGpu, t: float, gpu_instance_id: Any, sample: Any) -> int:
        if gpu.gpm is None or gpu.mig is None:
            return NOT_SUPPORTED
        instance = gpu.mig.instances.get(c_int_value(gpu_instance_id))
        if instance is None:
            return NOT_FOUND  # the GPU instance was destroyed (estimate of the code)
        return self._fill_gpm_sample(sample, gpu.index, instance.gpu_instance_id, instance.counters, t)

    @c_symbol("nvmlGpmMetricsGet")
    def _impl_gpm_metrics(self, t: float, request_ref: Any) -> int:
        if not self._refcount:
            return UNINITIALIZED
        request = pointee(request_ref)
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            return VERSION_MISMATCH
        count = int(request.numMetrics)
        if count > pynvml.NVML_GPM_METRIC_MAX:
            return INVALID_ARGUMENT
        first = self._gpm_samples.get(handle_value(request.sample1) or 0)
        second = self._gpm_samples.get(handle_value(request.sample2) or 0)
        if first is None or second is None or (first.gpu, first.instance) != (second.gpu, second.instance):
            return INVALID_ARGUMENT  # unfilled buffers, or samples of different devices
        elapsed = second.t - first.t
        if elapsed <= 0:
            return INVALID_ARGUMENT  # sample2 must be the later one (estimate of the code)
        if elapsed < 0.1:
            self.gpm_short_intervals += 1
        for slot in range(count):
            metric = request.metrics[slot]
            metric_id = int(metric.metricId)
            if metric_id not in second.counters:
                metric.nvmlReturn = INVALID_ARGUMENT if not 0 < metric_id < pynvml.NVML_GPM_METRIC_MAX \
                    else NOT_SUPPORTED
                continue
            metric.value = profiling.metric_between(first.counters, second.counters, elapsed, metric_id)
            metric.nvmlReturn = SUCCESS
            short, long, unit = profiling.METRIC_INFO[metric_id]
            info = metric.metricInfo
            info.shortName, info.longName, info.unit = short.encode(), long.encode(), unit.encode()
        return SUCCESS
