"""``nvmlDeviceGetFieldValues``: which field IDs the fake serves and how each is read from the model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml

from simulator.fakenvml.abi import ALL_LINKS, INVALID_ARGUMENT, NOT_SUPPORTED, SUCCESS
from simulator.fakenvml.device import (
    GPU_IDLE,
    HW_POWER_BRAKE,
    HW_THERMAL,
    SW_POWER_CAP,
    SW_THERMAL,
    SYNC_BOOST,
    FieldReader,
    SimulatedGpu,
)

FieldValue: Any = pynvml.c_nvmlFieldValue_t
FV_FIELD_ID: Any = FieldValue.fieldId
FV_SCOPE_ID: Any = FieldValue.scopeId
FV_TIMESTAMP: Any = FieldValue.timestamp
FV_LATENCY: Any = FieldValue.latencyUsec
FV_VALUE_TYPE: Any = FieldValue.valueType
FV_RETURN: Any = FieldValue.nvmlReturn
FV_VALUE: Any = FieldValue.value
# Which member of the c_nvmlValue_t union each NVML value type is written to.
UNION_MEMBER: dict[int, Any] = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: pynvml.c_nvmlValue_t.dVal,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: pynvml.c_nvmlValue_t.uiVal,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: pynvml.c_nvmlValue_t.ulVal,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: pynvml.c_nvmlValue_t.ullVal,
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: pynvml.c_nvmlValue_t.sllVal,
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: pynvml.c_nvmlValue_t.siVal,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: pynvml.c_nvmlValue_t.usVal,
}


def _when(supported: Callable[[SimulatedGpu], bool], read: Callable[[SimulatedGpu, float], float],
          ) -> FieldReader:
    """A field served only on boards where ``supported(gpu)``; per-entry NOT_SUPPORTED elsewhere."""

    def reader(gpu: SimulatedGpu, t: float, scope: int) -> tuple[int, float]:
        return (SUCCESS, read(gpu, t)) if supported(gpu) else (NOT_SUPPORTED, 0)

    return reader


def _power_field(read: Callable[[SimulatedGpu, float], float]) -> FieldReader:
    def reader(gpu: SimulatedGpu, t: float, scope: int) -> tuple[int, float]:
        if not gpu.features.power_usage or scope != pynvml.NVML_POWER_SCOPE_GPU:
            return NOT_SUPPORTED, 0  # module/memory power scopes exist only on Grace-based boards
        return SUCCESS, int(read(gpu, t))

    return reader


def _nvlink_field(tx: bool, raw: bool) -> FieldReader:
    def reader(gpu: SimulatedGpu, t: float, scope: int) -> tuple[int, float]:
        links = gpu.features.nvlink_links
        if not links:
            return NOT_SUPPORTED, 0
        per_link = gpu.nvlink_link_kib(t, tx=tx, raw=raw)
        if scope == ALL_LINKS:
            return SUCCESS, per_link * links
        if scope >= links:
            return INVALID_ARGUMENT, 0  # what GB200 answers beyond its links (reference 1.9)
        return SUCCESS, per_link

    return reader


def _fields() -> dict[int, tuple[int, FieldReader]]:
    """Field id -> (NVML value type, reader). Readers return (per-entry nvmlReturn, value).

    Value types follow what the corresponding dedicated calls return (c_uint counters and
    temperatures as UNSIGNED_INT, 64-bit counters as UNSIGNED_LONG_LONG); the T.Limit fields are
    SIGNED_INT because they are negative offsets (``nvidia-smi -q`` prints "-8 C"). These are
    estimates until checked on a real GPU.
    """
    uint: int = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    ull: int = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    sint: int = pynvml.NVML_VALUE_TYPE_SIGNED_INT

    def ecc(gpu: SimulatedGpu) -> bool:
        return gpu.features.ecc

    def retired(gpu: SimulatedGpu) -> bool:
        return gpu.features.page_retirement

    def remapped(gpu: SimulatedGpu) -> bool:
        return gpu.features.row_remapping

    def violations(gpu: SimulatedGpu) -> bool:
        return gpu.features.violation_counters

    def tlimit(gpu: SimulatedGpu) -> bool:
        return gpu.features.tlimit_fields

    def memory_tlimit(gpu: SimulatedGpu) -> bool:
        return gpu.features.tlimit_fields and gpu.features.memory_temperature

    def pcie_bytes(gpu: SimulatedGpu) -> bool:
        return gpu.features.pcie_byte_counters

    def counter(name: str) -> Callable[[SimulatedGpu, float], float]:
        return lambda gpu, t: gpu.counter(name, t)

    def violation(bit: int) -> FieldReader:
        return _when(violations, lambda gpu, t: gpu.violation_ns(bit, t))

    def aggregate(corrected: bool) -> Callable[[SimulatedGpu, float], float]:
        def read(gpu: SimulatedGpu, t: float) -> float:
            ecc = gpu.spec.ecc_errors
            if corrected:
                return ecc.aggregate_corrected + gpu.counter("ecc_corrected", t)
            return ecc.aggregate_uncorrected + gpu.counter("ecc_uncorrected", t)
        return read

    energy = _when(lambda gpu: gpu.features.energy_counter, lambda gpu, t: gpu.energy_mj(t))

    def rows_pending(gpu: SimulatedGpu, t: float) -> float:
        return int(gpu.spec.remapped_rows.pending.at(t))

    def rows_failed(gpu: SimulatedGpu, t: float) -> float:
        return int(gpu.spec.remapped_rows.failure.at(t))

    def pages_pending(gpu: SimulatedGpu, t: float) -> float:
        return int(gpu.spec.retired_pages.pending.at(t))

    fi = pynvml
    return {
        fi.NVML_FI_DEV_ECC_CURRENT: (uint, _when(ecc, lambda gpu, t: 1)),
        fi.NVML_FI_DEV_ECC_PENDING: (uint, _when(ecc, lambda gpu, t: 1)),
        fi.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: (ull, _when(ecc, counter("ecc_corrected"))),
        fi.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: (ull, _when(ecc, counter("ecc_uncorrected"))),
        fi.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: (ull, _when(ecc, aggregate(corrected=True))),
        fi.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: (ull, _when(ecc, aggregate(corrected=False))),
        fi.NVML_FI_DEV_RETIRED_SBE: (uint, _when(retired, counter("retired_single_bit"))),
        fi.NVML_FI_DEV_RETIRED_DBE: (uint, _when(retired, counter("retired_double_bit"))),
        fi.NVML_FI_DEV_RETIRED_PENDING: (uint, _when(retired, pages_pending)),
        fi.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP: (ull, violation(SW_POWER_CAP)),
        fi.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST: (ull, violation(SYNC_BOOST)),
        fi.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: (ull, violation(SW_THERMAL)),
        fi.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN: (ull, violation(HW_THERMAL)),
        fi.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: (ull, violation(HW_POWER_BRAKE)),
        # The other perf-policy counters: nvml.h maps the thermal policy (75) onto the SW thermal
        # slowdown counter; low utilisation accrues while the GPU idles; board-limit and reliability
        # episodes are not modelled, and a limiter that never fired reads 0 (not NOT_SUPPORTED).
        fi.NVML_FI_DEV_PERF_POLICY_THERMAL: (ull, violation(SW_THERMAL)),
        fi.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT: (ull, _when(violations, lambda gpu, t: 0)),
        fi.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION: (ull, violation(GPU_IDLE)),
        fi.NVML_FI_DEV_PERF_POLICY_RELIABILITY: (ull, _when(violations, lambda gpu, t: 0)),
        fi.NVML_FI_DEV_MEMORY_TEMP: (uint, _when(lambda gpu: gpu.features.memory_temperature,
                                                 lambda gpu, t: gpu.memory_temperature(t))),
        fi.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: (ull, energy),
        fi.NVML_FI_DEV_ENERGY: (ull, energy),
        fi.NVML_FI_DEV_NVLINK_LINK_COUNT: (uint, _when(lambda gpu: gpu.features.nvlink_links > 0,
                                                       lambda gpu, t: gpu.features.nvlink_links)),
        fi.NVML_FI_DEV_PCIE_REPLAY_COUNTER: (uint, _when(lambda gpu: gpu.model.pcie_replays_supported,
                                                         counter("pcie_replays"))),
        fi.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: (ull, _nvlink_field(tx=True, raw=False)),
        fi.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: (ull, _nvlink_field(tx=False, raw=False)),
        fi.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX: (ull, _nvlink_field(tx=True, raw=True)),
        fi.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX: (ull, _nvlink_field(tx=False, raw=True)),
        fi.NVML_FI_DEV_REMAPPED_COR: (uint, _when(remapped, counter("remapped_correctable"))),
        fi.NVML_FI_DEV_REMAPPED_UNC: (uint, _when(remapped, counter("remapped_uncorrectable"))),
        fi.NVML_FI_DEV_REMAPPED_PENDING: (uint, _when(remapped, rows_pending)),
        fi.NVML_FI_DEV_REMAPPED_FAILURE: (uint, _when(remapped, rows_failed)),
        fi.NVML_FI_DEV_POWER_AVERAGE: (uint, _power_field(lambda gpu, t: gpu.power_mw(t))),
        fi.NVML_FI_DEV_POWER_INSTANT: (uint, _power_field(lambda gpu, t: gpu.power_mw(t))),
        fi.NVML_FI_DEV_POWER_MIN_LIMIT: (uint, _power_field(lambda gpu, t: gpu.model.power_min_limit_mw)),
        fi.NVML_FI_DEV_POWER_MAX_LIMIT: (uint, _power_field(lambda gpu, t: gpu.model.power_max_limit_mw)),
        fi.NVML_FI_DEV_POWER_DEFAULT_LIMIT: (
            uint, _power_field(lambda gpu, t: gpu.model.power_default_limit_mw)),
        fi.NVML_FI_DEV_POWER_CURRENT_LIMIT: (uint, _power_field(lambda gpu, t: gpu.spec.power_limit_mw)),
        fi.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT: (
            sint, _when(tlimit, lambda gpu, t: gpu.model.tlimit_shutdown)),
        fi.NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT: (
            sint, _when(tlimit, lambda gpu, t: gpu.model.tlimit_slowdown)),
        fi.NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT: (
            sint, _when(memory_tlimit, lambda gpu, t: gpu.model.tlimit_memory_max)),
        fi.NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT: (
            sint, _when(tlimit, lambda gpu, t: gpu.model.tlimit_gpu_max)),
        fi.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: (
            ull, _when(pcie_bytes, lambda gpu, t: gpu.pcie_bytes(t, tx=True))),
        fi.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: (
            ull, _when(pcie_bytes, lambda gpu, t: gpu.pcie_bytes(t, tx=False))),
    }


FIELDS: dict[int, tuple[int, FieldReader]] = _fields()
SUPPORTED_FIELD_IDS: frozenset[int] = frozenset(FIELDS)

