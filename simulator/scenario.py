"""Simulation scenarios: a strictly validated YAML file loaded into frozen dataclasses.

A scenario describes a node's GPUs (model presets, counts, per-GPU overrides), how their
readings move over time (value patterns, counters, throttle windows, processes) and what goes
wrong (latency, errors, lost GPUs, hangs, missing symbols, a driver that is not loaded yet).
``FakeNvmlLibrary`` turns it into NVML answers; the kubelet/API-server fakes read the reserved
``kubernetes:`` section themselves.

Every user mistake raises ``ScenarioError`` (a ``ConfigError``, so the command line reports it
as one line and exits 2) whose text names the file, the line and the key path, for example
``scenarios/x.yaml:14: gpus[2].load: unknown pattern 'sinus' (known: constant, noise, ...)``.
The schema is documented in ``SCHEMA`` below and in the shipped scenarios.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import pynvml
import yaml

from exporter import safeyaml
from exporter.config import ConfigError
from exporter.inputfile import InputFileError, read_text
from exporter.safeyaml import YamlValue
from exporter.units import SIZE_UNITS, parse_quantity_duration, parse_size, split_quantity
from simulator import patterns
from simulator.latency_file import load_latency_file
from simulator.models import DEFAULT_MODEL, MIG_PROFILES, PRESETS, Features, GpuModel, check_mig_layout
from simulator.patterns import (
    ALWAYS,
    INFINITY,
    Constant,
    CounterSpec,
    Flag,
    Jittered,
    Noise,
    Pattern,
    Ramp,
    Sine,
    Square,
    Steps,
    Window,
)

_T = TypeVar("_T")

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
MAX_SCENARIO_BYTES = 4 * 1024 * 1024

SCHEMA = """\
description: str                      # optional; what the scenario shows
seed: int                             # default 0; drives UUIDs, serials and all noise
driver: {version: "550.90.07", nvml_version: "12.550.90.07", cuda_version: 12040 | "12.4"}
gpu_count: int                        # default 1 (1..1024)
gpu_defaults: GPU                     # settings applied to every GPU
gpus: {INDEX: GPU, ...}               # per-GPU overrides by NVML index (< gpu_count)
latency_profile: none | realistic | FILE.json   # default none; a .json file measured by scripts/test-gpu
                                      # (relative to this file) replaces the realistic estimates it covers
latency: {SYMBOL: DURATION, field_value: DURATION}   # per-call overrides; field_value = per entry
library:
  missing: bool                       # nvmlInitWithFlags -> NVML_ERROR_LIBRARY_NOT_FOUND forever
  missing_symbols: [SYMBOL, ...]      # absent from the library -> NVMLError_FunctionNotFound
  init_fails: {error: CODE, until: DURATION, calls: int}   # init fails while either holds
faults:
  - {type: error, symbol: SYMBOL, error: CODE, gpu: int, from: DURATION, until: DURATION, field: int}
  - {type: gpu_lost, gpu: int, at: DURATION, until: DURATION}   # until: answers again (reset)
  - {type: hang, symbol: SYMBOL, gpu: int, at: DURATION, duration: DURATION,
     holds_driver_lock: bool, error: CODE}
kubernetes: any                       # reserved: stored raw for the kubelet/API-server fakes
xid_events:                           # Xids the NVML event set delivers (to sets registered before `at`)
  - {gpu: int | [int, ...], xid: int, at: DURATION, count: int, over: DURATION,
     gpu_instance: int, compute_instance: int}   # count events spread evenly over `over` (a burst);
                                                 # gpu_instance/compute_instance: a MIG attribution

GPU:
  model: H100-SXM5-80GB | H200-SXM-141GB | A100-SXM4-80GB | L4 | RTX-4090 | V100-SXM2-32GB
  name: str, uuid: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", serial: str, vbios: str
  pci_bus_id: "00000000:18:00.0", minor: int, power_limit: POWER
  features: {ecc, memory_temperature, row_remapping, page_retirement, energy_counter, encoder,
             decoder, mig, serial_number, clock_event_reasons, violation_counters, tlimit_fields,
             pcie_byte_counters, power_usage, gpm: bool; fans, nvlink_links: int}
  load, memory_util, encoder_util, decoder_util, fan: PATTERN of percent
  memory_used: PATTERN of SIZE ("40GiB", "512MiB", bytes, or "60%" of total)
  temperature, memory_temperature: PATTERN of degrees C
  power: PATTERN of POWER ("350W", "0.35kW", watts)
  sm_clock, memory_clock: PATTERN of MHz;  pstate: PATTERN of 0..15 or "P0".."P15"
  nvlink_tx, nvlink_rx, pcie_tx, pcie_rx: PATTERN of RATE ("40GB/s", "1.5GiB/s", bytes/s)
  clock_events: [{reason: REASON, from: DURATION, until: DURATION | for: DURATION, every: DURATION}]
  pcie_replays: COUNTER
  ecc_errors: {corrected: COUNTER, uncorrected: COUNTER, aggregate_corrected: int,
               aggregate_uncorrected: int}
  retired_pages: {single_bit: COUNTER, double_bit: COUNTER, pending: FLAG}
  remapped_rows: {correctable: COUNTER, uncorrectable: COUNTER, pending: FLAG, failure: FLAG}
  processes: [{pid: int, used_memory: SIZE | unavailable, type: compute | graphics | both,
               from: DURATION, until: DURATION | for: DURATION, every: DURATION,
               load, memory_util, encoder_util, decoder_util: PATTERN of percent}]
                                      # a process's own activity (what NVML's per-process utilization
                                      # samples report); when any process of a GPU has some, the GPU's
                                      # load/memory_util/encoder_util/decoder_util follow its processes
                                      # (see sharing); otherwise its processes share the GPU's equally
  fabric: none | healthy | degraded | unhealthy   # NVLink fabric (nvmlDeviceGetGpuFabricInfoV): none (default,
                                      # NotSupported: not on an NVLink fabric); healthy; degraded (bandwidth
                                      # degraded, summary limited capacity); unhealthy (route unhealthy)
  sharing: time-slicing | mps         # default time-slicing: processes take turns, so the GPU is busy
                                      # the sum of their times (at most 100 %); mps: their kernels run
                                      # at once, busy 1 - prod(1 - each), less than the sum
  mig: [MIG_INSTANCE, ...]            # MIG enabled with these GPU instances ([]: enabled, none created);
                                      # on a MIG GPU the parent's load/memory follow its instances
  profiling: {workload: training | inference | hpc | graphics,   # GPM counters (features.gpm)
              gr_active, sm_active, sm_occupancy, tensor_active, dram_active, fp64_active, fp32_active,
              fp16_active: PATTERN of percent}   # explicit channels override the workload mix

