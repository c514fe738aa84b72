"""The fake NVML library driven through pynvml's real wrappers, structs and error mapping."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from ctypes import byref, c_uint
from typing import Any

import pynvml
import pytest

from simulator.fakenvml import (
    FIELDS,
    IMPLEMENTED_SYMBOLS,
    FakeNvmlLibrary,
    installed,
)
from simulator.models import GIB, MIB, PRESETS
from simulator.scenario import NVML_SYMBOLS, load_scenario
from tests.support.polling import wait_for

from .conftest import FixedClock, scenario_from

ALL_LINKS = 0xFFFFFFFF
UNKNOWN_FIELD = 5000  # beyond NVML_FI_MAX: no driver knows it


def field_map(handle: Any, ids: list[Any]) -> dict[Any, Any]:
    """Field values keyed by what was asked for (an id or an (id, scope) pair)."""
    values = pynvml.nvmlDeviceGetFieldValues(handle, ids)
    return {ids[i]: values[i] for i in range(len(ids))}


def decode(entry: Any) -> int | float:
    members = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return getattr(entry.value, members[entry.valueType])  # type: ignore[no-any-return]


# --- the library surface --------------------------------------------------------------------


def test_every_implemented_symbol_is_known_to_the_scenario_schema() -> None:
    assert IMPLEMENTED_SYMBOLS == NVML_SYMBOLS


def test_init_identity_and_system_strings(nvml: Any) -> None:
    nvml("default")
    assert pynvml.nvmlSystemGetDriverVersion() == "550.90.07"
    assert pynvml.nvmlSystemGetNVMLVersion() == "12.550.90.07"
    assert pynvml.nvmlSystemGetCudaDriverVersion() == 12040
    assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == 12040
    assert pynvml.nvmlDeviceGetCount() == 8

    uuids, buses, minors = set(), set(), set()
    for index in range(8):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        assert pynvml.nvmlDeviceGetIndex(handle) == index
        assert pynvml.nvmlDeviceGetName(handle) == "NVIDIA H100 80GB HBM3"
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", uuid)
        pci = pynvml.nvmlDeviceGetPciInfo(handle)
        assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.0", pci.busId)
        assert pci.busIdLegacy == pci.busId[4:]
        assert (pci.domain, pci.bus, pci.device) == tuple(int(p, 16) for p in re.split("[:.]", pci.busId)[:3])
        assert pci.pciDeviceId == PRESETS["H100-SXM5-80GB"].pci_device_id
        uuids.add(uuid)
        buses.add(pci.busId)
        minors.add(pynvml.nvmlDeviceGetMinorNumber(handle))
        assert pynvml.nvmlDeviceGetSerial(handle).isdigit()
        assert pynvml.nvmlDeviceGetVbiosVersion(handle) == PRESETS["H100-SXM5-80GB"].vbios_version
        assert pynvml.nvmlDeviceGetBrand(handle) == pynvml.NVML_BRAND_NVIDIA
        assert pynvml.nvmlDeviceGetArchitecture(handle) == pynvml.NVML_DEVICE_ARCH_HOPPER
        assert pynvml.nvmlDeviceGetCudaComputeCapability(handle) == (9, 0)
    assert len(uuids) == len(buses) == 8
    assert minors == set(range(8))


def test_handles_by_uuid_and_pci_bus_id_find_the_same_gpu(nvml: Any) -> None:
    nvml("default")
    handle = pynvml.nvmlDeviceGetHandleByIndex(5)
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    bus_id = pynvml.nvmlDeviceGetPciInfo(handle).busId
    assert pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(uuid)) == 5
    assert pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)) == 5
    sysfs_style = f"{int(bus_id[:8], 16):04x}:{bus_id[9:].lower()}"  # 0000:bb:00.0 as in /sys/bus/pci
    assert pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByPciBusId(sysfs_style)) == 5
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByPciBusId("00000000:77:00.0")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(8)


def test_a_null_handle_is_an_invalid_argument(nvml: Any) -> None:
    nvml("default")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetUtilizationRates(pynvml.c_nvmlDevice_t())


def test_many_gpus_get_distinct_bus_ids_across_pci_domains(nvml: Any) -> None:
    nvml("gpu_count: 64\ngpu_defaults: {model: H200-SXM-141GB}\n")
    buses = {pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).busId for i in range(64)}
    assert len(buses) == 64
    assert pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(63)) == "NVIDIA H200"


def test_error_strings(nvml: Any) -> None:
    nvml("default")
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_GPU_IS_LOST) == "GPU is lost"
    assert str(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_READY)) == "NotReady"  # not in pynvml's own table


# --- readings, units and coherence ----------------------------------------------------------


def test_memory_v1_and_v2_are_coherent(nvml: Any, clock: FixedClock) -> None:
    nvml("default")
    clock.t = 42.0
    for index in range(8):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
        assert v2.free + v2.used + v2.reserved == v2.total
        assert v1.total == v2.total == PRESETS["H100-SXM5-80GB"].memory_total
        assert v1.used == v2.used + v2.reserved  # v1 counts reserved as used
        assert v1.free == v2.free
        bar1 = pynvml.nvmlDeviceGetBAR1MemoryInfo(handle)
        assert bar1.bar1Free + bar1.bar1Used == bar1.bar1Total


def test_framebuffer_used_is_the_processes_memory(nvml: Any, clock: FixedClock) -> None:
    nvml("default")
    clock.t = 10.0
    busy = pynvml.nvmlDeviceGetHandleByIndex(0)
    idle = pynvml.nvmlDeviceGetHandleByIndex(6)
    processes = pynvml.nvmlDeviceGetComputeRunningProcesses(busy)
    used = pynvml.nvmlDeviceGetMemoryInfo(busy, version=pynvml.nvmlMemory_v2).used
    assert [p.pid for p in processes] == [41001]
    assert processes[0].usedGpuMemory == 62 * GIB
    assert 62 * GIB <= used < 62 * GIB + MIB
    assert pynvml.nvmlDeviceGetMemoryInfo(idle, version=pynvml.nvmlMemory_v2).used < MIB


def test_process_lists_use_the_two_call_size_probe(nvml: Any, clock: FixedClock) -> None:
    fake = nvml("default")
    clock.t = 150.0  # GPU 4's fourth inference process runs from 120 s to 300 s
    handle = pynvml.nvmlDeviceGetHandleByIndex(4)
    fake.reset_calls()
    processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 2  # size probe + fill
    assert [(p.pid, p.usedGpuMemory) for p in processes] == [
        (52010, 18 * GIB), (52011, 6 * GIB), (52012, 3 * GIB), (52013, 1500 * MIB)]
    assert {(p.gpuInstanceId, p.computeInstanceId) for p in processes} == {(0xFFFFFFFF, 0xFFFFFFFF)}

    clock.t = 400.0
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)] == [52010, 52011, 52012]
    fake.reset_calls()
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(6)) == []
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1  # no processes: the probe says so


def test_graphics_and_compute_lists_and_unavailable_memory(nvml: Any, clock: FixedClock) -> None:
    nvml("""
