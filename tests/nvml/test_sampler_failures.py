"""The sampler's failure handling as an operator meets it: the log lines (message and JSON fields), the
status behind /health and the self-metrics, and the pace of retries.

Written from the survivors of mutation testing (docs/testing.md): each test pins what a user reads when
NVML, a GPU or one reading goes wrong, once per change and never once per cycle.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pynvml
import pytest

from exporter.metrics.counters import load_counters, parse_counters
from exporter.nvml import sampler as sampler_module
from exporter.nvml.inventory import Inventory
from exporter.nvml.sampler import LOST_REPROBE_S, Sampler
from exporter.simulate.fakenvml import FakeNvmlLibrary, installed
from exporter.snapshot import Snapshot
from tests.e2e.exporter_process import wait_for

from .fake_sampling import Records, captured_logs

Event = tuple[str, str, dict[str, Any]]
DRIVER_NOT_LOADED = "NVMLError_DriverNotLoaded: Driver Not Loaded"
TEMPERATURE = "DCGM_FI_DEV_GPU_TEMP, gauge, t\n"  # one plain reading: no profiling rows, no GPM chatter
GPU_IS_LOST = "NVMLError_GpuIsLost: GPU is lost"


class Clock:
    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@contextmanager
def rig(scenario: str = "default", csv: str | None = None, *, start: float = 100.0,
        process_interval_s: float | None = None) -> Iterator[tuple[Sampler, FakeNvmlLibrary, Clock, Records]]:
    """A sampler on the fake library and a clock the test moves, with the sampler's log captured."""
    clock = Clock(start)
    counters = parse_counters(csv, "test.csv") if csv else load_counters(None)
    with installed(scenario, clock) as fake, captured_logs("gpu_pod_exporter.sampler") as logs:
        sampler = Sampler(counters.field_specs(), 1.0, clock=clock, process_interval_s=process_interval_s)
        yield sampler, fake, clock, logs


def events(logs: Records, level: int = logging.DEBUG) -> list[Event]:
    """What the JSON log format writes for each line: level, message and fields."""
    return [(record.levelname, record.getMessage(), dict(getattr(record, "fields", {})))
            for record in logs.records if record.levelno >= level]


# --- NVML itself: missing, back, gone ----------------------------------------------------------

def test_nvml_down_and_up_are_logged_once_per_change_with_the_reason() -> None:
    with rig() as (sampler, fake, clock, logs):
        fake.fail_init("DriverNotLoaded", calls=2)
        assert not sampler.initialise()
        assert not sampler.initialise()  # the same reason again: nothing new to say
        fake.fail_init("LibRmVersionMismatch", calls=1)
        assert not sampler.initialise()  # another reason: said
        down = sampler.snapshot.status
        assert sampler.initialise()
        up = sampler.snapshot
        clock.now += 1.0
        sampler.run_cycle()
        fake.drop_driver()
        clock.now += 1.0
        gone = sampler.run_cycle()
        assert not sampler.initialise()  # still gone, for the same reason: not said twice
        fake.restore_driver()
        assert sampler.initialise()
    mismatch = "NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM version mismatch."
    initialised = ("INFO", "NVML initialised", {"driver_version": "550.90.07", "gpus": 8})
    assert events(logs) == [
        ("ERROR", "NVML is not available; the exporter stays up and retries with backoff",
         {"error": DRIVER_NOT_LOADED}),
        ("ERROR", "NVML is not available; the exporter stays up and retries with backoff", {"error": mismatch}),
        initialised,
        ("ERROR", "NVML stopped working; re-initialising", {"error": DRIVER_NOT_LOADED}),
        initialised,
    ]
    assert (down.nvml_up, down.nvml_error, down.driver_version, down.nvml_version, down.device_count) == (
        False, mismatch, "", "", 0)
    status = up.status
    assert (status.nvml_up, status.nvml_error, status.driver_version, status.device_count, status.cycles) == (
        True, "", "550.90.07", 8, 0)
    assert status.nvml_version and up.devices == ()  # no readings before the first cycle
    assert (gone.status.nvml_up, gone.status.nvml_error, gone.devices, gone.status.device_count) == (
        False, DRIVER_NOT_LOADED, (), 0)