MIG_INSTANCE: a profile name ("1g.10gb", "3g.40gb", ... of the GPU's model), or
  {profile: PROFILE, compute_instances: int, load: PATTERN of percent, memory_used: PATTERN of SIZE,
   workload: training | inference | hpc | graphics, processes: [PROCESS, ...]}

PATTERN: a plain value (constant) or {pattern: KIND, ..., jitter: AMOUNT, jitter_period: DURATION}
  constant: value | sine: low, high, period, phase | square: low, high, period, duty, phase
  steps: steps: [[AT, VALUE], ...], every | ramp: from, to, duration, start, repeat: bool
  noise: low, high, period
COUNTER: int, or {start: int, steps: [[AT, ADD], ...], rate: PATTERN of events per second}
FLAG: bool, a window {from, until | for, every}, or a list of windows
DURATION: "4.5ms", "137us", "30s", "2m", "1h", or a number of seconds
CODE: an NVML error name ("NotSupported", "GpuIsLost", "NVML_ERROR_TIMEOUT") or number
"""

# Every C symbol the fake implements, with the latency the ``realistic`` profile injects (seconds).
# Measured figures come from flightlessmango/MangoHud#2104 (RTX 4090 laptop,
# driver 610.57.04, medians); everything marked "estimate" is a plausible guess for a datacenter
# GPU with persistence mode on, to be replaced when someone measures it on real hardware.
REALISTIC_LATENCY_S: Mapping[str, float] = MappingProxyType({
    "nvmlInitWithFlags": 50e-3,  # estimate (persistence mode on; seconds without it)
    "nvmlInit_v2": 50e-3,  # estimate
    "nvmlShutdown": 5e-3,  # estimate
    "nvmlErrorString": 0.2e-6,  # estimate (table lookup)
    "nvmlSystemGetDriverVersion": 1e-6,  # estimate (cached by the library)
    "nvmlSystemGetNVMLVersion": 1e-6,  # estimate
    "nvmlSystemGetCudaDriverVersion": 1e-6,  # estimate
    "nvmlSystemGetCudaDriverVersion_v2": 30e-6,  # estimate (asks libcuda)
    "nvmlDeviceGetCount_v2": 1e-6,  # estimate
    "nvmlDeviceGetHandleByIndex_v2": 2e-6,  # estimate
    "nvmlDeviceGetHandleByUUID": 20e-6,  # estimate (DRA driver notes it "can be slow" under load)
    "nvmlDeviceGetHandleByPciBusId_v2": 20e-6,  # estimate
    "nvmlDeviceGetIndex": 1e-6,  # estimate
    "nvmlDeviceGetUUID": 1e-6,  # estimate
    "nvmlDeviceGetName": 1e-6,  # estimate
    "nvmlDeviceGetPciInfo_v3": 2e-6,  # estimate
    "nvmlDeviceGetMinorNumber": 1e-6,  # estimate
    "nvmlDeviceGetSerial": 2e-6,  # estimate
    "nvmlDeviceGetVbiosVersion": 2e-6,  # estimate
    "nvmlDeviceGetBrand": 1e-6,  # estimate
    "nvmlDeviceGetArchitecture": 1e-6,  # estimate
    "nvmlDeviceGetCudaComputeCapability": 1e-6,  # estimate
    "nvmlDeviceGetUtilizationRates": 2.5e-6,  # measured
    "nvmlDeviceGetEncoderUtilization": 3e-6,  # estimate
    "nvmlDeviceGetDecoderUtilization": 3e-6,  # estimate
    "nvmlDeviceGetMemoryInfo": 11.6e-6,  # measured
    "nvmlDeviceGetMemoryInfo_v2": 11.6e-6,  # estimate (same RM query as v1)
    "nvmlDeviceGetBAR1MemoryInfo": 10e-6,  # estimate
    "nvmlDeviceGetTemperatureV": 25e-6,  # estimate
    "nvmlDeviceGetTemperature": 25e-6,  # estimate
    "nvmlDeviceGetTemperatureThreshold": 5e-6,  # estimate
    "nvmlDeviceGetPowerUsage": 40e-6,  # estimate
    "nvmlDeviceGetPowerManagementLimit": 5e-6,  # estimate
    "nvmlDeviceGetEnforcedPowerLimit": 5e-6,  # estimate
    "nvmlDeviceGetPowerManagementDefaultLimit": 5e-6,  # estimate
    "nvmlDeviceGetTotalEnergyConsumption": 40e-6,  # estimate
    "nvmlDeviceGetClockInfo": 10e-6,  # estimate
    "nvmlDeviceGetMaxClockInfo": 2e-6,  # estimate
    "nvmlDeviceGetPcieReplayCounter": 20e-6,  # estimate
    "nvmlDeviceGetFanSpeed": 137e-6,  # measured
    "nvmlDeviceGetNumFans": 5e-6,  # estimate
    "nvmlDeviceGetPerformanceState": 5e-6,  # estimate
    "nvmlDeviceGetCurrentClocksEventReasons": 10e-6,  # estimate
    "nvmlDeviceGetSupportedClocksEventReasons": 2e-6,  # estimate
    "nvmlDeviceGetEccMode": 5e-6,  # estimate
    "nvmlDeviceGetTotalEccErrors": 20e-6,  # estimate
    "nvmlDeviceGetRetiredPages": 30e-6,  # estimate
    "nvmlDeviceGetRetiredPages_v2": 30e-6,  # estimate
    "nvmlDeviceGetRetiredPagesPendingStatus": 10e-6,  # estimate
    "nvmlDeviceGetRemappedRows": 30e-6,  # estimate
    "nvmlDeviceGetComputeRunningProcesses_v3": 4.491e-3,  # measured (graphics list, same path)
    "nvmlDeviceGetGraphicsRunningProcesses_v3": 4.491e-3,  # measured
    # Per-process utilization samples: no published figure. Estimate: a quarter of the process-list
    # query (it reads RM's per-process sample buffer), per C call; pynvml makes two per read.
    "nvmlDeviceGetProcessUtilization": 1.0e-3,  # estimate
    "nvmlDeviceGetProcessesUtilizationInfo": 1.0e-3,  # estimate
    "nvmlDeviceGetPcieThroughput": 0.0,  # its 20 ms sampling window is always simulated
    "nvmlDeviceGetMaxMigDeviceCount": 2e-6,  # estimate
    "nvmlDeviceGetMigMode": 5e-6,  # estimate
    "nvmlDeviceGetMigDeviceHandleByIndex": 5e-6,  # estimate (DRA driver: a full MIG walk under load "O(10 s)")
    "nvmlDeviceIsMigDeviceHandle": 1e-6,  # estimate
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle": 1e-6,  # estimate
    "nvmlDeviceGetGpuInstanceId": 2e-6,  # estimate
    "nvmlDeviceGetComputeInstanceId": 2e-6,  # estimate
    "nvmlDeviceGetAttributes_v2": 5e-6,  # estimate
    "nvmlDeviceGetGpuFabricInfoV": 5e-6,  # estimate (the driver's cached fabric probe result)
    "nvmlGpmQueryDeviceSupport": 5e-6,  # estimate
    "nvmlGpmSampleAlloc": 2e-6,  # estimate (host memory only)
    "nvmlGpmSampleFree": 1e-6,  # estimate
    "nvmlGpmSampleGet": 50e-6,  # estimate (reads the perf-monitor counters through RM)
    "nvmlGpmMigSampleGet": 50e-6,  # estimate
    "nvmlGpmMetricsGet": 10e-6,  # estimate (host-side arithmetic on two samples)
    "nvmlDeviceGetFieldValues": 10e-6,  # estimate: per call, plus FIELD_VALUE_LATENCY per entry
    # NVML events (the wait's own blocking is simulated separately; this is the call overhead)
    "nvmlEventSetCreate": 5e-6,  # estimate
    "nvmlEventSetFree": 5e-6,  # estimate
    "nvmlDeviceGetSupportedEventTypes": 2e-6,  # estimate
    "nvmlDeviceRegisterEvents": 50e-6,  # estimate
    "nvmlEventSetWait_v2": 5e-6,  # estimate
})
REALISTIC_FIELD_VALUE_LATENCY_S = 5e-6  # estimate, per requested field
FIELD_VALUE_LATENCY_KEY = "field_value"

NVML_SYMBOLS: frozenset[str] = frozenset(REALISTIC_LATENCY_S)

LATENCY_PROFILES = ("none", "realistic")
PROCESS_TYPES = ("compute", "graphics", "both")
SHARING_MODES = ("time-slicing", "mps")
# The scenario's fabric health states (GPU key ``fabric``), answered by nvmlDeviceGetGpuFabricInfoV.
FABRIC_NONE = "none"
FABRIC_STATES = (FABRIC_NONE, "healthy", "degraded", "unhealthy")
# GPU channels that follow the processes' own activity when any process of the GPU has some.
DERIVED_FROM_PROCESSES = ("load", "memory_util", "encoder_util", "decoder_util")
PATTERN_KINDS = ("constant", "noise", "ramp", "sine", "square", "steps")

# Clock event reasons a scenario can schedule, with the bits NVML reports while they are active.
# HW thermal and HW power-brake slowdowns are subsets of HW slowdown (nvml.h), so both bits are set.
CLOCK_EVENT_REASONS: Mapping[str, int] = MappingProxyType({
    "applications_clocks_setting": pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
    "sw_power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,
    "hw_slowdown": pynvml.nvmlClocksEventReasonHwSlowdown,
    "sync_boost": pynvml.nvmlClocksEventReasonSyncBoost,
    "sw_thermal_slowdown": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
    "hw_thermal_slowdown": pynvml.nvmlClocksEventReasonHwThermalSlowdown
    | pynvml.nvmlClocksEventReasonHwSlowdown,
    "hw_power_brake_slowdown": pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    | pynvml.nvmlClocksEventReasonHwSlowdown,
    "display_clock_setting": pynvml.nvmlClocksEventReasonDisplayClockSetting,
})


def _nvml_error_codes() -> dict[str, int]:
    """Error names accepted in scenarios: ``NotSupported`` and ``NVML_ERROR_NOT_SUPPORTED`` styles."""
    codes: dict[str, int] = {}
    for constant in dir(pynvml):
        if constant.startswith("NVML_ERROR_"):
            code = int(getattr(pynvml, constant))
            short = "".join(part.capitalize() for part in constant[len("NVML_ERROR_"):].split("_"))
            codes[constant] = code
            codes[short] = code
    return codes


NVML_ERROR_CODES: Mapping[str, int] = MappingProxyType(_nvml_error_codes())


class ScenarioError(ConfigError):
    """A mistake in a scenario file; ``str()`` is ``file:line: key.path: message``."""

    def __init__(self, file: str, line: int | None, key: str, message: str) -> None:
        self.file = file
        self.line = line
        super().__init__(f"{file}:{line}" if line is not None else file, key, message)


def parse_error_code(raw: object) -> int:
    """An NVML error code from a name (``NotSupported``, ``NVML_ERROR_GPU_IS_LOST``) or number."""
    if isinstance(raw, bool):
        raise ValueError(f"invalid NVML error {raw!r}")
    if isinstance(raw, int):
        if raw not in set(NVML_ERROR_CODES.values()):
            raise ValueError(f"unknown NVML error code {raw}")
        return raw
    text = str(raw).strip()
    if text in NVML_ERROR_CODES:
        return NVML_ERROR_CODES[text]
    known = ", ".join(sorted(name for name in NVML_ERROR_CODES if not name.startswith("NVML_")))
    raise ValueError(f"unknown NVML error {text!r} (known: {known})")


# ---------------------------------------------------------------------------------------------
# Units. Each parser takes a YAML scalar and returns the internal unit, or raises ValueError.

_POWER_UNITS_MW = {"mW": 1.0, "W": 1000.0, "kW": 1_000_000.0}


def _parse_percent(raw: object) -> float:
    value, unit = split_quantity(raw, "a percentage like 45 or 45%")
    if unit not in ("", "%"):
        raise ValueError(f"expected a percentage like 45 or 45%, got {raw!r}")
    return value


def _size_parser(total: int) -> Callable[[object], float]:
    def parse(raw: object) -> float:
        return parse_size(raw, total)

    return parse


def _parse_rate(raw: object) -> float:
    value, unit = split_quantity(raw, "a rate like 40GB/s or a number of bytes per second")
    if unit:
        if not unit.endswith("/s") or unit[:-2] not in SIZE_UNITS:
            raise ValueError(f"unknown rate unit {unit!r} in {raw!r} (use e.g. 40GB/s, 1.5GiB/s, 500MB/s)")
        return value * SIZE_UNITS[unit[:-2]]
    return value


def _parse_power_mw(raw: object) -> float:
    value, unit = split_quantity(raw, "a power like 350W, 0.35kW or a number of watts")
    if unit and unit not in _POWER_UNITS_MW:
        raise ValueError(f"unknown power unit {unit!r} in {raw!r} (known: mW, W, kW)")
    return value * _POWER_UNITS_MW.get(unit, 1000.0)


def _parse_celsius(raw: object) -> float:
    value, unit = split_quantity(raw, "a temperature in degrees C")
    if unit not in ("", "C"):
        raise ValueError(f"expected a temperature in degrees C, got {raw!r}")
    return value


def _parse_mhz(raw: object) -> float:
    value, unit = split_quantity(raw, "a clock in MHz")
    if unit not in ("", "MHz"):
        raise ValueError(f"expected a clock in MHz, got {raw!r}")
    return value


def _parse_pstate(raw: object) -> float:
    if isinstance(raw, str) and raw.strip().upper().startswith("P"):
        raw = raw.strip()[1:]
    value, unit = split_quantity(raw, "a performance state 0..15 or P0..P15")
    if unit or value != int(value):
        raise ValueError(f"expected a performance state 0..15 or P0..P15, got {raw!r}")
    return value


def _parse_plain(raw: object) -> float:
    value, unit = split_quantity(raw, "a number")
    if unit:
        raise ValueError(f"expected a plain number, got {raw!r}")
    return value


@dataclass(frozen=True)
class _Unit:
    """How one channel's values are written and which range is valid (internal units)."""

    parse: Callable[[object], float]
    minimum: float
    maximum: float
    describe: str


def _channel_units(model: GpuModel) -> dict[str, _Unit]:
    percent = _Unit(_parse_percent, 0.0, 100.0, "percent (0..100)")
    rate = _Unit(_parse_rate, 0.0, 10e12, "bytes per second")
    return {
        "load": percent,
        "memory_util": percent,
        "encoder_util": percent,
        "decoder_util": percent,
        "fan": _Unit(_parse_percent, 0.0, 200.0, "percent (0..200)"),
        "memory_used": _Unit(_size_parser(model.memory_total), 0.0,
                             float(model.memory_total - model.memory_reserved),
                             f"bytes (at most {model.memory_total - model.memory_reserved} on {model.key})"),
        "temperature": _Unit(_parse_celsius, -40.0, 150.0, "degrees C (-40..150)"),
        "memory_temperature": _Unit(_parse_celsius, -40.0, 150.0, "degrees C (-40..150)"),
        "power": _Unit(_parse_power_mw, 0.0, float(model.power_max_limit_mw),
                       f"watts (at most {model.power_max_limit_mw / 1000:g} W on {model.key})"),
        "sm_clock": _Unit(_parse_mhz, 0.0, float(model.max_sm_clock),
                          f"MHz (at most {model.max_sm_clock} on {model.key})"),
        "memory_clock": _Unit(_parse_mhz, 0.0, float(model.max_memory_clock),
                              f"MHz (at most {model.max_memory_clock} on {model.key})"),
        "pstate": _Unit(_parse_pstate, 0.0, 15.0, "a performance state 0..15"),
        "nvlink_tx": rate,
        "nvlink_rx": rate,
        "pcie_tx": rate,
        "pcie_rx": rate,
    }


CHANNELS = tuple(_channel_units(PRESETS[DEFAULT_MODEL]))
_RATE_UNIT = _Unit(_parse_plain, 0.0, 1e9, "events per second")


# ---------------------------------------------------------------------------------------------
# Reading YAML nodes with their line numbers.

def _duration(value: YamlValue) -> float:
    """A scenario duration (``4.5ms``, ``30s``, a number of seconds) at ``value``."""
    return value.convert(parse_quantity_duration)


def _scenario_file(source: str) -> safeyaml.YamlFile:
    """How a scenario's nodes are read: its own error, values shown (a scenario holds no secrets)."""
    return safeyaml.YamlFile(source, ScenarioError, shows_values=True, document_key="scenario")


def _get(keys: Mapping[str, YamlValue], name: str, read: Callable[[YamlValue], _T], default: _T) -> _T:
    """``read(keys[name])`` when the key is present, else ``default``."""
    return read(keys[name]) if name in keys else default


# ---------------------------------------------------------------------------------------------
# The data model.


NO_COUNTS = CounterSpec()
NEVER = Flag()
IDLE = Constant(0.0)


@dataclass(frozen=True)
class EccSpec:
    corrected: CounterSpec = NO_COUNTS
    uncorrected: CounterSpec = NO_COUNTS
    aggregate_corrected: int = 0  # errors before the current driver load (aggregate = this + volatile)
    aggregate_uncorrected: int = 0


@dataclass(frozen=True)
class RetiredPagesSpec:
    single_bit: CounterSpec = NO_COUNTS
    double_bit: CounterSpec = NO_COUNTS
    pending: Flag = NEVER


@dataclass(frozen=True)
class RemappedRowsSpec:
    correctable: CounterSpec = NO_COUNTS
    uncorrectable: CounterSpec = NO_COUNTS
    pending: Flag = NEVER
    failure: Flag = NEVER


@dataclass(frozen=True)
class ClockEvent:
    """A scheduled clock event ("throttle") episode and the reason bits it sets."""

    reason: str
    bits: int
    window: Window


PROCESS_ACTIVITY_CHANNELS = ("load", "memory_util", "encoder_util", "decoder_util")


@dataclass(frozen=True)
class ProcessActivity:
    """A process's own activity, percent of the whole GPU per channel (None: not given).

    ``load`` is its SM utilization, ``memory_util`` its share of the frame-buffer bandwidth,
    ``encoder_util``/``decoder_util`` its video engine use: what NVML's per-process utilization
    samples report for it (``fakenvml/processutil.py``).
    """

    load: Pattern | None = None
    memory_util: Pattern | None = None
    encoder_util: Pattern | None = None
    decoder_util: Pattern | None = None

    @property
    def given(self) -> bool:
        return any(getattr(self, name) is not None for name in PROCESS_ACTIVITY_CHANNELS)


NO_ACTIVITY = ProcessActivity()


@dataclass(frozen=True)
class ProcessSpec:
    """A process on a GPU: host PID, framebuffer bytes (None: NVML reports "not available"), and
    optionally its own activity (see ``GpuSpec.sharing`` for how a GPU's utilization follows it)."""

    pid: int
    used_memory: int | None
    kind: str  # "compute", "graphics" or "both"
    window: Window = ALWAYS
    activity: ProcessActivity = NO_ACTIVITY

    @property
    def compute(self) -> bool:
        return self.kind in ("compute", "both")

    @property
    def graphics(self) -> bool:
        return self.kind in ("graphics", "both")


PROFILING_WORKLOADS = ("training", "inference", "hpc", "graphics")
PROFILING_CHANNELS = ("gr_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active", "fp64_active",
                      "fp32_active", "fp16_active")


@dataclass(frozen=True)
class ProfilingSpec:
    """What the GPM profiling counters (Hopper+) show: a workload mix derived from the load, or
    explicit percent patterns per channel (``channels`` keys are ``PROFILING_CHANNELS``)."""

    workload: str = "training"
    channels: Mapping[str, Pattern] = field(default_factory=dict)


DEFAULT_PROFILING = ProfilingSpec()


@dataclass(frozen=True)
class MigInstanceSpec:
    """One MIG GPU instance: its profile, compute instances, load, memory and processes."""

    profile: str
    compute_instances: int = 1
    load: Pattern = IDLE
    memory_used: Pattern | None = None  # bytes; default: the processes' sum
    profiling: ProfilingSpec = DEFAULT_PROFILING
    processes: tuple[ProcessSpec, ...] = ()


@dataclass(frozen=True)
class GpuSpec:
    """One simulated GPU. Channel patterns left as None are derived from ``load`` by the fake."""

    index: int
    model: GpuModel
    features: Features
    name: str
    uuid: str
    serial: str
    vbios_version: str
    pci_domain: int
    pci_bus: int
    pci_device: int
    minor: int
    power_limit_mw: int
    load: Pattern = IDLE
    memory_util: Pattern | None = None
    encoder_util: Pattern | None = None
    decoder_util: Pattern | None = None
    memory_used: Pattern | None = None
    temperature: Pattern | None = None
    memory_temperature: Pattern | None = None
    power: Pattern | None = None
    sm_clock: Pattern | None = None
    memory_clock: Pattern | None = None
    fan: Pattern | None = None
    pstate: Pattern | None = None
    nvlink_tx: Pattern | None = None
    nvlink_rx: Pattern | None = None
    pcie_tx: Pattern | None = None
    pcie_rx: Pattern | None = None
    clock_events: tuple[ClockEvent, ...] = ()
    pcie_replays: CounterSpec = NO_COUNTS
    ecc_errors: EccSpec = field(default_factory=EccSpec)
    retired_pages: RetiredPagesSpec = field(default_factory=RetiredPagesSpec)
    remapped_rows: RemappedRowsSpec = field(default_factory=RemappedRowsSpec)
    processes: tuple[ProcessSpec, ...] = ()
    mig: tuple[MigInstanceSpec, ...] | None = None  # None: MIG disabled; () enabled without instances
    profiling: ProfilingSpec = field(default_factory=lambda: DEFAULT_PROFILING)
    # How processes share the GPU: "time-slicing" (their kernels take turns, so the GPU's busy time
    # is the sum of theirs) or "mps" (their kernels run at the same time, so it is less).
    sharing: str = "time-slicing"
    # The NVLink fabric's health as nvmlDeviceGetGpuFabricInfoV reports it (FABRIC_STATES); "none": the GPU
    # is on no NVLink fabric and the call answers NotSupported, as on most GPUs.
    fabric: str = FABRIC_NONE

    @property
    def activity_from_processes(self) -> bool:
        """Whether the GPU's utilization is derived from its processes' own activity."""
        return self.mig is None and any(process.activity.given for process in self.processes)

    @property
    def pci_bus_id(self) -> str:
        """NVML's format: 8-hex-digit domain, upper case (``00000000:18:00.0``)."""
        return f"{self.pci_domain:08X}:{self.pci_bus:02X}:{self.pci_device:02X}.0"

    @property
    def pci_bus_id_legacy(self) -> str:
        return f"{self.pci_domain:04X}:{self.pci_bus:02X}:{self.pci_device:02X}.0"


@dataclass(frozen=True)
class ErrorFault:
    """Calls of ``symbol`` (``*``: any) on ``gpu`` (None: any) fail with ``code`` inside ``window``.

    With ``field`` set the fault hits only that entry of ``nvmlDeviceGetFieldValues``.
    """

    symbol: str
    code: int
    gpu: int | None = None
    window: Window = ALWAYS
    field: int | None = None


@dataclass(frozen=True)
class HangFault:
    """Calls of ``symbol`` on ``gpu`` made in ``[at, at + duration)`` block until ``at + duration``.

    ``holds_driver_lock`` makes the hung call stall every other NVML call too (a wedged RM lock);
    otherwise only the calling thread waits. Afterwards the call returns ``error`` or its answer.
    """

    symbol: str
    at: float
    duration: float
    gpu: int | None = None
    holds_driver_lock: bool = False
    error: int | None = None


@dataclass(frozen=True)
class XidEventSpec:
    """One Xid the simulated driver raises on ``gpu`` at scenario time ``at`` (optionally in a MIG instance)."""

    gpu: int
    xid: int
    at: float
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass(frozen=True)
class GpuLostFault:
    gpu: int
    at: float = 0.0
    until: float = INFINITY  # answers again from here on (a reset)


@dataclass(frozen=True)
class InitFailure:
    """``nvmlInitWithFlags``/``nvmlInit_v2`` fail with ``code`` for the first ``calls`` attempts
    and/or until scenario time ``until``."""

    code: int
    calls: int | None = None
    until: float | None = None


@dataclass(frozen=True)
class LibrarySpec:
    missing: bool = False
    missing_symbols: frozenset[str] = frozenset()
    init_failure: InitFailure | None = None


@dataclass(frozen=True)
class RawSection:
    """A reserved section kept as parsed YAML plus its node, for another part to validate."""

    source: str
    line: int
    data: Any
    node: yaml.Node = field(compare=False, repr=False)

    def reader(self, path: str) -> YamlValue:
        return _scenario_file(self.source).root(self.node, path)


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str
    description: str = ""
    seed: int = 0
    driver_version: str = "550.90.07"
    nvml_version: str = "12.550.90.07"
    cuda_driver_version: int = 12040
    gpus: tuple[GpuSpec, ...] = ()
    latency_profile: str = "none"
    latency: Mapping[str, float] = field(default_factory=dict)  # seconds per call, by C symbol
    field_value_latency: float = 0.0  # extra seconds per requested field in nvmlDeviceGetFieldValues
    library: LibrarySpec = field(default_factory=LibrarySpec)
    errors: tuple[ErrorFault, ...] = ()
    hangs: tuple[HangFault, ...] = ()
    lost: tuple[GpuLostFault, ...] = ()
    kubernetes: RawSection | None = None
    xid_events: tuple[XidEventSpec, ...] = ()  # sorted by time


# ---------------------------------------------------------------------------------------------
# Parsing.

_TOP_KEYS = ("description", "seed", "driver", "gpu_count", "gpu_defaults", "gpus", "latency_profile",
             "latency", "library", "faults", "kubernetes", "xid_events")
_GPU_KEYS = ("model", "name", "uuid", "serial", "vbios", "pci_bus_id", "minor", "power_limit", "features", "mig",
             "profiling",
             "clock_events", "pcie_replays", "ecc_errors", "retired_pages", "remapped_rows", "processes",
             "sharing", "fabric", *CHANNELS)
_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_PCI = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<device>[0-9a-fA-F]{1,2})"
                  r"(?:\.(?P<function>[0-7]))?$")