gpus:
  0:
    processes:
      - {pid: 10, used_memory: 1GiB, type: graphics}
      - {pid: 11, used_memory: unavailable, type: compute}
      - {pid: 12, used_memory: 2GiB, type: both}
""")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    compute = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    graphics = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle)}
    assert compute == {11: None, 12: 2 * GIB}
    assert graphics == {10: GIB, 12: 2 * GIB}


def test_readings_have_nvml_types_and_units(nvml: Any, clock: FixedClock) -> None:
    nvml("default")
    clock.t = 30.0
    model = PRESETS["H100-SXM5-80GB"]
    for index in range(8):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        utilization = pynvml.nvmlDeviceGetUtilizationRates(handle)
        assert isinstance(utilization.gpu, int) and 0 <= utilization.gpu <= 100
        assert isinstance(utilization.memory, int) and 0 <= utilization.memory <= 100
        power = pynvml.nvmlDeviceGetPowerUsage(handle)
        limit = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle)
        assert limit == pynvml.nvmlDeviceGetPowerManagementLimit(handle) == 700_000  # mW
        assert pynvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) == 700_000
        assert 50_000 < power <= limit
        temperature = pynvml.nvmlDeviceGetTemperatureV(handle, pynvml.NVML_TEMPERATURE_GPU)
        assert temperature == pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
        assert 20 <= temperature < model.temp_shutdown
        threshold = pynvml.nvmlDeviceGetTemperatureThreshold
        assert threshold(handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN) == model.temp_shutdown
        assert threshold(handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN) == model.temp_slowdown
        for clock_type, maximum in ((pynvml.NVML_CLOCK_SM, model.max_sm_clock),
                                    (pynvml.NVML_CLOCK_MEM, model.max_memory_clock),
                                    (pynvml.NVML_CLOCK_GRAPHICS, model.max_graphics_clock),
                                    (pynvml.NVML_CLOCK_VIDEO, model.max_video_clock)):
            assert 0 < pynvml.nvmlDeviceGetClockInfo(handle, clock_type) <= maximum
            assert pynvml.nvmlDeviceGetMaxClockInfo(handle, clock_type) == maximum
        assert pynvml.nvmlDeviceGetPerformanceState(handle) == pynvml.NVML_PSTATE_0
        assert pynvml.nvmlDeviceGetEccMode(handle) == [1, 1]
        assert pynvml.nvmlDeviceGetTotalEccErrors(handle, 0, pynvml.NVML_VOLATILE_ECC) == 0
        assert pynvml.nvmlDeviceGetRemappedRows(handle) == (0, 0, 0, 0)
        assert pynvml.nvmlDeviceGetPcieReplayCounter(handle) == 0
        assert pynvml.nvmlDeviceGetEncoderUtilization(handle) == [0, 167_000]
        assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 0
        assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 0]
        supported = pynvml.nvmlDeviceGetSupportedClocksEventReasons(handle)
        assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle) & ~supported == 0


def test_busy_gpus_draw_more_and_run_hotter_and_faster_than_idle_ones(
        nvml: Any, clock: FixedClock) -> None:
    nvml("default")
    clock.t = 200.0
    busy, idle = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(6)
    assert pynvml.nvmlDeviceGetUtilizationRates(idle).gpu == 0
    assert pynvml.nvmlDeviceGetUtilizationRates(busy).gpu > 50
    assert pynvml.nvmlDeviceGetPowerUsage(busy) > 3 * pynvml.nvmlDeviceGetPowerUsage(idle)
    gpu = pynvml.NVML_TEMPERATURE_GPU
    assert pynvml.nvmlDeviceGetTemperatureV(busy, gpu) > pynvml.nvmlDeviceGetTemperatureV(idle, gpu) + 10
    assert pynvml.nvmlDeviceGetClockInfo(busy, pynvml.NVML_CLOCK_SM) > pynvml.nvmlDeviceGetClockInfo(
        idle, pynvml.NVML_CLOCK_SM)
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(idle) == pynvml.nvmlClocksEventReasonGpuIdle


def test_energy_is_monotonic_and_is_the_integral_of_power(nvml: Any, clock: FixedClock) -> None:
    nvml("default")
    handle = pynvml.nvmlDeviceGetHandleByIndex(5)  # the ramping GPU
    previous = -1
    powers = []
    for step in range(0, 601, 20):
        clock.t = float(step)
        energy = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        assert energy >= previous
        previous = energy
        powers.append(pynvml.nvmlDeviceGetPowerUsage(handle))
    clock.t = 100.0
    start = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    clock.t = 160.0
    end = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    clock.t = 100.0
    low = pynvml.nvmlDeviceGetPowerUsage(handle)
    clock.t = 160.0
    high = pynvml.nvmlDeviceGetPowerUsage(handle)
    assert low * 60 * 0.95 <= end - start <= high * 60 * 1.05  # mW x s = mJ; the ramp only rises here
    assert powers[:-1] == sorted(powers[:-1])  # the load ramps up for 600 s ...
    assert powers[-1] < powers[-2]  # ... and starts again


def test_thermal_throttle_window_sets_reasons_lowers_clocks_and_counts_time(
        nvml: Any, clock: FixedClock) -> None:
    nvml("default")
    handle = pynvml.nvmlDeviceGetHandleByIndex(2)  # HW thermal slowdown 90 s .. 110 s
    hw_thermal = pynvml.nvmlClocksEventReasonHwThermalSlowdown | pynvml.nvmlClocksEventReasonHwSlowdown
    violation = pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN

    clock.t = 85.0
    before_reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    before_clock = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    before_ns = decode(field_map(handle, [violation])[violation])
    assert before_reasons & hw_thermal == 0
    assert before_ns == 0

    clock.t = 100.0
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle) & hw_thermal == hw_thermal
    assert pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM) < before_clock
    slowdown = PRESETS["H100-SXM5-80GB"].temp_slowdown
    assert pynvml.nvmlDeviceGetTemperatureV(handle, pynvml.NVML_TEMPERATURE_GPU) > slowdown

    clock.t = 130.0
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle) & hw_thermal == 0
    after_ns = decode(field_map(handle, [violation])[violation])
    assert 19e9 <= after_ns <= 21e9  # the 20 s window, in nanoseconds


def test_power_stays_below_a_lowered_limit_and_reports_the_power_cap(
        nvml: Any, clock: FixedClock) -> None:
    nvml("gpu_defaults: {load: 100, power_limit: 300W}\n")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    clock.t = 50.0
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) == 300_000
    assert pynvml.nvmlDeviceGetPowerUsage(handle) <= 300_000
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle) & pynvml.nvmlClocksEventReasonSwPowerCap
    field = pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP
    assert decode(field_map(handle, [field])[field]) >= 49e9


def test_readings_are_identical_for_the_same_scenario_and_time() -> None:
    def snapshot(t: float) -> list[Any]:
        clock = FixedClock(t)
        readings: list[Any] = []
        with installed("default", clock):
            pynvml.nvmlInit()
            for index in range(8):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                readings.append((
                    pynvml.nvmlDeviceGetUUID(handle),
                    str(pynvml.nvmlDeviceGetUtilizationRates(handle)),
                    str(pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)),
                    pynvml.nvmlDeviceGetPowerUsage(handle),
                    pynvml.nvmlDeviceGetTemperatureV(handle, 0),
                    pynvml.nvmlDeviceGetTotalEnergyConsumption(handle),
                    pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                    pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle),
                    [(v.nvmlReturn, v.valueType, v.value.ullVal, v.timestamp) for v in
                     pynvml.nvmlDeviceGetFieldValues(handle, sorted(FIELDS))],
                ))
            pynvml.nvmlShutdown()
        return readings

    first = snapshot(234.5)
    assert snapshot(234.5) == first
    assert snapshot(300.0) != first


def test_the_same_time_reads_the_same_after_the_clock_went_elsewhere(nvml: Any, clock: FixedClock) -> None:
    nvml("default")
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    clock.t = 700.0
    energy = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    nvlink = decode(field_map(handle, [(138, ALL_LINKS)])[(138, ALL_LINKS)])
    clock.t = 5000.0
    pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    clock.t = 3.0
    pynvml.nvmlDeviceGetFieldValues(handle, [(138, ALL_LINKS)])
    clock.t = 700.0
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) == energy
    assert decode(field_map(handle, [(138, ALL_LINKS)])[(138, ALL_LINKS)]) == nvlink


def test_seed_changes_identities() -> None:
    one = load_scenario("default")
    other = scenario_from("seed: 1\ngpu_count: 8\n")
    assert {g.uuid for g in one.gpus}.isdisjoint({g.uuid for g in other.gpus})


# --- field values ---------------------------------------------------------------------------


def test_field_values_types_statuses_and_timestamps(nvml: Any, clock: FixedClock) -> None:
    fake = nvml("default")
    clock.t = 60.0
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    ids = sorted(FIELDS)
    values = pynvml.nvmlDeviceGetFieldValues(handle, [*ids, UNKNOWN_FIELD])
    by_id = {v.fieldId: v for v in values}
    expected_us = int(fake.wall_time(60.0) * 1_000_000)
    for field_id in ids:
        entry = by_id[field_id]
        if field_id in (pynvml.NVML_FI_DEV_RETIRED_SBE, pynvml.NVML_FI_DEV_RETIRED_DBE,
                        pynvml.NVML_FI_DEV_RETIRED_PENDING):
            assert entry.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED  # Hopper uses row remapping
            continue
        assert entry.nvmlReturn == pynvml.NVML_SUCCESS, field_id
        assert entry.valueType == FIELDS[field_id][0]
        assert entry.timestamp == expected_us
    assert decode(by_id[pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT]) == 18
    assert decode(by_id[pynvml.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT]) == -8  # signed
    tlimit = by_id[pynvml.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT]
    assert tlimit.valueType == pynvml.NVML_VALUE_TYPE_SIGNED_INT
    energy = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    assert decode(by_id[pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION]) == energy
    assert decode(by_id[pynvml.NVML_FI_DEV_POWER_INSTANT]) == pynvml.nvmlDeviceGetPowerUsage(handle)
    assert decode(by_id[pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT]) == 700_000
    memory_temp = decode(by_id[pynvml.NVML_FI_DEV_MEMORY_TEMP])
    assert memory_temp > pynvml.nvmlDeviceGetTemperatureV(handle, 0)  # HBM runs warmer here
    assert by_id[UNKNOWN_FIELD].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_nvlink_counters_per_link_and_summed(nvml: Any, clock: FixedClock) -> None:
    nvml("default")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    tx = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    clock.t = 100.0
    requests = [(tx, link) for link in range(18)] + [(tx, ALL_LINKS), (tx, 18)]
    values = pynvml.nvmlDeviceGetFieldValues(handle, requests)
    per_link = [decode(values[link]) for link in range(18)]
    assert sum(per_link) == decode(values[18])
    assert values[19].nvmlReturn == pynvml.NVML_ERROR_INVALID_ARGUMENT  # there is no link 18
    clock.t = 190.0
    later = decode(pynvml.nvmlDeviceGetFieldValues(handle, [(tx, ALL_LINKS)])[0])
    # two periods of the square wave: 95 GB/s for 9 s and 2 GB/s for 36 s each, counted in KiB
    expected_kib = 2 * (95e9 * 9 + 2e9 * 36) / 1024
    assert 0.98 * expected_kib < later - decode(values[18]) < 1.02 * expected_kib
    raw = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX
    assert decode(pynvml.nvmlDeviceGetFieldValues(handle, [(raw, ALL_LINKS)])[0]) > later


def test_pcie_byte_counters_grow_with_traffic(nvml: Any, clock: FixedClock) -> None:
    nvml("gpu_defaults: {pcie_rx: 1GB/s, pcie_tx: 0}\n")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    ids = [pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES]
    clock.t = 10.0
    rx, tx = (decode(v) for v in pynvml.nvmlDeviceGetFieldValues(handle, ids))
    assert rx == 10 * 10**9
    assert tx == 0


def test_injected_field_error_hits_only_that_entry(nvml: Any) -> None:
    fake = nvml("default")
    fake.inject_error("nvmlDeviceGetFieldValues", "NoPermission", gpu=0, field=pynvml.NVML_FI_DEV_MEMORY_TEMP)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    temp, energy = pynvml.nvmlDeviceGetFieldValues(handle, [82, 83])
    assert temp.nvmlReturn == pynvml.NVML_ERROR_NO_PERMISSION
    assert energy.nvmlReturn == pynvml.NVML_SUCCESS
    other = pynvml.nvmlDeviceGetFieldValues(pynvml.nvmlDeviceGetHandleByIndex(1), [82])[0]
    assert other.nvmlReturn == pynvml.NVML_SUCCESS


# --- what a board does not support ----------------------------------------------------------


def test_geforce_answers_not_supported_like_a_real_one(nvml: Any, clock: FixedClock) -> None:
    nvml("consumer-gpu")
    clock.t = 30.0
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetName(handle) == "NVIDIA GeForce RTX 4090"
    assert pynvml.nvmlDeviceGetBrand(handle) == pynvml.NVML_BRAND_GEFORCE
    unsupported: list[Callable[[], object]] = [
        lambda: pynvml.nvmlDeviceGetEccMode(handle),
        lambda: pynvml.nvmlDeviceGetTotalEccErrors(handle, 0, 0),
        lambda: pynvml.nvmlDeviceGetRemappedRows(handle),
        lambda: pynvml.nvmlDeviceGetRetiredPages(handle, 0),
        lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle),
        lambda: pynvml.nvmlDeviceGetSerial(handle),
        lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle),
        lambda: pynvml.nvmlDeviceGetMigMode(handle),
        lambda: pynvml.nvmlDeviceGetTemperatureThreshold(handle, pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX),
    ]
    for call in unsupported:
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()
    fields = pynvml.nvmlDeviceGetFieldValues(handle, [1, 3, 82, 91, 138, 142, 270, 83])
    assert [v.nvmlReturn for v in fields] == [pynvml.NVML_ERROR_NOT_SUPPORTED] * 7 + [pynvml.NVML_SUCCESS]
    assert pynvml.nvmlDeviceGetNumFans(handle) == 2
    assert 30 <= pynvml.nvmlDeviceGetFanSpeed(handle) <= 100
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 0
    assert [p.pid for p in pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle)] == [2210]


def test_passively_cooled_board_has_no_fan(nvml: Any) -> None:
    nvml("default")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetFanSpeed(handle)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetNumFans(handle)


def test_feature_overrides_per_gpu(nvml: Any) -> None:
    nvml("""