def test_the_status_counts_cycles_and_every_nvml_call() -> None:
    with rig() as (sampler, fake, clock, _logs):
        assert sampler.initialise()
        for _ in range(3):
            clock.now += 1.0
            status = sampler.run_cycle().status
    assert status.cycles == 3
    assert status.nvml_calls_total == sampler.nvml.total_calls == fake.total_calls()


def test_when_nvml_goes_away_mig_devices_go_with_the_readings() -> None:
    """Kubelet MIG-<uuid> IDs must not keep matching devices NVML no longer reports."""
    with rig("mig-h100") as (sampler, fake, clock, _logs):
        assert sampler.initialise()
        assert sampler.run_cycle().migs
        fake.drop_driver()
        clock.now += 1.0
        gone = sampler.run_cycle()
    assert (gone.devices, gone.migs) == ((), ())


def test_a_snapshot_consumer_that_fails_is_logged_and_sampling_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    published: list[Snapshot] = []

    def consumer(snapshot: Snapshot) -> None:
        published.append(snapshot)
        raise RuntimeError("renderer bug")

    with installed("default", Clock()) as _fake, captured_logs("gpu_pod_exporter.sampler") as logs:
        sampler = Sampler(load_counters(None).field_specs(), 1.0, consumer)
        assert sampler.initialise()
        sampler.run_cycle()
    assert len(published) == 2 and len(published[1].devices) == 8
    failures = [record for record in logs.records if record.levelno == logging.ERROR]
    assert [record.getMessage() for record in failures] == ["snapshot consumer failed"] * 2
    assert failures[0].exc_info is not None and str(failures[0].exc_info[1]) == "renderer bug"


# --- one GPU lost, and back --------------------------------------------------------------------

def test_a_lost_gpu_is_logged_when_lost_and_when_back_and_keeps_its_reason_while_lost() -> None:
    with rig() as (sampler, fake, clock, logs):
        assert sampler.initialise()
        sampler.run_cycle()
        uuid = sampler.snapshot.devices[3].identity.uuid
        fake.lose_gpu(3)
        clock.now = lost_at = 101.0
        assert not sampler.run_cycle().devices[3].up
        clock.now = lost_at + 1.0
        still = sampler.run_cycle().devices[3]
        assert (still.up, still.error) == (False, GPU_IS_LOST)  # the reason stays on the reading
        probes = fake.calls["nvmlDeviceGetUUID"]
        clock.now = lost_at + LOST_REPROBE_S  # exactly one re-probe interval later: asked again
        assert sampler.run_cycle().devices[3].error == GPU_IS_LOST
        assert fake.calls["nvmlDeviceGetUUID"] == probes + 1
        fake.restore_gpu(3)
        clock.now = lost_at + 2 * LOST_REPROBE_S - 0.5  # not yet: the last probe was less than 30 s ago
        assert not sampler.run_cycle().devices[3].up
        clock.now = lost_at + 2 * LOST_REPROBE_S
        back = sampler.run_cycle().devices[3]
        assert (back.up, back.error) == (True, "") and back.values
        fake.lose_gpu(3)  # and lost again: said again
        clock.now += 1.0
        sampler.run_cycle()
    lost = ("ERROR", "GPU lost: its readings are dropped until it answers again; other GPUs continue",
            {"gpu": 3, "uuid": uuid, "error": GPU_IS_LOST})
    assert events(logs, logging.WARNING) == [
        lost, ("WARNING", "GPU answers again after being lost", {"gpu": 3}), lost]


def test_a_hung_reprobe_is_reported_on_the_gpu_it_probes() -> None:
    with rig() as (sampler, fake, clock, _logs):
        assert sampler.initialise()
        fake.lose_gpu(3)
        clock.now += 1.0
        sampler.run_cycle()
        fake.restore_gpu(3)
        fake.hang("nvmlDeviceGetUUID", 60.0, gpu=3)
        clock.now += LOST_REPROBE_S
        worker = threading.Thread(target=sampler.run_cycle, daemon=True)
        worker.start()
        try:
            def probing() -> object:
                call = sampler.in_flight()
                return call if call is not None and call.function == "nvmlDeviceGetUUID" else None

            call = wait_for(probing, 10.0, "the re-probe to block inside NVML")
            assert call.gpu == 3  # type: ignore[attr-defined]
        finally:
            fake.release_hangs()
            worker.join(10)