MAX_GPUS = 1024


def parse_pci_bus_id(text: str) -> tuple[int, int, int]:
    """(domain, bus, device) from ``00000000:3B:00.0``, ``0000:3b:00.0`` or ``3b:00.0``."""
    match = _PCI.match(text.strip())
    if not match:
        raise ValueError(f"invalid PCI bus id {text!r}: expected domain:bus:device.function, "
                         "e.g. 00000000:18:00.0")
    return int(match.group("domain") or "0", 16), int(match.group("bus"), 16), int(match.group("device"), 16)


def _pattern(value: YamlValue, unit: _Unit) -> Pattern:
    def level(item: YamlValue) -> float:
        number = float(item.convert(unit.parse))
        if not unit.minimum <= number <= unit.maximum:
            raise item.error(f"{item.scalar()!r} is out of range: expected {unit.describe}")
        return number

    if not value.is_mapping():
        return Constant(level(value))
    keys = value.mapping(("pattern", "value", "low", "high", "period", "phase", "duty", "steps", "every",
                          "from", "to", "duration", "start", "repeat", "jitter", "jitter_period"))
    if "pattern" not in keys:
        raise value.error(f"a pattern mapping needs 'pattern: KIND' (known: {', '.join(PATTERN_KINDS)})")
    kind = keys["pattern"].string()
    allowed = {
        "constant": ("value",),
        "sine": ("low", "high", "period", "phase"),
        "square": ("low", "high", "period", "duty", "phase"),
        "steps": ("steps", "every"),
        "ramp": ("from", "to", "duration", "start", "repeat"),
        "noise": ("low", "high", "period"),
    }
    if kind not in allowed:
        raise keys["pattern"].error(f"unknown pattern {kind!r} (known: {', '.join(PATTERN_KINDS)})",
                                    path=value.path)
    required = {"constant": ("value",), "sine": ("low", "high", "period"),
                "square": ("low", "high", "period"), "steps": ("steps",), "ramp": ("from", "to", "duration"),
                "noise": ("low", "high")}[kind]
    for name, item in keys.items():
        if name not in (*allowed[kind], "pattern", "jitter", "jitter_period"):
            raise item.error(f"'{name}' does not apply to pattern {kind!r} "
                             f"(it takes: {', '.join(allowed[kind])}, jitter, jitter_period)")
    for name in required:
        if name not in keys:
            raise value.error(f"pattern {kind!r} needs '{name}'")

    def period(name: str, default: float) -> float:
        if name not in keys:
            return default
        seconds = _duration(keys[name])
        if seconds <= 0:
            raise keys[name].error("must be greater than zero")
        return seconds

    base: Pattern
    if kind == "constant":
        base = Constant(level(keys["value"]))
    elif kind == "sine":
        base = Sine(level(keys["low"]), level(keys["high"]), period("period", 1.0),
                    _duration(keys["phase"]) if "phase" in keys else 0.0)
    elif kind == "square":
        duty = keys["duty"].number(0.0, 1.0) if "duty" in keys else 0.5
        base = Square(level(keys["low"]), level(keys["high"]), period("period", 1.0), duty,
                      _duration(keys["phase"]) if "phase" in keys else 0.0)
    elif kind == "noise":
        base = Noise(level(keys["low"]), level(keys["high"]), period("period", 5.0))
    elif kind == "ramp":
        base = Ramp(level(keys["from"]), level(keys["to"]), period("duration", 1.0),
                    _duration(keys["start"]) if "start" in keys else 0.0,
                    keys["repeat"].boolean() if "repeat" in keys else False)
    else:
        points: list[tuple[float, float]] = []
        for item in keys["steps"].sequence():
            pair = item.sequence()
            if len(pair) != 2:
                raise item.error("each step is [AT, VALUE], e.g. [30s, 95]")
            at = _duration(pair[0])
            if points and at <= points[-1][0]:
                raise pair[0].error("step times must increase")
            points.append((at, level(pair[1])))
        if not points:
            raise keys["steps"].error("needs at least one [AT, VALUE] step")
        base = Steps(tuple(points), period("every", 0.0) if "every" in keys else None)
    if "jitter" in keys:
        amplitude = keys["jitter"].convert(unit.parse)
        if amplitude < 0:
            raise keys["jitter"].error("jitter must be zero or positive")
        return Jittered(base, float(amplitude), period("jitter_period", 2.0))
    if "jitter_period" in keys:
        raise keys["jitter_period"].error("jitter_period needs jitter")
    return base


