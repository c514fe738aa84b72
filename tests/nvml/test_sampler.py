"""The sampler against the fake NVML library, through pynvml's real wrappers, structs and errors."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pynvml
import pytest

from exporter.metrics.catalog import FromExporter
from exporter.metrics.counters import load_counters, parse_counters
from exporter.nvml.sampler import LOST_REPROBE_S, Sampler
from simulator.fakenvml import FakeNvmlLibrary, installed
from simulator.scenario import load_scenario, parse_scenario
from tests.support.polling import wait_for

MIB = 1024 * 1024


class Clock:
    """Scenario time for the fake, advanced by the test (no sleeping)."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@contextmanager
def sampler_on(scenario: str, csv: str | None = None, clock: Clock | None = None,
               process_interval_s: float | None = None) -> Iterator[tuple[Sampler, FakeNvmlLibrary, Clock]]:
    clock = clock or Clock()
    counters = parse_counters(csv, "test.csv") if csv else load_counters(None)
    with installed(scenario, clock) as fake:
        sampler = Sampler(counters.field_specs(), 1.0, process_interval_s=process_interval_s, clock=clock)
        yield sampler, fake, clock


def served_default_names() -> set[str]:
    """Default rows the sampler serves (FromExporter rows, e.g. the Xid gauge, come from other components)."""
    return {row.spec.name for row in load_counters(None).metrics
            if row.spec.served and not isinstance(row.spec.read, FromExporter)}


def test_every_served_default_field_is_read_for_all_eight_gpus() -> None:
    with sampler_on("default") as (sampler, _fake, clock):
        assert sampler.initialise()
        sampler.run_cycle()
        clock.now += 1.0  # rates (NVLink bandwidth) need two samples
        snapshot = sampler.run_cycle()
    assert len(snapshot.devices) == 8
    # Page retirement predates row remapping: an H100 answers NotSupported, so that row is omitted there.
    expected = served_default_names() - {"DCGM_FI_DEV_RETIRED_PENDING"}
    for reading in snapshot.devices:
        assert reading.up
        assert expected <= set(reading.values), expected - set(reading.values)
    assert snapshot.status.driver_version == "550.90.07"
    assert snapshot.status.unsupported_fields == tuple((gpu, "DCGM_FI_DEV_RETIRED_PENDING") for gpu in range(8))


def test_values_are_converted_to_dcgm_units() -> None:
    with sampler_on("default") as (sampler, _fake, _clock):
        assert sampler.initialise()
        reading = sampler.run_cycle().devices[0]
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        power_mw = pynvml.nvmlDeviceGetPowerUsage(handle)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        sm_clock = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    assert reading.values["DCGM_FI_DEV_POWER_USAGE"] == round(power_mw / 1000, 6)  # mW -> W
    assert reading.values["DCGM_FI_DEV_FB_USED"] == memory.used // MIB  # bytes -> MiB, truncated like DCGM
    assert reading.values["DCGM_FI_DEV_FB_FREE"] == memory.free // MIB
    assert reading.values["DCGM_FI_DEV_FB_RESERVED"] == memory.reserved // MIB
    assert reading.values["DCGM_FI_DEV_SM_CLOCK"] == sm_clock  # MHz both
    assert isinstance(reading.values["DCGM_FI_DEV_GPU_TEMP"], int)


def test_identity_is_read_once_and_matches_dcgm_formats() -> None:
    with sampler_on("default") as (sampler, fake, _clock):
        assert sampler.initialise()
        identity_calls = fake.calls["nvmlDeviceGetUUID"]
        for _ in range(3):
            sampler.run_cycle()
        assert fake.calls["nvmlDeviceGetUUID"] == identity_calls
        inventory = sampler.inventory
    assert inventory is not None
    first = inventory.devices[0].identity
    assert first.uuid.startswith("GPU-")
    assert len(first.pci_bus_id.split(":")[0]) == 8  # 00000000:18:00.0
    assert first.model == "NVIDIA H100 80GB HBM3"