# --- one reading fails -------------------------------------------------------------------------

def test_a_failing_reading_is_logged_once_per_gpu_and_error_and_read_again_next_cycle() -> None:
    with rig() as (sampler, fake, clock, logs):
        assert sampler.initialise()
        fake.inject_error("nvmlDeviceGetTemperatureV", "Timeout", gpu=0)
        fake.inject_error("nvmlDeviceGetTemperatureV", "Timeout", gpu=1)
        for _ in range(3):
            clock.now += 1.0
            snapshot = sampler.run_cycle()
        assert "DCGM_FI_DEV_GPU_TEMP" not in snapshot.devices[0].values
        fake.clear_errors()
        clock.now += 1.0
        snapshot = sampler.run_cycle()
    assert "DCGM_FI_DEV_GPU_TEMP" in snapshot.devices[0].values  # a transient failure is asked again
    assert snapshot.status.unsupported_fields == ()
    assert events(logs, logging.WARNING) == [
        ("WARNING", "reading failed; skipped this cycle", {"gpu": gpu, "reading": "gpu_temp",
                                                          "error": "NVMLError_Timeout: Timeout"})
        for gpu in (0, 1)]


def test_an_unsupported_reading_is_logged_once_with_what_and_why() -> None:
    with rig() as (sampler, fake, clock, logs):
        assert sampler.initialise()
        fake.inject_error("nvmlDeviceGetTemperatureV", "NotSupported", gpu=2)
        for _ in range(2):
            clock.now += 1.0
            sampler.run_cycle()
    assert events(logs, logging.INFO)[1:] == [
        ("INFO", "reading not supported on this GPU; it is omitted and not asked again",
         {"gpu": 2, "reading": "gpu_temp", "error": "NVMLError_NotSupported: Not Supported"})]


def test_a_failing_field_is_named_by_its_field_id() -> None:
    with rig() as (sampler, fake, clock, logs):
        assert sampler.initialise()
        field = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
        fake.inject_error("nvmlDeviceGetFieldValues", "Timeout", gpu=0, field=field)
        clock.now += 1.0
        values = sampler.run_cycle().devices[0].values
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" not in values and "DCGM_FI_DEV_POWER_USAGE" in values
    assert events(logs, logging.WARNING) == [
        ("WARNING", "reading failed; skipped this cycle",
         {"gpu": 0, "reading": f"field {field}", "error": "NVMLError_Timeout: Timeout"})]


def test_a_driver_without_field_values_loses_those_rows_only() -> None:
    with rig() as (sampler, fake, clock, logs):
        assert sampler.initialise()
        fake.inject_error("nvmlDeviceGetFieldValues", "FunctionNotFound", gpu=0)
        for _ in range(2):
            clock.now += 1.0
            snapshot = sampler.run_cycle()
        asked = fake.calls["nvmlDeviceGetFieldValues"]
        clock.now += 1.0
        sampler.run_cycle()
        assert fake.calls["nvmlDeviceGetFieldValues"] == asked + 7  # GPU 0 is not asked again
    values = snapshot.devices[0].values
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" not in values and "DCGM_FI_DEV_GPU_TEMP" in values
    assert (0, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") in snapshot.status.unsupported_fields
    assert events(logs, logging.INFO)[1:] == [
        ("INFO", "reading not supported on this GPU; it is omitted and not asked again",
         {"gpu": 0, "reading": "nvmlDeviceGetFieldValues",
          "error": "NVMLError_FunctionNotFound: Function Not Found"})]


# --- the loop's pace ---------------------------------------------------------------------------

class RecordedWaits(threading.Event):
    """Stands in for the sampler's stop event: records each pause and ends the loop after ``pauses``."""

    def __init__(self, pauses: int) -> None:
        super().__init__()
        self.waits: list[float | None] = []
        self._pauses = pauses

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) >= self._pauses:
            self.set()
        return self.is_set()


def _run_loop(sampler: Sampler, pauses: int) -> list[float | None]:
    waits = RecordedWaits(pauses)
    sampler._stop = waits  # the loop's pauses are what the test observes
    sampler._run()  # run the thread's loop in this thread, pause by pause
    return waits.waits


