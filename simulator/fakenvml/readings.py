"""Device readings: identity, utilization, memory, temperature, power, clocks, ECC, processes, fields."""

from __future__ import annotations

import time
from typing import Any

import pynvml

from simulator.fakenvml.abi import (
    ENC_DEC_SAMPLING_PERIOD_US,
    INSUFFICIENT_SIZE,
    INVALID_ARGUMENT,
    NOT_AVAILABLE,
    NOT_MIG,
    NOT_SUPPORTED,
    PCIE_THROUGHPUT_WINDOW_S,
    SUCCESS,
    VERSION_MISMATCH,
    c_int_value,
    c_symbol,
    pointee,
    precise_wait,
    write_string,
)
from simulator.fakenvml.device import SUPPORTED_REASONS, SimulatedGpu
from simulator.fakenvml.faults import ErrorRule
from simulator.fakenvml.fields import (
    FIELDS,
    FV_FIELD_ID,
    FV_LATENCY,
    FV_RETURN,
    FV_SCOPE_ID,
    FV_TIMESTAMP,
    FV_VALUE,
    FV_VALUE_TYPE,
    UNION_MEMBER,
    FieldValue,
)
from simulator.fakenvml.state import LibraryState
from simulator.models import MIB
from simulator.scenario import (
    ProcessSpec,
)


def _fabric_mask(*, degraded: bool = False, unhealthy: bool = False) -> int:
    """A health mask as NVML packs it (nvml.h, NVML_GPU_FABRIC_HEALTH_MASK_*): the boolean 2-bit sub-fields
    "false" (2) unless asked for "true" (1), incorrect configuration "none" (1); the others not supported (0)."""
    def bit(true: bool) -> int:
        return int(pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE if true else
                   pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE)
    return int(bit(degraded) << pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW
            | bit(False) << pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY
            | bit(unhealthy) << pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY
            | bit(False) << pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY
            | pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE
            << pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION)


# The struct versions the simulated driver accepts (a driver before v3 answers ArgumentVersionMismatch to it).
FABRIC_INFO_VERSIONS: tuple[int, ...] = (pynvml.nvmlGpuFabricInfo_v2, pynvml.nvmlGpuFabricInfo_v3)

# Scenario fabric state -> (healthMask, healthSummary); absent: NotSupported (no NVLink fabric).
FABRIC_HEALTH: dict[str, tuple[int, int]] = {
    "healthy": (_fabric_mask(), pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY),
    "degraded": (_fabric_mask(degraded=True), pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY),
    "unhealthy": (_fabric_mask(unhealthy=True), pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY),
}