def _window(value: YamlValue, extra: Collection[str] = ()) -> tuple[Window, dict[str, YamlValue]]:
    keys = value.mapping(("from", "until", "for", "every", *extra))
    start = _duration(keys["from"]) if "from" in keys else 0.0
    if "until" in keys and "for" in keys:
        raise keys["for"].error("give either 'until' or 'for', not both")
    end = INFINITY
    if "until" in keys:
        end = _duration(keys["until"])
        if end <= start:
            raise keys["until"].error("'until' must be after 'from'")
    elif "for" in keys:
        end = start + _duration(keys["for"])
    every = None
    if "every" in keys:
        every = _duration(keys["every"])
        if every <= 0 or end == INFINITY or end - start > every:
            raise keys["every"].error("'every' needs a window ('until' or 'for') no longer than the period")
    return Window(start, end, every), keys


def _flag(value: YamlValue) -> Flag:
    if value.is_sequence():
        return Flag(tuple(_window(item)[0] for item in value.sequence()))
    if value.is_mapping():
        return Flag((_window(value)[0],))
    return Flag((ALWAYS,)) if value.boolean() else NEVER


def _counter(value: YamlValue) -> CounterSpec:
    if not value.is_mapping():
        return CounterSpec(start=value.integer(0))
    keys = value.mapping(("start", "steps", "rate"))
    steps: list[tuple[float, int]] = []
    if "steps" in keys:
        for item in keys["steps"].sequence():
            pair = item.sequence()
            if len(pair) != 2:
                raise item.error("each step is [AT, ADD], e.g. [120s, 2]")
            steps.append((_duration(pair[0]), pair[1].integer(0)))
    return CounterSpec(
        start=keys["start"].integer(0) if "start" in keys else 0,
        steps=tuple(sorted(steps)),
        rate=_pattern(keys["rate"], _RATE_UNIT) if "rate" in keys else None,
    )