gpu_count: 2
gpu_defaults: {model: L4}
gpus:
  1: {features: {memory_temperature: true, fans: 1}}
""")
    plain, changed = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetFieldValues(plain, [82])[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert pynvml.nvmlDeviceGetFieldValues(changed, [82])[0].nvmlReturn == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetNumFans(changed) == 1
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigMode(plain)  # L4 has no MIG


def test_memory_error_counters_step_up(nvml: Any, clock: FixedClock) -> None:
    nvml("memory-errors")
    a100_rate, a100_steps, v100 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1, 3))
    clock.t = 10.0
    assert pynvml.nvmlDeviceGetRemappedRows(a100_steps) == (0, 0, 0, 0)
    assert pynvml.nvmlDeviceGetTotalEccErrors(a100_steps, 0, pynvml.NVML_VOLATILE_ECC) == 3
    clock.t = 100.0
    assert pynvml.nvmlDeviceGetRemappedRows(a100_steps) == (0, 1, 1, 0)
    assert pynvml.nvmlDeviceGetTotalEccErrors(a100_steps, 0, pynvml.NVML_VOLATILE_ECC) == 8
    assert pynvml.nvmlDeviceGetTotalEccErrors(a100_steps, 1, pynvml.NVML_VOLATILE_ECC) == 1
    clock.t = 400.0
    assert pynvml.nvmlDeviceGetRemappedRows(a100_steps) == (0, 1, 1, 1)
    assert pynvml.nvmlDeviceGetTotalEccErrors(a100_rate, 0, pynvml.NVML_VOLATILE_ECC) == 80  # 0.2/s x 400 s
    assert pynvml.nvmlDeviceGetTotalEccErrors(a100_rate, 0, pynvml.NVML_AGGREGATE_ECC) == 1280
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetRetiredPages(a100_rate, 0)  # Ampere replaced page retirement

    clock.t = 200.0
    single_bit = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    pages = pynvml.nvmlDeviceGetRetiredPages_v2(v100, single_bit)
    assert len(pages) == 4
    assert len({page["address"] for page in pages}) == 4
    assert pynvml.nvmlDeviceGetRetiredPages(v100, 0) == [page["address"] for page in pages]
    assert pynvml.nvmlDeviceGetRetiredPages(v100, 1) == []
    assert pynvml.nvmlDeviceGetRetiredPagesPendingStatus(v100) == 1
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetRemappedRows(v100)


# --- faults ---------------------------------------------------------------------------------


def test_lost_gpu_answers_gpu_is_lost_to_every_call_naming_it(nvml: Any, clock: FixedClock) -> None:
    nvml("gpu-lost")
    clock.t = 29.0
    lost = pynvml.nvmlDeviceGetHandleByIndex(3)
    healthy = pynvml.nvmlDeviceGetHandleByIndex(2)
    assert pynvml.nvmlDeviceGetUtilizationRates(lost).gpu >= 70
    clock.t = 30.0
    calls: tuple[Callable[[], object], ...] = (
        lambda: pynvml.nvmlDeviceGetUtilizationRates(lost),
        lambda: pynvml.nvmlDeviceGetUUID(lost),
        lambda: pynvml.nvmlDeviceGetFieldValues(lost, [82, 83]),
        lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(lost),
        lambda: pynvml.nvmlDeviceGetHandleByIndex(3),
    )
    for call in calls:
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call()
    assert pynvml.nvmlDeviceGetCount() == 8
    assert pynvml.nvmlDeviceGetUtilizationRates(healthy).gpu >= 70


def test_lose_gpu_at_runtime(nvml: Any) -> None:
    fake = nvml("default")
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    fake.lose_gpu(1)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetPowerUsage(handle)
    assert pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(0)) > 0


def test_missing_symbols_raise_function_not_found(nvml: Any) -> None:
    fake = nvml("""
