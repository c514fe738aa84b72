"""Simulated GPM profiling counters (Hopper and newer): what ``nvmlGpmMetricsGet`` computes.

Real GPM works on two opaque samples of hardware performance counters taken at least 100 ms apart;
``nvmlGpmMetricsGet`` turns their difference into percentages ("SM activity 37.5 %") and rates
("PCIe TX 812 MiB/s"). The simulator mirrors that: each GPU (and each MIG GPU instance) has an
``ActivityModel`` giving every supported metric's instantaneous rate as a function of scenario
time, and ``GpmCounters`` integrates those rates. A sample is the integrals' values at one
instant; a metric between two samples is the mean rate over the interval, exactly the kind of
quantity GPM reports, and it is deterministic for a scenario and a pair of times.

The rates derive from the scenario's load so they stay coherent with utilisation: the graphics
engine is active while kernels run (``gr_active`` = the load), SMs are busy for a share of that
time (``sm_active`` <= ``gr_active``), occupancy is a share of SM activity, and a workload mix says
how much of the SM time goes to tensor cores and to FP64/FP32/FP16 pipes (a training job is
tensor-heavy, an HPC job FP64-heavy). DRAM activity follows the memory-copy utilisation; PCIe and
NVLink bandwidths follow the byte rates the fake already reports through field values. Any channel
the scenario gives a pattern for overrides the derivation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import pynvml

from simulator.patterns import Integral, Pattern
from simulator.scenario import ProfilingSpec

MIB_F = float(1 << 20)

GRAPHICS: int = pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL
SM: int = pynvml.NVML_GPM_METRIC_SM_UTIL
OCCUPANCY: int = pynvml.NVML_GPM_METRIC_SM_OCCUPANCY
INTEGER: int = pynvml.NVML_GPM_METRIC_INTEGER_UTIL
ANY_TENSOR: int = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
DFMA_TENSOR: int = pynvml.NVML_GPM_METRIC_DFMA_TENSOR_UTIL
HMMA_TENSOR: int = pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL
DMMA_TENSOR: int = pynvml.NVML_GPM_METRIC_DMMA_TENSOR_UTIL
IMMA_TENSOR: int = pynvml.NVML_GPM_METRIC_IMMA_TENSOR_UTIL
DRAM: int = pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL
FP64: int = pynvml.NVML_GPM_METRIC_FP64_UTIL
FP32: int = pynvml.NVML_GPM_METRIC_FP32_UTIL
FP16: int = pynvml.NVML_GPM_METRIC_FP16_UTIL
PCIE_TX: int = pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC
PCIE_RX: int = pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC
NVLINK_RX: int = pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC
NVLINK_TX: int = pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC

ACTIVITY_METRICS = (GRAPHICS, SM, OCCUPANCY, INTEGER, ANY_TENSOR, DFMA_TENSOR, HMMA_TENSOR, DMMA_TENSOR,
                    IMMA_TENSOR, DRAM, FP64, FP32, FP16)
# Units as NVML documents them (pynvml's comments on the metric ids), also written to metricInfo.
METRIC_INFO: Mapping[int, tuple[str, str, str]] = {
    GRAPHICS: ("GR_UTIL", "Graphics engine activity", "%"),
    SM: ("SM_UTIL", "SM activity", "%"),
    OCCUPANCY: ("SM_OCCUPANCY", "SM occupancy", "%"),
    INTEGER: ("INT_UTIL", "Integer pipe activity", "%"),
    ANY_TENSOR: ("TENSOR_UTIL", "Any tensor pipe activity", "%"),
    DFMA_TENSOR: ("DFMA_UTIL", "DFMA tensor pipe activity", "%"),
    HMMA_TENSOR: ("HMMA_UTIL", "HMMA tensor pipe activity", "%"),
    DMMA_TENSOR: ("DMMA_UTIL", "DMMA tensor pipe activity", "%"),
    IMMA_TENSOR: ("IMMA_UTIL", "IMMA tensor pipe activity", "%"),
    DRAM: ("DRAM_BW_UTIL", "DRAM bandwidth utilization", "%"),
    FP64: ("FP64_UTIL", "FP64 pipe activity", "%"),
    FP32: ("FP32_UTIL", "FP32 pipe activity", "%"),
    FP16: ("FP16_UTIL", "FP16 pipe activity", "%"),
    PCIE_TX: ("PCIE_TX", "PCIe transmit bandwidth", "MiB/sec"),
    PCIE_RX: ("PCIE_RX", "PCIe receive bandwidth", "MiB/sec"),
    NVLINK_RX: ("NVLINK_RX", "NVLink receive bandwidth, all links", "MiB/sec"),
    NVLINK_TX: ("NVLINK_TX", "NVLink transmit bandwidth, all links", "MiB/sec"),
}


@dataclass(frozen=True)
class WorkloadMix:
    """Shares that turn the graphics-engine activity into the finer GPM metrics.

    ``sm`` of the engine-active time has SMs busy; ``occupancy``, ``tensor``, ``fp*`` and
    ``integer`` are shares of SM activity; ``hmma``/``imma``/``dfma`` split the tensor activity.
    """

    sm: float
    occupancy: float
    tensor: float
    hmma: float
    imma: float
    dfma: float
    fp64: float
    fp32: float
    fp16: float
    integer: float


WORKLOAD_MIXES: Mapping[str, WorkloadMix] = {
    "training": WorkloadMix(sm=0.9, occupancy=0.55, tensor=0.7, hmma=0.95, imma=0.05, dfma=0.0,
                            fp64=0.0, fp32=0.15, fp16=0.2, integer=0.1),
    "inference": WorkloadMix(sm=0.75, occupancy=0.35, tensor=0.45, hmma=0.6, imma=0.4, dfma=0.0,
                             fp64=0.0, fp32=0.1, fp16=0.15, integer=0.15),
    "hpc": WorkloadMix(sm=0.85, occupancy=0.45, tensor=0.15, hmma=0.0, imma=0.0, dfma=1.0,
                       fp64=0.55, fp32=0.2, fp16=0.0, integer=0.1),
    "graphics": WorkloadMix(sm=0.5, occupancy=0.3, tensor=0.0, hmma=0.0, imma=0.0, dfma=0.0,
                            fp64=0.0, fp32=0.35, fp16=0.05, integer=0.2),
}

Rate = Callable[[float], float]


def _percent(value: float) -> float:
    return 0.0 if value < 0.0 else 100.0 if value > 100.0 else value


class ActivityModel:
    """Instantaneous GPM metric values (percent, or MiB/s) of one GPU or GPU instance at time t.

    ``load`` and ``memory_util`` are percent functions of time; ``byte_rates`` maps the
    device-wide metric ids (PCIe, NVLink) to byte-per-second functions (absent for a GPU
    instance, and NVLink absent on boards without it).
    """

    def __init__(self, spec: ProfilingSpec, key: Callable[[str], int], load: Rate, memory_util: Rate,
                 byte_rates: Mapping[int, Rate] | None = None) -> None:
        self._mix = WORKLOAD_MIXES[spec.workload]
        self._channels: Mapping[str, Pattern] = spec.channels
        self._key = key
        self._load = load
        self._memory_util = memory_util
        self._byte_rates = dict(byte_rates or {})
        self._memo: dict[float, dict[int, float]] = {}
        self.metric_ids: tuple[int, ...] = (*ACTIVITY_METRICS, *self._byte_rates)

    def _channel(self, name: str, t: float, default: float) -> float:
        pattern = self._channels.get(name)
        return _percent(default if pattern is None else pattern.at(t, self._key(f"gpm:{name}")))

    def rates(self, t: float) -> dict[int, float]:
        """Every supported metric at ``t``; memoised because each metric's integral asks in turn."""
        cached = self._memo.get(t)
        if cached is not None:
            return cached
        if len(self._memo) > 64:
            self._memo.clear()
        mix = self._mix
        gr = self._channel("gr_active", t, self._load(t))
        sm = self._channel("sm_active", t, gr * mix.sm)
        tensor = self._channel("tensor_active", t, sm * mix.tensor)
        rates = {
            GRAPHICS: gr,
            SM: sm,
            OCCUPANCY: self._channel("sm_occupancy", t, sm * mix.occupancy),
            INTEGER: _percent(sm * mix.integer),
            ANY_TENSOR: tensor,
            HMMA_TENSOR: _percent(tensor * mix.hmma),
            IMMA_TENSOR: _percent(tensor * mix.imma),
            DFMA_TENSOR: _percent(tensor * mix.dfma),
            DMMA_TENSOR: _percent(tensor * mix.dfma),
            DRAM: self._channel("dram_active", t, self._memory_util(t)),
            FP64: self._channel("fp64_active", t, sm * mix.fp64),
            FP32: self._channel("fp32_active", t, sm * mix.fp32),
            FP16: self._channel("fp16_active", t, sm * mix.fp16),
        }
        for metric_id, byte_rate in self._byte_rates.items():
            rates[metric_id] = max(0.0, byte_rate(t)) / MIB_F
        self._memo[t] = rates
        return rates

    def rate(self, metric_id: int, t: float) -> float:
        return self.rates(t)[metric_id]


class GpmCounters:
    """Cumulative integrals of an ActivityModel's rates: a GPM sample is their value at one instant."""

    def __init__(self, model: ActivityModel) -> None:
        self.model = model
        self._integrals = {metric_id: Integral(partial(model.rate, metric_id)) for metric_id in model.metric_ids}

    def sample(self, t: float) -> dict[int, float]:
        return {metric_id: integral.value(t) for metric_id, integral in self._integrals.items()}


def metric_between(first: Mapping[int, float], second: Mapping[int, float], elapsed_s: float,
                   metric_id: int) -> float:
    """The mean rate of ``metric_id`` between two samples ``elapsed_s`` apart."""
    return (second[metric_id] - first[metric_id]) / elapsed_s