def _features(value: YamlValue, base: Features) -> Features:
    keys = value.mapping(Features.names())
    changes: dict[str, Any] = {}
    for name, item in keys.items():
        if name == "fans":
            changes[name] = item.integer(0, 8)
        elif name == "nvlink_links":
            changes[name] = item.integer(0, pynvml.NVML_NVLINK_MAX_LINKS)
        else:
            changes[name] = item.boolean()
    return Features(**{**base.__dict__, **changes})


def _processes(value: YamlValue, model: GpuModel) -> tuple[ProcessSpec, ...]:
    result: list[ProcessSpec] = []
    size = _size_parser(model.memory_total)
    units = _channel_units(model)
    seen: dict[int, YamlValue] = {}
    for item in value.sequence():
        window, keys = _window(item, ("pid", "used_memory", "type", *PROCESS_ACTIVITY_CHANNELS))
        if "pid" not in keys:
            raise item.error("a process needs 'pid'")
        used: int | None = None
        if "used_memory" in keys:
            raw = keys["used_memory"].scalar()
            if raw != "unavailable":
                used = int(keys["used_memory"].convert(size))
                if not 0 <= used <= model.memory_total:
                    raise keys["used_memory"].error(f"must be between 0 and {model.memory_total} bytes")
        kind = _get(keys, "type", lambda v: v.choice(PROCESS_TYPES, "process type"), "compute")
        activity = ProcessActivity(**{name: _pattern(keys[name], units[name])
                                      for name in PROCESS_ACTIVITY_CHANNELS if name in keys})
        pid = keys["pid"].integer(1, 2**31 - 1)
        if activity.given and pid in seen:
            raise keys["pid"].error(f"PID {pid} is listed twice on this GPU with its own activity; give its "
                                    "activity once (a process has one utilization per GPU)")
        if activity.given:
            seen[pid] = keys["pid"]
        result.append(ProcessSpec(pid, used, kind, window, activity))
    return tuple(result)