library:
  missing_symbols: [nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetComputeRunningProcesses_v3]
""")
    assert not hasattr(fake, "nvmlDeviceGetMemoryInfo_v2")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert pynvml.nvmlDeviceGetMemoryInfo(handle).total > 0  # the v1 fallback works
    with pytest.raises(pynvml.NVMLLibraryMismatchError):  # the unversioned wrapper's own exception
        pynvml.nvmlDeviceGetComputeRunningProcesses(handle)


def test_library_missing_fails_init_with_library_not_found(nvml: Any) -> None:
    nvml("no-driver", init=False)
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        pynvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_init_fails_until_the_driver_is_loaded(nvml: Any, clock: FixedClock) -> None:
    nvml("init-recovers", init=False)
    clock.t = 1.0
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()
    clock.t = 2.9
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()
    clock.t = 3.0
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 4


def test_init_fails_for_the_first_attempts(nvml: Any) -> None:
    fake = nvml("library:\n  init_fails: {error: NoPermission, calls: 2}\n", init=False)
    for _ in range(2):
        with pytest.raises(pynvml.NVMLError_NoPermission):
            pynvml.nvmlInit()
    pynvml.nvmlInit()
    assert fake.calls["nvmlInitWithFlags"] == 3
    fake.fail_init("DriverNotLoaded", calls=1)
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()


def test_calls_after_the_last_shutdown_are_uninitialized(nvml: Any) -> None:
    nvml("default", init=False)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlShutdown()  # never initialised
    pynvml.nvmlInit()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlShutdown()
    assert pynvml.nvmlDeviceGetPowerUsage(handle) > 0  # still one reference
    pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetPowerUsage(handle)
    pynvml.nvmlShutdown()  # extra shutdowns are not an error


def test_injected_errors_by_name_number_gpu_and_window(nvml: Any, clock: FixedClock) -> None:
    fake = nvml("default")
    zero, one = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    fake.inject_error("nvmlDeviceGetPowerUsage", "Unknown", gpu=1, from_s=10.0, until_s=20.0)
    fake.inject_error("nvmlDeviceGetTemperatureV", pynvml.NVML_ERROR_TIMEOUT)
    clock.t = 5.0
    assert pynvml.nvmlDeviceGetPowerUsage(one) > 0
    clock.t = 10.0
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetPowerUsage(one)
    assert pynvml.nvmlDeviceGetPowerUsage(zero) > 0
    clock.t = 20.0
    assert pynvml.nvmlDeviceGetPowerUsage(one) > 0
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlDeviceGetTemperatureV(zero, 0)
    fake.clear_errors()
    assert pynvml.nvmlDeviceGetTemperatureV(zero, 0) > 0
    with pytest.raises(ValueError, match="unknown NVML error"):
        fake.inject_error("nvmlDeviceGetPowerUsage", "NotAnError")


def test_scenario_error_faults(nvml: Any, clock: FixedClock) -> None:
    nvml("""