class ReadingsMixin(LibraryState):
    """The per-device reading symbols, each answering from the ``device.SimulatedGpu`` model."""

    @c_symbol("nvmlDeviceGetIndex", device=True)
    def _impl_index(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        pointee(out).value = gpu.index
        return SUCCESS

    @c_symbol("nvmlDeviceGetUUID", device=True)
    def _impl_uuid(self, gpu: SimulatedGpu, t: float, buffer: Any, length: Any) -> int:
        return write_string(buffer, length, gpu.spec.uuid)

    @c_symbol("nvmlDeviceGetName", device=True)
    def _impl_name(self, gpu: SimulatedGpu, t: float, buffer: Any, length: Any) -> int:
        return write_string(buffer, length, gpu.spec.name)

    @c_symbol("nvmlDeviceGetPciInfo_v3", device=True)
    def _impl_pci_info(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        info = pointee(out)
        spec = gpu.spec
        info.busIdLegacy = spec.pci_bus_id_legacy.encode()
        info.domain = spec.pci_domain
        info.bus = spec.pci_bus
        info.device = spec.pci_device
        info.pciDeviceId = gpu.model.pci_device_id
        info.pciSubSystemId = gpu.model.pci_subsystem_id
        info.busId = spec.pci_bus_id.encode()
        return SUCCESS

    @c_symbol("nvmlDeviceGetMinorNumber", device=True)
    def _impl_minor(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        pointee(out).value = gpu.spec.minor
        return SUCCESS

    @c_symbol("nvmlDeviceGetSerial", device=True)
    def _impl_serial(self, gpu: SimulatedGpu, t: float, buffer: Any, length: Any) -> int:
        if not gpu.features.serial_number:
            return NOT_SUPPORTED
        return write_string(buffer, length, gpu.spec.serial)

    @c_symbol("nvmlDeviceGetVbiosVersion", device=True)
    def _impl_vbios(self, gpu: SimulatedGpu, t: float, buffer: Any, length: Any) -> int:
        return write_string(buffer, length, gpu.spec.vbios_version)

    @c_symbol("nvmlDeviceGetBrand", device=True)
    def _impl_brand(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        pointee(out).value = gpu.model.brand
        return SUCCESS

    @c_symbol("nvmlDeviceGetArchitecture", device=True)
    def _impl_architecture(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        pointee(out).value = gpu.model.architecture
        return SUCCESS

    @c_symbol("nvmlDeviceGetCudaComputeCapability", device=True)
    def _impl_compute_capability(self, gpu: SimulatedGpu, t: float, major: Any, minor: Any) -> int:
        pointee(major).value, pointee(minor).value = gpu.model.compute_capability
        return SUCCESS

    @c_symbol("nvmlDeviceGetUtilizationRates", device=True)
    def _impl_utilization(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if gpu.mig is not None:
            return NOT_SUPPORTED  # nvml.h: not supported on MIG-enabled GPUs
        utilization = pointee(out)
        utilization.gpu = round(gpu.load(t))
        utilization.memory = round(gpu.memory_util(t))
        return SUCCESS

    def _media(self, supported: bool, value: float, util: Any, period: Any) -> int:
        if not supported:
            return NOT_SUPPORTED
        pointee(util).value = round(value)
        pointee(period).value = ENC_DEC_SAMPLING_PERIOD_US
        return SUCCESS

    @c_symbol("nvmlDeviceGetEncoderUtilization", device=True)
    def _impl_encoder(self, gpu: SimulatedGpu, t: float, util: Any, period: Any) -> int:
        return self._media(gpu.features.encoder and gpu.mig is None, gpu.encoder_util(t), util, period)

    @c_symbol("nvmlDeviceGetDecoderUtilization", device=True)
    def _impl_decoder(self, gpu: SimulatedGpu, t: float, util: Any, period: Any) -> int:
        return self._media(gpu.features.decoder and gpu.mig is None, gpu.decoder_util(t), util, period)

    @c_symbol("nvmlDeviceGetMemoryInfo", device=True)
    def _impl_memory_v1(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        """v1 ``used`` is reserved + allocated (nvml.h struct comment); total = free + used."""
        memory = pointee(out)
        used = gpu.memory_used(t) + gpu.model.memory_reserved
        memory.total = gpu.model.memory_total
        memory.used = used
        memory.free = gpu.model.memory_total - used
        return SUCCESS

    @c_symbol("nvmlDeviceGetMemoryInfo_v2", device=True)
    def _impl_memory_v2(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        memory = pointee(out)
        if memory.version != pynvml.nvmlMemory_v2:
            return VERSION_MISMATCH
        used = gpu.memory_used(t)
        memory.total = gpu.model.memory_total
        memory.reserved = gpu.model.memory_reserved
        memory.used = used
        memory.free = gpu.model.memory_total - gpu.model.memory_reserved - used
        return SUCCESS

    @c_symbol("nvmlDeviceGetBAR1MemoryInfo", device=True)
    def _impl_bar1(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        bar1 = pointee(out)
        used = 2 * MIB + 2 * MIB * len(gpu.processes(t))
        bar1.bar1Total = gpu.model.bar1_total
        bar1.bar1Used = used
        bar1.bar1Free = gpu.model.bar1_total - used
        return SUCCESS

    @c_symbol("nvmlDeviceGetTemperatureV", device=True)
    def _impl_temperature_v(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        reading = pointee(out)
        if reading.version != pynvml.nvmlTemperature_v1:
            return VERSION_MISMATCH
        if reading.sensorType != pynvml.NVML_TEMPERATURE_GPU:
            return INVALID_ARGUMENT
        reading.temperature = gpu.temperature(t)
        return SUCCESS

    @c_symbol("nvmlDeviceGetTemperature", device=True)
    def _impl_temperature(self, gpu: SimulatedGpu, t: float, sensor: Any, out: Any) -> int:
        if c_int_value(sensor) != pynvml.NVML_TEMPERATURE_GPU:
            return INVALID_ARGUMENT
        pointee(out).value = gpu.temperature(t)
        return SUCCESS

    @c_symbol("nvmlDeviceGetTemperatureThreshold", device=True)
    def _impl_temperature_threshold(self, gpu: SimulatedGpu, t: float, kind: Any, out: Any) -> int:
        model = gpu.model
        thresholds = {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: model.temp_shutdown,
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: model.temp_slowdown,
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: model.temp_gpu_max,
        }
        if gpu.features.memory_temperature:
            thresholds[pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX] = model.temp_memory_max
        value = thresholds.get(c_int_value(kind))
        if value is None:
            return NOT_SUPPORTED
        pointee(out).value = value
        return SUCCESS

    @c_symbol("nvmlDeviceGetPowerUsage", device=True)
    def _impl_power_usage(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.power_usage:
            return NOT_SUPPORTED
        pointee(out).value = int(gpu.power_mw(t))
        return SUCCESS

    def _power_limit(self, gpu: SimulatedGpu, value: int, out: Any) -> int:
        if not gpu.features.power_usage:
            return NOT_SUPPORTED
        pointee(out).value = value
        return SUCCESS

    @c_symbol("nvmlDeviceGetPowerManagementLimit", device=True)
    def _impl_power_limit(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return self._power_limit(gpu, gpu.spec.power_limit_mw, out)

    @c_symbol("nvmlDeviceGetEnforcedPowerLimit", device=True)
    def _impl_enforced_limit(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return self._power_limit(gpu, gpu.spec.power_limit_mw, out)

    @c_symbol("nvmlDeviceGetPowerManagementDefaultLimit", device=True)
    def _impl_default_limit(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return self._power_limit(gpu, gpu.model.power_default_limit_mw, out)

    @c_symbol("nvmlDeviceGetTotalEnergyConsumption", device=True)
    def _impl_energy(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.energy_counter:
            return NOT_SUPPORTED
        pointee(out).value = gpu.energy_mj(t)
        return SUCCESS

    @c_symbol("nvmlDeviceGetClockInfo", device=True)
    def _impl_clock(self, gpu: SimulatedGpu, t: float, kind: Any, out: Any) -> int:
        readers = {
            pynvml.NVML_CLOCK_GRAPHICS: gpu.sm_clock,
            pynvml.NVML_CLOCK_SM: gpu.sm_clock,
            pynvml.NVML_CLOCK_MEM: gpu.memory_clock,
            pynvml.NVML_CLOCK_VIDEO: gpu.video_clock,
        }
        reader = readers.get(c_int_value(kind))
        if reader is None:
            return INVALID_ARGUMENT
        pointee(out).value = reader(t)
        return SUCCESS

    @c_symbol("nvmlDeviceGetMaxClockInfo", device=True)
    def _impl_max_clock(self, gpu: SimulatedGpu, t: float, kind: Any, out: Any) -> int:
        model = gpu.model
        maxima = {
            pynvml.NVML_CLOCK_GRAPHICS: model.max_graphics_clock,
            pynvml.NVML_CLOCK_SM: model.max_sm_clock,
            pynvml.NVML_CLOCK_MEM: model.max_memory_clock,
            pynvml.NVML_CLOCK_VIDEO: model.max_video_clock,
        }
        value = maxima.get(c_int_value(kind))
        if value is None:
            return INVALID_ARGUMENT
        pointee(out).value = value
        return SUCCESS

    @c_symbol("nvmlDeviceGetPcieReplayCounter", device=True)
    def _impl_pcie_replays(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.model.pcie_replays_supported:
            return NOT_SUPPORTED
        pointee(out).value = gpu.counter("pcie_replays", t)
        return SUCCESS

    @c_symbol("nvmlDeviceGetFanSpeed", device=True)
    def _impl_fan_speed(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.fans:
            return NOT_SUPPORTED  # passively cooled board
        pointee(out).value = gpu.fan_percent(t)
        return SUCCESS

    @c_symbol("nvmlDeviceGetNumFans", device=True)
    def _impl_num_fans(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.fans:
            return NOT_SUPPORTED
        pointee(out).value = gpu.features.fans
        return SUCCESS

    @c_symbol("nvmlDeviceGetPerformanceState", device=True)
    def _impl_pstate(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        pointee(out).value = gpu.pstate(t)
        return SUCCESS

    @c_symbol("nvmlDeviceGetCurrentClocksEventReasons", device=True)
    def _impl_event_reasons(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.clock_event_reasons:
            return NOT_SUPPORTED
        pointee(out).value = gpu.event_bits(t) & SUPPORTED_REASONS
        return SUCCESS

    @c_symbol("nvmlDeviceGetSupportedClocksEventReasons", device=True)
    def _impl_supported_reasons(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.clock_event_reasons:
            return NOT_SUPPORTED
        pointee(out).value = SUPPORTED_REASONS
        return SUCCESS

    @c_symbol("nvmlDeviceGetGpuFabricInfoV", device=True)
    def _impl_fabric_info(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        """The scenario's ``fabric`` state as the driver's v2 or v3 struct (v3 adds ``healthSummary``)."""
        info = pointee(out)
        if info.version not in FABRIC_INFO_VERSIONS:
            return VERSION_MISMATCH
        health = FABRIC_HEALTH.get(gpu.spec.fabric)
        if health is None:
            return NOT_SUPPORTED
        mask, summary = health
        info.clusterUuid[:] = bytes(range(16))
        info.status = SUCCESS
        info.cliqueId = 1
        info.state = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
        info.healthMask = mask
        if info.version == pynvml.nvmlGpuFabricInfo_v3:
            info.healthSummary = summary
        return SUCCESS

    @c_symbol("nvmlDeviceGetEccMode", device=True)
    def _impl_ecc_mode(self, gpu: SimulatedGpu, t: float, current: Any, pending: Any) -> int:
        if not gpu.features.ecc:
            return NOT_SUPPORTED
        pointee(current).value = pynvml.NVML_FEATURE_ENABLED
        pointee(pending).value = pynvml.NVML_FEATURE_ENABLED
        return SUCCESS

    @c_symbol("nvmlDeviceGetTotalEccErrors", device=True)
    def _impl_total_ecc(self, gpu: SimulatedGpu, t: float, error_type: Any, counter_type: Any,
                        out: Any) -> int:
        if not gpu.features.ecc:
            return NOT_SUPPORTED
        kind, scope = c_int_value(error_type), c_int_value(counter_type)
        if kind not in (0, 1) or scope not in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC):
            return INVALID_ARGUMENT
        volatile = gpu.counter("ecc_corrected" if kind == 0 else "ecc_uncorrected", t)
        ecc = gpu.spec.ecc_errors
        before = ecc.aggregate_corrected if kind == 0 else ecc.aggregate_uncorrected
        pointee(out).value = volatile + (before if scope == pynvml.NVML_AGGREGATE_ECC else 0)
        return SUCCESS

    def _retired(self, gpu: SimulatedGpu, t: float, cause: Any, count: Any, addresses: Any,  # noqa: PLR0917
                 timestamps: Any) -> int:
        """The two-call size probe: NULL buffer (or too small) -> INSUFFICIENT_SIZE with the count."""
        if not gpu.features.page_retirement:
            return NOT_SUPPORTED
        if c_int_value(cause) not in (0, 1):
            return INVALID_ARGUMENT
        pages = gpu.retired_pages(c_int_value(cause), t, self._epoch)
        capacity = pointee(count)
        if addresses is None or capacity.value < len(pages):
            capacity.value = len(pages)
            return INSUFFICIENT_SIZE if pages else SUCCESS
        for slot, (address, moment) in enumerate(pages):
            addresses[slot] = address
            if timestamps is not None:
                timestamps[slot] = moment
        capacity.value = len(pages)
        return SUCCESS

    @c_symbol("nvmlDeviceGetRetiredPages", device=True)
    def _impl_retired_pages(self, gpu: SimulatedGpu, t: float, cause: Any, count: Any, addresses: Any) -> int:
        return self._retired(gpu, t, cause, count, addresses, None)

    @c_symbol("nvmlDeviceGetRetiredPages_v2", device=True)
    def _impl_retired_pages_v2(  # noqa: PLR0917 - mirrors the C signature
            self, gpu: SimulatedGpu, t: float, cause: Any, count: Any, addresses: Any,
            timestamps: Any = None) -> int:
        # pynvml's size probe passes only four arguments (no timestamps buffer); a C library would
        # read an indeterminate fifth one, which is harmless because addresses is NULL then.
        return self._retired(gpu, t, cause, count, addresses, timestamps)

    @c_symbol("nvmlDeviceGetRetiredPagesPendingStatus", device=True)
    def _impl_retired_pending(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        if not gpu.features.page_retirement:
            return NOT_SUPPORTED
        pending = gpu.spec.retired_pages.pending.at(t)
        pointee(out).value = pynvml.NVML_FEATURE_ENABLED if pending else pynvml.NVML_FEATURE_DISABLED
        return SUCCESS

    @c_symbol("nvmlDeviceGetRemappedRows", device=True)
    def _impl_remapped_rows(  # noqa: PLR0917 - mirrors the C signature
            self, gpu: SimulatedGpu, t: float, corrected: Any, uncorrected: Any, pending: Any,
            failure: Any) -> int:
        if not gpu.features.row_remapping:
            return NOT_SUPPORTED
        rows = gpu.spec.remapped_rows
        pointee(corrected).value = gpu.counter("remapped_correctable", t)
        pointee(uncorrected).value = gpu.counter("remapped_uncorrectable", t)
        pointee(pending).value = int(rows.pending.at(t))
        pointee(failure).value = int(rows.failure.at(t))
        return SUCCESS

    def _processes_on(self, gpu: SimulatedGpu, t: float, *, compute: bool) -> list[tuple[ProcessSpec, int, int]]:
        """The GPU's processes with their GPU/compute instance ids (all of them, as root sees them)."""
        found = [(p, NOT_MIG, NOT_MIG) for p in gpu.processes(t)]
        if gpu.mig is not None:
            found.extend(gpu.mig.processes(t))
        return [entry for entry in found if (entry[0].compute if compute else entry[0].graphics)]

    def _process_list(self, processes: list[tuple[ProcessSpec, int, int]], count: Any, infos: Any) -> int:
        """Two-call protocol: probe with count=0 and NULL -> INSUFFICIENT_SIZE (or SUCCESS when
        there are none) and the count; then fill a buffer of at least that many entries."""
        capacity = pointee(count)
        if infos is None or capacity.value < len(processes):
            capacity.value = len(processes)
            return INSUFFICIENT_SIZE if processes else SUCCESS
        for slot, (process, gpu_instance_id, compute_instance_id) in enumerate(processes):
            info = infos[slot]
            info.pid = process.pid
            used = process.used_memory
            info.usedGpuMemory = NOT_AVAILABLE if used is None else used
            info.gpuInstanceId = gpu_instance_id
            info.computeInstanceId = compute_instance_id
        capacity.value = len(processes)
        return SUCCESS

    @c_symbol("nvmlDeviceGetComputeRunningProcesses_v3", device=True)
    def _impl_compute_processes(self, gpu: SimulatedGpu, t: float, count: Any, infos: Any) -> int:
        return self._process_list(self._processes_on(gpu, t, compute=True), count, infos)

    @c_symbol("nvmlDeviceGetGraphicsRunningProcesses_v3", device=True)
    def _impl_graphics_processes(self, gpu: SimulatedGpu, t: float, count: Any, infos: Any) -> int:
        return self._process_list(self._processes_on(gpu, t, compute=False), count, infos)

    @c_symbol("nvmlDeviceGetPcieThroughput", device=True)
    def _impl_pcie_throughput(self, gpu: SimulatedGpu, t: float, counter: Any, out: Any) -> int:
        """KB/s measured over a real 20 ms window, during which the driver lock is held."""
        which = c_int_value(counter)
        if which not in (pynvml.NVML_PCIE_UTIL_TX_BYTES, pynvml.NVML_PCIE_UTIL_RX_BYTES):
            return INVALID_ARGUMENT
        time.sleep(PCIE_THROUGHPUT_WINDOW_S)
        pointee(out).value = int(gpu.pcie_rate(t, tx=which == pynvml.NVML_PCIE_UTIL_TX_BYTES) / 1000)
        return SUCCESS

    @staticmethod
    def _field_fault(rules: list[ErrorRule], field_id: int, gpu: int, t: float) -> int:
        for rule in rules:
            if rule.field == field_id and rule.applies(gpu, t):
                return rule.code
        return SUCCESS

    @c_symbol("nvmlDeviceGetFieldValues", device=True)
    def _impl_field_values(self, gpu: SimulatedGpu, t: float, count: Any, values: Any) -> int:
        """Per-entry status, value type, union member, timestamp (us since the epoch), latency.

        A lost GPU fails the whole call with GPU_IS_LOST (the dispatcher answers before this
        runs): NVML validates the device in the common prologue every device call shares, before
        it dispatches to the per-field readers, which is why every other device call reports
        GPU_IS_LOST too; per-entry statuses are for fields that one board cannot serve. It also
        lets production treat "GPU lost" uniformly, whichever call noticed first.
        """
        entries = pointee(values)
        total = c_int_value(count)
        if total < 0:
            return INVALID_ARGUMENT
        per_field = self._field_latency
        if per_field:
            precise_wait(per_field * total)
        timestamp = int((self._epoch + t) * 1_000_000)
        latency_us = int(per_field * 1_000_000)
        field_errors = self._field_errors
        for slot in range(total):
            # Struct members are set through their ctypes descriptors: pynvml's
            # _PrintableStructure.__setattr__ would otherwise cost a microsecond per member.
            entry = entries[slot]
            field_id = FV_FIELD_ID.__get__(entry, FieldValue)
            FV_TIMESTAMP.__set__(entry, timestamp)
            FV_LATENCY.__set__(entry, latency_us)
            injected = self._field_fault(field_errors, field_id, gpu.index, t) if field_errors else 0
            if injected:
                FV_RETURN.__set__(entry, injected)
                continue
            reader = FIELDS.get(field_id)
            if reader is None:
                FV_RETURN.__set__(entry, NOT_SUPPORTED)
                continue
            value_type, read = reader
            code, value = read(gpu, t, FV_SCOPE_ID.__get__(entry, FieldValue))
            FV_RETURN.__set__(entry, code)
            if code == SUCCESS:
                FV_VALUE_TYPE.__set__(entry, value_type)
                UNION_MEMBER[value_type].__set__(FV_VALUE.__get__(entry, FieldValue), value)
        return SUCCESS
