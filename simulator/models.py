"""GPU model presets for the simulator: what a kind of NVIDIA GPU reports and what it cannot.

A scenario names a preset (``model: H100-SXM5-80GB``) instead of spelling out a hundred numbers.
Each preset carries the identity strings exactly as NVML reports them (``nvmlDeviceGetName``), sizes
in bytes, power in milliwatts, clocks in MHz and temperatures in degrees Celsius, plus a
``Features`` set that decides which NVML calls answer ``NVML_ERROR_NOT_SUPPORTED`` on that kind of
board (nvml.h: full support on Tesla/Quadro, limited support on GeForce): a GeForce has no ECC, no
memory temperature and no serial number; a passively cooled datacenter board has no fan; only HBM
parts report memory temperature; Ampere and newer datacenter parts replaced page retirement with row
remapping.

Numbers are typical values for each product as shown by ``nvidia-smi -q`` on common driver
branches; where a figure is an estimate it says so. They only need to be plausible: the exporter
must never depend on a specific value, only on units, types and support.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import pynvml

MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class Features:
    """Which optional NVML readings a board supports; False (or 0) means NOT_SUPPORTED.

    ``fans`` is the number of fans (0: passively cooled, fan calls are NOT_SUPPORTED) and
    ``nvlink_links`` the number of NVLink links (0: no NVLink, NVLink fields NOT_SUPPORTED).
    """

    ecc: bool = True
    memory_temperature: bool = True
    fans: int = 0
    nvlink_links: int = 0
    row_remapping: bool = True
    page_retirement: bool = False
    energy_counter: bool = True
    encoder: bool = True
    decoder: bool = True
    mig: bool = False
    serial_number: bool = True
    clock_event_reasons: bool = True
    violation_counters: bool = True  # field ids 74-79, 269-271 (ns spent in each clock event / policy)
    tlimit_fields: bool = True  # field ids 193-196 (T.Limit temperatures, Ada and newer)
    pcie_byte_counters: bool = True  # field ids 197-198
    power_usage: bool = True
    gpm: bool = False  # NVML GPM profiling counters (Hopper and newer datacenter parts)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True)
class GpuModel:
    """Static facts about one GPU product.

    ``memory_total`` is what NVML reports as ``total`` (a little under the marketing size);
    ``memory_reserved`` is the v2 ``reserved`` amount held by the driver and firmware.
    ``power_idle_mw``/``power_busy_mw`` anchor the simulated draw at 0 % and 100 % load;
    ``temp_idle``/``temp_busy`` do the same for the core temperature. ``tlimit_*`` are the
    T.Limit-relative thresholds that Hopper/Ada report through field ids 193-196 (negative
    numbers: degrees below the T.Limit reference).
    """

    key: str
    name: str
    architecture: int
    brand: int
    compute_capability: tuple[int, int]
    memory_total: int
    memory_reserved: int
    bar1_total: int
    pci_device_id: int
    pci_subsystem_id: int
    vbios_version: str
    power_default_limit_mw: int
    power_min_limit_mw: int
    power_max_limit_mw: int
    power_idle_mw: int
    power_busy_mw: int
    max_graphics_clock: int
    max_sm_clock: int
    max_memory_clock: int
    max_video_clock: int
    idle_sm_clock: int
    idle_memory_clock: int
    idle_video_clock: int
    temp_idle: int
    temp_busy: int
    memory_temp_offset: int
    temp_shutdown: int
    temp_slowdown: int
    temp_gpu_max: int
    temp_memory_max: int
    tlimit_shutdown: int
    tlimit_slowdown: int
    tlimit_memory_max: int
    tlimit_gpu_max: int
    idle_pstate: int
    busy_pstate: int
    pcie_replays_supported: bool
    features: Features
    # Bus ids of the usual slots, used when a scenario does not give one (index -> bus number).
    default_pci_buses: tuple[int, ...] = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


# HGX H100 / H200 baseboards: 8 GPUs, 18 NVLink4 links each, passively cooled, HBM3(e).
_HOPPER_SXM_FEATURES = Features(nvlink_links=18, mig=True, gpm=True)

_PRESETS: tuple[GpuModel, ...] = (
    GpuModel(
        key="H100-SXM5-80GB",
        name="NVIDIA H100 80GB HBM3",
        architecture=pynvml.NVML_DEVICE_ARCH_HOPPER,
        brand=pynvml.NVML_BRAND_NVIDIA,
        compute_capability=(9, 0),
        memory_total=81559 * MIB,
        memory_reserved=517 * MIB,  # estimate
        bar1_total=131072 * MIB,
        pci_device_id=0x233010DE,
        pci_subsystem_id=0x16C110DE,
        vbios_version="96.00.99.00.01",
        power_default_limit_mw=700_000,
        power_min_limit_mw=200_000,
        power_max_limit_mw=700_000,
        power_idle_mw=72_000,
        power_busy_mw=660_000,
        max_graphics_clock=1980,
        max_sm_clock=1980,
        max_memory_clock=2619,
        max_video_clock=1545,
        idle_sm_clock=345,
        idle_memory_clock=2619,
        idle_video_clock=765,
        temp_idle=31,
        temp_busy=68,
        memory_temp_offset=8,
        temp_shutdown=92,
        temp_slowdown=89,
        temp_gpu_max=87,
        temp_memory_max=95,
        tlimit_shutdown=-8,
        tlimit_slowdown=-2,
        tlimit_memory_max=0,
        tlimit_gpu_max=0,
        idle_pstate=0,
        busy_pstate=0,
        pcie_replays_supported=True,
        features=_HOPPER_SXM_FEATURES,
    ),
    GpuModel(
        key="H200-SXM-141GB",
        name="NVIDIA H200",
        architecture=pynvml.NVML_DEVICE_ARCH_HOPPER,
        brand=pynvml.NVML_BRAND_NVIDIA,
        compute_capability=(9, 0),
        memory_total=143771 * MIB,
        memory_reserved=583 * MIB,  # estimate
        bar1_total=262144 * MIB,
        pci_device_id=0x233510DE,
        pci_subsystem_id=0x18BE10DE,
        vbios_version="96.00.A5.00.01",
        power_default_limit_mw=700_000,
        power_min_limit_mw=200_000,
        power_max_limit_mw=700_000,
        power_idle_mw=76_000,
        power_busy_mw=670_000,
        max_graphics_clock=1980,
        max_sm_clock=1980,
        max_memory_clock=3201,
        max_video_clock=1545,
        idle_sm_clock=345,
        idle_memory_clock=3201,
        idle_video_clock=765,
        temp_idle=30,
        temp_busy=66,
        memory_temp_offset=9,
        temp_shutdown=92,
        temp_slowdown=89,
        temp_gpu_max=87,
        temp_memory_max=95,
        tlimit_shutdown=-8,
        tlimit_slowdown=-2,
        tlimit_memory_max=0,
        tlimit_gpu_max=0,
        idle_pstate=0,
        busy_pstate=0,
        pcie_replays_supported=True,
        features=_HOPPER_SXM_FEATURES,
    ),
    GpuModel(
        key="A100-SXM4-80GB",
        name="NVIDIA A100-SXM4-80GB",
        architecture=pynvml.NVML_DEVICE_ARCH_AMPERE,
        brand=pynvml.NVML_BRAND_NVIDIA,
        compute_capability=(8, 0),
        memory_total=81920 * MIB,
        memory_reserved=631 * MIB,  # estimate
        bar1_total=131072 * MIB,
        pci_device_id=0x20B210DE,
        pci_subsystem_id=0x147F10DE,
        vbios_version="92.00.36.00.02",
        power_default_limit_mw=400_000,
        power_min_limit_mw=100_000,
        power_max_limit_mw=400_000,
        power_idle_mw=61_000,
        power_busy_mw=380_000,
        max_graphics_clock=1410,
        max_sm_clock=1410,
        max_memory_clock=1593,
        max_video_clock=1290,
        idle_sm_clock=210,
        idle_memory_clock=1593,
        idle_video_clock=585,
        temp_idle=29,
        temp_busy=64,
        memory_temp_offset=6,
        temp_shutdown=92,
        temp_slowdown=89,
        temp_gpu_max=87,
        temp_memory_max=95,
        tlimit_shutdown=0,
        tlimit_slowdown=0,
        tlimit_memory_max=0,
        tlimit_gpu_max=0,
        idle_pstate=0,
        busy_pstate=0,
        pcie_replays_supported=True,
        # T.Limit fields arrived with Ada/Hopper drivers; GA100 answers NOT_SUPPORTED (estimate).
        features=Features(nvlink_links=12, mig=True, tlimit_fields=False),
    ),
    GpuModel(
        key="L4",
        name="NVIDIA L4",
        architecture=pynvml.NVML_DEVICE_ARCH_ADA,
        brand=pynvml.NVML_BRAND_NVIDIA,
        compute_capability=(8, 9),
        memory_total=23034 * MIB,
        memory_reserved=433 * MIB,  # estimate
        bar1_total=32768 * MIB,
        pci_device_id=0x27B810DE,
        pci_subsystem_id=0x16CA10DE,
        vbios_version="95.04.29.00.06",
        power_default_limit_mw=72_000,
        power_min_limit_mw=40_000,
        power_max_limit_mw=72_000,
        power_idle_mw=16_000,
        power_busy_mw=70_000,
        max_graphics_clock=2040,
        max_sm_clock=2040,
        max_memory_clock=6251,
        max_video_clock=1770,
        idle_sm_clock=210,
        idle_memory_clock=405,
        idle_video_clock=795,
        temp_idle=35,
        temp_busy=72,
        memory_temp_offset=0,
        temp_shutdown=98,
        temp_slowdown=95,
        temp_gpu_max=92,
        temp_memory_max=0,
        tlimit_shutdown=-6,
        tlimit_slowdown=-3,
        tlimit_memory_max=0,
        tlimit_gpu_max=0,
        idle_pstate=8,
        busy_pstate=0,
        pcie_replays_supported=True,
        # GDDR6 with ECC: no memory temperature sensor; PCIe card without NVLink or fan; no MIG.
        features=Features(memory_temperature=False),
        default_pci_buses=(0x01, 0x21, 0x41, 0x61, 0x81, 0xA1, 0xC1, 0xE1),
    ),
    GpuModel(
        key="RTX-4090",
        name="NVIDIA GeForce RTX 4090",
        architecture=pynvml.NVML_DEVICE_ARCH_ADA,
        brand=pynvml.NVML_BRAND_GEFORCE,
        compute_capability=(8, 9),
        memory_total=24564 * MIB,
        memory_reserved=361 * MIB,  # estimate
        bar1_total=256 * MIB,
        pci_device_id=0x268410DE,
        pci_subsystem_id=0x165B10DE,
        vbios_version="95.02.3C.00.A4",
        power_default_limit_mw=450_000,
        power_min_limit_mw=150_000,
        power_max_limit_mw=600_000,
        power_idle_mw=21_000,
        power_busy_mw=420_000,
        max_graphics_clock=3120,
        max_sm_clock=3120,
        max_memory_clock=10501,
        max_video_clock=2415,
        idle_sm_clock=210,
        idle_memory_clock=405,
        idle_video_clock=1185,
        temp_idle=36,
        temp_busy=70,
        memory_temp_offset=0,
        temp_shutdown=97,
        temp_slowdown=94,
        temp_gpu_max=90,
        temp_memory_max=0,
        tlimit_shutdown=-7,
        tlimit_slowdown=-4,
        tlimit_memory_max=0,
        tlimit_gpu_max=0,
        idle_pstate=8,
        busy_pstate=2,
        pcie_replays_supported=True,
        # GeForce: "limited support" products (nvml.h): no ECC (so no retired pages or
        # remapped rows), no memory temperature, no serial number (no InfoROM), no clock-event
        # reasons or violation counters; two fans on the Founders Edition board.
        features=Features(
            ecc=False,
            memory_temperature=False,
            fans=2,
            row_remapping=False,
            serial_number=False,
            clock_event_reasons=False,
            violation_counters=False,
        ),
        default_pci_buses=(0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08),
    ),
    GpuModel(
        key="V100-SXM2-32GB",
        name="Tesla V100-SXM2-32GB",
        architecture=pynvml.NVML_DEVICE_ARCH_VOLTA,
        brand=pynvml.NVML_BRAND_TESLA,
        compute_capability=(7, 0),
        memory_total=32768 * MIB,
        memory_reserved=258 * MIB,  # estimate
        bar1_total=32768 * MIB,
        pci_device_id=0x1DB510DE,
        pci_subsystem_id=0x124910DE,
        vbios_version="88.00.80.00.01",
        power_default_limit_mw=300_000,
        power_min_limit_mw=150_000,
        power_max_limit_mw=300_000,
        power_idle_mw=43_000,
        power_busy_mw=290_000,
        max_graphics_clock=1530,
        max_sm_clock=1530,
        max_memory_clock=877,
        max_video_clock=1372,
        idle_sm_clock=135,
        idle_memory_clock=877,
        idle_video_clock=555,
        temp_idle=33,
        temp_busy=70,
        memory_temp_offset=3,
        temp_shutdown=90,
        temp_slowdown=87,
        temp_gpu_max=83,
        temp_memory_max=85,
        tlimit_shutdown=0,
        tlimit_slowdown=0,
        tlimit_memory_max=0,
        tlimit_gpu_max=0,
        idle_pstate=0,
        busy_pstate=0,
        pcie_replays_supported=True,
        # Volta: dynamic page retirement instead of row remapping; no MIG; no T.Limit fields.
        features=Features(
            nvlink_links=6,
            row_remapping=False,
            page_retirement=True,
            tlimit_fields=False,
            pcie_byte_counters=False,
        ),
    ),
)

PRESETS: dict[str, GpuModel] = {model.key: model for model in _PRESETS}
DEFAULT_MODEL = "H100-SXM5-80GB"


def preset_names() -> tuple[str, ...]:
    return tuple(PRESETS)


# --- MIG profiles ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile of a MIG-capable model, as ``nvidia-smi mig -lgip`` lists it.

    ``compute_slices`` of the GPU's 7, ``memory_slices`` of its 8; ``memory_bytes`` is what
    ``nvmlDeviceGetMemoryInfo`` on the MIG device reports as total and ``multiprocessors`` what
    ``nvmlDeviceGetAttributes`` reports. Sizes are estimates close to what the MIG user guide lists.
    """

    name: str
    compute_slices: int
    memory_slices: int
    memory_bytes: int
    multiprocessors: int


