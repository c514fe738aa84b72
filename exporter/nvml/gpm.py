"""DCGM-class profiling metrics through NVML GPM (Hopper and newer), without a DCGM host engine.

GPM ("GPU performance monitoring") exposes the hardware counters DCGM's profiling module reads:
the caller takes opaque samples (``nvmlGpmSampleGet`` for a whole GPU, ``nvmlGpmMigSampleGet`` for
one MIG GPU instance) and ``nvmlGpmMetricsGet`` computes metrics between two of them: utilisation
percentages and bandwidths in MiB/s. So the reader keeps the previous sample per target (the GPU,
and each GPU instance) and, each cycle, takes one new sample and asks for every needed metric in
one ``nvmlGpmMetricsGet`` call: two NVML calls per target per cycle, counted like any other.

NVML refreshes the counters internally and wants samples more than 100 ms apart. The collect
interval is at least 100 ms, but a cycle can start a little early after a slow one; a sample that
would be too close to the previous one is not taken and the last computed values are published
again (they are at most one interval old), so a series never flaps off and on.

Support is probed once per GPU with ``nvmlGpmQueryDeviceSupport``; a GPU without GPM is remembered
and never asked again (the sampler then lists the PROF fields as unsupported, logs it once, and
serves the PCIe byte rates from field values instead). Conversions to DCGM units live in the
catalog (``FromGpm.scale``); docs/profiling.md maps each metric to its DCGM field.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

from exporter.nvml.client import NvmlClient

MIN_SAMPLE_INTERVAL_S = 0.1  # NVML: samples must be more than 100 ms apart
# Per-metric answers meaning "this GPU (instance) does not have that metric": stop asking for it.
_METRIC_UNSUPPORTED = frozenset({pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT,
                                 pynvml.NVML_ERROR_NO_PERMISSION})

Target = int | None  # None: the whole GPU; an int: a MIG GPU instance id
_UNSUPPORTED_CALL = frozenset({pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                               pynvml.NVML_ERROR_NO_PERMISSION})


def gpm_unsupported(error: BaseException) -> bool:
    """Whether a failed GPM call means "not on this GPU / driver" (stop asking), not a passing failure.

    Narrower than the client's classification: InvalidArgument is not in it, because NVML also
    answers that for samples it cannot compare, which the next pair of samples fixes.
    """
    return isinstance(error, pynvml.NVMLError) and error.value in _UNSUPPORTED_CALL


@dataclass
class _Series:
    """The sample chain of one target: the previous sample buffer, when it was taken, the last metrics."""

    previous: Any = None
    taken_at: float = -math.inf
    spare: Any = None  # a buffer to reuse for the next sample
    request: Any = None  # the c_nvmlGpmMetricsGet_t, allocated once (it is ~19 KB)
    requested: tuple[int, ...] = ()
    last: dict[int, float] = field(default_factory=dict)


class GpmReader:
    """GPM state of one GPU: support, unsupported metrics, and the sample chain per target.

    Owned by the sampling thread. NVML errors that are not about one metric propagate to the
    caller, which classifies them (GPU lost, NVML down, unsupported, transient).
    """

    def __init__(self) -> None:
        self.supported: bool | None = None  # None: not probed yet
        self.unsupported_metrics: set[tuple[Target, int]] = set()
        self._series: dict[Target, _Series] = {}

    def probe(self, nvml: NvmlClient, handle: Any) -> bool:
        """Ask NVML once whether this GPU has GPM (raises NVMLError for the caller to classify)."""
        if self.supported is None:
            support = nvml.call(pynvml.nvmlGpmQueryDeviceSupport, handle)
            self.supported = bool(support.isSupportedDevice)
        return self.supported

    def read(self, nvml: NvmlClient, handle: Any, metric_ids: Sequence[int], now: float,
             gpu_instance_id: Target = None) -> dict[int, float]:
        """Metric values (NVML units) between the previous sample of the target and a new one.

        Empty on the first call for a target (nothing to compare with yet). ``now`` is the
        caller's monotonic clock at the time of the call.
        """
        wanted = tuple(metric for metric in metric_ids if (gpu_instance_id, metric) not in self.unsupported_metrics)
        series = self._series.setdefault(gpu_instance_id, _Series())
        if not wanted:
            return {}
        if now - series.taken_at < MIN_SAMPLE_INTERVAL_S:
            return {metric: value for metric, value in series.last.items() if metric in wanted}
        buffer = series.spare if series.spare is not None else nvml.call(pynvml.nvmlGpmSampleAlloc)
        series.spare = None
        try:
            if gpu_instance_id is None:
                nvml.call(pynvml.nvmlGpmSampleGet, handle, buffer)
            else:
                nvml.call(pynvml.nvmlGpmMigSampleGet, handle, gpu_instance_id, buffer)
        except pynvml.NVMLError:
            series.spare = buffer
            raise
        previous, series.previous, series.taken_at = series.previous, buffer, now
        if previous is None:
            return {}
        series.spare = previous
        request = self._request(series, wanted)
        request.sample1 = previous
        request.sample2 = buffer
        nvml.call(pynvml.nvmlGpmMetricsGet, request)
        values: dict[int, float] = {}
        for slot, metric_id in enumerate(wanted):
            metric = request.metrics[slot]
            code = int(metric.nvmlReturn)
            if code == pynvml.NVML_SUCCESS:
                value = float(metric.value)
                if math.isfinite(value):
                    values[metric_id] = value
            elif code in _METRIC_UNSUPPORTED:
                self.unsupported_metrics.add((gpu_instance_id, metric_id))
        series.last = values
        return values

    @staticmethod
    def _request(series: _Series, metric_ids: tuple[int, ...]) -> Any:
        if series.request is None or series.requested != metric_ids:
            request = pynvml.c_nvmlGpmMetricsGet_t()
            request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(metric_ids)
            for slot, metric_id in enumerate(metric_ids):
                request.metrics[slot].metricId = metric_id
            series.request, series.requested = request, metric_ids
        return series.request

    def targets(self) -> tuple[Target, ...]:
        return tuple(self._series)

    def forget(self, nvml: NvmlClient, gpu_instance_id: Target) -> None:
        """Drop a target's chain (its GPU instance is gone, or the GPU was lost) and free its buffers."""
        series = self._series.pop(gpu_instance_id, None)
        self.unsupported_metrics = {key for key in self.unsupported_metrics if key[0] != gpu_instance_id}
        if series is None:
            return
        for buffer in (series.previous, series.spare):
            if buffer is not None:
                with contextlib.suppress(pynvml.NVMLError):  # best effort: the buffer is host memory only
                    nvml.call(pynvml.nvmlGpmSampleFree, buffer)

    def reset(self, nvml: NvmlClient) -> None:
        """Forget every chain (after the GPU was lost or MIG was reconfigured); support stays known."""
        for target in list(self._series):
            self.forget(nvml, target)
