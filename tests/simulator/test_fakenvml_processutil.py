"""The fake's per-process utilization, driven through pynvml's own wrappers and structs."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pynvml
import pytest

from simulator.fakenvml import FIXED_WALL_EPOCH
from simulator.fakenvml.processutil import BUFFER_SAMPLES, SAMPLE_PERIOD_US
from simulator.scenario import ScenarioError, load_scenario

from .conftest import FixedClock

SHARED = """
gpu_count: 4
gpus:
  0:
    processes:
      - {pid: 100, used_memory: 4GiB, load: 60, memory_util: 30}
      - {pid: 200, used_memory: 2GiB, load: 25, decoder_util: 40}
      - {pid: 300, used_memory: 1GiB, load: 5}
      - {pid: 400, used_memory: 1GiB, load: 0}
      - {pid: 500, used_memory: 1GiB, load: 10, from: 20s}
  1:
    sharing: mps
    processes:
      - {pid: 600, used_memory: 1GiB, load: 50}
      - {pid: 700, used_memory: 1GiB, load: 30}
      - {pid: 800, used_memory: 1GiB, load: 20}
  2:
    load: 60
    memory_util: 30
    processes:
      - {pid: 900, used_memory: 1GiB}
      - {pid: 901, used_memory: 1GiB}
  3:
    mig: [3g.40gb]
"""


def us(seconds: float) -> int:
    """A wall-clock timestamp in microseconds, as NVML's samples carry it (scenario t -> CPU time)."""
    return round((FIXED_WALL_EPOCH + seconds) * 1_000_000)


def by_pid(entries: list[Any]) -> dict[int, tuple[int, int, int, int]]:
    return {entry.pid: (entry.smUtil, entry.memUtil, entry.encUtil, entry.decUtil) for entry in entries}