def _clock_events(value: YamlValue) -> tuple[ClockEvent, ...]:
    events: list[ClockEvent] = []
    for item in value.sequence():
        window, keys = _window(item, ("reason",))
        if "reason" not in keys:
            known = ", ".join(sorted(CLOCK_EVENT_REASONS))
            raise item.error(f"a clock event needs 'reason' (known: {known})")
        reason = keys["reason"].choice(CLOCK_EVENT_REASONS, "clock event reason")
        events.append(ClockEvent(reason, CLOCK_EVENT_REASONS[reason], window))
    return tuple(events)


def _ecc(value: YamlValue) -> EccSpec:
    keys = value.mapping(("corrected", "uncorrected", "aggregate_corrected", "aggregate_uncorrected"))
    return EccSpec(
        corrected=_counter(keys["corrected"]) if "corrected" in keys else NO_COUNTS,
        uncorrected=_counter(keys["uncorrected"]) if "uncorrected" in keys else NO_COUNTS,
        aggregate_corrected=_get(keys, "aggregate_corrected", lambda v: v.integer(0), 0),
        aggregate_uncorrected=_get(keys, "aggregate_uncorrected", lambda v: v.integer(0), 0),
    )


def _retired_pages(value: YamlValue) -> RetiredPagesSpec:
    keys = value.mapping(("single_bit", "double_bit", "pending"))
    return RetiredPagesSpec(
        single_bit=_counter(keys["single_bit"]) if "single_bit" in keys else NO_COUNTS,
        double_bit=_counter(keys["double_bit"]) if "double_bit" in keys else NO_COUNTS,
        pending=_flag(keys["pending"]) if "pending" in keys else NEVER,
    )


def _remapped_rows(value: YamlValue) -> RemappedRowsSpec:
    keys = value.mapping(("correctable", "uncorrectable", "pending", "failure"))
    return RemappedRowsSpec(
        correctable=_counter(keys["correctable"]) if "correctable" in keys else NO_COUNTS,
        uncorrectable=_counter(keys["uncorrectable"]) if "uncorrectable" in keys else NO_COUNTS,
        pending=_flag(keys["pending"]) if "pending" in keys else NEVER,
        failure=_flag(keys["failure"]) if "failure" in keys else NEVER,
    )


def _profiling(value: YamlValue) -> ProfilingSpec:
    keys = value.mapping(("workload", *PROFILING_CHANNELS))
    percent = _channel_units(PRESETS[DEFAULT_MODEL])["load"]
    return ProfilingSpec(
        workload=_get(keys, "workload", lambda v: v.choice(PROFILING_WORKLOADS, "workload"), "training"),
        channels=MappingProxyType({name: _pattern(item, percent) for name, item in keys.items()
                                   if name != "workload"}),
    )


def _mig_instance(item: YamlValue, model: GpuModel) -> MigInstanceSpec:
    profiles = MIG_PROFILES.get(model.key, {})
    if not item.is_mapping():
        return MigInstanceSpec(item.choice(profiles, f"MIG profile on {model.key}"))
    keys = item.mapping(("profile", "compute_instances", "load", "memory_used", "workload", "processes"))
    if "profile" not in keys:
        raise item.error("a MIG instance needs 'profile' (e.g. 1g.10gb)")
    profile = profiles[keys["profile"].choice(profiles, f"MIG profile on {model.key}")]
    compute_instances = keys["compute_instances"].integer(1, profile.compute_slices) \
        if "compute_instances" in keys else 1
    if profile.compute_slices % compute_instances:
        raise keys["compute_instances"].error(
            f"{profile.name} has {profile.compute_slices} compute slices; it splits into 1 or a divisor of that")
    size = _Unit(_size_parser(profile.memory_bytes), 0.0, float(profile.memory_bytes),
                 f"bytes (at most {profile.memory_bytes} in a {profile.name} instance)")
    instance_model = replace(model, memory_total=profile.memory_bytes)
    return MigInstanceSpec(
        profile=profile.name,
        compute_instances=compute_instances,
        load=_pattern(keys["load"], _channel_units(model)["load"]) if "load" in keys else IDLE,
        memory_used=_pattern(keys["memory_used"], size) if "memory_used" in keys else None,
        profiling=ProfilingSpec(workload=keys["workload"].choice(PROFILING_WORKLOADS, "workload"))
        if "workload" in keys else DEFAULT_PROFILING,
        processes=_processes(keys["processes"], instance_model) if "processes" in keys else (),
    )


def _mig_layout(value: YamlValue, model: GpuModel) -> tuple[MigInstanceSpec, ...]:
    """``mig: [1g.10gb, {profile: 3g.40gb, load: 80}, ...]``: MIG enabled with these GPU instances."""
    if model.key not in MIG_PROFILES:
        raise value.error(f"{model.key} does not support MIG")
    instances = tuple(_mig_instance(item, model) for item in value.sequence())
    try:
        check_mig_layout(model.key, [instance.profile for instance in instances])
    except ValueError as exc:
        raise value.error(str(exc)) from None
    return instances


def _model(settings: Mapping[str, YamlValue]) -> GpuModel:
    if "model" not in settings:
        return PRESETS[DEFAULT_MODEL]
    return PRESETS[settings["model"].choice(PRESETS, "GPU model")]


def _gpu_settings(settings: Mapping[str, YamlValue], model: GpuModel) -> dict[str, Any]:
    """Parse the GPU keys present in ``settings`` (everything but model/features/identity defaults)."""
    parsed: dict[str, Any] = {}
    units = _channel_units(model)
    for name, item in settings.items():
        if name in units:
            parsed[name] = _pattern(item, units[name])
        elif name == "name":
            parsed["name"] = item.string()
        elif name == "uuid":
            uuid = item.string()
            if not _UUID.match(uuid):
                raise item.error(f"invalid UUID {uuid!r}: expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx "
                                 "(lower-case hex)")
            parsed["uuid"] = uuid
        elif name == "serial":
            serial = item.string()
            limit = pynvml.NVML_DEVICE_SERIAL_BUFFER_SIZE - 1
            if len(serial) > limit:
                raise item.error(f"serial is longer than {limit} characters")
            parsed["serial"] = serial
        elif name == "vbios":
            parsed["vbios_version"] = item.string()
        elif name == "pci_bus_id":
            parsed["pci"] = item.convert(lambda raw: parse_pci_bus_id(str(raw)))
        elif name == "minor":
            parsed["minor"] = item.integer(0, 255)
        elif name == "power_limit":
            limit = item.convert(_parse_power_mw)
            if not model.power_min_limit_mw <= limit <= model.power_max_limit_mw:
                raise item.error(f"power limit must be between {model.power_min_limit_mw / 1000:g} W and "
                                 f"{model.power_max_limit_mw / 1000:g} W on {model.key}")
            parsed["power_limit_mw"] = int(limit)
        elif name == "clock_events":
            parsed["clock_events"] = _clock_events(item)
        elif name == "pcie_replays":
            parsed["pcie_replays"] = _counter(item)
        elif name == "ecc_errors":
            parsed["ecc_errors"] = _ecc(item)
        elif name == "retired_pages":
            parsed["retired_pages"] = _retired_pages(item)
        elif name == "remapped_rows":
            parsed["remapped_rows"] = _remapped_rows(item)
        elif name == "processes":
            parsed["processes"] = _processes(item, model)
        elif name == "mig":
            parsed["mig"] = _mig_layout(item, model)
        elif name == "profiling":
            parsed["profiling"] = _profiling(item)
        elif name == "sharing":
            parsed["sharing"] = item.choice(SHARING_MODES, "sharing mode")
        elif name == "fabric":
            parsed["fabric"] = item.choice(FABRIC_STATES, "fabric health")
    return parsed


