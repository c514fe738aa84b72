"""Named NVML device queries: one NVML call each, returning plain numbers in NVML's units.

The catalog refers to these by name (``FromQuery("memory", "used")``); several DCGM fields share one
query, and the sampler runs each needed query once per GPU per cycle. Version fallbacks live here:
memory info v2 (used excludes reserved, matching nvidia-smi) falls back to v1 on drivers without the
symbol, and ``nvmlDeviceGetTemperatureV`` falls back to the deprecated ``nvmlDeviceGetTemperature``.
Field values (``nvmlDeviceGetFieldValues``) are batched separately by the sampler.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from exporter.nvml.client import NvmlClient

NVML_PSTATE_UNKNOWN = 32


@dataclass
class QueryState:
    """Per-GPU facts a query learns about the driver (kept across cycles by the sampler)."""

    memory_v1_only: bool = False
    temperature_legacy: bool = False
    notes: dict[str, Any] = field(default_factory=dict)


QueryFunction = Callable[[NvmlClient, Any, QueryState], dict[str, float]]


@dataclass(frozen=True)
class Query:
    name: str
    run: QueryFunction
    static: bool = False  # read once per GPU (thresholds do not change while the driver is loaded)


def _utilization(nvml: NvmlClient, handle: Any, state: QueryState) -> dict[str, float]:
    rates = nvml.call(pynvml.nvmlDeviceGetUtilizationRates, handle)
    return {"gpu": rates.gpu, "memory": rates.memory}


def _encoder(nvml: NvmlClient, handle: Any, state: QueryState) -> dict[str, float]:
    return {"util": nvml.call(pynvml.nvmlDeviceGetEncoderUtilization, handle)[0]}


def _decoder(nvml: NvmlClient, handle: Any, state: QueryState) -> dict[str, float]:
    return {"util": nvml.call(pynvml.nvmlDeviceGetDecoderUtilization, handle)[0]}


def _memory(nvml: NvmlClient, handle: Any, state: QueryState) -> dict[str, float]:
    if not state.memory_v1_only:
        try:
            info = nvml.call(pynvml.nvmlDeviceGetMemoryInfo, handle, version=pynvml.nvmlMemory_v2)
        except pynvml.NVMLError_FunctionNotFound:
            state.memory_v1_only = True
        else:
            total = int(info.total)
            return {"total": total, "free": int(info.free), "used": int(info.used),
                    "reserved": int(info.reserved), "used_ratio": info.used / total if total else 0.0}
    # v1 counts reserved memory as used; there is no separate reserved figure.
    info = nvml.call(pynvml.nvmlDeviceGetMemoryInfo, handle)
    total = int(info.total)
    return {"total": total, "free": int(info.free), "used": int(info.used),
            "used_ratio": info.used / total if total else 0.0}


def _gpu_temperature(nvml: NvmlClient, handle: Any, state: QueryState) -> dict[str, float]:
    if not state.temperature_legacy:
        try:
            return {"celsius": nvml.call(pynvml.nvmlDeviceGetTemperatureV, handle, pynvml.NVML_TEMPERATURE_GPU)}
        except pynvml.NVMLError_FunctionNotFound:
            state.temperature_legacy = True
    return {"celsius": nvml.call(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)}


def _power_usage(nvml: NvmlClient, handle: Any, state: QueryState) -> dict[str, float]:
    return {"milliwatts": nvml.call(pynvml.nvmlDeviceGetPowerUsage, handle)}


def _power_limit(nvml: NvmlClient, handle: Any, state: QueryState) -> dict[str, float]:
    return {"milliwatts": nvml.call(pynvml.nvmlDeviceGetPowerManagementLimit, handle)}


def _clock(clock_type: int) -> QueryFunction:
    def run(nvml: NvmlClient, handle: Any, state: QueryState) -> dict[str, float]:
        return {"mhz": nvml.call(pynvml.nvmlDeviceGetClockInfo, handle, clock_type)}

    return run


def _fan_speed(nvml: NvmlClient, handle: Any, state: QueryState) -> dict[str, float]:
    return {"percent": nvml.call(pynvml.nvmlDeviceGetFanSpeed, handle)}


def _pstate(nvml: NvmlClient, handle: Any, state: QueryState) -> dict[str, float]:
    pstate = nvml.call(pynvml.nvmlDeviceGetPerformanceState, handle)
    return {} if pstate == NVML_PSTATE_UNKNOWN else {"pstate": pstate}


def _clock_event_reasons(nvml: NvmlClient, handle: Any, state: QueryState) -> dict[str, float]:
    return {"mask": nvml.call(pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle)}


def _fabric(nvml: NvmlClient, handle: Any, state: QueryState) -> dict[str, float]:
    """GPU fabric information (NVLink-fabric GPUs: GH200/GB200 NVL, HGX with NVSwitch and Fabric Manager).

    Asked as ``nvmlGpuFabricInfo_v3`` (adds ``healthSummary``) and, on a driver that answers
    ArgumentVersionMismatch or lacks the symbol for it, as v2 from then on (remembered), as DCGM's cache
    manager does for its fields 174/175. ``health_mask`` is NVML's ``healthMask`` unchanged: DCGM stores
    exactly that in DCGM_FI_DEV_FABRIC_HEALTH_MASK (its sub-fields are read with
    DCGM_GPU_FABRIC_HEALTH_GET, i.e. NVML_GPU_FABRIC_HEALTH_GET). ``health_summary`` is v3's
    ``healthSummary`` (1 healthy, 2 unhealthy, 3 limited capacity); 0 means "not supported" and is left
    out, never served as a value. NotSupported (no NVLink fabric, most GPUs) propagates: the sampler
    omits both rows on that GPU for good.
    """
    if not state.notes.get("fabric_v2_only"):
        info: Any = pynvml.c_nvmlGpuFabricInfo_v3_t()
        try:
            nvml.call(pynvml.nvmlDeviceGetGpuFabricInfoV, handle, ctypes.byref(info))
        except (pynvml.NVMLError_ArgumentVersionMismatch, pynvml.NVMLError_FunctionNotFound):
            state.notes["fabric_v2_only"] = True
        else:
            result: dict[str, float] = {"health_mask": int(info.healthMask)}
            if info.healthSummary != pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED:
                result["health_summary"] = int(info.healthSummary)
            return result
    info = pynvml.c_nvmlGpuFabricInfo_v2_t()
    nvml.call(pynvml.nvmlDeviceGetGpuFabricInfoV, handle, ctypes.byref(info))
    return {"health_mask": int(info.healthMask)}


def _threshold(threshold: int) -> QueryFunction:
    def run(nvml: NvmlClient, handle: Any, state: QueryState) -> dict[str, float]:
        return {"celsius": nvml.call(pynvml.nvmlDeviceGetTemperatureThreshold, handle, threshold)}

    return run


QUERIES: dict[str, Query] = {
    query.name: query
    for query in (
        Query("utilization", _utilization),
        Query("encoder", _encoder),
        Query("decoder", _decoder),
        Query("memory", _memory),
        Query("gpu_temp", _gpu_temperature),
        Query("power_usage", _power_usage),
        Query("power_limit", _power_limit),
        Query("sm_clock", _clock(pynvml.NVML_CLOCK_SM)),
        Query("mem_clock", _clock(pynvml.NVML_CLOCK_MEM)),
        Query("fan_speed", _fan_speed),
        Query("pstate", _pstate),
        Query("clock_event_reasons", _clock_event_reasons),
        Query("fabric", _fabric),
        Query("slowdown_temp", _threshold(pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN), static=True),
        Query("shutdown_temp", _threshold(pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN), static=True),
    )
}

def decode_field_value(value: Any) -> float:
    """Decode a ``c_nvmlFieldValue_t`` by its ``valueType`` (signed members are sllVal/siVal in pynvml)."""
    kind = value.valueType
    union = value.value
    if kind == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return float(union.dVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return int(union.uiVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return int(union.ulVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return int(union.ullVal)
    if kind == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return int(union.sllVal)
    if kind == getattr(pynvml, "NVML_VALUE_TYPE_SIGNED_INT", 5):
        return int(union.siVal)
    if kind == getattr(pynvml, "NVML_VALUE_TYPE_UNSIGNED_SHORT", 6):
        return int(union.usVal)
    raise ValueError(f"unknown NVML value type {kind}")