def test_initialisation_is_retried_with_doubling_pauses_up_to_thirty_seconds() -> None:
    with rig("no-driver") as (sampler, fake, _clock, logs):
        assert _run_loop(sampler, 8) == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
        assert fake.calls["nvmlInitWithFlags"] == 8
    assert len(events(logs)) == 1  # one line for eight failed attempts


def test_once_nvml_works_sampling_runs_at_the_collect_interval() -> None:
    with rig("init-recovers", TEMPERATURE, start=0.0) as (sampler, _fake, clock, _logs):
        # The scenario's driver loads at t=3 s; the loop keeps to the clock the test moves.
        waits = RecordedWaits(4)

        def pause(timeout: float | None = None) -> bool:
            clock.now += timeout or 0.0
            return RecordedWaits.wait(waits, timeout)

        waits.wait = pause  # type: ignore[method-assign]
        sampler._stop = waits
        sampler._run()
    assert waits.waits == [1.0, 2.0, 1.0, 1.0]  # t=0 and t=1 fail, t=3 works: then every second


def test_a_machine_without_gpus_is_looked_at_again_every_thirty_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sampler_module.discover

    def no_gpus(nvml: Any) -> Inventory:
        inventory = real(nvml)
        return Inventory(system=inventory.system, devices=())

    monkeypatch.setattr(sampler_module, "discover", no_gpus)
    with rig(csv=TEMPERATURE) as (sampler, fake, _clock, logs):
        assert _run_loop(sampler, 3) == [30.0, 30.0, 30.0]
        assert fake.calls["nvmlInitWithFlags"] == 3  # NVML is asked again after each pause
    assert events(logs, logging.WARNING) == [("WARNING", "NVML found no GPU", {})]


def test_a_cycle_longer_than_the_interval_warns_once_and_samples_back_to_back() -> None:
    with installed("default") as fake, captured_logs("gpu_pod_exporter.sampler") as logs:
        fake.set_latency("nvmlDeviceGetTemperatureV", 0.002)  # 8 GPUs: a cycle takes at least 16 ms
        sampler = Sampler(parse_counters(TEMPERATURE, "t.csv").field_specs(), 0.005)
        waits = _run_loop(sampler, 3)
    assert waits == [0.0, 0.0, 0.0]
    [overrun] = events(logs, logging.WARNING)
    level, message, fields = overrun
    assert (level, message) == (
        "WARNING", "a sampling cycle took longer than the collect interval; sampling back to back")
    assert fields["interval_seconds"] == 0.005
    cycle = fields["cycle_seconds"]
    assert 0.016 <= cycle < 60 and round(cycle, 3) == cycle  # in seconds, to the millisecond


def test_a_cycle_shorter_than_the_interval_waits_out_the_rest() -> None:
    with installed("default") as _fake, captured_logs("gpu_pod_exporter.sampler") as logs:
        sampler = Sampler(parse_counters(TEMPERATURE, "t.csv").field_specs(), 600.0)
        waits = _run_loop(sampler, 2)
    assert all(wait is not None and 540.0 < wait <= 600.0 for wait in waits)
    assert events(logs, logging.WARNING) == []


def test_the_sampling_thread_is_named_is_a_daemon_and_stop_does_not_wait_for_a_hung_call() -> None:
    """A hung NVML call cannot be interrupted: stopping gives up after its timeout, and the daemon
    thread cannot keep the process from exiting."""
    with rig() as (sampler, fake, _clock, _logs):
        fake.hang("nvmlDeviceGetTemperatureV", 60.0)
        sampler.start()
        try:
            wait_for(lambda: sampler.in_flight() is not None and sampler.in_flight().function ==  # type: ignore[union-attr]
                     "nvmlDeviceGetTemperatureV", 10.0, "the sampler to block inside NVML")
            [thread] = [thread for thread in threading.enumerate() if thread.name == "nvml-sampler"]
            assert thread.daemon
            sampler.stop(timeout=0.1)
            assert thread.is_alive()  # stop returned although the call is still hung
        finally:
            fake.release_hangs()
            sampler.stop()