MIG_MAX_DEVICES = 7  # nvmlDeviceGetMaxMigDeviceCount on A100 / H100 / H200 with MIG enabled
MIG_COMPUTE_SLICES = 7
MIG_MEMORY_SLICES = 8


def _mig_profiles(sizes: tuple[str, str, str, str], slice_mib: int, sms_per_slice: int,
                  sms_total: int) -> dict[str, MigProfile]:
    """The usual profile ladder: 1g (+me), 1g with two memory slices, 2g, 3g, 4g, 7g."""
    one, one_double, half, full = sizes
    table = (
        (f"1g.{one}", 1, 1), (f"1g.{one}+me", 1, 1), (f"1g.{one_double}", 1, 2), (f"2g.{one_double}", 2, 2),
        (f"3g.{half}", 3, 4), (f"4g.{half}", 4, 4), (f"7g.{full}", 7, 8),
    )
    return {name: MigProfile(name, compute, memory, memory * slice_mib * MIB,
                             sms_total if compute == MIG_COMPUTE_SLICES else compute * sms_per_slice)
            for name, compute, memory in table}


MIG_PROFILES: dict[str, dict[str, MigProfile]] = {
    "H100-SXM5-80GB": _mig_profiles(("10gb", "20gb", "40gb", "80gb"), 9984, 16, 132),
    "H200-SXM-141GB": _mig_profiles(("18gb", "35gb", "71gb", "141gb"), 17920, 16, 132),
    "A100-SXM4-80GB": _mig_profiles(("10gb", "20gb", "40gb", "80gb"), 9728, 14, 98),
}