def test_both_calls_return_each_process_own_activity_in_pynvml_structs(nvml: Any, clock: FixedClock) -> None:
    nvml(SHARED)
    clock.t = 30.0
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    info = pynvml.nvmlDeviceGetProcessesUtilizationInfo(handle, us(25.0))
    legacy = pynvml.nvmlDeviceGetProcessUtilization(handle, us(25.0))
    assert all(isinstance(entry, pynvml.c_nvmlProcessUtilizationInfo_v1_t) for entry in info)
    assert all(isinstance(entry, pynvml.c_nvmlProcessUtilizationSample_t) for entry in legacy)
    # 400 ran but used nothing: NVML lists only processes with non-zero utilization.
    expected = {100: (60, 30, 0, 0), 200: (25, 10, 0, 40), 300: (5, 2, 0, 0), 500: (10, 4, 0, 0)}
    assert by_pid(info) == by_pid(legacy) == expected
    assert {(entry.jpgUtil, entry.ofaUtil) for entry in info} == {(0, 0)}
    # Each entry carries its newest sample's CPU time, the last sample period before t (1/6 s).
    newest = us(0) + (30_000_000 // SAMPLE_PERIOD_US) * SAMPLE_PERIOD_US
    assert {entry.timeStamp for entry in info} == {newest}
    # Time-slicing: the GPU was busy for the sum of its processes' times.
    assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == 60 + 25 + 5 + 10
    assert pynvml.nvmlDeviceGetDecoderUtilization(handle)[0] == 40


def test_only_samples_newer_than_the_timestamp_count_and_nothing_new_is_not_found(
        nvml: Any, clock: FixedClock) -> None:
    nvml(SHARED)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    clock.t = 25.0
    first = pynvml.nvmlDeviceGetProcessesUtilizationInfo(handle, us(20.0))
    cursor = max(entry.timeStamp for entry in first)
    with pytest.raises(pynvml.NVMLError_NotFound):  # no sample period ended since
        pynvml.nvmlDeviceGetProcessesUtilizationInfo(handle, cursor)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetProcessUtilization(handle, cursor)
    clock.t = 25.1  # one more sample period (at 25.00005 s)
    [*later] = pynvml.nvmlDeviceGetProcessesUtilizationInfo(handle, cursor)
    assert {entry.timeStamp for entry in later} == {cursor + SAMPLE_PERIOD_US}


def test_a_process_that_starts_mid_window_averages_over_its_own_samples(nvml: Any, clock: FixedClock) -> None:
    text = """
gpus:
  0:
    processes:
      - {pid: 1, used_memory: 1GiB, load: {pattern: steps, steps: [[0s, 20], [10s, 80]]}}
      - {pid: 2, used_memory: 1GiB, load: 50, until: 5s}
"""
    nvml(text)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    clock.t = 20.0
    entries = by_pid(pynvml.nvmlDeviceGetProcessesUtilizationInfo(handle, us(0.0)))
    assert entries[1][0] == 50  # half of the window at 20 %, half at 80 %
    assert entries[2][0] == 50  # a process that left: its samples stay in the driver's buffer
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetProcessesUtilizationInfo(handle, us(19.9))  # the next one is at 20.0
    # 0 asks for the whole buffer, which holds BUFFER_SAMPLES periods
    clock.t = 200.0
    [only] = pynvml.nvmlDeviceGetProcessesUtilizationInfo(handle, 0)
    assert only.pid == 1 and only.smUtil == 80
    assert BUFFER_SAMPLES * SAMPLE_PERIOD_US < 195_000_000  # the process that left at 5 s has aged out


def test_mps_clients_overlap_so_the_gpu_is_busy_less_than_their_sum(nvml: Any, clock: FixedClock) -> None:
    nvml(SHARED)
    clock.t = 30.0
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    entries = by_pid(pynvml.nvmlDeviceGetProcessesUtilizationInfo(handle, us(25.0)))
    assert [entries[pid][0] for pid in (600, 700, 800)] == [50, 30, 20]
    # busy whenever any client is: 1 - 0.5 * 0.7 * 0.8 = 72 %, while the clients' sum is 100 %
    assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == 72


def test_processes_without_their_own_activity_share_the_gpus_equally(nvml: Any, clock: FixedClock) -> None:
    nvml(SHARED)
    clock.t = 30.0
    handle = pynvml.nvmlDeviceGetHandleByIndex(2)
    assert by_pid(pynvml.nvmlDeviceGetProcessUtilization(handle, us(25.0))) == {
        900: (30, 15, 0, 0), 901: (30, 15, 0, 0)}


def test_the_c_protocol_size_query_short_buffer_and_struct_version(nvml: Any, clock: FixedClock) -> None:
    fake = nvml(SHARED)
    clock.t = 30.0
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    count = ctypes.c_uint(0)
    assert fake.nvmlDeviceGetProcessUtilization(handle, None, ctypes.byref(count), ctypes.c_ulonglong(us(25))) \
        == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert count.value == 4
    short = (pynvml.c_nvmlProcessUtilizationSample_t * 2)()
    count.value = 2
    assert fake.nvmlDeviceGetProcessUtilization(handle, short, ctypes.byref(count), ctypes.c_ulonglong(us(25))) \
        == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert count.value == 4
    request = pynvml.c_nvmlProcessesUtilizationInfo_v1_t(0)
    request.version = pynvml.ProcessesUtilizationInfo_v1 + 1
    assert fake.nvmlDeviceGetProcessesUtilizationInfo(handle, ctypes.byref(request)) \
        == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    request.version = pynvml.ProcessesUtilizationInfo_v1
    request.lastSeenTimeStamp = us(25)
    assert fake.nvmlDeviceGetProcessesUtilizationInfo(handle, ctypes.byref(request)) \
        == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert request.processSamplesCount == 4


class SteppingClock(FixedClock):
    """Moves on by ``step`` every time the fake reads it: one read per NVML call."""

    def __init__(self, t: float, step: float) -> None:
        super().__init__(t)
        self.step = step

    def __call__(self) -> float:
        now = self.t
        self.t += self.step
        return now


def test_a_process_appearing_between_the_two_calls_is_an_insufficient_size_race(
        nvml: Any, clock: FixedClock) -> None:
    """pynvml sizes its buffer with the first call; a sample period ending before the second adds
    process 500 (it starts at 20 s), so the second call answers INSUFFICIENT_SIZE."""
    fake = nvml(SHARED)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    boundary = (20_000_000 // SAMPLE_PERIOD_US + 1) * SAMPLE_PERIOD_US / 1e6  # first sample of process 500
    fake._clock = SteppingClock(boundary - 0.001, 0.002)  # probe before, fill after
    with pytest.raises(pynvml.NVMLError_InsufficientSize):
        pynvml.nvmlDeviceGetProcessesUtilizationInfo(handle, us(15.0))
    fake._clock = SteppingClock(boundary - 0.001, 0.002)
    with pytest.raises(pynvml.NVMLError_InsufficientSize):
        pynvml.nvmlDeviceGetProcessUtilization(handle, us(15.0))


def test_mig_gpus_and_mig_devices_have_no_per_process_utilization(nvml: Any, clock: FixedClock) -> None:
    nvml(SHARED)
    clock.t = 30.0
    parent = pynvml.nvmlDeviceGetHandleByIndex(3)
    device = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    for handle in (parent, device):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetProcessesUtilizationInfo(handle, 0)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetProcessUtilization(handle, 0)


def test_a_driver_without_the_symbols_answers_function_not_found(nvml: Any, clock: FixedClock) -> None:
    nvml("library: {missing_symbols: [nvmlDeviceGetProcessesUtilizationInfo, nvmlDeviceGetProcessUtilization]}\n"
         "gpus: {0: {processes: [{pid: 1, load: 10}]}}\n")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetProcessesUtilizationInfo(handle, 0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetProcessUtilization(handle, 0)


def test_a_gpu_pattern_that_contradicts_its_processes_is_a_scenario_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("gpus:\n  0:\n    load: 50\n    processes: [{pid: 1, load: 10}]\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"bad\.yaml:3: gpus\[0\]\.load: 'load' of this GPU follows its processes"):
        load_scenario(str(path))
    # a load from gpu_defaults simply gives way to the processes'
    path.write_text("gpu_defaults: {load: 50}\ngpus:\n  0:\n    processes: [{pid: 1, load: 10}]\n", encoding="utf-8")
    assert load_scenario(str(path)).gpus[0].activity_from_processes