def _default_uuid(seed: int, index: int) -> str:
    high = patterns.channel_key(seed, index, "uuid-high")
    low = patterns.channel_key(seed, index, "uuid-low")
    text = f"{high:016x}{low:016x}"
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"


def _default_serial(seed: int, index: int) -> str:
    return "1654" + f"{patterns.channel_key(seed, index, 'serial') % 10**9:09d}"


def _build_gpu(index: int, settings: Mapping[str, YamlValue], features: Features, seed: int,
               own: Mapping[str, YamlValue] | None = None) -> GpuSpec:
    """``settings``: gpu_defaults merged with the GPU's own keys; ``own``: only the latter."""
    own = settings if own is None else own
    model = _model(settings)
    parsed = _gpu_settings({k: v for k, v in settings.items() if k not in ("model", "features")}, model)
    # Beyond the usual slots of one board, further GPUs go to further PCI domains (segments).
    slots = model.default_pci_buses
    domain, bus, device = parsed.pop("pci", (index // len(slots), slots[index % len(slots)], 0))
    if parsed.get("mig") is not None and not features.mig:
        raise settings["mig"].error(f"MIG is not supported on this GPU ({model.key} with features.mig false)")
    if any(process.activity.given for process in parsed.get("processes", ())) and parsed.get("mig") is None:
        # The GPU's utilization is derived from its processes: a GPU-level pattern for a derived
        # channel would contradict them (a default from gpu_defaults simply gives way).
        for channel in DERIVED_FROM_PROCESSES:
            if channel in own:
                raise own[channel].error(f"'{channel}' of this GPU follows its processes' own activity "
                                         f"(their load, memory_util, encoder_util, decoder_util); remove "
                                         f"one of the two")
            parsed.pop(channel, None)
    return GpuSpec(
        index=index,
        model=model,
        features=features,
        name=parsed.pop("name", model.name),
        uuid=parsed.pop("uuid", _default_uuid(seed, index)),
        serial=parsed.pop("serial", _default_serial(seed, index)),
        vbios_version=parsed.pop("vbios_version", model.vbios_version),
        pci_domain=domain,
        pci_bus=bus,
        pci_device=device,
        minor=parsed.pop("minor", index),
        power_limit_mw=parsed.pop("power_limit_mw", model.power_default_limit_mw),
        **parsed,
    )


def _gpus(root: YamlValue, top: Mapping[str, YamlValue], seed: int) -> tuple[GpuSpec, ...]:
    count = top["gpu_count"].integer(1, MAX_GPUS) if "gpu_count" in top else 1
    defaults = top["gpu_defaults"].mapping(_GPU_KEYS) if "gpu_defaults" in top else {}
    overrides = top["gpus"].index_mapping(count, "GPU") if "gpus" in top else {}
    # Validate the defaults once on their own, so a mistake in a key that every GPU overrides is
    # still reported (with the gpu_defaults path).
    default_model = _model(defaults)
    _gpu_settings({k: v for k, v in defaults.items() if k not in ("model", "features")}, default_model)
    if "features" in defaults:
        _features(defaults["features"], default_model.features)

    gpus: list[GpuSpec] = []
    first_seen: dict[tuple[str, object], int] = {}
    for index in range(count):
        own = overrides[index].mapping(_GPU_KEYS) if index in overrides else {}
        merged = {**defaults, **own}
        model = _model(merged)
        features = model.features
        for settings in (defaults, own):
            if "features" in settings:
                features = _features(settings["features"], features)
        gpu = _build_gpu(index, merged, features, seed, own)
        for what, key in (("uuid", gpu.uuid), ("pci_bus_id", gpu.pci_bus_id), ("minor", gpu.minor)):
            if (what, key) in first_seen:
                where = merged.get(what) or overrides.get(index) or root
                raise where.error(f"GPU {index} has the same {what} as GPU {first_seen[what, key]} ({key})")
            first_seen[what, key] = index
        gpus.append(gpu)
    return tuple(gpus)


def _symbol(value: YamlValue, allow_any: bool = False) -> str:
    name = value.string()
    if allow_any and name == "*":
        return name
    if name not in NVML_SYMBOLS:
        known = ", ".join(sorted(NVML_SYMBOLS))
        raise value.error(f"unknown NVML symbol {name!r} (the fake implements: {known})")
    return name


def _code(value: YamlValue) -> int:
    code = int(value.convert(parse_error_code))
    if code == pynvml.NVML_SUCCESS:
        raise value.error("NVML_SUCCESS is not an error")
    return code


def _gpu_index(value: YamlValue, count: int) -> int:
    index = value.integer(0)
    if index >= count:
        raise value.error(f"GPU index {index} out of range (gpu_count is {count})")
    return index


def _faults(value: YamlValue, count: int) -> tuple[tuple[ErrorFault, ...], tuple[HangFault, ...],
                                                    tuple[GpuLostFault, ...]]:
    errors: list[ErrorFault] = []
    hangs: list[HangFault] = []
    lost: list[GpuLostFault] = []
    kinds = ("error", "gpu_lost", "hang")
    for item in value.sequence():
        if not item.is_mapping():
            raise item.error(f"a fault is a mapping with 'type' ({', '.join(kinds)})")
        raw_type = item.mapping(("type", "symbol", "error", "gpu", "from", "until", "field", "at", "duration",
                                 "holds_driver_lock"))
        if "type" not in raw_type:
            raise item.error(f"a fault needs 'type' (known: {', '.join(kinds)})")
        kind = raw_type["type"].choice(kinds, "fault type")
        if kind == "error":
            keys = item.mapping(("type", "symbol", "error", "gpu", "from", "until", "field"))
            if "error" not in keys:
                raise item.error("an error fault needs 'error' (an NVML error name such as NotSupported)")
            field_id = keys["field"].integer(0, pynvml.NVML_FI_MAX) if "field" in keys else None
            if "symbol" in keys:
                symbol = _symbol(keys["symbol"], allow_any=True)
            elif field_id is not None:
                symbol = "nvmlDeviceGetFieldValues"
            else:
                raise item.error("an error fault needs 'symbol' (or 'field' for one field value)")
            if field_id is not None and symbol != "nvmlDeviceGetFieldValues":
                raise keys["field"].error("'field' only applies to nvmlDeviceGetFieldValues")
            window = _error_window(keys)
            gpu = _get(keys, "gpu", lambda v: _gpu_index(v, count), None)
            errors.append(ErrorFault(symbol, _code(keys["error"]), gpu, window, field_id))
        elif kind == "gpu_lost":
            keys = item.mapping(("type", "gpu", "at", "until"))
            if "gpu" not in keys:
                raise item.error("a gpu_lost fault needs 'gpu'")
            at = _get(keys, "at", _duration, 0.0)
            until = _get(keys, "until", _duration, INFINITY)
            if until <= at:
                raise keys["until"].error("'until' must be later than 'at'")
            lost.append(GpuLostFault(_gpu_index(keys["gpu"], count), at, until))
        else:
            keys = item.mapping(("type", "symbol", "gpu", "at", "duration", "holds_driver_lock", "error"))
            for needed in ("symbol", "duration"):
                if needed not in keys:
                    raise item.error(f"a hang fault needs '{needed}'")
            hangs.append(HangFault(
                symbol=_symbol(keys["symbol"], allow_any=True),
                at=_duration(keys["at"]) if "at" in keys else 0.0,
                duration=_duration(keys["duration"]),
                gpu=_gpu_index(keys["gpu"], count) if "gpu" in keys else None,
                holds_driver_lock=_get(keys, "holds_driver_lock", YamlValue.boolean, False),
                error=_code(keys["error"]) if "error" in keys else None,
            ))
    return tuple(errors), tuple(hangs), tuple(lost)


MAX_XID_EVENTS = 1_000_000
MAX_XID = 0xFFFF


def _xid_events(value: YamlValue, count: int) -> tuple[XidEventSpec, ...]:
    """``xid_events:`` entries, bursts expanded into single events, sorted by time."""
    events: list[XidEventSpec] = []
    for item in value.sequence():
        keys = item.mapping(("gpu", "xid", "at", "count", "over", "gpu_instance", "compute_instance"))
        for needed in ("gpu", "xid"):
            if needed not in keys:
                raise item.error(f"an Xid event needs '{needed}'")
        gpus = ([_gpu_index(entry, count) for entry in keys["gpu"].sequence()] if keys["gpu"].is_sequence()
                else [_gpu_index(keys["gpu"], count)])
        xid = keys["xid"].integer(1, MAX_XID)
        at = _duration(keys["at"]) if "at" in keys else 0.0
        burst = keys["count"].integer(1, MAX_XID_EVENTS) if "count" in keys else 1
        over = _duration(keys["over"]) if "over" in keys else 0.0
        gpu_instance = keys["gpu_instance"].integer(0, 0xFFFFFFFE) if "gpu_instance" in keys else None
        compute_instance = None
        if "compute_instance" in keys:
            if gpu_instance is None:
                raise keys["compute_instance"].error("'compute_instance' needs 'gpu_instance'")
            compute_instance = keys["compute_instance"].integer(0, 0xFFFFFFFE)
        if len(events) + burst * len(gpus) > MAX_XID_EVENTS:
            raise item.error(f"too many Xid events (at most {MAX_XID_EVENTS} in one scenario)")
        for gpu in gpus:
            events.extend(XidEventSpec(gpu, xid, at + over * slot / burst, gpu_instance, compute_instance)
                          for slot in range(burst))
    return tuple(sorted(events, key=lambda event: event.at))


def _error_window(keys: Mapping[str, YamlValue]) -> Window:
    start = _duration(keys["from"]) if "from" in keys else 0.0
    end = _duration(keys["until"]) if "until" in keys else INFINITY
    if end <= start:
        raise keys["until"].error("'until' must be after 'from'")
    return Window(start, end)


def _library(value: YamlValue) -> LibrarySpec:
    keys = value.mapping(("missing", "missing_symbols", "init_fails"))
    missing_symbols = frozenset(_symbol(item) for item in keys["missing_symbols"].sequence()) \
        if "missing_symbols" in keys else frozenset()
    init_failure = None
    if "init_fails" in keys:
        fails = keys["init_fails"].mapping(("error", "until", "calls"))
        if "error" not in fails:
            raise keys["init_fails"].error("init_fails needs 'error' (e.g. DriverNotLoaded)")
        if "until" not in fails and "calls" not in fails:
            raise keys["init_fails"].error("init_fails needs 'until' (a time) or 'calls' (attempts)")
        init_failure = InitFailure(
            code=_code(fails["error"]),
            calls=fails["calls"].integer(1) if "calls" in fails else None,
            until=_duration(fails["until"]) if "until" in fails else None,
        )
    return LibrarySpec(
        missing=keys["missing"].boolean() if "missing" in keys else False,
        missing_symbols=missing_symbols,
        init_failure=init_failure,
    )


def _latency(top: Mapping[str, YamlValue]) -> tuple[str, dict[str, float], float]:
    profile = _latency_profile(top["latency_profile"]) if "latency_profile" in top else "none"
    latency: dict[str, float] = dict(REALISTIC_LATENCY_S) if profile != "none" else {}
    per_field = REALISTIC_FIELD_VALUE_LATENCY_S if profile != "none" else 0.0
    if profile.endswith(".json"):  # measured on a GPU node (scripts/test-gpu): replaces the estimates it covers
        measured = load_latency_file(profile, NVML_SYMBOLS)
        latency.update(measured.per_call)
        per_field = per_field if measured.field_value is None else measured.field_value
    if "latency" in top:
        for name, item in top["latency"].mapping((*NVML_SYMBOLS, FIELD_VALUE_LATENCY_KEY)).items():
            if name == FIELD_VALUE_LATENCY_KEY:
                per_field = _duration(item)
            else:
                latency[name] = _duration(item)
    return profile, {name: seconds for name, seconds in latency.items() if seconds > 0}, per_field


def _latency_profile(value: YamlValue) -> str:
    """``none``, ``realistic``, or a measured-latency JSON file (relative to the scenario file)."""
    text = value.string()
    if not text.endswith(".json"):
        return value.choice(LATENCY_PROFILES, "latency profile")
    path = Path(text)
    return str(path if path.is_absolute() else Path(value.source).parent / path)


def _cuda_version(value: YamlValue) -> int:
    raw = value.scalar()
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    match = re.match(r"^(\d+)\.(\d+)$", str(raw))
    if not match:
        raise value.error(f"expected a CUDA version like 12.4 or 12040, got {raw!r}")
    return int(match.group(1)) * 1000 + int(match.group(2)) * 10


def parse_scenario(text: str, source: str, name: str) -> Scenario:
    """Build a Scenario from YAML text; ``source`` is the file name used in error messages."""
    try:
        # Aliases and merge keys are part of the format (the shipped scenarios use them); their
        # expansion is bounded, as are nesting and numbers.
        root = safeyaml.compose(text, allow_aliases=True)
    except safeyaml.YamlInputError as exc:
        raise ScenarioError(source, exc.line, "yaml", exc.message) from None
    if root is None:
        raise ScenarioError(source, 1, "scenario", "the file is empty")
    top = _scenario_file(source).root(root)
    if not top.is_mapping():
        raise ScenarioError(source, top.line, "scenario", "expected a mapping of scenario keys")
    keys = top.mapping(_TOP_KEYS)
    seed = keys["seed"].integer() if "seed" in keys else 0
    gpus = _gpus(top, keys, seed)
    profile, latency, per_field = _latency(keys)
    errors, hangs, lost = _faults(keys["faults"], len(gpus)) if "faults" in keys else ((), (), ())
    driver = keys["driver"].mapping(("version", "nvml_version", "cuda_version")) if "driver" in keys else {}
    driver_version = driver["version"].string() if "version" in driver else Scenario.driver_version
    kubernetes = None
    if "kubernetes" in keys:
        section = keys["kubernetes"]
        kubernetes = RawSection(source, section.line or 1, section.value(), section.node)
    return Scenario(
        name=name,
        source=source,
        description=keys["description"].string() if "description" in keys else "",
        seed=seed,
        driver_version=driver_version,
        nvml_version=driver["nvml_version"].string() if "nvml_version" in driver else f"12.{driver_version}",
        cuda_driver_version=_cuda_version(driver["cuda_version"]) if "cuda_version" in driver
        else Scenario.cuda_driver_version,
        gpus=gpus,
        latency_profile=profile,
        latency=MappingProxyType(latency),
        field_value_latency=per_field,
        library=_library(keys["library"]) if "library" in keys else LibrarySpec(),
        errors=errors,
        hangs=hangs,
        lost=lost,
        kubernetes=kubernetes,
        xid_events=_xid_events(keys["xid_events"], len(gpus)) if "xid_events" in keys else (),
    )


def builtin_scenarios() -> list[str]:
    """Names of the scenarios shipped under simulator/scenarios/ (file stems)."""
    return sorted(path.stem for path in SCENARIO_DIR.glob("*.yaml"))


def load_scenario(name_or_path: str) -> Scenario:
    """Load a built-in scenario by name (``default``) or a scenario file by path."""
    candidate = Path(name_or_path)
    builtin = SCENARIO_DIR / f"{name_or_path}.yaml"
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
        path = candidate
    elif builtin.is_file():
        path = builtin
    elif candidate.is_file():
        path = candidate
    else:
        raise ScenarioError("scenario", None, name_or_path,
                            f"unknown built-in scenario (known: {', '.join(builtin_scenarios())}); "
                            "give a path to load a file")
    try:
        text = read_text(path, MAX_SCENARIO_BYTES)
    except InputFileError as exc:
        raise ScenarioError(str(path), None, "scenario", str(exc)) from None
    return parse_scenario(text, str(path), path.stem)