def check_mig_layout(model_key: str, profiles: list[str]) -> None:
    """Raise ValueError unless ``profiles`` (GPU instances) fit on one ``model_key`` GPU.

    Checks what makes a layout impossible on any placement: unknown profiles, more instances than
    MIG devices, more compute or memory slices than the GPU has. (NVML's placement rules are
    stricter; the simulator does not need them.)
    """
    table = MIG_PROFILES.get(model_key)
    if table is None:
        raise ValueError(f"{model_key} has no MIG profiles")
    unknown = [name for name in profiles if name not in table]
    if unknown:
        raise ValueError(f"unknown MIG profile {unknown[0]!r} on {model_key} (known: {', '.join(table)})")
    if len(profiles) > MIG_MAX_DEVICES:
        raise ValueError(f"at most {MIG_MAX_DEVICES} GPU instances fit on one GPU, got {len(profiles)}")
    compute = sum(table[name].compute_slices for name in profiles)
    memory = sum(table[name].memory_slices for name in profiles)
    if compute > MIG_COMPUTE_SLICES or memory > MIG_MEMORY_SLICES:
        raise ValueError(f"the instances need {compute} compute and {memory} memory slices; a {model_key} "
                         f"has {MIG_COMPUTE_SLICES} and {MIG_MEMORY_SLICES}")
