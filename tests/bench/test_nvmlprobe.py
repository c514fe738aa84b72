import json
import urllib.request
from collections.abc import Iterator

import pynvml
import pytest

from bench import scenarios
from bench.nvmlprobe import BLOCKING_WINDOW_S, ProbeServer, ProbeStats, driver_latency_s, put_in_front
from simulator.fakenvml import FakeNvmlLibrary
from simulator.scenario import REALISTIC_FIELD_VALUE_LATENCY_S, REALISTIC_LATENCY_S, parse_scenario
from tests.support.ports import free_port


@pytest.fixture
def probed() -> Iterator[tuple[FakeNvmlLibrary, ProbeStats]]:
    scenario = parse_scenario(scenarios.scenario_yaml(2), "bench.yaml", "bench")
    fake = FakeNvmlLibrary(scenario)
    stats = ProbeStats()
    fake.install()
    put_in_front(fake, stats)
    pynvml.nvmlInit()
    try:
        yield fake, stats
    finally:
        pynvml.nvmlShutdown()
        with pynvml.libLoadLock:
            pynvml.nvmlLib = fake  # so that uninstall recognises its own library
        fake.uninstall()


def test_calls_through_pynvml_reach_the_fake_and_are_timed(probed: tuple[FakeNvmlLibrary, ProbeStats]):
    fake, stats = probed
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    before = stats.snapshot()["nvml_wall_s"]
    for _ in range(3):
        pynvml.nvmlDeviceGetUtilizationRates(handle)
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 3
    # 3 calls of 2.5 us each at least: the injected latency is real time spent inside the library.
    assert stats.snapshot()["nvml_wall_s"] - before >= 3 * REALISTIC_LATENCY_S["nvmlDeviceGetUtilizationRates"]


def test_field_value_entries_are_counted(probed: tuple[FakeNvmlLibrary, ProbeStats]):
    _, stats = probed
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_ECC_CURRENT, pynvml.NVML_FI_DEV_MEMORY_TEMP,
                                             pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION])
    assert stats.snapshot()["field_entries"] == 3


def test_symbols_the_fake_lacks_are_counted_as_attempts(probed: tuple[FakeNvmlLibrary, ProbeStats]):
    _, stats = probed
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for _ in range(2):
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceGetJpgUtilization(handle)
    assert stats.snapshot()["missing_calls"] == {"nvmlDeviceGetJpgUtilization": 2}


def test_driver_latency_is_calls_times_per_call_latency_plus_field_entries():
    latency = {"nvmlDeviceGetFanSpeed": 137e-6, "nvmlDeviceGetFieldValues": 10e-6}
    calls = {"nvmlDeviceGetFanSpeed": 2, "nvmlDeviceGetFieldValues": 1, "nvmlDeviceGetIndex": 5}
    assert driver_latency_s(calls, 4, latency, 5e-6) == pytest.approx(2 * 137e-6 + 10e-6 + 4 * 5e-6)


def test_the_pcie_throughput_call_costs_its_20_ms_sampling_window():
    # The realistic table lists it at 0.0 (the fake always simulates the window); the driver time must not.
    assert REALISTIC_LATENCY_S["nvmlDeviceGetPcieThroughput"] == 0.0
    assert BLOCKING_WINDOW_S["nvmlDeviceGetPcieThroughput"] == pytest.approx(0.020)
    calls = {"nvmlDeviceGetPcieThroughput": 2, "nvmlDeviceGetUtilizationRates": 1}
    assert driver_latency_s(calls, 0, dict(REALISTIC_LATENCY_S), REALISTIC_FIELD_VALUE_LATENCY_S) == pytest.approx(
        2 * 0.020 + REALISTIC_LATENCY_S["nvmlDeviceGetUtilizationRates"])


def test_calls_whose_argument_selects_what_they_read_are_counted_per_argument(
        probed: tuple[FakeNvmlLibrary, ProbeStats]):
    fake, stats = probed
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_VIDEO)
    pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES)
    assert stats.snapshot()["keyed_calls"] == {"nvmlDeviceGetClockInfo[1]": 2, "nvmlDeviceGetClockInfo[3]": 1,
                                               "nvmlDeviceGetPcieThroughput[1]": 1}
    assert fake.calls["nvmlDeviceGetClockInfo"] == 3


def test_probe_endpoint_serves_the_fakes_counts(probed: tuple[FakeNvmlLibrary, ProbeStats]):
    fake, stats = probed
    port = free_port()
    server = ProbeServer(port, stats, lambda: fake)
    server.start()
    pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
    stats.add_cycle(0.001, 0.002)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
        reading = json.load(response)
    assert reading["installed"] is True
    assert reading["cycles"] == 1
    assert reading["calls"]["nvmlDeviceGetMemoryInfo"] == 1
    expected = sum(count * (fake.scenario.latency.get(name, 0.0) + BLOCKING_WINDOW_S.get(name, 0.0))
                   for name, count in reading["calls"].items())
    assert reading["driver_latency_s"] == pytest.approx(expected + reading["field_entries"]
                                                         * REALISTIC_FIELD_VALUE_LATENCY_S)
