"""Immutable values that flow from the sources (NVML, kubelet, API server) to the renderer.

Every source runs on its own clock and publishes one of these frozen values; the renderer is a
pure function of them. Nothing here performs I/O, so tests can build snapshots by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DeviceIdentity:
    """Static identity of one physical GPU, read once at start.

    ``index`` is NVML's index (dcgm-exporter's ``gpu`` label); ``minor`` is the /dev/nvidia<minor>
    number (GKE's ``nvidia<N>`` device names use it). ``pci_bus_id`` keeps NVML's format with the
    8-hex-digit domain, as dcgm-exporter prints it. ``memory_total_bytes`` is the whole card's
    framebuffer (``nvmlDeviceGetMemoryInfo`` on the GPU's own handle, fixed while the driver is loaded):
    the only total of a MIG-enabled GPU, whose framebuffer series are per instance and leave out what
    MIG keeps for itself. None when NVML did not give it.
    """

    index: int
    uuid: str
    pci_bus_id: str
    minor: int
    model: str
    serial: str = ""
    vbios_version: str = ""
    memory_total_bytes: int | None = None

    @property
    def device_name(self) -> str:
        """dcgm-exporter's ``device`` label: literally ``nvidia`` + the NVML index."""
        return f"nvidia{self.index}"


@dataclass(frozen=True)
class MigIdentity:
    """One MIG device (GPU instance + compute instance) on a MIG-enabled parent GPU."""

    parent_uuid: str
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile: str  # e.g. "1g.10gb", dcgm-exporter's GPU_I_PROFILE label


@dataclass(frozen=True)
class MigReading:
    """Readings of one MIG instance, in DCGM units keyed by DCGM field name."""

    identity: MigIdentity
    values: Mapping[str, float] = field(default_factory=dict)
    peaks: Mapping[str, float] = field(default_factory=dict)  # as DeviceReading.peaks, of this instance's values


@dataclass(frozen=True)
class GpuProcess:
    """A process NVML reports on a GPU (or MIG instance): host PID and framebuffer bytes."""

    pid: int
    used_memory_bytes: int | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class ProcessUtilizationSample:
    """One process's utilization of a whole GPU over the last process interval, in percent.

    ``sm``: share of time its kernels ran on the SMs; ``memory``: share of time it read or wrote
    device memory (frame-buffer bandwidth); ``encoder``/``decoder``: its video engine use. NVML's
    per-process samples, averaged by the driver over the samples since the previous read.
    """

    pid: int
    sm: float
    memory: float
    encoder: float
    decoder: float


@dataclass(frozen=True)
class ProcessUtilization:
    """The per-process utilization of one GPU over one process interval.

    Only processes with non-zero utilization have a sample (NVML lists no others): a process
    that is absent used 0 %. ``window_s`` is the span the samples cover (from the previous read's
    newest sample, or one process interval before the first read, to this read).
    """

    samples: tuple[ProcessUtilizationSample, ...] = ()
    window_s: float = 0.0


@dataclass(frozen=True)
class DeviceReading:
    """One GPU's readings from one sampling cycle.

    ``values`` holds DCGM-unit values keyed by DCGM field name (``DCGM_FI_DEV_GPU_TEMP`` -> 41.0).
    A reading the GPU does not support is simply absent. ``up`` is False when NVML reported the GPU
    lost or unreachable; ``error`` then says why, and ``values`` is empty.
    """

    identity: DeviceIdentity
    up: bool = True
    error: str = ""
    values: Mapping[str, float] = field(default_factory=dict)
    mig: tuple[MigReading, ...] = ()
    processes: tuple[GpuProcess, ...] | None = None  # None: not read (process attribution off)
    # None: not read (process attribution off), or this GPU/driver has no per-process utilization.
    process_utilization: ProcessUtilization | None = None
    # The highest value of some readings over the sampler's trailing peak window (exporter/nvml/peaks.py),
    # keyed like ``values``; only readings present in ``values`` have one.
    peaks: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class InFlight:
    """An NVML call in progress: which function, on which GPU, since when (time.monotonic())."""

    function: str
    gpu: int | None
    started: float


@dataclass(frozen=True)
class SamplerStatus:
    """What the sampler knows about itself, for self-metrics and /health."""

    nvml_up: bool
    nvml_error: str = ""
    driver_version: str = ""
    nvml_version: str = ""
    device_count: int = 0
    cycles: int = 0
    last_cycle_duration_s: float = 0.0
    last_cycle_nvml_calls: int = 0
    nvml_calls_total: int = 0
    last_sample_wall_time: float = 0.0  # time.time() at the end of the last complete cycle
    last_sample_monotonic: float = 0.0
    unsupported_fields: tuple[tuple[int, str], ...] = ()  # (gpu index, DCGM field name)
    peak_window_s: float = 0.0  # the trailing window of DeviceReading.peaks (0: no sampler yet)


@dataclass(frozen=True)
class Snapshot:
    """The newest complete sampling cycle plus the sampler's status."""

    devices: tuple[DeviceReading, ...] = ()
    status: SamplerStatus = field(default_factory=lambda: SamplerStatus(nvml_up=False))
    # Every MIG device (all compute instances) of every GPU, for mapping the kubelet's MIG-<uuid> IDs.
    migs: tuple[MigIdentity, ...] = ()
