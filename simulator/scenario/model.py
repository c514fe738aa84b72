"""The scenario as frozen dataclasses: GPUs, their readings over time, processes, faults and the library."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pynvml
import yaml

from exporter.safeyaml import YamlValue
from simulator.models import Features, GpuModel
from simulator.patterns import (
    ALWAYS,
    INFINITY,
    Constant,
    CounterSpec,
    Flag,
    Pattern,
    Window,
)
from simulator.scenario.errors import scenario_file

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
        return scenario_file(self.source).root(self.node, path)


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
