"""Device inventory: the static identity of every GPU, read once after NVML initialises.

Identity (UUID, PCI bus id, minor number, model name, framebuffer total) never changes while the driver is loaded, so
it is read once and cached together with the NVML handle; per-cycle sampling then costs only the
readings themselves. NVML attaches GPUs lazily, so one broken GPU fails its own handle lookup
without hiding the others: it is reported and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

from exporter.logs import get_logger
from exporter.nvml.client import NvmlClient, describe
from exporter.snapshot import DeviceIdentity

log = get_logger("inventory")


@dataclass(frozen=True)
class SystemInfo:
    driver_version: str
    nvml_version: str


@dataclass(frozen=True)
class Device:
    identity: DeviceIdentity
    handle: Any


@dataclass(frozen=True)
class Inventory:
    system: SystemInfo
    devices: tuple[Device, ...]
    failed: tuple[tuple[int, str], ...] = ()  # (index, reason) of GPUs whose identity could not be read


def _optional_text(nvml: NvmlClient, function: Any, *args: Any) -> str:
    """Serial and VBIOS are only on boards with an InfoROM; absence is normal, not an error."""
    try:
        return str(nvml.call(function, *args))
    except pynvml.NVMLError:
        return ""


def _memory_total(nvml: NvmlClient, handle: Any) -> int | None:
    """The card's framebuffer total in bytes (v1 and v2 report the same total). On a MIG-enabled GPU the
    parent handle answers only a privileged caller; without it the total is unknown, not an error."""
    try:
        return int(nvml.call(pynvml.nvmlDeviceGetMemoryInfo, handle).total)
    except pynvml.NVMLError:
        return None


def discover(nvml: NvmlClient) -> Inventory:
    """Read system versions and every GPU's identity. Raises NVMLError only if NVML itself fails."""
    system = SystemInfo(
        driver_version=str(nvml.call(pynvml.nvmlSystemGetDriverVersion)),
        nvml_version=_optional_text(nvml, pynvml.nvmlSystemGetNVMLVersion),
    )
    count = nvml.call(pynvml.nvmlDeviceGetCount)
    devices: list[Device] = []
    failed: list[tuple[int, str]] = []
    for index in range(count):
        nvml.gpu = index
        try:
            handle = nvml.call(pynvml.nvmlDeviceGetHandleByIndex, index)
            identity = DeviceIdentity(
                index=index,
                uuid=str(nvml.call(pynvml.nvmlDeviceGetUUID, handle)),
                pci_bus_id=str(nvml.call(pynvml.nvmlDeviceGetPciInfo, handle).busId),
                minor=int(nvml.call(pynvml.nvmlDeviceGetMinorNumber, handle)),
                model=str(nvml.call(pynvml.nvmlDeviceGetName, handle)),
                serial=_optional_text(nvml, pynvml.nvmlDeviceGetSerial, handle),
                vbios_version=_optional_text(nvml, pynvml.nvmlDeviceGetVbiosVersion, handle),
                memory_total_bytes=_memory_total(nvml, handle),
            )
        except pynvml.NVMLError as exc:
            reason = describe(exc)
            failed.append((index, reason))
            log.warning("GPU identity could not be read; it is skipped", extra={"fields": {"gpu": index,
                                                                                         "error": reason}})
            continue
        finally:
            nvml.gpu = None
        devices.append(Device(identity=identity, handle=handle))
    return Inventory(system=system, devices=tuple(devices), failed=tuple(failed))
