"""A fake NVML C library: installed as ``pynvml.nvmlLib`` it stands where libnvidia-ml.so would.

Production code keeps calling ``pynvml.nvmlDeviceGetX(...)`` unchanged. pynvml looks each C
symbol up on ``nvmlLib`` with ``getattr``, allocates the ctypes out-parameters itself, calls the
function and maps the returned ``nvmlReturn_t`` to its exception classes. So this object only has
to behave like the C ABI: attributes named after C symbols, each taking the ctypes arguments
exactly as pynvml passes them (``byref(struct)`` out-parameters, ``create_string_buffer`` plus a
length, ``c_uint`` by value, device handles as ``c_nvmlDevice_t`` pointers), writing results
through them and returning an int code. pynvml's real wrappers, structs, string decoding and
error mapping then run for real (reference/nvml.md sections 7.3 and 8).

Faithfulness rules kept here:

* A symbol the scenario marks missing is not an attribute at all, so pynvml raises
  ``NVMLError_FunctionNotFound`` exactly as with an old driver.
* Units are NVML's: bytes, mW, mJ, MHz, degrees C, percent, ns, KiB for NVLink counters.
* Calls before ``nvmlInit`` (or after the last ``nvmlShutdown``) answer UNINITIALIZED; a bad
  handle answers INVALID_ARGUMENT; a lost GPU answers GPU_IS_LOST to every call that names it,
  including ``nvmlDeviceGetFieldValues`` as a whole (see ``_impl_field_values``); a feature the
  board lacks answers NOT_SUPPORTED.
* NVML calls serialize in the driver (reference/nvml.md 5.3): every call runs under one
  library-wide driver lock, and injected latency is a real sleep taken while holding it, so
  concurrent callers queue as they would on a real driver. Without injected latency a call costs
  a few microseconds of Python.
* ``nvmlDeviceGetPcieThroughput`` always blocks 20 ms (its real sampling window), so a test can
  prove through ``calls`` that production never calls it.
* Events: ``nvmlEventSetWait_v2`` blocks up to its timeout *outside* the driver lock (a real wait
  sleeps in the kernel), wakes at once for ``inject_xid``/``inject_event``, picks up the scenario's
  ``xid_events`` when due, and answers TIMEOUT otherwise. A set only receives events raised after
  the GPU was registered on it ([H]); a lost registered GPU answers GPU_IS_LOST once per set.

Device handles are opaque integers written into the ``c_nvmlDevice_t`` pointer; they are never
dereferenced. The handle table maps them to simulated devices. A MIG device handle is its parent's
handle plus one plus its slot (``miglayout.py`` keeps the layout); a device symbol given a MIG
handle runs the method registered with ``_mig_variant`` (after the parent's lost/error/hang rules)
or answers NOT_SUPPORTED. GPM sample buffers are opaque pointers too, mapped to the counter
snapshots ``profiling.py`` computes; event sets are opaque handles mapped to ``_EventSet`` queues.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import pynvml

from exporter.simulate import profiling
from exporter.simulate.miglayout import MigLayout, SimulatedMigDevice
from exporter.simulate.models import MIB, MIG_MAX_DEVICES, check_mig_layout
from exporter.simulate.patterns import (
    INFINITY,
    CounterSpec,
    Integral,
    Pattern,
    Window,
    channel_key,
    hash_unit,
)
from exporter.simulate.profiling import GpmCounters
from exporter.simulate.scenario import (
    NVML_ERROR_CODES,
    NVML_SYMBOLS,
    ErrorFault,
    GpuSpec,
    InitFailure,
    MigInstanceSpec,
    ProcessSpec,
    Scenario,
    XidEventSpec,
    load_scenario,
    parse_error_code,
    parse_pci_bus_id,
)

SUCCESS: int = pynvml.NVML_SUCCESS
UNINITIALIZED: int = pynvml.NVML_ERROR_UNINITIALIZED
INVALID_ARGUMENT: int = pynvml.NVML_ERROR_INVALID_ARGUMENT
NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
NOT_FOUND: int = pynvml.NVML_ERROR_NOT_FOUND
INSUFFICIENT_SIZE: int = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
GPU_IS_LOST: int = pynvml.NVML_ERROR_GPU_IS_LOST
LIBRARY_NOT_FOUND: int = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
VERSION_MISMATCH: int = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
TIMEOUT: int = pynvml.NVML_ERROR_TIMEOUT

PCIE_THROUGHPUT_WINDOW_S = 0.020  # [H]: measured by a byte counter over a 20 ms interval
FIXED_WALL_EPOCH = 1_700_000_000.0  # wall time of scenario t=0 when a test injects its clock
NOT_MIG = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId of a process on a non-MIG GPU
ALL_LINKS = 0xFFFFFFFF  # NVLink field scopeId meaning "sum over all links"
ENC_DEC_SAMPLING_PERIOD_US = 167_000
_NOT_AVAILABLE: int = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value  # usedGpuMemory "N/A" (WDDM)
_HANDLE_BASE = 0x4E564D4C0000  # "NVML" in ASCII: easy to spot, never NULL
_HANDLE_STRIDE = 0x100  # room for MIG device handles under each parent (parent + 1 + slot)

# Real NVML strings for the codes a user is likely to print (nvmlErrorString).
_ERROR_STRINGS = {
    SUCCESS: "Success",
    UNINITIALIZED: "Uninitialized",
    INVALID_ARGUMENT: "Invalid Argument",
    NOT_SUPPORTED: "Not Supported",
    pynvml.NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NOT_FOUND: "Not Found",
    INSUFFICIENT_SIZE: "Insufficient Size",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    pynvml.NVML_ERROR_TIMEOUT: "Timeout",
    LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    GPU_IS_LOST: "GPU is lost",
    pynvml.NVML_ERROR_RESET_REQUIRED: "GPU requires reset",
    VERSION_MISMATCH: "Argument version mismatch",
    pynvml.NVML_ERROR_UNKNOWN: "Unknown Error",
}

_FieldValue: Any = pynvml.c_nvmlFieldValue_t
_FV_FIELD_ID: Any = _FieldValue.fieldId
_FV_SCOPE_ID: Any = _FieldValue.scopeId
_FV_TIMESTAMP: Any = _FieldValue.timestamp
_FV_LATENCY: Any = _FieldValue.latencyUsec
_FV_VALUE_TYPE: Any = _FieldValue.valueType
_FV_RETURN: Any = _FieldValue.nvmlReturn
_FV_VALUE: Any = _FieldValue.value
# Which member of the c_nvmlValue_t union each NVML value type is written to.
_UNION_MEMBER: dict[int, Any] = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: pynvml.c_nvmlValue_t.dVal,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: pynvml.c_nvmlValue_t.uiVal,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: pynvml.c_nvmlValue_t.ulVal,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: pynvml.c_nvmlValue_t.ullVal,
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: pynvml.c_nvmlValue_t.sllVal,
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: pynvml.c_nvmlValue_t.siVal,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: pynvml.c_nvmlValue_t.usVal,
}

_HW_SLOWDOWN: int = pynvml.nvmlClocksEventReasonHwSlowdown
_SW_THERMAL: int = pynvml.nvmlClocksEventReasonSwThermalSlowdown
_HW_THERMAL: int = pynvml.nvmlClocksEventReasonHwThermalSlowdown
_HW_POWER_BRAKE: int = pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
_SW_POWER_CAP: int = pynvml.nvmlClocksEventReasonSwPowerCap
_SYNC_BOOST: int = pynvml.nvmlClocksEventReasonSyncBoost
_GPU_IDLE: int = pynvml.nvmlClocksEventReasonGpuIdle
_SUPPORTED_REASONS: int = (
    _GPU_IDLE | pynvml.nvmlClocksEventReasonApplicationsClocksSetting | _SW_POWER_CAP | _HW_SLOWDOWN
    | _SYNC_BOOST | _SW_THERMAL | _HW_THERMAL | _HW_POWER_BRAKE
    | pynvml.nvmlClocksEventReasonDisplayClockSetting
)
_VIOLATION_BITS = (_SW_POWER_CAP, _SYNC_BOOST, _SW_THERMAL, _HW_THERMAL, _HW_POWER_BRAKE, _GPU_IDLE)
_POWER_CAP_FRACTION = 0.97
# A "*" fault (every symbol) spares these, so a test can always shut down and print errors.
_WILDCARD_EXEMPT = frozenset({"nvmlShutdown", "nvmlErrorString"})  # a capped GPU settles just below its limit


def _clamp(value: float, low: float, high: float) -> float:
    return low if value < low else high if value > high else value


class SimulatedGpu:
    """Coherent readings of one GPU as functions of scenario time, in NVML units.

    Derived values follow the load: power rises with utilisation and stays below the enforced
    limit (setting the SW power cap reason when it presses against it), temperature follows power
    with a lag, clocks drop during slowdowns, energy is the integral of power, byte counters the
    integral of traffic rates. Any channel the scenario gives a pattern for overrides the
    derivation. Support checks live in the library layer; these methods assume the reading exists.
    """

    def __init__(self, spec: GpuSpec, seed: int) -> None:
        self.spec = spec
        self.model = spec.model
        self.features = spec.features
        self.index = spec.index

        def key(channel: str) -> int:
            return channel_key(seed, spec.index, channel)

        self._key = key
        self._k_load = key("load")
        self._power_memo: dict[float, float] = {}
        self._energy = Integral(self.power_mw)
        self._pcie = (Integral(partial(self.pcie_rate, tx=True)), Integral(partial(self.pcie_rate, tx=False)))
        self._nvlink = (Integral(partial(self.nvlink_rate, tx=True)),
                        Integral(partial(self.nvlink_rate, tx=False)))
        self._violations = {bit: Integral(partial(self._violation_rate, bit))
                            for bit in _VIOLATION_BITS}
        self._counters: dict[str, tuple[CounterSpec, Integral | None]] = {}
        for name, counter in (
            ("pcie_replays", spec.pcie_replays),
            ("ecc_corrected", spec.ecc_errors.corrected),
            ("ecc_uncorrected", spec.ecc_errors.uncorrected),
            ("retired_single_bit", spec.retired_pages.single_bit),
            ("retired_double_bit", spec.retired_pages.double_bit),
            ("remapped_correctable", spec.remapped_rows.correctable),
            ("remapped_uncorrectable", spec.remapped_rows.uncorrectable),
        ):
            rate = counter.rate
            integral = None
            if rate is not None:
                rate_key = key(f"counter:{name}")
                integral = Integral(partial(rate.at, key=rate_key))
            self._counters[name] = (counter, integral)
        # MIG layout (None: MIG disabled) and GPM counters (None: no GPM); the library sets both.
        self.mig: MigLayout | None = None
        self.gpm: GpmCounters | None = None
        if spec.mig is not None:
            self.mig = MigLayout.create(spec.index, spec.model, spec.name, seed, key, specs=spec.mig)
        if spec.features.gpm:
            byte_rates: dict[int, Callable[[float], float]] = {
                profiling.PCIE_TX: partial(self.pcie_rate, tx=True),
                profiling.PCIE_RX: partial(self.pcie_rate, tx=False),
            }
            if spec.features.nvlink_links:
                byte_rates[profiling.NVLINK_TX] = partial(self.nvlink_rate, tx=True)
                byte_rates[profiling.NVLINK_RX] = partial(self.nvlink_rate, tx=False)
            self.gpm = GpmCounters(profiling.ActivityModel(spec.profiling, key, self.load, self.memory_util,
                                                           byte_rates))

    def _level(self, pattern: Pattern | None, channel: str, t: float, default: float) -> float:
        return default if pattern is None else pattern.at(t, self._key(channel))

    # --- activity -------------------------------------------------------------------------

    def load(self, t: float) -> float:
        if self.mig is not None:
            return _clamp(self.mig.load(t), 0.0, 100.0)  # a MIG GPU is as busy as its instances
        return _clamp(self.spec.load.at(t, self._k_load), 0.0, 100.0)

    def busy(self, t: float) -> bool:
        return self.load(t) >= 0.5

    def memory_util(self, t: float) -> float:
        return _clamp(self._level(self.spec.memory_util, "memory_util", t, self.load(t) * 0.42), 0.0, 100.0)

    def encoder_util(self, t: float) -> float:
        return _clamp(self._level(self.spec.encoder_util, "encoder_util", t, 0.0), 0.0, 100.0)

    def decoder_util(self, t: float) -> float:
        return _clamp(self._level(self.spec.decoder_util, "decoder_util", t, 0.0), 0.0, 100.0)

    def processes(self, t: float) -> list[ProcessSpec]:
        return [process for process in self.spec.processes if process.window.active(t)]

    def memory_used(self, t: float) -> int:
        """Allocated framebuffer bytes (v2 ``used``): the pattern, else the processes' sum."""
        usable = self.model.memory_total - self.model.memory_reserved
        if self.mig is not None:
            return int(_clamp(self.mig.memory_used(t), 0.0, usable))
        if self.spec.memory_used is not None:
            used = self.spec.memory_used.at(t, self._key("memory_used"))
        else:
            used = sum(p.used_memory or 0 for p in self.processes(t)) + MIB // 2
        return int(_clamp(used, 0.0, usable))

    # --- clock events, power, temperature -------------------------------------------------

    def scheduled_bits(self, t: float) -> int:
        bits = 0
        for event in self.spec.clock_events:
            if event.window.active(t):
                bits |= event.bits
        return bits

    def _raw_power_mw(self, t: float, scheduled: int) -> float:
        """Uncapped draw. Memoised per t: temperature, clocks, reasons and fields all need it."""
        cached = self._power_memo.get(t)
        if cached is not None:
            return cached
        if len(self._power_memo) > 64:
            self._power_memo.clear()
        power = self._compute_raw_power_mw(t, scheduled)
        self._power_memo[t] = power
        return power

    def _compute_raw_power_mw(self, t: float, scheduled: int) -> float:
        if self.spec.power is not None:
            return self.spec.power.at(t, self._key("power"))
        model = self.model
        utilisation = self.load(t) / 100.0
        media = (self.encoder_util(t) + self.decoder_util(t)) / 200.0
        span = model.power_busy_mw - model.power_idle_mw
        power = model.power_idle_mw + span * math.pow(utilisation, 1.15) + 0.04 * span * media
        if scheduled & (_HW_SLOWDOWN | _HW_POWER_BRAKE):
            power *= 0.6
        return power

    def _power_capped(self, t: float, scheduled: int) -> bool:
        cap = self.spec.power_limit_mw * _POWER_CAP_FRACTION
        return bool(scheduled & _SW_POWER_CAP) or self._raw_power_mw(t, scheduled) > cap

    def power_mw(self, t: float) -> float:
        scheduled = self.scheduled_bits(t)
        limit = self.spec.power_limit_mw
        power = self._raw_power_mw(t, scheduled)
        if self._power_capped(t, scheduled):
            power = min(power, limit * _POWER_CAP_FRACTION)
        return _clamp(power, 0.0, float(limit))

    def event_bits(self, t: float) -> int:
        """Current clock event reasons (NVML bitmask)."""
        scheduled = self.scheduled_bits(t)
        bits = scheduled
        if self._power_capped(t, scheduled):
            bits |= _SW_POWER_CAP
        if not bits and not self.busy(t):
            bits |= _GPU_IDLE
        return bits

    def _violation_rate(self, bit: int, t: float) -> float:
        return 1e9 if self.event_bits(t) & bit else 0.0

    def violation_ns(self, bit: int, t: float) -> int:
        """Cumulative nanoseconds spent with ``bit`` set (NVML's perf-policy violation counters)."""
        return int(self._violations[bit].value(t))

    def _heat(self, t: float) -> float:
        """Load-driven heating, 0..1, lagging power by tens of seconds."""
        model = self.model
        span = max(1.0, model.power_busy_mw - model.power_idle_mw)
        weighted = 0.0
        for lag, weight in ((0.0, 0.5), (10.0, 0.3), (30.0, 0.2)):
            weighted += weight * (self.power_mw(max(0.0, t - lag)) - model.power_idle_mw) / span
        return _clamp(weighted, 0.0, 1.2)

    def temperature(self, t: float) -> int:
        model = self.model
        if self.spec.temperature is not None:
            return round(self.spec.temperature.at(t, self._key("temperature")))
        value = model.temp_idle + (model.temp_busy - model.temp_idle) * self._heat(t)
        scheduled = self.scheduled_bits(t)
        if scheduled & _SW_THERMAL:
            value = max(value, model.temp_gpu_max + 1)
        if scheduled & _HW_THERMAL:
            value = max(value, model.temp_slowdown + 1)
        return round(value)

    def memory_temperature(self, t: float) -> int:
        if self.spec.memory_temperature is not None:
            return round(self.spec.memory_temperature.at(t, self._key("memory_temperature")))
        return self.temperature(t) + self.model.memory_temp_offset

    def fan_percent(self, t: float) -> int:
        if self.spec.fan is not None:
            return round(self.spec.fan.at(t, self._key("fan")))
        return round(_clamp(30.0 + (self.temperature(t) - self.model.temp_idle) * 1.6, 30.0, 100.0))

    # --- clocks and performance state -----------------------------------------------------

    def sm_clock(self, t: float) -> int:
        model = self.model
        if self.spec.sm_clock is not None:
            return round(self.spec.sm_clock.at(t, self._key("sm_clock")))
        if not self.busy(t):
            return model.idle_sm_clock
        clock = float(model.max_sm_clock)
        bits = self.event_bits(t)
        if bits & _SW_POWER_CAP:
            clock *= 0.9
        if bits & _SW_THERMAL:
            clock *= 0.85
        if bits & _HW_SLOWDOWN:
            clock *= 0.5
        return max(model.idle_sm_clock, int(clock // 15) * 15)

    def memory_clock(self, t: float) -> int:
        model = self.model
        if self.spec.memory_clock is not None:
            return round(self.spec.memory_clock.at(t, self._key("memory_clock")))
        return model.max_memory_clock if self.busy(t) else model.idle_memory_clock

    def video_clock(self, t: float) -> int:
        media = self.encoder_util(t) + self.decoder_util(t)
        return self.model.max_video_clock if media > 0 or self.busy(t) else self.model.idle_video_clock

    def pstate(self, t: float) -> int:
        if self.spec.pstate is not None:
            return round(_clamp(self.spec.pstate.at(t, self._key("pstate")), 0.0, 15.0))
        return self.model.busy_pstate if self.busy(t) else self.model.idle_pstate

    # --- cumulative counters ----------------------------------------------------------------

    def energy_mj(self, t: float) -> int:
        return int(self._energy.value(t))  # integral of mW over seconds = mJ

    def pcie_rate(self, t: float, *, tx: bool) -> float:
        pattern = self.spec.pcie_tx if tx else self.spec.pcie_rx
        if pattern is not None:
            return max(0.0, pattern.at(t, self._key("pcie_tx" if tx else "pcie_rx")))
        utilisation = self.load(t) / 100.0
        return 1.0e6 + utilisation * 25.0e6 if tx else 2.0e6 + utilisation * 60.0e6

    def pcie_bytes(self, t: float, *, tx: bool) -> int:
        return int(self._pcie[0 if tx else 1].value(t))

    def nvlink_rate(self, t: float, *, tx: bool) -> float:
        pattern = self.spec.nvlink_tx if tx else self.spec.nvlink_rx
        if pattern is None:
            return 0.0
        return max(0.0, pattern.at(t, self._key("nvlink_tx" if tx else "nvlink_rx")))

    def nvlink_link_kib(self, t: float, *, tx: bool, raw: bool) -> int:
        """Cumulative KiB through one link (traffic spreads evenly); RAW adds protocol overhead."""
        total = self._nvlink[0 if tx else 1].value(t) * (1.08 if raw else 1.0)
        return int(total / self.features.nvlink_links / 1024.0)

    def counter(self, name: str, t: float) -> int:
        spec, integral = self._counters[name]
        value = spec.stepped(t)
        if integral is not None:
            value += math.floor(integral.value(t))
        return value

    def retired_pages(self, cause: int, t: float, epoch: float) -> list[tuple[int, int]]:
        """(hardware page address, retirement time in seconds since the epoch) per retired page."""
        name = "retired_single_bit" if cause == 0 else "retired_double_bit"
        spec = self.spec.retired_pages.single_bit if cause == 0 else self.spec.retired_pages.double_bit
        when = [epoch - 86400.0] * spec.start
        for at, add in spec.steps:
            if at <= t:
                when.extend([epoch + at] * add)
        while len(when) < self.counter(name, t):
            when.append(epoch + t)
        key = self._key(f"retired:{cause}")
        return [(0x1000 * (1 + int(hash_unit(key, slot) * 0x3FFFFF)), int(moment))
                for slot, moment in enumerate(when)]


FieldReader = Callable[[SimulatedGpu, float, int], tuple[int, float]]


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
        fi.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP: (ull, violation(_SW_POWER_CAP)),
        fi.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST: (ull, violation(_SYNC_BOOST)),
        fi.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: (ull, violation(_SW_THERMAL)),
        fi.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN: (ull, violation(_HW_THERMAL)),
        fi.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: (ull, violation(_HW_POWER_BRAKE)),
        # The other perf-policy counters: nvml.h maps the thermal policy (75) onto the SW thermal
        # slowdown counter; low utilisation accrues while the GPU idles; board-limit and reliability
        # episodes are not modelled, and a limiter that never fired reads 0 (not NOT_SUPPORTED).
        fi.NVML_FI_DEV_PERF_POLICY_THERMAL: (ull, violation(_SW_THERMAL)),
        fi.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT: (ull, _when(violations, lambda gpu, t: 0)),
        fi.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION: (ull, violation(_GPU_IDLE)),
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


# ---------------------------------------------------------------------------------------------
# The C ABI.


@dataclass(frozen=True)
class _Symbol:
    name: str
    method: str
    takes_device: bool
    blocking: bool = False  # runs outside the driver lock (an event wait sleeps in the kernel, not in RM)


_REGISTRY: list[_Symbol] = []
# Symbol -> method answering it for a MIG device handle; symbols not listed answer NOT_SUPPORTED there.
_MIG_VARIANTS: dict[str, str] = {}


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _c_symbol(name: str, *, device: bool = False, blocking: bool = False) -> Callable[[_Method], _Method]:
    """Register an implementation method as C symbol ``name``.

    ``device=True``: the first C argument is a device handle; the dispatcher resolves it and
    applies the per-GPU rules (lost GPU, injected errors, hangs) before the method runs as
    ``method(gpu, t, *other_args)``. Otherwise the method runs as ``method(t, *args)``.
    """

    def register(method: _Method) -> _Method:
        _REGISTRY.append(_Symbol(name, method.__name__, device, blocking))
        return method

    return register


def _mig_variant(name: str) -> Callable[[_Method], _Method]:
    """Register the method that answers device symbol ``name`` when it is given a MIG device handle.

    It runs as ``method(mig_device, t, *other_args)`` after the parent GPU's rules (lost GPU,
    injected errors, hangs) have been applied, as on a real driver where a MIG device shares its
    parent's fate.
    """

    def register(method: _Method) -> _Method:
        _MIG_VARIANTS[name] = method.__name__
        return method

    return register


def _int(arg: Any) -> int:
    """A C integer argument: pynvml passes ctypes scalars (``c_uint(3)``) or plain ints."""
    value = getattr(arg, "value", arg)
    return int(value)


def _target(ref: Any) -> Any:
    """The object an out-parameter points at: ``byref(x)`` -> x, ``pointer(x)`` -> x, else itself."""
    obj = getattr(ref, "_obj", None)
    if obj is not None:
        return obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    return ref


def _write_string(buffer: Any, length: Any, text: str) -> int:
    data = text.encode()
    if len(data) + 1 > _int(length):
        return INSUFFICIENT_SIZE
    buffer.value = data
    return SUCCESS


def _write_handle(ref: Any, value: int) -> None:
    pointer = _target(ref)
    ctypes.c_void_p.from_address(ctypes.addressof(pointer)).value = value


def _handle_value(handle: Any) -> int | None:
    try:
        return ctypes.addressof(handle.contents)  # fastest read of a pointer's value (NULL raises)
    except (ValueError, AttributeError, TypeError):
        pass
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return None


def _wait(seconds: float) -> None:
    """Wait precisely: ``time.sleep`` (even ``sleep(0)``) overshoots by 50-80 us on Linux, more
    than most NVML calls take, so short waits spin on ``sched_yield``, which releases the GIL the
    way a real C call into the driver would."""
    if seconds >= 1e-3:
        time.sleep(seconds)
        return
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        os.sched_yield()


@dataclass
class _HangRule:
    symbol: str
    gpu: int | None
    start: float
    end: float
    holds_driver_lock: bool
    error: int | None
    released: bool = False


@dataclass(frozen=True)
class _ErrorRule:
    symbol: str
    code: int
    gpu: int | None
    start: float
    end: float
    field: int | None

    def applies(self, gpu: int | None, t: float) -> bool:
        return (self.gpu is None or self.gpu == gpu) and self.start <= t < self.end


@dataclass(frozen=True)
class _GpmSample:
    """Contents of a filled GPM sample buffer: whose counters, when, and their values."""

    gpu: int
    instance: int | None  # GPU instance id for nvmlGpmMigSampleGet samples
    t: float
    counters: dict[int, float]


_MISSING = object()
_GPM_SAMPLE_BASE = 0x47504D000000  # "GPM" in ASCII


XID_EVENT: int = pynvml.nvmlEventTypeXidCriticalError
_GPU_UNAVAILABLE_EVENT: int = getattr(pynvml, "nvmlEventTypeGpuUnavailableError", 0x4000)
_EVENT_SET_BASE = 0x45564E540000  # "EVNT"
_EVENT_DEVICE_OFFSET: int = pynvml.c_nvmlEventData_t.device.offset
EVENT_POLL_S = 0.05  # longest sleep of a waiter between checks of scenario time


def _supported_events(gpu: SimulatedGpu) -> int:
    """What ``nvmlDeviceGetSupportedEventTypes`` reports: Xid and P-state everywhere, ECC events on ECC
    boards, DRAM retirement where pages are retired or rows remapped, MIG changes on MIG boards."""
    mask = XID_EVENT | pynvml.nvmlEventTypePState | _GPU_UNAVAILABLE_EVENT
    features = gpu.features
    if features.ecc:
        mask |= pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError
    if features.page_retirement or features.row_remapping:
        mask |= pynvml.nvmlEventTypeDramRetirementEvent | pynvml.nvmlEventTypeDramRetirementFailure
    if features.mig:
        mask |= pynvml.nvmlEventMigConfigChange
    return int(mask)


@dataclass(frozen=True)
class _FakeEvent:
    at: float
    gpu: int
    event_type: int
    data: int
    gpu_instance_id: int = NOT_MIG
    compute_instance_id: int = NOT_MIG

    @classmethod
    def xid(cls, spec: XidEventSpec) -> _FakeEvent:
        return cls(spec.at, spec.gpu, XID_EVENT, spec.xid,
                   NOT_MIG if spec.gpu_instance is None else spec.gpu_instance,
                   NOT_MIG if spec.compute_instance is None else spec.compute_instance)


@dataclass
class _EventSet:
    """One ``nvmlEventSet_t``: which GPUs are registered for which types since when, and its queue."""

    cursor: int = 0  # next scheduled scenario event to look at
    types: dict[int, int] = field(default_factory=dict)  # GPU index -> registered event types
    since: dict[int, float] = field(default_factory=dict)  # GPU index -> scenario time of registration
    queue: deque[_FakeEvent] = field(default_factory=deque)
    lost_reported: set[int] = field(default_factory=set)

    def accepts(self, event: _FakeEvent) -> bool:
        """Registered for this GPU and type, and registered before the event happened ([H])."""
        return bool(self.types.get(event.gpu, 0) & event.event_type) and event.at >= self.since[event.gpu]


class FakeNvmlLibrary:
    """The fake ``libnvidia-ml.so``: attributes named after C symbols, driven by a Scenario.

    ``clock`` returns scenario seconds since start (default: ``time.monotonic()`` relative to
    construction); tests inject a fixed clock for deterministic readings. ``wall_epoch`` is the
    wall time of scenario t=0, used for field-value timestamps (default: the construction time
    with the real clock, a fixed date with an injected clock so output is byte-identical).
    """

    def __init__(self, scenario: Scenario, clock: Callable[[], float] | None = None, *,
                 wall_epoch: float | None = None) -> None:
        self.scenario = scenario
        if clock is None:
            started = time.monotonic()
            self._clock: Callable[[], float] = lambda: time.monotonic() - started
            self._epoch = time.time() if wall_epoch is None else wall_epoch
        else:
            self._clock = clock
            self._epoch = FIXED_WALL_EPOCH if wall_epoch is None else wall_epoch
        self.calls: Counter[str] = Counter()
        # _state_lock guards call counters and fault tables and is never held while sleeping;
        # _driver_lock is the simulated driver's lock: every call's work (and its injected
        # latency) runs under it, so calls serialize like on a real driver.
        self._state_lock = threading.Lock()
        self._driver_lock = threading.Lock()
        self._release = threading.Event()
        self._refcount = 0
        self._ever_initialized = False
        self._init_attempts = 0
        self._init_failure = scenario.library.init_failure
        self._latency: dict[str, float] = dict(scenario.latency)
        self._field_latency = scenario.field_value_latency
        self._gpus = tuple(SimulatedGpu(spec, scenario.seed) for spec in scenario.gpus)
        self._handles = {_HANDLE_BASE + gpu.index * _HANDLE_STRIDE: gpu for gpu in self._gpus}
        self._by_uuid = {gpu.spec.uuid: gpu for gpu in self._gpus}
        self._gpm_samples: dict[int, _GpmSample | None] = {}  # allocated GPM sample buffers
        self._gpm_next_sample = 0
        self.gpm_short_intervals = 0  # nvmlGpmMetricsGet calls on samples < 100 ms apart (NVML: too close)
        self._by_pci = {(g.spec.pci_domain, g.spec.pci_bus, g.spec.pci_device): g for g in self._gpus}
        self._lost_at = [INFINITY] * len(self._gpus)
        for lost in scenario.lost:
            self._lost_at[lost.gpu] = min(self._lost_at[lost.gpu], lost.at)
        self._errors: dict[str, list[_ErrorRule]] = {}
        self._field_errors: list[_ErrorRule] = []
        for fault in scenario.errors:
            self._add_error_rule(fault)
        self._hangs: list[_HangRule] = [
            _HangRule(h.symbol, h.gpu, h.at, h.at + h.duration, h.holds_driver_lock, h.error)
            for h in scenario.hangs
        ]
        # NVML events: sets by handle value, scheduled scenario Xids, and a condition that wakes waiters.
        self._events = threading.Condition()
        self._event_sets: dict[int, _EventSet] = {}
        self._next_event_set = 0
        self._scheduled: tuple[_FakeEvent, ...] = tuple(_FakeEvent.xid(spec) for spec in scenario.xid_events)
        self._wait_generation = 0
        for symbol in _REGISTRY:
            if symbol.name not in scenario.library.missing_symbols:
                setattr(self, symbol.name, self._entry(symbol))

    # --- public API -----------------------------------------------------------------------

    @property
    def devices(self) -> tuple[SimulatedGpu, ...]:
        """The simulated GPUs by NVML index (for tests that compare with the model)."""
        return self._gpus

    def elapsed(self) -> float:
        """Scenario time in seconds."""
        return self._clock()

    def wall_time(self, t: float) -> float:
        """The wall-clock time (seconds since the epoch) of scenario time ``t``."""
        return self._epoch + t

    def install(self) -> None:
        """Make pynvml use this library: ``pynvml.nvmlInit()`` then talks to the fake."""
        with pynvml.libLoadLock:
            pynvml.nvmlLib = self
            pynvml._nvmlGetFunctionPointer_cache.clear()
            pynvml._nvmlLib_refcount = 0

    def uninstall(self) -> None:
        """Detach from pynvml (a later ``nvmlInit`` would load the real library again)."""
        with pynvml.libLoadLock:
            if pynvml.nvmlLib is self:
                pynvml.nvmlLib = None
                pynvml._nvmlLib_refcount = 0
            pynvml._nvmlGetFunctionPointer_cache.clear()

    def reset_calls(self) -> None:
        with self._state_lock:
            self.calls.clear()

    def total_calls(self) -> int:
        with self._state_lock:
            return sum(self.calls.values())

    def set_latency(self, symbol: str, seconds: float) -> None:
        """Inject ``seconds`` of real latency into every call of ``symbol`` (0 removes it).

        ``"field_value"`` sets the extra latency per requested field of nvmlDeviceGetFieldValues.
        """
        if seconds < 0:
            raise ValueError("latency must be zero or positive")
        with self._state_lock:
            if symbol == "field_value":
                self._field_latency = seconds
                return
            _check_symbol(symbol)
            if seconds:
                self._latency[symbol] = seconds
            else:
                self._latency.pop(symbol, None)

    def inject_error(self, symbol: str, code: int | str, gpu: int | None = None,
                     from_s: float | None = None, until_s: float | None = None, *,
                     field: int | None = None) -> None:
        """Make calls of ``symbol`` (``"*"``: every symbol) fail with ``code`` on ``gpu`` (None: any).

        The window is scenario time ``[from_s, until_s)`` (default: from now on, forever). With
        ``field`` only that entry of ``nvmlDeviceGetFieldValues`` fails.
        """
        if symbol != "*":
            _check_symbol(symbol)
        number = parse_error_code(code)
        self._check_gpu(gpu)
        start = self.elapsed() if from_s is None else from_s
        end = INFINITY if until_s is None else until_s
        fault = ErrorFault(symbol, number, gpu, Window(start, end), field)
        with self._state_lock:
            self._add_error_rule(fault)

    def clear_errors(self) -> None:
        with self._state_lock:
            self._errors.clear()
            self._field_errors.clear()

    def lose_gpu(self, index: int) -> None:
        """The GPU falls off the bus now: every call naming it answers GPU_IS_LOST from now on."""
        self._check_gpu(index)
        with self._state_lock:
            self._lost_at[index] = -INFINITY

    def inject_xid(self, gpu: int, xid: int, count: int = 1, gi: int | None = None, ci: int | None = None) -> None:
        """Raise ``count`` Xid ``xid`` events on ``gpu`` now (in MIG instance ``gi``/``ci`` when given).

        Every event set that has the GPU registered for Xid events receives them, and blocked
        ``nvmlEventSetWait_v2`` calls wake at once.
        """
        if not 0 < xid <= 0xFFFFFFFF or count < 1:
            raise ValueError("xid must be positive and count at least 1")
        self.inject_event(gpu, XID_EVENT, xid, count=count, gi=gi, ci=ci)

    def inject_event(self, gpu: int, event_type: int, data: int = 0, *, count: int = 1,
                     gi: int | None = None, ci: int | None = None) -> None:
        """Raise ``count`` NVML events of ``event_type`` (an ``nvmlEventType*`` bit) on ``gpu`` now."""
        self._check_gpu(gpu)
        if event_type <= 0 or event_type & (event_type - 1):
            raise ValueError("event_type must be a single nvmlEventType* bit")
        event = _FakeEvent(self.elapsed(), gpu, event_type, data, NOT_MIG if gi is None else gi,
                           NOT_MIG if ci is None else ci)
        with self._events:
            for event_set in self._event_sets.values():
                if event_set.accepts(event):
                    event_set.queue.extend([event] * count)
            self._events.notify_all()

    def release_waits(self) -> None:
        """Wake every blocked ``nvmlEventSetWait_v2`` now: it returns TIMEOUT, as on an interrupt ([H])."""
        with self._events:
            self._wait_generation += 1
            self._events.notify_all()

    @property
    def open_event_sets(self) -> int:
        """Event sets created and not yet freed (a clean shutdown leaves none)."""
        with self._events:
            return len(self._event_sets)

    def hang(self, symbol: str, seconds: float, gpu: int | None = None, *,
             holds_driver_lock: bool = False) -> None:
        """Calls of ``symbol`` (on ``gpu``) block for ``seconds`` from now; ``release_hangs`` ends it."""
        if symbol != "*":
            _check_symbol(symbol)
        self._check_gpu(gpu)
        start = self.elapsed()
        with self._state_lock:
            self._hangs.append(_HangRule(symbol, gpu, start, start + seconds, holds_driver_lock, None))

    def release_hangs(self) -> None:
        """Wake every blocked call now and disable all hangs (scenario and runtime ones)."""
        with self._state_lock:
            for rule in self._hangs:
                rule.released = True
            released, self._release = self._release, threading.Event()
        released.set()
        self.release_waits()

    def fail_init(self, code: int | str, calls: int | None = None, until_s: float | None = None) -> None:
        """Make the next ``calls`` init attempts and/or those before ``until_s`` fail with ``code``."""
        with self._state_lock:
            self._init_attempts = 0
            self._init_failure = InitFailure(parse_error_code(code), calls, until_s)

    # --- dispatch -------------------------------------------------------------------------

    def _check_gpu(self, gpu: int | None) -> None:
        if gpu is not None and not 0 <= gpu < len(self._gpus):
            raise ValueError(f"no GPU {gpu} in this scenario ({len(self._gpus)} GPUs)")

    def _add_error_rule(self, fault: ErrorFault) -> None:
        window = fault.window
        rule = _ErrorRule(fault.symbol, fault.code, fault.gpu, window.start, window.end, fault.field)
        if fault.field is not None:
            self._field_errors.append(rule)
        else:
            self._errors.setdefault(fault.symbol, []).append(rule)

    def _entry(self, symbol: _Symbol) -> Callable[..., int]:
        name = symbol.name
        implementation = getattr(self, symbol.method)
        calls = self.calls
        state_lock = self._state_lock

        if symbol.takes_device:
            def call_device(*args: Any) -> int:
                with state_lock:
                    calls[name] += 1
                t = self._clock()
                if not self._refcount:
                    return UNINITIALIZED
                gpu = self._handles.get(_handle_value(args[0]) or 0) if args else None
                if gpu is None:
                    return self._call_mig_device(name, t, args)
                return self._dispatch(name, gpu.index, t, implementation, (gpu, t, *args[1:]))

            call_device.__name__ = name
            return call_device

        blocking = symbol.blocking

        def call(*args: Any) -> int:
            with state_lock:
                calls[name] += 1
            t = self._clock()
            return self._dispatch(name, None, t, implementation, (t, *args), blocking=blocking)

        call.__name__ = name
        return call

    def _dispatch(self, name: str, gpu: int | None, t: float, implementation: Callable[..., int],  # noqa: PLR0917
                  args: tuple[Any, ...], blocking: bool = False) -> int:
        after_hang: int | None = None
        if self._hangs:
            after_hang = self._maybe_hang(name, gpu, t)
        latency = self._latency.get(name, 0.0)
        with self._driver_lock:
            if latency:
                _wait(latency)
            code = self._system_gate(name, t) if gpu is None else self._device_gate(name, gpu, t)
            if code:
                return code
            if after_hang:
                return after_hang
            if not blocking:
                return implementation(*args)
        return implementation(*args)  # a blocking call (event wait) must not stall other callers

    def _device_gate(self, name: str, gpu: int, t: float) -> int:
        """The per-GPU answer that preempts the real one: lost GPU first, then injected errors."""
        if t >= self._lost_at[gpu]:
            return GPU_IS_LOST
        for rules in (self._errors.get(name), self._errors.get("*")):
            if rules:
                for rule in rules:
                    if rule.applies(gpu, t):
                        return rule.code
        return SUCCESS

    def _system_gate(self, name: str, t: float) -> int:
        wildcard = None if name in _WILDCARD_EXEMPT else self._errors.get("*")
        for rules in (self._errors.get(name), wildcard):
            if rules:
                for rule in rules:
                    if rule.gpu is None and rule.applies(None, t):
                        return rule.code
        return SUCCESS

    def _maybe_hang(self, name: str, gpu: int | None, t: float) -> int | None:
        # Take the release event before looking at ``released``: release_hangs marks the rules
        # first and then sets the old event, so a caller either sees the mark or gets woken.
        release = self._release
        for rule in list(self._hangs):
            if rule.released or not rule.start <= t < rule.end:
                continue
            if rule.symbol != name and (rule.symbol != "*" or name in _WILDCARD_EXEMPT):
                continue
            if rule.gpu is not None and rule.gpu != gpu:
                continue
            if rule.holds_driver_lock:
                with self._driver_lock:
                    release.wait(rule.end - t)
            else:
                release.wait(rule.end - t)
            return rule.error
        return None

    def _gpu_for_index(self, index: int) -> Any:
        return self._gpus[index] if 0 <= index < len(self._gpus) else None

    # --- init, shutdown, errors, system ---------------------------------------------------

    def _init(self, t: float) -> int:
        if self.scenario.library.missing:
            return LIBRARY_NOT_FOUND
        self._init_attempts += 1
        failure = self._init_failure
        if failure is not None:
            failing_calls = failure.calls is not None and self._init_attempts <= failure.calls
            failing_time = failure.until is not None and t < failure.until
            if failing_calls or failing_time:
                return failure.code
        self._refcount += 1
        self._ever_initialized = True
        return SUCCESS

    @_c_symbol("nvmlInitWithFlags")
    def _impl_init_with_flags(self, t: float, flags: Any) -> int:
        return self._init(t)

    @_c_symbol("nvmlInit_v2")
    def _impl_init(self, t: float) -> int:
        return self._init(t)

    @_c_symbol("nvmlShutdown")
    def _impl_shutdown(self, t: float) -> int:
        if not self._ever_initialized:
            return UNINITIALIZED
        # [H]: extra shutdowns are not an error, for backwards compatibility.
        self._refcount = max(0, self._refcount - 1)
        return SUCCESS

    @_c_symbol("nvmlErrorString")
    def _impl_error_string(self, t: float, code: Any) -> bytes:
        """Returns bytes, as ``restype = c_char_p`` makes ctypes do; works without init."""
        number = _int(code)
        text = _ERROR_STRINGS.get(number)
        if text is None:
            names = [n for n, c in NVML_ERROR_CODES.items() if c == number and not n.startswith("NVML_")]
            text = names[0] if names else "Unknown Error"
        return text.encode()

    def _system(self, t: float) -> int:
        return SUCCESS if self._refcount else UNINITIALIZED

    @_c_symbol("nvmlSystemGetDriverVersion")
    def _impl_driver_version(self, t: float, buffer: Any, length: Any) -> int:
        return self._system(t) or _write_string(buffer, length, self.scenario.driver_version)

    @_c_symbol("nvmlSystemGetNVMLVersion")
    def _impl_nvml_version(self, t: float, buffer: Any, length: Any) -> int:
        return self._system(t) or _write_string(buffer, length, self.scenario.nvml_version)

    @_c_symbol("nvmlSystemGetCudaDriverVersion")
    def _impl_cuda_version(self, t: float, out: Any) -> int:
        code = self._system(t)
        if not code:
            _target(out).value = self.scenario.cuda_driver_version
        return code

    @_c_symbol("nvmlSystemGetCudaDriverVersion_v2")
    def _impl_cuda_version_v2(self, t: float, out: Any) -> int:
        code = self._system(t)
        if not code:
            _target(out).value = self.scenario.cuda_driver_version
        return code

    # --- handles --------------------------------------------------------------------------

    @_c_symbol("nvmlDeviceGetCount_v2")
    def _impl_count(self, t: float, out: Any) -> int:
        code = self._system(t)
        if not code:
            _target(out).value = len(self._gpus)
        return code

    def _give_handle(self, name: str, gpu: SimulatedGpu | None, t: float, out: Any, missing: int) -> int:
        if not self._refcount:
            return UNINITIALIZED
        if gpu is None:
            return missing
        code = self._device_gate(name, gpu.index, t)
        if code:
            return code
        _write_handle(out, _HANDLE_BASE + gpu.index * _HANDLE_STRIDE)
        return SUCCESS

    @_c_symbol("nvmlDeviceGetHandleByIndex_v2")
    def _impl_handle_by_index(self, t: float, index: Any, out: Any) -> int:
        gpu = self._gpu_for_index(_int(index))
        return self._give_handle("nvmlDeviceGetHandleByIndex_v2", gpu, t, out, INVALID_ARGUMENT)

    @_c_symbol("nvmlDeviceGetHandleByUUID")
    def _impl_handle_by_uuid(self, t: float, uuid: Any, out: Any) -> int:
        raw = getattr(uuid, "value", uuid)
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        if text.startswith("MIG-"):  # current drivers resolve MIG UUIDs to MIG device handles
            return self._give_mig_handle(text, t, out)
        return self._give_handle("nvmlDeviceGetHandleByUUID", self._by_uuid.get(text), t, out, NOT_FOUND)

    @_c_symbol("nvmlDeviceGetHandleByPciBusId_v2")
    def _impl_handle_by_pci(self, t: float, bus_id: Any, out: Any) -> int:
        raw = getattr(bus_id, "value", bus_id)
        try:
            key = parse_pci_bus_id(raw.decode() if isinstance(raw, bytes) else str(raw))
        except ValueError:
            return INVALID_ARGUMENT
        return self._give_handle("nvmlDeviceGetHandleByPciBusId_v2", self._by_pci.get(key), t, out, NOT_FOUND)

    # --- identity -------------------------------------------------------------------------

    @_c_symbol("nvmlDeviceGetIndex", device=True)
    def _impl_index(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        _target(out).value = gpu.index
        return SUCCESS

    @_c_symbol("nvmlDeviceGetUUID", device=True)
    def _impl_uuid(self, gpu: SimulatedGpu, t: float, buffer: Any, length: Any) -> int:
        return _write_string(buffer, length, gpu.spec.uuid)

    @_c_symbol("nvmlDeviceGetName", device=True)
    def _impl_name(self, gpu: SimulatedGpu, t: float, buffer: Any, length: Any) -> int:
        return _write_string(buffer, length, gpu.spec.name)

    @_c_symbol("nvmlDeviceGetPciInfo_v3", device=True)
    def _impl_pci_info(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        info = _target(out)
        spec = gpu.spec
        info.busIdLegacy = spec.pci_bus_id_legacy.encode()
        info.domain = spec.pci_domain
        info.bus = spec.pci_bus
        info.device = spec.pci_device
        info.pciDeviceId = gpu.model.pci_device_id
        info.pciSubSystemId = gpu.model.pci_subsystem_id
        info.busId = spec.pci_bus_id.encode()
        return SUCCESS

    @_c_symbol("nvmlDeviceGetMinorNumber", device=True)
    def _impl_minor(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        _target(out).value = gpu.spec.minor
        return SUCCESS

    @_c_symbol("nvmlDeviceGetSerial", device=True)
    def _impl_serial(self, gpu: SimulatedGpu, t: float, buffer: Any, length: Any) -> int:
        if not gpu.features.serial_number:
            return NOT_SUPPORTED
        return _write_string(buffer, length, gpu.spec.serial)

    @_c_symbol("nvmlDeviceGetVbiosVersion", device=True)
    def _impl_vbios(self, gpu: SimulatedGpu, t: float, buffer: Any, length: Any) -> int:
        return _write_string(buffer, length, gpu.spec.vbios_version)

    @_c_symbol("nvmlDeviceGetBrand", device=True)
    def _impl_brand(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        _target(out).value = gpu.model.brand
        return SUCCESS

    @_c_symbol("nvmlDeviceGetArchitecture", device=True)
    def _impl_architecture(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        _target(out).value = gpu.model.architecture
        return SUCCESS

    @_c_symbol("nvmlDeviceGetCudaComputeCapability", device=True)
    def _impl_compute_capability(self, gpu: SimulatedGpu, t: float, major: Any, minor: Any) -> int:
        _target(major).value, _target(minor).value = gpu.model.compute_capability
        return SUCCESS

    # --- utilisation and memory -----------------------------------------------------------

    @_c_symbol("nvmlDeviceGetUtilizationRates", device=True)
    def _impl_utilization(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if gpu.mig is not None:
            return NOT_SUPPORTED  # [H]: not supported on MIG-enabled GPUs
        utilization = _target(out)
        utilization.gpu = round(gpu.load(t))
        utilization.memory = round(gpu.memory_util(t))
        return SUCCESS

    def _media(self, supported: bool, value: float, util: Any, period: Any) -> int:
        if not supported:
            return NOT_SUPPORTED
        _target(util).value = round(value)
        _target(period).value = ENC_DEC_SAMPLING_PERIOD_US
        return SUCCESS

    @_c_symbol("nvmlDeviceGetEncoderUtilization", device=True)
    def _impl_encoder(self, gpu: SimulatedGpu, t: float, util: Any, period: Any) -> int:
        return self._media(gpu.features.encoder and gpu.mig is None, gpu.encoder_util(t), util, period)

    @_c_symbol("nvmlDeviceGetDecoderUtilization", device=True)
    def _impl_decoder(self, gpu: SimulatedGpu, t: float, util: Any, period: Any) -> int:
        return self._media(gpu.features.decoder and gpu.mig is None, gpu.decoder_util(t), util, period)

    @_c_symbol("nvmlDeviceGetMemoryInfo", device=True)
    def _impl_memory_v1(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        """v1 ``used`` is reserved + allocated ([H] struct comment); total = free + used."""
        memory = _target(out)
        used = gpu.memory_used(t) + gpu.model.memory_reserved
        memory.total = gpu.model.memory_total
        memory.used = used
        memory.free = gpu.model.memory_total - used
        return SUCCESS

    @_c_symbol("nvmlDeviceGetMemoryInfo_v2", device=True)
    def _impl_memory_v2(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        memory = _target(out)
        if memory.version != pynvml.nvmlMemory_v2:
            return VERSION_MISMATCH
        used = gpu.memory_used(t)
        memory.total = gpu.model.memory_total
        memory.reserved = gpu.model.memory_reserved
        memory.used = used
        memory.free = gpu.model.memory_total - gpu.model.memory_reserved - used
        return SUCCESS

    @_c_symbol("nvmlDeviceGetBAR1MemoryInfo", device=True)
    def _impl_bar1(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        bar1 = _target(out)
        used = 2 * MIB + 2 * MIB * len(gpu.processes(t))
        bar1.bar1Total = gpu.model.bar1_total
        bar1.bar1Used = used
        bar1.bar1Free = gpu.model.bar1_total - used
        return SUCCESS

    # --- temperature, power, energy -------------------------------------------------------

    @_c_symbol("nvmlDeviceGetTemperatureV", device=True)
    def _impl_temperature_v(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        reading = _target(out)
        if reading.version != pynvml.nvmlTemperature_v1:
            return VERSION_MISMATCH
        if reading.sensorType != pynvml.NVML_TEMPERATURE_GPU:
            return INVALID_ARGUMENT
        reading.temperature = gpu.temperature(t)
        return SUCCESS

    @_c_symbol("nvmlDeviceGetTemperature", device=True)
    def _impl_temperature(self, gpu: SimulatedGpu, t: float, sensor: Any, out: Any) -> int:
        if _int(sensor) != pynvml.NVML_TEMPERATURE_GPU:
            return INVALID_ARGUMENT
        _target(out).value = gpu.temperature(t)
        return SUCCESS

    @_c_symbol("nvmlDeviceGetTemperatureThreshold", device=True)
    def _impl_temperature_threshold(self, gpu: SimulatedGpu, t: float, kind: Any, out: Any) -> int:
        model = gpu.model
        thresholds = {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: model.temp_shutdown,
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: model.temp_slowdown,
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: model.temp_gpu_max,
        }
        if gpu.features.memory_temperature:
            thresholds[pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX] = model.temp_memory_max
        value = thresholds.get(_int(kind))
        if value is None:
            return NOT_SUPPORTED
        _target(out).value = value
        return SUCCESS

    @_c_symbol("nvmlDeviceGetPowerUsage", device=True)
    def _impl_power_usage(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.power_usage:
            return NOT_SUPPORTED
        _target(out).value = int(gpu.power_mw(t))
        return SUCCESS

    def _power_limit(self, gpu: SimulatedGpu, value: int, out: Any) -> int:
        if not gpu.features.power_usage:
            return NOT_SUPPORTED
        _target(out).value = value
        return SUCCESS

    @_c_symbol("nvmlDeviceGetPowerManagementLimit", device=True)
    def _impl_power_limit(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return self._power_limit(gpu, gpu.spec.power_limit_mw, out)

    @_c_symbol("nvmlDeviceGetEnforcedPowerLimit", device=True)
    def _impl_enforced_limit(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return self._power_limit(gpu, gpu.spec.power_limit_mw, out)

    @_c_symbol("nvmlDeviceGetPowerManagementDefaultLimit", device=True)
    def _impl_default_limit(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return self._power_limit(gpu, gpu.model.power_default_limit_mw, out)

    @_c_symbol("nvmlDeviceGetTotalEnergyConsumption", device=True)
    def _impl_energy(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.energy_counter:
            return NOT_SUPPORTED
        _target(out).value = gpu.energy_mj(t)
        return SUCCESS

    # --- clocks, fan, performance state, clock events -------------------------------------

    @_c_symbol("nvmlDeviceGetClockInfo", device=True)
    def _impl_clock(self, gpu: SimulatedGpu, t: float, kind: Any, out: Any) -> int:
        readers = {
            pynvml.NVML_CLOCK_GRAPHICS: gpu.sm_clock,
            pynvml.NVML_CLOCK_SM: gpu.sm_clock,
            pynvml.NVML_CLOCK_MEM: gpu.memory_clock,
            pynvml.NVML_CLOCK_VIDEO: gpu.video_clock,
        }
        reader = readers.get(_int(kind))
        if reader is None:
            return INVALID_ARGUMENT
        _target(out).value = reader(t)
        return SUCCESS

    @_c_symbol("nvmlDeviceGetMaxClockInfo", device=True)
    def _impl_max_clock(self, gpu: SimulatedGpu, t: float, kind: Any, out: Any) -> int:
        model = gpu.model
        maxima = {
            pynvml.NVML_CLOCK_GRAPHICS: model.max_graphics_clock,
            pynvml.NVML_CLOCK_SM: model.max_sm_clock,
            pynvml.NVML_CLOCK_MEM: model.max_memory_clock,
            pynvml.NVML_CLOCK_VIDEO: model.max_video_clock,
        }
        value = maxima.get(_int(kind))
        if value is None:
            return INVALID_ARGUMENT
        _target(out).value = value
        return SUCCESS

    @_c_symbol("nvmlDeviceGetPcieReplayCounter", device=True)
    def _impl_pcie_replays(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.model.pcie_replays_supported:
            return NOT_SUPPORTED
        _target(out).value = gpu.counter("pcie_replays", t)
        return SUCCESS

    @_c_symbol("nvmlDeviceGetFanSpeed", device=True)
    def _impl_fan_speed(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.fans:
            return NOT_SUPPORTED  # passively cooled board
        _target(out).value = gpu.fan_percent(t)
        return SUCCESS

    @_c_symbol("nvmlDeviceGetNumFans", device=True)
    def _impl_num_fans(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.fans:
            return NOT_SUPPORTED
        _target(out).value = gpu.features.fans
        return SUCCESS

    @_c_symbol("nvmlDeviceGetPerformanceState", device=True)
    def _impl_pstate(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        _target(out).value = gpu.pstate(t)
        return SUCCESS

    @_c_symbol("nvmlDeviceGetCurrentClocksEventReasons", device=True)
    def _impl_event_reasons(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.clock_event_reasons:
            return NOT_SUPPORTED
        _target(out).value = gpu.event_bits(t) & _SUPPORTED_REASONS
        return SUCCESS

    @_c_symbol("nvmlDeviceGetSupportedClocksEventReasons", device=True)
    def _impl_supported_reasons(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.clock_event_reasons:
            return NOT_SUPPORTED
        _target(out).value = _SUPPORTED_REASONS
        return SUCCESS

    # --- ECC, retired pages, remapped rows ------------------------------------------------

    @_c_symbol("nvmlDeviceGetEccMode", device=True)
    def _impl_ecc_mode(self, gpu: SimulatedGpu, t: float, current: Any, pending: Any) -> int:
        if not gpu.features.ecc:
            return NOT_SUPPORTED
        _target(current).value = pynvml.NVML_FEATURE_ENABLED
        _target(pending).value = pynvml.NVML_FEATURE_ENABLED
        return SUCCESS

    @_c_symbol("nvmlDeviceGetTotalEccErrors", device=True)
    def _impl_total_ecc(self, gpu: SimulatedGpu, t: float, error_type: Any, counter_type: Any,
                        out: Any) -> int:
        if not gpu.features.ecc:
            return NOT_SUPPORTED
        kind, scope = _int(error_type), _int(counter_type)
        if kind not in (0, 1) or scope not in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC):
            return INVALID_ARGUMENT
        volatile = gpu.counter("ecc_corrected" if kind == 0 else "ecc_uncorrected", t)
        ecc = gpu.spec.ecc_errors
        before = ecc.aggregate_corrected if kind == 0 else ecc.aggregate_uncorrected
        _target(out).value = volatile + (before if scope == pynvml.NVML_AGGREGATE_ECC else 0)
        return SUCCESS

    def _retired(self, gpu: SimulatedGpu, t: float, cause: Any, count: Any, addresses: Any,  # noqa: PLR0917
                 timestamps: Any) -> int:
        """The two-call size probe: NULL buffer (or too small) -> INSUFFICIENT_SIZE with the count."""
        if not gpu.features.page_retirement:
            return NOT_SUPPORTED
        if _int(cause) not in (0, 1):
            return INVALID_ARGUMENT
        pages = gpu.retired_pages(_int(cause), t, self._epoch)
        capacity = _target(count)
        if addresses is None or capacity.value < len(pages):
            capacity.value = len(pages)
            return INSUFFICIENT_SIZE if pages else SUCCESS
        for slot, (address, moment) in enumerate(pages):
            addresses[slot] = address
            if timestamps is not None:
                timestamps[slot] = moment
        capacity.value = len(pages)
        return SUCCESS

    @_c_symbol("nvmlDeviceGetRetiredPages", device=True)
    def _impl_retired_pages(self, gpu: SimulatedGpu, t: float, cause: Any, count: Any, addresses: Any) -> int:
        return self._retired(gpu, t, cause, count, addresses, None)

    @_c_symbol("nvmlDeviceGetRetiredPages_v2", device=True)
    def _impl_retired_pages_v2(  # noqa: PLR0917 - mirrors the C signature
            self, gpu: SimulatedGpu, t: float, cause: Any, count: Any, addresses: Any,
            timestamps: Any = None) -> int:
        # pynvml's size probe passes only four arguments (no timestamps buffer); a C library would
        # read an indeterminate fifth one, which is harmless because addresses is NULL then.
        return self._retired(gpu, t, cause, count, addresses, timestamps)

    @_c_symbol("nvmlDeviceGetRetiredPagesPendingStatus", device=True)
    def _impl_retired_pending(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.page_retirement:
            return NOT_SUPPORTED
        pending = gpu.spec.retired_pages.pending.at(t)
        _target(out).value = pynvml.NVML_FEATURE_ENABLED if pending else pynvml.NVML_FEATURE_DISABLED
        return SUCCESS

    @_c_symbol("nvmlDeviceGetRemappedRows", device=True)
    def _impl_remapped_rows(  # noqa: PLR0917 - mirrors the C signature
            self, gpu: SimulatedGpu, t: float, corrected: Any, uncorrected: Any, pending: Any,
            failure: Any) -> int:
        if not gpu.features.row_remapping:
            return NOT_SUPPORTED
        rows = gpu.spec.remapped_rows
        _target(corrected).value = gpu.counter("remapped_correctable", t)
        _target(uncorrected).value = gpu.counter("remapped_uncorrectable", t)
        _target(pending).value = int(rows.pending.at(t))
        _target(failure).value = int(rows.failure.at(t))
        return SUCCESS

    # --- processes ------------------------------------------------------------------------

    def _process_list(self, processes: list[tuple[ProcessSpec, int, int]], count: Any, infos: Any) -> int:
        """Two-call protocol: probe with count=0 and NULL -> INSUFFICIENT_SIZE (or SUCCESS when
        there are none) and the count; then fill a buffer of at least that many entries."""
        capacity = _target(count)
        if infos is None or capacity.value < len(processes):
            capacity.value = len(processes)
            return INSUFFICIENT_SIZE if processes else SUCCESS
        for slot, (process, gpu_instance_id, compute_instance_id) in enumerate(processes):
            info = infos[slot]
            info.pid = process.pid
            used = process.used_memory
            info.usedGpuMemory = _NOT_AVAILABLE if used is None else used
            info.gpuInstanceId = gpu_instance_id
            info.computeInstanceId = compute_instance_id
        capacity.value = len(processes)
        return SUCCESS

    @_c_symbol("nvmlDeviceGetComputeRunningProcesses_v3", device=True)
    def _impl_compute_processes(self, gpu: SimulatedGpu, t: float, count: Any, infos: Any) -> int:
        return self._process_list(self._processes_on(gpu, t, compute=True), count, infos)

    @_c_symbol("nvmlDeviceGetGraphicsRunningProcesses_v3", device=True)
    def _impl_graphics_processes(self, gpu: SimulatedGpu, t: float, count: Any, infos: Any) -> int:
        return self._process_list(self._processes_on(gpu, t, compute=False), count, infos)

    # --- PCIe throughput (the call production must never make) ----------------------------

    @_c_symbol("nvmlDeviceGetPcieThroughput", device=True)
    def _impl_pcie_throughput(self, gpu: SimulatedGpu, t: float, counter: Any, out: Any) -> int:
        """KB/s measured over a real 20 ms window, during which the driver lock is held."""
        which = _int(counter)
        if which not in (pynvml.NVML_PCIE_UTIL_TX_BYTES, pynvml.NVML_PCIE_UTIL_RX_BYTES):
            return INVALID_ARGUMENT
        time.sleep(PCIE_THROUGHPUT_WINDOW_S)
        _target(out).value = int(gpu.pcie_rate(t, tx=which == pynvml.NVML_PCIE_UTIL_TX_BYTES) / 1000)
        return SUCCESS

    # --- MIG probing (the MIG device symbols are further down) -----------------------------

    @_c_symbol("nvmlDeviceGetMaxMigDeviceCount", device=True)
    def _impl_max_mig_devices(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        # [H]: zero when MIG is unsupported or disabled
        _target(out).value = MIG_MAX_DEVICES if gpu.mig is not None else 0
        return SUCCESS

    @_c_symbol("nvmlDeviceGetMigMode", device=True)
    def _impl_mig_mode(self, gpu: SimulatedGpu, t: float, current: Any, pending: Any) -> int:
        if not gpu.features.mig:
            return NOT_SUPPORTED
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig is not None else pynvml.NVML_DEVICE_MIG_DISABLE
        _target(current).value = mode
        _target(pending).value = mode
        return SUCCESS

    # --- events ---------------------------------------------------------------------------

    def _event_set(self, handle: Any) -> _EventSet | None:
        return self._event_sets.get(_handle_value(handle) or 0)

    @_c_symbol("nvmlEventSetCreate")
    def _impl_event_set_create(self, t: float, out: Any) -> int:
        code = self._system(t)
        if code:
            return code
        with self._events:
            self._next_event_set += 1
            value = _EVENT_SET_BASE + self._next_event_set * 0x10
            self._event_sets[value] = _EventSet(cursor=self._first_due(t))
        _write_handle(out, value)
        return SUCCESS

    @_c_symbol("nvmlEventSetFree")
    def _impl_event_set_free(self, t: float, event_set: Any) -> int:
        code = self._system(t)
        if code:
            return code
        with self._events:
            if self._event_sets.pop(_handle_value(event_set) or 0, None) is None:
                return INVALID_ARGUMENT
            self._events.notify_all()
        return SUCCESS

    @_c_symbol("nvmlDeviceGetSupportedEventTypes", device=True)
    def _impl_supported_event_types(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        _target(out).value = _supported_events(gpu)
        return SUCCESS

    @_c_symbol("nvmlDeviceRegisterEvents", device=True)
    def _impl_register_events(self, gpu: SimulatedGpu, t: float, event_types: Any, event_set: Any) -> int:
        """[H]: NOT_SUPPORTED when any requested type is unsupported, and then none is registered."""
        mask = _int(event_types)
        with self._events:
            target = self._event_set(event_set)
            if target is None:
                return INVALID_ARGUMENT
            if mask & ~_supported_events(gpu):
                return NOT_SUPPORTED
            target.types[gpu.index] = target.types.get(gpu.index, 0) | mask
            target.since.setdefault(gpu.index, t)
        return SUCCESS

    @_c_symbol("nvmlEventSetWait_v2", blocking=True)
    def _impl_event_set_wait(self, t: float, event_set: Any, data: Any, timeout_ms: Any) -> int:
        """Block up to ``timeout_ms`` (real time) for the next event; TIMEOUT when none comes.

        Runs outside the driver lock. Wakes at once for injected events, frees and ``release_waits``;
        scenario Xids are picked up when due (re-checked at least every 50 ms, so a test that moves an
        injected clock needs no real waiting). A registered GPU that is lost answers GPU_IS_LOST once
        per set, after the events that happened before it.
        """
        deadline = time.monotonic() + _int(timeout_ms) / 1000.0
        with self._events:
            generation = self._wait_generation
            while True:
                if not self._refcount:
                    return UNINITIALIZED
                target = self._event_set(event_set)
                if target is None:
                    return INVALID_ARGUMENT
                now = self._clock()
                self._collect_due(target, now)
                if target.queue:
                    self._write_event(_target(data), target.queue.popleft())
                    return SUCCESS
                lost = next((index for index in sorted(target.types) if now >= self._lost_at[index]
                             and index not in target.lost_reported), None)
                if lost is not None:
                    target.lost_reported.add(lost)
                    return GPU_IS_LOST
                remaining = deadline - time.monotonic()
                if remaining <= 0 or generation != self._wait_generation:
                    return TIMEOUT
                due = self._scheduled[target.cursor].at - now if target.cursor < len(self._scheduled) else remaining
                self._events.wait(max(0.0, min(remaining, due, EVENT_POLL_S)))

    def _first_due(self, t: float) -> int:
        """Index of the first scheduled event at or after ``t`` (a new set sees nothing older)."""
        index = 0
        while index < len(self._scheduled) and self._scheduled[index].at < t:
            index += 1
        return index

    def _collect_due(self, target: _EventSet, now: float) -> None:
        scheduled = self._scheduled
        while target.cursor < len(scheduled) and scheduled[target.cursor].at <= now:
            event = scheduled[target.cursor]
            target.cursor += 1
            if target.accepts(event):
                target.queue.append(event)

    def _write_event(self, data: Any, event: _FakeEvent) -> None:
        ctypes.c_void_p.from_address(ctypes.addressof(data) + _EVENT_DEVICE_OFFSET).value = (
            _HANDLE_BASE + event.gpu * _HANDLE_STRIDE)
        data.eventType = event.event_type
        data.eventData = event.data
        data.gpuInstanceId = event.gpu_instance_id
        data.computeInstanceId = event.compute_instance_id

    # --- field values ---------------------------------------------------------------------

    @staticmethod
    def _field_fault(rules: list[_ErrorRule], field_id: int, gpu: int, t: float) -> int:
        for rule in rules:
            if rule.field == field_id and rule.applies(gpu, t):
                return rule.code
        return SUCCESS

    @_c_symbol("nvmlDeviceGetFieldValues", device=True)
    def _impl_field_values(self, gpu: SimulatedGpu, t: float, count: Any, values: Any) -> int:
        """Per-entry status, value type, union member, timestamp (us since the epoch), latency.

        A lost GPU fails the whole call with GPU_IS_LOST (the dispatcher answers before this
        runs): NVML validates the device in the common prologue every device call shares, before
        it dispatches to the per-field readers, which is why every other device call reports
        GPU_IS_LOST too; per-entry statuses are for fields that one board cannot serve. It also
        lets production treat "GPU lost" uniformly, whichever call noticed first.
        """
        entries = _target(values)
        total = _int(count)
        if total < 0:
            return INVALID_ARGUMENT
        per_field = self._field_latency
        if per_field:
            _wait(per_field * total)
        timestamp = int((self._epoch + t) * 1_000_000)
        latency_us = int(per_field * 1_000_000)
        field_errors = self._field_errors
        for slot in range(total):
            # Struct members are set through their ctypes descriptors: pynvml's
            # _PrintableStructure.__setattr__ would otherwise cost a microsecond per member.
            entry = entries[slot]
            field_id = _FV_FIELD_ID.__get__(entry, _FieldValue)
            _FV_TIMESTAMP.__set__(entry, timestamp)
            _FV_LATENCY.__set__(entry, latency_us)
            injected = self._field_fault(field_errors, field_id, gpu.index, t) if field_errors else 0
            if injected:
                _FV_RETURN.__set__(entry, injected)
                continue
            reader = FIELDS.get(field_id)
            if reader is None:
                _FV_RETURN.__set__(entry, NOT_SUPPORTED)
                continue
            value_type, read = reader
            code, value = read(gpu, t, _FV_SCOPE_ID.__get__(entry, _FieldValue))
            _FV_RETURN.__set__(entry, code)
            if code == SUCCESS:
                _FV_VALUE_TYPE.__set__(entry, value_type)
                _UNION_MEMBER[value_type].__set__(_FV_VALUE.__get__(entry, _FieldValue), value)
        return SUCCESS

    # --- MIG devices ----------------------------------------------------------------------
    # A MIG device handle is parent handle + 1 + slot: when a slot is reused after a
    # reconfiguration the handle value comes back with different properties, as [H] warns.

    def set_mig_layout(self, gpu: int, instances: list[str | MigInstanceSpec] | None) -> None:
        """Reconfigure MIG on ``gpu`` now, as an administrator would with ``nvidia-smi mig``.

        ``instances`` lists GPU instances (profile names or full specs); instances already there
        and still wanted (same profile, oldest first) keep their slot, ids and UUID, the others are
        destroyed and the new ones created in the lowest free slots. ``None`` disables MIG (the
        mode change itself needs a GPU reset on real hardware; here it takes effect at once).
        """
        self._check_gpu(gpu)
        target = self._gpus[gpu]
        if not target.features.mig:
            raise ValueError(f"GPU {gpu} ({target.model.key}) does not support MIG")
        specs = None if instances is None else [
            item if isinstance(item, MigInstanceSpec) else MigInstanceSpec(item) for item in instances]
        if specs is not None:
            check_mig_layout(target.model.key, [spec.profile for spec in specs])
        with self._driver_lock:
            if specs is None:
                target.mig = None
            elif target.mig is None:
                target.mig = MigLayout.create(gpu, target.model, target.spec.name, self.scenario.seed,
                                              partial(channel_key, self.scenario.seed, gpu), specs=specs)
            else:
                target.mig = target.mig.changed(specs)

    def _mig_device(self, handle: Any) -> SimulatedMigDevice | None:
        value = (_handle_value(handle) or 0) - _HANDLE_BASE
        parent, offset = divmod(value, _HANDLE_STRIDE)
        gpu: SimulatedGpu | None = self._gpu_for_index(parent) if value >= 0 and offset else None
        if gpu is None or gpu.mig is None:
            return None
        return gpu.mig.slots.get(offset - 1)

    def _call_mig_device(self, name: str, t: float, args: tuple[Any, ...]) -> int:
        device = self._mig_device(args[0]) if args else None
        if device is None:
            return INVALID_ARGUMENT
        method = _MIG_VARIANTS.get(name)
        implementation = getattr(self, method) if method else _not_on_mig_device
        return self._dispatch(name, device.parent, t, implementation, (device, t, *args[1:]))

    def _give_mig_handle(self, uuid: str, t: float, out: Any) -> int:
        if not self._refcount:
            return UNINITIALIZED
        for gpu in self._gpus:
            for slot, device in (gpu.mig.slots.items() if gpu.mig is not None else ()):
                if device.uuid == uuid:
                    code = self._device_gate("nvmlDeviceGetHandleByUUID", gpu.index, t)
                    if not code:
                        _write_handle(out, _HANDLE_BASE + gpu.index * _HANDLE_STRIDE + 1 + slot)
                    return code
        return NOT_FOUND

    def _processes_on(self, gpu: SimulatedGpu, t: float, *, compute: bool) -> list[tuple[ProcessSpec, int, int]]:
        """The GPU's processes with their GPU/compute instance ids (all of them, as root sees them)."""
        found = [(p, NOT_MIG, NOT_MIG) for p in gpu.processes(t)]
        if gpu.mig is not None:
            found.extend(gpu.mig.processes(t))
        return [entry for entry in found if (entry[0].compute if compute else entry[0].graphics)]

    @_c_symbol("nvmlDeviceGetMigDeviceHandleByIndex", device=True)
    def _impl_mig_handle_by_index(self, gpu: SimulatedGpu, t: float, index: Any, out: Any) -> int:
        if not gpu.features.mig:
            return NOT_SUPPORTED
        slot = _int(index)
        if gpu.mig is None or not 0 <= slot < MIG_MAX_DEVICES:
            return INVALID_ARGUMENT
        if slot not in gpu.mig.slots:
            return NOT_FOUND  # [H]: an empty slot; callers continue with the next index
        _write_handle(out, _HANDLE_BASE + gpu.index * _HANDLE_STRIDE + 1 + slot)
        return SUCCESS

    @_c_symbol("nvmlDeviceIsMigDeviceHandle", device=True)
    def _impl_is_mig_handle(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        _target(out).value = 0
        return SUCCESS

    @_mig_variant("nvmlDeviceIsMigDeviceHandle")
    def _mig_is_mig_handle(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        _target(out).value = 1
        return SUCCESS

    @_c_symbol("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", device=True)
    def _impl_parent_handle(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return NOT_SUPPORTED  # a full-GPU handle is not a MIG device (estimate of the code)

    @_mig_variant("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
    def _mig_parent_handle(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        _write_handle(out, _HANDLE_BASE + device.parent * _HANDLE_STRIDE)
        return SUCCESS

    @_c_symbol("nvmlDeviceGetGpuInstanceId", device=True)
    def _impl_gpu_instance_id(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return NOT_SUPPORTED

    @_mig_variant("nvmlDeviceGetGpuInstanceId")
    def _mig_gpu_instance_id(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        _target(out).value = device.gpu_instance_id
        return SUCCESS

    @_c_symbol("nvmlDeviceGetComputeInstanceId", device=True)
    def _impl_compute_instance_id(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return NOT_SUPPORTED

    @_mig_variant("nvmlDeviceGetComputeInstanceId")
    def _mig_compute_instance_id(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        _target(out).value = device.compute_instance_id
        return SUCCESS

    @_c_symbol("nvmlDeviceGetAttributes_v2", device=True)
    def _impl_attributes(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return NOT_SUPPORTED  # [H]: only supports MIG device handles

    @_mig_variant("nvmlDeviceGetAttributes_v2")
    def _mig_attributes(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        attributes = _target(out)
        profile = device.instance.profile
        share = device.instance.spec.compute_instances
        attributes.multiprocessorCount = profile.multiprocessors // share
        attributes.sharedCopyEngineCount = profile.compute_slices
        attributes.sharedDecoderCount = profile.compute_slices // 2
        attributes.sharedEncoderCount = 0
        attributes.sharedJpegCount = profile.compute_slices // 7
        attributes.sharedOfaCount = profile.compute_slices // 7
        attributes.gpuInstanceSliceCount = profile.compute_slices
        attributes.computeInstanceSliceCount = profile.compute_slices // share
        attributes.memorySizeMB = profile.memory_bytes // MIB
        return SUCCESS

    @_mig_variant("nvmlDeviceGetUUID")
    def _mig_uuid(self, device: SimulatedMigDevice, t: float, buffer: Any, length: Any) -> int:
        return _write_string(buffer, length, device.uuid)

    @_mig_variant("nvmlDeviceGetName")
    def _mig_name(self, device: SimulatedMigDevice, t: float, buffer: Any, length: Any) -> int:
        return _write_string(buffer, length, device.name)

    @_mig_variant("nvmlDeviceGetMemoryInfo")
    def _mig_memory_v1(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        instance = device.instance
        memory = _target(out)
        used = instance.memory_used(t) + instance.memory_reserved
        memory.total = instance.memory_total
        memory.used = used
        memory.free = instance.memory_total - used
        return SUCCESS

    @_mig_variant("nvmlDeviceGetMemoryInfo_v2")
    def _mig_memory_v2(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        memory = _target(out)
        if memory.version != pynvml.nvmlMemory_v2:
            return VERSION_MISMATCH
        instance = device.instance
        used = instance.memory_used(t)
        memory.total = instance.memory_total
        memory.reserved = instance.memory_reserved
        memory.used = used
        memory.free = instance.memory_total - instance.memory_reserved - used
        return SUCCESS

    def _mig_processes(self, device: SimulatedMigDevice, t: float, compute: bool, count: Any, infos: Any) -> int:
        instance = device.instance
        entries = [(p, instance.gpu_instance_id, device.compute_instance_id) for p in instance.processes(t)
                   if (p.compute if compute else p.graphics)]
        if device.compute_instance_id:  # processes are listed once, on the first compute instance
            entries = []
        return self._process_list(entries, count, infos)

    @_mig_variant("nvmlDeviceGetComputeRunningProcesses_v3")
    def _mig_compute_processes(self, device: SimulatedMigDevice, t: float, count: Any, infos: Any) -> int:
        return self._mig_processes(device, t, True, count, infos)

    @_mig_variant("nvmlDeviceGetGraphicsRunningProcesses_v3")
    def _mig_graphics_processes(self, device: SimulatedMigDevice, t: float, count: Any, infos: Any) -> int:
        return self._mig_processes(device, t, False, count, infos)

    # --- GPM (Hopper+ profiling counters) --------------------------------------------------
    # A sample buffer is an opaque pointer; the fake keeps its contents (the GpmCounters
    # integrals at the sample's time) in a table, and nvmlGpmMetricsGet divides their difference
    # by the time between the samples, so a metric is the mean rate over the interval.

    @_c_symbol("nvmlGpmQueryDeviceSupport", device=True)
    def _impl_gpm_support(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        support = _target(out)
        if support.version != pynvml.NVML_GPM_SUPPORT_VERSION:
            return VERSION_MISMATCH
        support.isSupportedDevice = 1 if gpu.gpm is not None else 0
        return SUCCESS

    @_c_symbol("nvmlGpmSampleAlloc")
    def _impl_gpm_alloc(self, t: float, out: Any) -> int:
        if not self._refcount:
            return UNINITIALIZED
        self._gpm_next_sample += 1
        handle = _GPM_SAMPLE_BASE + self._gpm_next_sample * 0x10
        self._gpm_samples[handle] = None
        _write_handle(out, handle)
        return SUCCESS

    @_c_symbol("nvmlGpmSampleFree")
    def _impl_gpm_free(self, t: float, sample: Any) -> int:
        if self._gpm_samples.pop(_handle_value(sample) or 0, _MISSING) is _MISSING:
            return INVALID_ARGUMENT
        return SUCCESS

    def _fill_gpm_sample(self, sample: Any, gpu: int, instance: int | None, counters: GpmCounters, t: float) -> int:
        key = _handle_value(sample) or 0
        if key not in self._gpm_samples:
            return INVALID_ARGUMENT
        self._gpm_samples[key] = _GpmSample(gpu, instance, t, counters.sample(t))
        return SUCCESS

    @_c_symbol("nvmlGpmSampleGet", device=True)
    def _impl_gpm_sample(self, gpu: SimulatedGpu, t: float, sample: Any) -> int:
        if gpu.gpm is None:
            return NOT_SUPPORTED
        return self._fill_gpm_sample(sample, gpu.index, None, gpu.gpm, t)

    @_c_symbol("nvmlGpmMigSampleGet", device=True)
    def _impl_gpm_mig_sample(self, gpu: SimulatedGpu, t: float, gpu_instance_id: Any, sample: Any) -> int:
        if gpu.gpm is None or gpu.mig is None:
            return NOT_SUPPORTED
        instance = gpu.mig.instances.get(_int(gpu_instance_id))
        if instance is None:
            return NOT_FOUND  # the GPU instance was destroyed (estimate of the code)
        return self._fill_gpm_sample(sample, gpu.index, instance.gpu_instance_id, instance.counters, t)

    @_c_symbol("nvmlGpmMetricsGet")
    def _impl_gpm_metrics(self, t: float, request_ref: Any) -> int:
        if not self._refcount:
            return UNINITIALIZED
        request = _target(request_ref)
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            return VERSION_MISMATCH
        count = int(request.numMetrics)
        if count > pynvml.NVML_GPM_METRIC_MAX:
            return INVALID_ARGUMENT
        first = self._gpm_samples.get(_handle_value(request.sample1) or 0)
        second = self._gpm_samples.get(_handle_value(request.sample2) or 0)
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


def _not_on_mig_device(device: SimulatedMigDevice, t: float, *args: Any) -> int:
    """What a device symbol without a MIG variant answers for a MIG device handle."""
    return NOT_SUPPORTED


def _check_symbol(symbol: str) -> None:
    if symbol not in NVML_SYMBOLS:
        raise ValueError(f"unknown NVML symbol {symbol!r}")


IMPLEMENTED_SYMBOLS: frozenset[str] = frozenset(symbol.name for symbol in _REGISTRY)


@contextmanager
def installed(scenario: Scenario | str, clock: Callable[[], float] | None = None, *,
              wall_epoch: float | None = None) -> Iterator[FakeNvmlLibrary]:
    """Install a fake for the ``with`` block (tests): pynvml is detached again afterwards,
    hung calls are released, and pynvml's init refcount is reset."""
    loaded = load_scenario(scenario) if isinstance(scenario, str) else scenario
    fake = FakeNvmlLibrary(loaded, clock, wall_epoch=wall_epoch)
    fake.install()
    try:
        yield fake
    finally:
        fake.release_hangs()
        fake.uninstall()