gpu_count: 2
faults:
  - {type: error, symbol: "*", error: GpuIsLost, gpu: 1, from: 5s, until: 6s}
  - {type: error, symbol: nvmlSystemGetDriverVersion, error: Unknown, from: 5s}
""")
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    clock.t = 5.5
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetName(handle)
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlSystemGetDriverVersion()
    clock.t = 6.0
    assert pynvml.nvmlDeviceGetName(handle) == "NVIDIA H100 80GB HBM3"


def test_calls_are_counted_per_symbol_even_when_they_fail(nvml: Any) -> None:
    fake = nvml("default")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    fake.reset_calls()
    assert fake.total_calls() == 0
    pynvml.nvmlDeviceGetUtilizationRates(handle)
    pynvml.nvmlDeviceGetUtilizationRates(handle)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetFanSpeed(handle)
    pynvml.nvmlDeviceGetFieldValues(handle, [82, 83, 94])
    assert fake.calls == {"nvmlDeviceGetUtilizationRates": 2, "nvmlDeviceGetFanSpeed": 1,
                          "nvmlDeviceGetFieldValues": 1}
    assert fake.total_calls() == 4


def test_pcie_throughput_blocks_for_its_sampling_window_and_is_counted(nvml: Any) -> None:
    fake = nvml("gpu_defaults: {pcie_tx: 5GB/s}\n")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    started = time.perf_counter()
    kb_per_s = pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES)
    assert time.perf_counter() - started >= 0.02
    assert kb_per_s == 5_000_000
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 1


def test_injected_latency_is_spent_under_one_driver_lock(nvml: Any) -> None:
    fake = nvml("gpu_count: 2\n")
    fake.set_latency("nvmlDeviceGetPowerUsage", 0.05)
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    started = time.perf_counter()
    threads = [threading.Thread(target=pynvml.nvmlDeviceGetPowerUsage, args=(h,)) for h in handles]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    assert time.perf_counter() - started >= 0.1  # two 50 ms calls on two threads queue, not overlap
    fake.set_latency("nvmlDeviceGetPowerUsage", 0)
    with pytest.raises(ValueError, match="unknown NVML symbol"):
        fake.set_latency("nvmlDeviceGetSomethingElse", 0.1)


def test_field_value_latency_is_reported_per_entry(nvml: Any) -> None:
    fake = nvml("default")
    fake.set_latency("field_value", 0.002)
    values = pynvml.nvmlDeviceGetFieldValues(pynvml.nvmlDeviceGetHandleByIndex(0), [82, 83])
    assert [v.latencyUsec for v in values] == [2000, 2000]


def test_a_hang_blocks_only_its_caller_until_released(nvml: Any) -> None:
    fake = nvml("gpu_count: 2\n")
    hung_handle, other = pynvml.nvmlDeviceGetHandleByIndex(1), pynvml.nvmlDeviceGetHandleByIndex(0)
    fake.hang("nvmlDeviceGetPowerUsage", 30.0, gpu=1)
    results: list[int] = []
    caller = threading.Thread(target=lambda: results.append(pynvml.nvmlDeviceGetPowerUsage(hung_handle)))
    caller.start()
    wait_for(lambda: fake.calls["nvmlDeviceGetPowerUsage"] == 1, 5.0, "one power read", 0.005)
    assert caller.is_alive()
    assert pynvml.nvmlDeviceGetPowerUsage(other) > 0  # other GPUs and the driver lock stay usable
    fake.release_hangs()
    caller.join(timeout=5)
    assert not caller.is_alive()
    assert results and results[0] > 0
    assert pynvml.nvmlDeviceGetPowerUsage(hung_handle) > 0  # released hangs do not come back


def test_a_hang_holding_the_driver_lock_stalls_every_call(nvml: Any) -> None:
    fake = nvml("gpu_count: 2\n")
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    fake.hang("nvmlDeviceGetTemperatureV", 30.0, gpu=1, holds_driver_lock=True)
    hung = threading.Thread(target=pynvml.nvmlDeviceGetTemperatureV, args=(handles[1], 0))
    hung.start()
    wait_for(lambda: fake.calls["nvmlDeviceGetTemperatureV"] == 1, 5.0, "one temperature read", 0.005)
    blocked = threading.Thread(target=pynvml.nvmlDeviceGetUtilizationRates, args=(handles[0],))
    blocked.start()
    wait_for(lambda: fake.calls["nvmlDeviceGetUtilizationRates"] == 1, 5.0, "1 utilization read(s)", 0.005)
    assert blocked.is_alive() and hung.is_alive()
    hook = threading.Thread(target=fake.inject_error, args=("nvmlDeviceGetName", "Unknown"))
    hook.start()
    hook.join(timeout=5)
    assert not hook.is_alive()  # test hooks never wait behind the wedged driver lock
    fake.release_hangs()
    hung.join(timeout=5)
    blocked.join(timeout=5)
    assert not hung.is_alive() and not blocked.is_alive()


def test_scenario_hang_starts_at_its_time(nvml: Any, clock: FixedClock) -> None:
    fake = nvml("hang")
    handle = pynvml.nvmlDeviceGetHandleByIndex(5)
    clock.t = 4.0
    assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu >= 0  # before the hang: answers at once
    clock.t = 6.0
    finished = threading.Event()

    def read() -> None:
        pynvml.nvmlDeviceGetUtilizationRates(handle)
        finished.set()

    caller = threading.Thread(target=read)
    caller.start()
    wait_for(lambda: fake.calls["nvmlDeviceGetUtilizationRates"] == 2, 5.0, "2 utilization read(s)", 0.005)
    assert not finished.wait(0.05)
    assert pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(4)).gpu >= 0
    fake.release_hangs()
    assert finished.wait(5)
    caller.join(timeout=5)


def test_concurrent_callers_are_all_served_and_counted(nvml: Any, clock: FixedClock) -> None:
    fake = nvml("default")
    clock.t = 77.0
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
    fake.reset_calls()
    errors: list[BaseException] = []

    def work(handle: Any) -> None:
        try:
            for _ in range(200):
                pynvml.nvmlDeviceGetUtilizationRates(handle)
                pynvml.nvmlDeviceGetFieldValues(handle, [83, 138, 142])
                pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(h,)) for h in handles]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert fake.total_calls() == 8 * 200 * 3


def test_install_and_uninstall_leave_pynvml_clean() -> None:
    scenario = load_scenario("default")
    fake = FakeNvmlLibrary(scenario, FixedClock())
    fake.install()
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 8
    fake.uninstall()
    assert pynvml.nvmlLib is None
    assert pynvml._nvmlGetFunctionPointer_cache == {}
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    other = FakeNvmlLibrary(scenario_from("gpu_count: 3\n"), FixedClock())
    with installed(other.scenario) as second:
        pynvml.nvmlInit()  # the refcount was reset, and the cache no longer points at the old fake
        assert pynvml.nvmlDeviceGetCount() == 3
        assert second.calls["nvmlDeviceGetCount_v2"] == 1
    assert pynvml.nvmlLib is None


def test_errors_for_bad_arguments_to_the_runtime_hooks(nvml: Any) -> None:
    fake = nvml("gpu_count: 2\n")
    with pytest.raises(ValueError, match="no GPU 5"):
        fake.lose_gpu(5)
    with pytest.raises(ValueError, match="unknown NVML symbol"):
        fake.hang("nvmlNothing", 1.0)


def test_handles_written_by_the_fake_are_never_null(nvml: Any) -> None:
    nvml("gpu_count: 4\n")
    values = set()
    for index in range(4):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        assert bool(handle)
        values.add(pynvml.cast(handle, pynvml.c_void_p).value)
    assert len(values) == 4
    assert c_uint(3).value == 3  # ctypes scalars pass through by value


# --- a sweep over every symbol --------------------------------------------------------------

SYSTEM_CALLS: dict[str, Callable[[], object]] = {
    "nvmlSystemGetDriverVersion": pynvml.nvmlSystemGetDriverVersion,
    "nvmlSystemGetNVMLVersion": pynvml.nvmlSystemGetNVMLVersion,
    "nvmlSystemGetCudaDriverVersion": pynvml.nvmlSystemGetCudaDriverVersion,
    "nvmlSystemGetCudaDriverVersion_v2": pynvml.nvmlSystemGetCudaDriverVersion_v2,
    "nvmlDeviceGetCount_v2": pynvml.nvmlDeviceGetCount,
    "nvmlErrorString": lambda: pynvml.nvmlErrorString(pynvml.NVML_ERROR_NOT_SUPPORTED),
}
DEVICE_CALLS: dict[str, Callable[[Any], object]] = {
    "nvmlDeviceGetHandleByUUID": lambda h: pynvml.nvmlDeviceGetHandleByUUID(pynvml.nvmlDeviceGetUUID(h)),
    "nvmlDeviceGetHandleByPciBusId_v2": lambda h: pynvml.nvmlDeviceGetHandleByPciBusId(
        pynvml.nvmlDeviceGetPciInfo(h).busId),
    "nvmlDeviceGetIndex": pynvml.nvmlDeviceGetIndex,
    "nvmlDeviceGetGpuFabricInfoV": lambda h: pynvml.nvmlDeviceGetGpuFabricInfoV(
        h, byref(pynvml.c_nvmlGpuFabricInfo_v3_t())),
    "nvmlDeviceGetUUID": pynvml.nvmlDeviceGetUUID,
    "nvmlDeviceGetName": pynvml.nvmlDeviceGetName,
    "nvmlDeviceGetPciInfo_v3": pynvml.nvmlDeviceGetPciInfo_v3,
    "nvmlDeviceGetMinorNumber": pynvml.nvmlDeviceGetMinorNumber,
    "nvmlDeviceGetSerial": pynvml.nvmlDeviceGetSerial,
    "nvmlDeviceGetVbiosVersion": pynvml.nvmlDeviceGetVbiosVersion,
    "nvmlDeviceGetBrand": pynvml.nvmlDeviceGetBrand,
    "nvmlDeviceGetArchitecture": pynvml.nvmlDeviceGetArchitecture,
    "nvmlDeviceGetCudaComputeCapability": pynvml.nvmlDeviceGetCudaComputeCapability,
    "nvmlDeviceGetUtilizationRates": pynvml.nvmlDeviceGetUtilizationRates,
    "nvmlDeviceGetEncoderUtilization": pynvml.nvmlDeviceGetEncoderUtilization,
    "nvmlDeviceGetDecoderUtilization": pynvml.nvmlDeviceGetDecoderUtilization,
    "nvmlDeviceGetMemoryInfo": pynvml.nvmlDeviceGetMemoryInfo,
    "nvmlDeviceGetMemoryInfo_v2": lambda h: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
    "nvmlDeviceGetBAR1MemoryInfo": pynvml.nvmlDeviceGetBAR1MemoryInfo,
    "nvmlDeviceGetTemperatureV": lambda h: pynvml.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU),
    "nvmlDeviceGetTemperature": lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
    "nvmlDeviceGetTemperatureThreshold": lambda h: [
        pynvml.nvmlDeviceGetTemperatureThreshold(h, kind) for kind in range(4)],
    "nvmlDeviceGetPowerUsage": pynvml.nvmlDeviceGetPowerUsage,
    "nvmlDeviceGetPowerManagementLimit": pynvml.nvmlDeviceGetPowerManagementLimit,
    "nvmlDeviceGetEnforcedPowerLimit": pynvml.nvmlDeviceGetEnforcedPowerLimit,
    "nvmlDeviceGetPowerManagementDefaultLimit": pynvml.nvmlDeviceGetPowerManagementDefaultLimit,
    "nvmlDeviceGetTotalEnergyConsumption": pynvml.nvmlDeviceGetTotalEnergyConsumption,
    "nvmlDeviceGetClockInfo": lambda h: [pynvml.nvmlDeviceGetClockInfo(h, kind) for kind in range(4)],
    "nvmlDeviceGetMaxClockInfo": lambda h: [pynvml.nvmlDeviceGetMaxClockInfo(h, kind) for kind in range(4)],
    "nvmlDeviceGetPcieReplayCounter": pynvml.nvmlDeviceGetPcieReplayCounter,
    "nvmlDeviceGetFanSpeed": pynvml.nvmlDeviceGetFanSpeed,
    "nvmlDeviceGetNumFans": pynvml.nvmlDeviceGetNumFans,
    "nvmlDeviceGetPerformanceState": pynvml.nvmlDeviceGetPerformanceState,
    "nvmlDeviceGetCurrentClocksEventReasons": pynvml.nvmlDeviceGetCurrentClocksEventReasons,
    "nvmlDeviceGetSupportedClocksEventReasons": pynvml.nvmlDeviceGetSupportedClocksEventReasons,
    "nvmlDeviceGetEccMode": pynvml.nvmlDeviceGetEccMode,
    "nvmlDeviceGetTotalEccErrors": lambda h: [
        pynvml.nvmlDeviceGetTotalEccErrors(h, kind, scope) for kind in (0, 1) for scope in (0, 1)],
    "nvmlDeviceGetRetiredPages": lambda h: [pynvml.nvmlDeviceGetRetiredPages(h, cause) for cause in (0, 1)],
    "nvmlDeviceGetRetiredPages_v2": lambda h: [
        pynvml.nvmlDeviceGetRetiredPages_v2(h, cause) for cause in (0, 1)],
    "nvmlDeviceGetRetiredPagesPendingStatus": pynvml.nvmlDeviceGetRetiredPagesPendingStatus,
    "nvmlDeviceGetRemappedRows": pynvml.nvmlDeviceGetRemappedRows,
    "nvmlDeviceGetComputeRunningProcesses_v3": pynvml.nvmlDeviceGetComputeRunningProcesses,
    "nvmlDeviceGetGraphicsRunningProcesses_v3": pynvml.nvmlDeviceGetGraphicsRunningProcesses,
    "nvmlDeviceGetMaxMigDeviceCount": pynvml.nvmlDeviceGetMaxMigDeviceCount,
    "nvmlDeviceGetMigMode": pynvml.nvmlDeviceGetMigMode,
    "nvmlDeviceGetFieldValues": lambda h: pynvml.nvmlDeviceGetFieldValues(h, sorted(FIELDS)),
    # MIG and GPM on full-GPU handles (MIG devices and GPM metrics: test_miglayout.py, test_profiling.py)
    "nvmlDeviceIsMigDeviceHandle": lambda h: bool(pynvml.nvmlDeviceIsMigDeviceHandle(h)),
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle": pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle,
    "nvmlDeviceGetGpuInstanceId": pynvml.nvmlDeviceGetGpuInstanceId,
    "nvmlDeviceGetComputeInstanceId": pynvml.nvmlDeviceGetComputeInstanceId,
    "nvmlDeviceGetAttributes_v2": pynvml.nvmlDeviceGetAttributes_v2,
    "nvmlGpmQueryDeviceSupport": pynvml.nvmlGpmQueryDeviceSupport,
    "nvmlGpmSampleGet": lambda h: pynvml.nvmlGpmSampleGet(h, pynvml.nvmlGpmSampleAlloc()),
    "nvmlGpmMigSampleGet": lambda h: pynvml.nvmlGpmMigSampleGet(h, 0, pynvml.nvmlGpmSampleAlloc()),
    "nvmlDeviceGetSupportedEventTypes": pynvml.nvmlDeviceGetSupportedEventTypes,
}
# Tested on their own: init/shutdown, handle by index (used to get every handle), the call with a
# real 20 ms window, the event-set calls (tests/simulator/test_fakenvml_events.py) and per-process
# utilization, which answers NOT_FOUND when nothing is new (tests/simulator/test_fakenvml_processutil.py).
SEPARATELY_TESTED = {"nvmlInitWithFlags", "nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetHandleByIndex_v2",
                     "nvmlDeviceGetPcieThroughput", "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlGpmSampleAlloc",
                     "nvmlGpmSampleFree", "nvmlGpmMetricsGet", "nvmlEventSetCreate", "nvmlEventSetFree",
                     "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2", "nvmlDeviceGetProcessUtilization",
                     "nvmlDeviceGetProcessesUtilizationInfo"}


def test_the_sweep_covers_every_symbol() -> None:
    assert set(SYSTEM_CALLS) | set(DEVICE_CALLS) | SEPARATELY_TESTED == IMPLEMENTED_SYMBOLS


@pytest.mark.parametrize("name", ["default", "consumer-gpu", "memory-errors", "init-recovers"])
def test_every_call_answers_or_says_not_supported_and_nothing_else(
        nvml: Any, clock: FixedClock, name: str) -> None:
    clock.t = 3.0  # init-recovers has a driver from 3 s on
    fake = nvml(name)
    answered: set[str] = set()
    for t in (3.0, 95.0, 1000.0):
        clock.t = t
        for symbol, call in SYSTEM_CALLS.items():
            call()
            answered.add(symbol)
        for index in range(len(fake.devices)):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for symbol, device_call in DEVICE_CALLS.items():
                try:
                    device_call(handle)
                    answered.add(symbol)
                except pynvml.NVMLError_NotSupported:
                    pass  # what this board lacks; any other error fails the test
    assert answered >= set(SYSTEM_CALLS) | {"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetFieldValues"}


def test_a_wildcard_error_spares_shutdown_and_error_strings(nvml: Any) -> None:
    fake = nvml("default")
    fake.inject_error("*", "Unknown")
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlSystemGetDriverVersion()
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_UNKNOWN) == "Unknown Error"
    pynvml.nvmlShutdown()