def test_unsupported_readings_are_omitted_listed_logged_once_and_never_retried(
        caplog: pytest.LogCaptureFixture) -> None:
    csv = ("DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_MEMORY_TEMP, gauge, m\n"
           "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, r\nDCGM_FI_DEV_FAN_SPEED, gauge, f\n")
    caplog.set_level(logging.INFO, logger="gpu_pod_exporter")
    with sampler_on("consumer-gpu", csv) as (sampler, fake, _clock):
        assert sampler.initialise()
        first = sampler.run_cycle()
        reasons_calls = fake.calls["nvmlDeviceGetCurrentClocksEventReasons"]
        for _ in range(3):
            last = sampler.run_cycle()
        assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == reasons_calls == 1
    assert set(first.devices[0].values) == {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FAN_SPEED"}
    assert set(last.status.unsupported_fields) == {(0, "DCGM_FI_DEV_MEMORY_TEMP"),
                                                   (0, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")}
    unsupported_logs = [record for record in caplog.records if "not supported" in record.getMessage()]
    assert len(unsupported_logs) == 2  # once per reading, not once per cycle


def test_memory_info_falls_back_to_v1_when_the_driver_lacks_the_v2_symbol() -> None:
    base = Path(load_scenario("consumer-gpu").source).read_text(encoding="utf-8")
    scenario_yaml = base + "library:\n  missing_symbols: [nvmlDeviceGetMemoryInfo_v2]\n"
    scenario = parse_scenario(scenario_yaml, "old-driver.yaml", "old-driver")
    counters = load_counters(None)
    with installed(scenario, Clock()) as fake:
        sampler = Sampler(counters.field_specs(), 1.0)
        assert sampler.initialise()
        assert fake.calls["nvmlDeviceGetMemoryInfo"] == 1  # the card's total, once at start (the inventory)
        values = sampler.run_cycle().devices[0].values
        sampler.run_cycle()
        assert fake.calls["nvmlDeviceGetMemoryInfo"] == 1 + 2  # then v1 each cycle, v2 never retried
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0), version=pynvml.nvmlMemory_v2)
    assert "DCGM_FI_DEV_FB_USED" in values and "DCGM_FI_DEV_FB_FREE" in values
    assert "DCGM_FI_DEV_FB_RESERVED" not in values  # v1 has no reserved figure: omitted, not zero


def test_a_lost_gpu_leaves_the_others_updating_and_is_reprobed_later() -> None:
    with sampler_on("default") as (sampler, fake, clock):
        assert sampler.initialise()
        sampler.run_cycle()
        fake.lose_gpu(3)
        clock.now += 1.0
        snapshot = sampler.run_cycle()
        lost = snapshot.devices[3]
        assert not lost.up and "GpuIsLost" in lost.error and lost.values == {}
        assert all(reading.up and reading.values for i, reading in enumerate(snapshot.devices) if i != 3)
        calls_while_lost = fake.total_calls()
        clock.now += 1.0
        sampler.run_cycle()
        # The lost GPU costs nothing until the re-probe interval has passed.
        per_gpu = (fake.total_calls() - calls_while_lost) / 7
        assert per_gpu == int(per_gpu)
        clock.now += LOST_REPROBE_S + 1
        assert not sampler.run_cycle().devices[3].up  # re-probed: still lost, still reported


def test_a_lost_gpu_that_answers_again_comes_back_with_all_its_readings() -> None:
    with sampler_on("default") as (sampler, fake, clock):
        assert sampler.initialise()
        sampler.run_cycle()
        clock.now += 1.0
        before = sampler.run_cycle().devices[3]  # rates (NVLink bandwidth) need a second sample
        fake.lose_gpu(3)
        clock.now += 1.0
        assert not sampler.run_cycle().devices[3].up
        fake.restore_gpu(3)  # reset: the GPU answers again with the same handle
        clock.now += 1.0
        assert not sampler.run_cycle().devices[3].up  # not asked before the re-probe interval
        clock.now += LOST_REPROBE_S
        snapshot = sampler.run_cycle()
        back = snapshot.devices[3]
        assert back.up and back.error == "" and back.identity == before.identity
        assert all(reading.up for reading in snapshot.devices)
        clock.now += 1.0
        back = sampler.run_cycle().devices[3]  # GPM profiling restarts its sample chain: one cycle later
        assert set(back.values) == set(before.values)  # every reading it had, none left behind
        assert sampler.inventory is not None and len(sampler.inventory.devices) == 8


def test_nvml_that_goes_away_and_comes_back_is_reinitialised_by_the_sampling_thread() -> None:
    with sampler_on("default") as (sampler, fake, _clock):
        sampler.start()
        try:
            before = wait_for(lambda: sampler.snapshot if len(sampler.snapshot.devices) == 8 else None,
                              10.0, "the first snapshot")
            fake.drop_driver()  # e.g. the driver is unloaded for an upgrade
            down = wait_for(lambda: sampler.snapshot if not sampler.snapshot.status.nvml_up else None,
                            10.0, "NVML reported down")
            assert "DriverNotLoaded" in down.status.nvml_error and down.devices == ()
            fake.restore_driver()  # the old session is gone: only a new nvmlInit works

            def back() -> object:
                snapshot = sampler.snapshot
                return snapshot if snapshot.status.nvml_up and len(snapshot.devices) == 8 else None

            after = wait_for(back, 20.0, "NVML re-initialised with every GPU")
        finally:
            sampler.stop()
        assert [reading.identity for reading in after.devices] == [reading.identity for reading in before.devices]
        assert all(reading.up and reading.values for reading in after.devices)


def test_production_never_calls_the_blocking_pcie_throughput_query() -> None:
    with sampler_on("default") as (sampler, fake, clock):
        assert sampler.initialise()
        for _ in range(3):
            sampler.run_cycle()
            clock.now += 1.0
        assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0


def test_nvml_calls_per_cycle_are_counted_exactly() -> None:
    with sampler_on("default") as (sampler, fake, clock):
        assert sampler.initialise()
        sampler.run_cycle()
        clock.now += 1.0
        sampler.run_cycle()  # the first two cycles also read static values and allocate GPM samples
        before = fake.total_calls()
        clock.now += 1.0
        snapshot = sampler.run_cycle()
        # pynvml's field-value wrapper is one C call; every wrapper call is one C call here.
        assert snapshot.status.last_cycle_nvml_calls == fake.total_calls() - before
        # Steady state, per GPU: a handful of queries + one field batch + GPM: 11 for dcgm-exporter 4.8's rows, 2 for
        # the default's clock-event reasons and power limit (docs/benchmarks.md, "Default counters").
        assert snapshot.status.last_cycle_nvml_calls <= 8 * 13


def test_without_the_nvml_library_the_status_says_why() -> None:
    with sampler_on("no-driver") as (sampler, _fake, _clock):
        assert not sampler.initialise()
    status = sampler.snapshot.status
    assert not status.nvml_up
    assert status.nvml_error.startswith("NVMLError_LibraryNotFound")


def test_initialisation_recovers_once_the_driver_is_loaded() -> None:
    with sampler_on("init-recovers", clock=Clock(0.0)) as (sampler, _fake, clock):
        assert not sampler.initialise()
        assert "DriverNotLoaded" in sampler.snapshot.status.nvml_error
        clock.now = 5.0
        assert sampler.initialise()
        assert len(sampler.run_cycle().devices) == 4


def test_process_lists_are_read_on_their_own_interval() -> None:
    with sampler_on("default", process_interval_s=5.0) as (sampler, fake, clock):
        assert sampler.initialise()
        first = sampler.run_cycle()
        clock.now += 1.0
        after_first = fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"]
        assert after_first >= 8  # every GPU asked once (a size probe, plus the fetch where processes exist)
        sampler.run_cycle()
        assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == after_first  # not every cycle
        clock.now += 5.0
        sampler.run_cycle()
        assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 2 * after_first
    processes = first.devices[0].processes
    assert processes is not None and [p.pid for p in processes] == [41001]
    assert processes[0].used_memory_bytes == 62 * 1024 * MIB


def test_a_hung_call_is_visible_as_the_call_in_flight() -> None:
    clock = Clock(0.0)
    with sampler_on("hang", clock=clock) as (sampler, fake, _clock):
        assert sampler.initialise()
        clock.now = 10.0  # inside the scenario's hang window on GPU 5 (from t=5 s for 10 minutes)
        worker = threading.Thread(target=sampler.run_cycle, daemon=True)
        worker.start()
        def blocked_on_gpu5() -> object:
            call = sampler.in_flight()
            return call if call is not None and call.gpu == 5 else None

        in_flight = wait_for(blocked_on_gpu5, 5.0, "the sampler to block inside NVML on GPU 5")
        assert in_flight.function.startswith("nvmlDevice")  # type: ignore[attr-defined]
        clock.now = 700.0  # past the hang window, then let the blocked call return
        fake.release_hangs()
        worker.join(5)
        assert not worker.is_alive()
        assert sampler.in_flight() is None
