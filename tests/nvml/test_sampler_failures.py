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

from exporter.backoff import Backoff
from exporter.metrics.counters import CounterSet, default_counters_text, load_counters, parse_counters
from exporter.nvml import sampler as sampler_module
from exporter.nvml.events import handle_value
from exporter.nvml.inventory import Inventory
from exporter.nvml.sampler import INIT_BACKOFF, LOST_REPROBE_S, Sampler
from exporter.snapshot import Snapshot
from simulator.fakenvml import FakeNvmlLibrary, installed
from simulator.scenario import parse_scenario
from tests.support.polling import wait_for

from .fake_sampling import Clock, Records, captured_logs

Event = tuple[str, str, dict[str, Any]]
DRIVER_NOT_LOADED = "NVMLError_DriverNotLoaded: Driver Not Loaded"
TEMPERATURE = "DCGM_FI_DEV_GPU_TEMP, gauge, t\n"  # one plain reading: no profiling rows, no GPM chatter
GPU_IS_LOST = "NVMLError_GpuIsLost: GPU is lost"


def default_counters_the_fake_gpus_serve() -> CounterSet:
    """The product's default counters without pending page retirement, which the default scenario's
    GPUs (as real ones since Ampere) do not support: it would add a "not supported" line per GPU."""
    rows = default_counters_text().split("\n")
    kept = [row for row in rows if not row.startswith("DCGM_FI_DEV_RETIRED_PENDING,")]
    assert len(kept) == len(rows) - 1
    return parse_counters("\n".join(kept), "default-counters.csv")


@contextmanager
def rig(scenario: str = "default", csv: str | None = None, *, start: float = 100.0,
        process_interval_s: float | None = None) -> Iterator[tuple[Sampler, FakeNvmlLibrary, Clock, Records]]:
    """A sampler on the fake library and a clock the test moves, with the sampler's log captured."""
    clock = Clock()
    clock.t = start
    counters = parse_counters(csv, "test.csv") if csv else default_counters_the_fake_gpus_serve()
    loaded = parse_scenario(scenario, "test.yaml", "test") if "\n" in scenario else scenario
    with installed(loaded, clock) as fake, captured_logs("gpu_pod_exporter.sampler") as logs:
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
        clock.t += 1.0
        sampler.run_cycle()
        fake.drop_driver()
        clock.t += 1.0
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
            clock.t += 1.0
            status = sampler.run_cycle().status
    assert status.cycles == 3 and status.nvml_up and status.nvml_error == ""
    assert status.nvml_calls_total == sampler.nvml.total_calls == fake.total_calls()


def test_when_nvml_goes_away_mig_devices_go_with_the_readings() -> None:
    """Kubelet MIG-<uuid> IDs must not keep matching devices NVML no longer reports."""
    with rig("mig-h100") as (sampler, fake, clock, _logs):
        assert sampler.initialise()
        assert sampler.run_cycle().migs
        fake.drop_driver()
        clock.t += 1.0
        gone = sampler.run_cycle()
    assert (gone.devices, gone.migs) == ((), ())


def test_a_snapshot_consumer_that_fails_is_logged_and_sampling_goes_on() -> None:
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
        clock.t = lost_at = 101.0
        assert not sampler.run_cycle().devices[3].up
        clock.t = lost_at + 1.0
        still = sampler.run_cycle().devices[3]
        assert (still.up, still.error) == (False, GPU_IS_LOST)  # the reason stays on the reading
        probes = fake.calls["nvmlDeviceGetUUID"]
        clock.t = lost_at + LOST_REPROBE_S  # exactly one re-probe interval later: asked again
        assert sampler.run_cycle().devices[3].error == GPU_IS_LOST
        assert fake.calls["nvmlDeviceGetUUID"] == probes + 1
        fake.restore_gpu(3)
        clock.t = lost_at + 2 * LOST_REPROBE_S - 0.5  # not yet: the last probe was less than 30 s ago
        assert not sampler.run_cycle().devices[3].up
        clock.t = lost_at + 2 * LOST_REPROBE_S
        back = sampler.run_cycle().devices[3]
        assert (back.up, back.error) == (True, "") and back.values
        fake.lose_gpu(3)  # and lost again: said again
        clock.t += 1.0
        sampler.run_cycle()
    lost = ("ERROR", "GPU lost: its readings are dropped until it answers again; other GPUs continue",
            {"gpu": 3, "uuid": uuid, "error": GPU_IS_LOST})
    assert events(logs, logging.WARNING) == [
        lost, ("WARNING", "GPU answers again after being lost", {"gpu": 3}), lost]


def test_a_hung_reprobe_is_reported_on_the_gpu_it_probes() -> None:
    with rig() as (sampler, fake, clock, _logs):
        assert sampler.initialise()
        fake.lose_gpu(3)
        clock.t += 1.0
        sampler.run_cycle()
        fake.restore_gpu(3)
        fake.hang("nvmlDeviceGetUUID", 60.0, gpu=3)
        clock.t += LOST_REPROBE_S
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
            clock.t += 1.0
            snapshot = sampler.run_cycle()
        assert "DCGM_FI_DEV_GPU_TEMP" not in snapshot.devices[0].values
        fake.clear_errors()
        clock.t += 1.0
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
            clock.t += 1.0
            sampler.run_cycle()
    assert events(logs, logging.INFO)[1:] == [
        ("INFO", "reading not supported on this GPU; it is omitted and not asked again",
         {"gpu": 2, "reading": "gpu_temp", "error": "NVMLError_NotSupported: Not Supported"})]


def test_a_failing_field_is_named_by_its_field_id() -> None:
    with rig() as (sampler, fake, clock, logs):
        assert sampler.initialise()
        field = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
        fake.inject_error("nvmlDeviceGetFieldValues", "Timeout", gpu=0, field=field)
        clock.t += 1.0
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
            clock.t += 1.0
            snapshot = sampler.run_cycle()
        asked = fake.calls["nvmlDeviceGetFieldValues"]
        clock.t += 1.0
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


def _run_on_its_clock(sampler: Sampler, clock: Any, pauses: int) -> list[float | None]:
    """Run the loop for ``pauses`` pauses, each moving the rig's clock; the start-up backoff's random
    fraction pinned to the middle of each window."""
    sampler.init_backoff = Backoff(INIT_BACKOFF, lambda: 0.5)
    waits = RecordedWaits(pauses)

    def pause(timeout: float | None = None) -> bool:
        clock.t += timeout or 0.0
        return RecordedWaits.wait(waits, timeout)

    waits.wait = pause  # type: ignore[method-assign]
    sampler._stop = waits
    sampler._run()
    return waits.waits


def test_initialisation_is_retried_with_doubling_pauses_up_to_thirty_seconds() -> None:
    with rig("no-driver") as (sampler, fake, clock, logs):
        # The shared backoff's windows, 1 s doubling to 30 s back to back ([0, 1), [1, 3), [3, 7), ...),
        # one attempt in the middle of each: a fleet whose driver is missing does not retry in step.
        assert _run_on_its_clock(sampler, clock, 8) == [0.5, 1.5, 3.0, 6.0, 12.0, 23.0, 30.0, 30.0]
        assert fake.calls["nvmlInitWithFlags"] == 8
    assert len(events(logs)) == 1  # one line for eight failed attempts


def test_once_nvml_works_sampling_runs_at_the_collect_interval() -> None:
    with rig("init-recovers", TEMPERATURE, start=0.0) as (sampler, _fake, clock, _logs):
        # The scenario's driver loads at t=3 s. t=0, t=0.5 and t=2 fail (attempts in the middle of the windows
        # [0, 1), [1, 3)), t=5 works: then every second.
        assert _run_on_its_clock(sampler, clock, 4) == [0.5, 1.5, 3.0, 1.0]


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
    assert 0.016 <= cycle < 2.5 and round(cycle, 3) == cycle  # in seconds, to the millisecond


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


def test_a_failure_on_the_way_out_ends_the_loop_instead_of_restarting_it() -> None:
    """stop() while a cycle is inside NVML, then the cycle fails (here: its clock): no restart, no error line."""
    def broken_clock() -> float:
        raise RuntimeError("clock gone")

    with rig(csv=TEMPERATURE) as (sampler, fake, _clock, _logs), \
            captured_logs("gpu_pod_exporter.supervisor") as supervision:
        fake.hang("nvmlDeviceGetTemperatureV", 60.0)
        sampler.start()
        try:
            wait_for(lambda: sampler.in_flight() is not None, 10.0, "the sampler to block inside NVML")
            [thread] = [thread for thread in threading.enumerate() if thread.name == "nvml-sampler"]
            sampler.stop(timeout=0.0)  # asked to stop while still inside the call
            sampler._clock = broken_clock
        finally:
            fake.release_hangs()
        sampler.stop(timeout=10.0)
        assert not thread.is_alive()
    assert events(supervision) == []


# --- GPM profiling ------------------------------------------------------------------------------

GR_ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, g\n"  # a per-GPU-instance profiling row, no fallback
PCIE_PROF = "DCGM_FI_PROF_PCIE_TX_BYTES, gauge, p\nDCGM_FI_PROF_PCIE_RX_BYTES, gauge, p\n"  # with a field fallback
MIG_GPU = "gpu_defaults: {model: H100-SXM5-80GB, load: 50}\ngpus:\n  1: {mig: [{profile: 3g.40gb, load: 20}]}\n" \
          "gpu_count: 2\n"


def test_a_gpu_without_gpm_names_the_rows_it_omits_and_those_served_from_field_values() -> None:
    with rig("gpu_defaults: {model: A100-SXM4-80GB}\n", GR_ENGINE + PCIE_PROF) as (sampler, fake, clock, logs):
        assert sampler.initialise()
        for _ in range(3):
            clock.t += 1.0
            snapshot = sampler.run_cycle()
        assert fake.calls["nvmlGpmQueryDeviceSupport"] == 1  # asked once
    uuid = snapshot.devices[0].identity.uuid
    assert events(logs, logging.WARNING) == [
        ("WARNING", "profiling metrics need NVML GPM (Hopper or newer), which this GPU does not support; their rows "
         "are omitted for it", {"gpu": 0, "uuid": uuid, "omitted": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                                "from_field_values": "DCGM_FI_PROF_PCIE_TX_BYTES,DCGM_FI_PROF_PCIE_RX_BYTES"})]
    assert snapshot.status.unsupported_fields == ((0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),)
    assert "DCGM_FI_PROF_PCIE_TX_BYTES" in snapshot.devices[0].values


def test_without_a_field_fallback_the_warning_says_none() -> None:
    with rig("gpu_defaults: {model: A100-SXM4-80GB}\n", GR_ENGINE) as (sampler, _fake, clock, logs):
        assert sampler.initialise()
        clock.t += 1.0
        sampler.run_cycle()
    [(_level, _message, fields)] = events(logs, logging.WARNING)
    assert fields["from_field_values"] == "-"


def test_a_refused_gpm_probe_is_not_asked_again_and_omits_the_rows() -> None:
    with rig("gpu_defaults: {model: H100-SXM5-80GB}\n", GR_ENGINE) as (sampler, fake, clock, logs):
        fake.inject_error("nvmlGpmQueryDeviceSupport", "NotSupported")
        assert sampler.initialise()
        for _ in range(3):
            clock.t += 1.0
            snapshot = sampler.run_cycle()
        assert fake.calls["nvmlGpmQueryDeviceSupport"] == 1 and fake.calls["nvmlGpmSampleGet"] == 0
    assert snapshot.status.unsupported_fields == ((0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),)
    assert [message for _level, message, _fields in events(logs, logging.WARNING)] == [
        "profiling metrics need NVML GPM (Hopper or newer), which this GPU does not support; their rows are "
        "omitted for it"]


def test_a_gpm_probe_that_fails_for_a_passing_reason_is_logged_as_a_reading_and_asked_again() -> None:
    with rig("gpu_defaults: {model: H100-SXM5-80GB}\n", GR_ENGINE) as (sampler, fake, clock, logs):
        fake.inject_error("nvmlGpmQueryDeviceSupport", "Timeout", until_s=101.5)
        assert sampler.initialise()
        clock.t = 101.0
        sampler.run_cycle()
        for second in (102.0, 103.0, 104.0):
            clock.t = second
            snapshot = sampler.run_cycle()
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in snapshot.devices[0].values
    assert events(logs, logging.WARNING) == [
        ("WARNING", "reading failed; skipped this cycle", {"gpu": 0, "reading": "GPM",
                                                          "error": "NVMLError_Timeout: Timeout"})]


def test_gpm_is_not_probed_when_no_profiling_row_is_configured() -> None:
    with rig(MIG_GPU, TEMPERATURE) as (sampler, fake, clock, _logs):
        assert sampler.initialise()
        for _ in range(2):
            clock.t += 1.0
            sampler.run_cycle()
        assert fake.calls["nvmlGpmQueryDeviceSupport"] == 0


def test_a_mig_gpu_with_only_per_instance_profiling_rows_reads_them_per_instance() -> None:
    with rig(MIG_GPU, GR_ENGINE) as (sampler, _fake, clock, _logs):
        assert sampler.initialise()
        for _ in range(3):
            clock.t += 1.0
            snapshot = sampler.run_cycle()
    [instance] = snapshot.devices[1].mig
    assert instance.values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.2)


def test_a_mig_gpu_with_only_per_instance_profiling_rows_takes_no_whole_gpu_samples() -> None:
    """Its instances are sampled; the parent serves no such row, so sampling it would be NVML time for nothing."""
    scenario = "gpu_count: 1\ngpu_defaults: {model: H100-SXM5-80GB, mig: [{profile: 3g.40gb, load: 20}]}\n"
    with rig(scenario, GR_ENGINE) as (sampler, fake, clock, _logs):
        assert sampler.initialise()
        for _ in range(3):
            clock.t += 1.0
            snapshot = sampler.run_cycle()
        assert (fake.calls["nvmlGpmSampleGet"], fake.calls["nvmlGpmMigSampleGet"]) == (0, 3)
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in snapshot.devices[0].mig[0].values


def test_a_gpu_instance_id_taken_over_by_a_new_instance_starts_a_new_sample_chain() -> None:
    """No profiling value mixes a destroyed instance's last sample with its successor's first."""
    scenario = "gpu_count: 1\ngpu_defaults: {model: H100-SXM5-80GB, mig: [{profile: 3g.40gb, load: 20}]}\n"
    with rig(scenario, GR_ENGINE) as (sampler, fake, clock, _logs):
        assert sampler.initialise()
        seen = []
        for step in ("before", "before", "changed", "after"):
            if step == "changed":
                fake.set_mig_layout(0, ["4g.40gb"])  # the 3g.40gb instance goes; the new one gets its id
                clock.t += 60.0  # the layout is checked once a minute
            clock.t += 1.0
            [instance] = sampler.run_cycle().devices[0].mig
            seen.append((instance.identity.profile, instance.identity.gpu_instance_id,
                         instance.values.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE")))
    assert seen == [("3g.40gb", 1, None), ("3g.40gb", 1, pytest.approx(0.2)), ("4g.40gb", 1, None),
                    ("4g.40gb", 1, 0.0)]


def test_a_cycle_of_exactly_the_interval_is_no_overrun() -> None:
    with rig(csv=TEMPERATURE) as (sampler, _fake, clock, logs):
        assert sampler.initialise()
        cycle = sampler.run_cycle

        def one_interval() -> Snapshot:
            snapshot = cycle()
            clock.t += sampler.interval_s
            return snapshot

        sampler.run_cycle = one_interval  # type: ignore[method-assign]
        waits = _run_loop(sampler, 2)
    assert waits == [0.0, 0.0]
    assert events(logs, logging.WARNING) == []


def test_a_rate_row_whose_counters_a_gpu_lacks_is_listed_unsupported() -> None:
    with rig(csv="DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, n\n") as (sampler, fake, clock, _logs):
        fake.inject_error("nvmlDeviceGetFieldValues", "NotSupported", gpu=0,
                          field=pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
        assert sampler.initialise()
        for _ in range(2):
            clock.t += 1.0
            snapshot = sampler.run_cycle()
    assert snapshot.status.unsupported_fields == ((0, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"),)


def test_a_failed_whole_gpu_sample_is_logged_once_with_its_target_and_restarts_the_chain() -> None:
    with rig(MIG_GPU, GR_ENGINE) as (sampler, fake, clock, logs):
        assert sampler.initialise()
        fake.inject_error("nvmlGpmSampleGet", "InvalidArgument", gpu=0, from_s=101.5, until_s=103.5)
        present = []
        for second in (101.0, 102.0, 103.0, 104.0, 105.0):
            clock.t = second
            present.append("DCGM_FI_PROF_GR_ENGINE_ACTIVE" in sampler.run_cycle().devices[0].values)
    assert present == [False, False, False, False, True]  # two samples after the failures: a value again
    assert events(logs, logging.WARNING) == [
        ("WARNING", "GPM sample failed; its sample chain restarts next cycle",
         {"gpu": 0, "target": "the whole GPU", "error": "NVMLError_InvalidArgument: Invalid Argument"})]


def test_failed_gpm_samples_are_logged_once_per_gpu() -> None:
    with rig("gpu_count: 2\ngpu_defaults: {model: H100-SXM5-80GB, load: 50}\n", GR_ENGINE) as (
            sampler, fake, clock, logs):
        assert sampler.initialise()
        fake.inject_error("nvmlGpmSampleGet", "InvalidArgument")
        for _ in range(3):
            clock.t += 1.0
            sampler.run_cycle()
    assert events(logs, logging.WARNING) == [
        ("WARNING", "GPM sample failed; its sample chain restarts next cycle",
         {"gpu": gpu, "target": "the whole GPU", "error": "NVMLError_InvalidArgument: Invalid Argument"})
        for gpu in (0, 1)]


def test_a_failed_instance_sample_restarts_that_instances_chain_only() -> None:
    with rig(MIG_GPU, GR_ENGINE) as (sampler, fake, clock, logs):
        assert sampler.initialise()
        clock.t = 101.0
        sampler.run_cycle()
        clock.t = 102.0
        whole_before = sampler.run_cycle().devices[0].values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
        fake.inject_error("nvmlGpmMigSampleGet", "Timeout", gpu=1, from_s=102.5, until_s=103.5)
        clock.t = 103.0
        failed = sampler.run_cycle()
        clock.t = 104.0
        restarted = sampler.run_cycle()
        clock.t = 105.0
        back = sampler.run_cycle()
    gi = back.devices[1].mig[0].identity.gpu_instance_id
    assert [("DCGM_FI_PROF_GR_ENGINE_ACTIVE" in snapshot.devices[1].mig[0].values)
            for snapshot in (failed, restarted, back)] == [False, False, True]
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in restarted.devices[0].values and whole_before  # GPU 0 unaffected
    assert events(logs, logging.WARNING) == [
        ("WARNING", "GPM sample failed; its sample chain restarts next cycle",
         {"gpu": 1, "target": f"GPU instance {gi}", "error": "NVMLError_Timeout: Timeout"})]


def test_refused_gpm_samples_are_logged_once_per_gpu_and_listed_for_the_rows_they_serve() -> None:
    scenario = "gpu_count: 2\ngpu_defaults: {model: H100-SXM5-80GB, load: 50}\n"
    with rig(scenario, GR_ENGINE + PCIE_PROF) as (sampler, fake, clock, logs):
        fake.inject_error("nvmlGpmMetricsGet", "NotSupported")
        assert sampler.initialise()
        for _ in range(3):
            clock.t += 1.0
            snapshot = sampler.run_cycle()
    uuids = [reading.identity.uuid for reading in snapshot.devices]
    assert events(logs, logging.WARNING) == [
        ("WARNING", "GPM samples are not supported here; its profiling rows are omitted",
         {"gpu": gpu, "uuid": uuids[gpu], "target": "the whole GPU", "error": "NVMLError_NotSupported: Not Supported"})
        for gpu in (0, 1)]
    assert set(snapshot.status.unsupported_fields) == {
        (gpu, name) for gpu in (0, 1) for name in (
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES")}


def test_a_gpu_lost_during_a_gpm_sample_is_a_lost_gpu() -> None:
    with rig("gpu_count: 2\ngpu_defaults: {model: H100-SXM5-80GB}\n", GR_ENGINE) as (sampler, fake, clock, logs):
        assert sampler.initialise()
        clock.t += 1.0
        sampler.run_cycle()
        fake.inject_error("nvmlGpmSampleGet", "GpuIsLost", gpu=1)
        clock.t += 1.0
        snapshot = sampler.run_cycle()
    assert [reading.up for reading in snapshot.devices] == [True, False]
    assert [message for _level, message, _fields in events(logs, logging.WARNING)] == [
        "GPU lost: its readings are dropped until it answers again; other GPUs continue"]


# --- process lists ------------------------------------------------------------------------------

PROCESSES = """
gpu_defaults: {model: H100-SXM5-80GB}
gpus:
  0:
    processes:
      - {pid: 500, used_memory: 1GiB}
      - {pid: 501, used_memory: 3GiB}
      - {pid: 502, used_memory: unavailable}
"""
GIB = 1 << 30
MIB = 1 << 20


def listed_process(pid: int, used: int | None) -> Any:
    """An entry of NVML's process lists (whole GPU) as pynvml returns it."""
    return type("Process", (), {"pid": pid, "usedGpuMemory": used, "gpuInstanceId": 0xFFFFFFFF,
                                "computeInstanceId": 0xFFFFFFFF})()


def test_a_process_in_both_lists_is_kept_once_with_the_larger_known_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    graphics = [listed_process(500, 2 * GIB), listed_process(501, None), listed_process(502, 4 * GIB),
                listed_process(503, GIB)]
    with rig(PROCESSES, TEMPERATURE, process_interval_s=5.0) as (sampler, _fake, _clock, _logs):
        monkeypatch.setattr(pynvml, "nvmlDeviceGetGraphicsRunningProcesses", lambda _handle: graphics)
        assert sampler.initialise()
        processes = sampler.run_cycle().devices[0].processes
    assert processes is not None
    assert [(p.pid, p.used_memory_bytes, p.gpu_instance_id) for p in processes] == [
        (500, 2 * GIB, None), (501, 3 * GIB, None), (502, 4 * GIB, None), (503, GIB, None)]


def test_memory_one_list_does_not_know_is_taken_from_the_other_however_small(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with rig(PROCESSES, TEMPERATURE, process_interval_s=5.0) as (sampler, _fake, _clock, _logs):
        monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses",
                            lambda _handle: [listed_process(600, None), listed_process(601, 0)])
        monkeypatch.setattr(pynvml, "nvmlDeviceGetGraphicsRunningProcesses",
                            lambda _handle: [listed_process(600, 1), listed_process(601, 1)])
        assert sampler.initialise()
        processes = sampler.run_cycle().devices[0].processes
    assert processes is not None
    assert [(p.pid, p.used_memory_bytes) for p in processes] == [(600, 1), (601, 1)]


@pytest.mark.parametrize(("refused", "listed", "scenario"), [
    ("compute", [500], PROCESSES.replace("used_memory: 1GiB}", "used_memory: 1GiB, type: graphics}")),
    ("graphics", [500, 501, 502], PROCESSES),
])
def test_a_gpu_without_one_process_list_still_reports_the_other(refused: str, listed: list[int],
                                                                 scenario: str) -> None:
    symbol = f"nvmlDeviceGet{refused.capitalize()}RunningProcesses_v3"
    with rig(scenario, TEMPERATURE, process_interval_s=5.0) as (sampler, fake, clock, logs):
        fake.inject_error(symbol, "NotSupported", gpu=0)
        assert sampler.initialise()
        for _ in range(2):
            processes = sampler.run_cycle().devices[0].processes
            clock.t += 5.0
        asked = fake.calls[symbol]
    assert processes is not None and [p.pid for p in processes] == listed
    assert asked == 1  # refused once, not asked again
    assert events(logs, logging.INFO)[1:] == [
        ("INFO", "reading not supported on this GPU; it is omitted and not asked again",
         {"gpu": 0, "reading": f"{refused}_processes", "error": "NVMLError_NotSupported: Not Supported"})]


def test_a_failing_compute_list_does_not_hide_the_graphics_list() -> None:
    scenario = PROCESSES.replace("used_memory: 1GiB}", "used_memory: 1GiB, type: graphics}")
    with rig(scenario, TEMPERATURE, process_interval_s=5.0) as (sampler, fake, _clock, logs):
        fake.inject_error("nvmlDeviceGetComputeRunningProcesses_v3", "Timeout", gpu=0)
        assert sampler.initialise()
        processes = sampler.run_cycle().devices[0].processes
    assert processes is not None and [p.pid for p in processes] == [500]
    assert [fields["reading"] for _level, _message, fields in events(logs, logging.WARNING)] == ["compute_processes"]


def test_process_lists_are_read_again_exactly_when_their_interval_has_passed() -> None:
    with rig(PROCESSES, TEMPERATURE, process_interval_s=5.0) as (sampler, fake, clock, _logs):
        assert sampler.initialise()
        sampler.run_cycle()
        asked = fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"]
        clock.t += 4.5
        sampler.run_cycle()
        assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == asked
        clock.t += 0.5
        sampler.run_cycle()
        assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] > asked


def test_processes_in_mig_instances_carry_their_gpu_and_compute_instance() -> None:
    with rig("mig-h100", TEMPERATURE, process_interval_s=5.0) as (sampler, _fake, _clock, _logs):
        assert sampler.initialise()
        reading = sampler.run_cycle().devices[1]
    assert reading.processes is not None
    assert sorted((p.pid, p.gpu_instance_id, p.compute_instance_id) for p in reading.processes) == sorted(
        (pid, mig.identity.gpu_instance_id, mig.identity.compute_instance_id)
        for pid, mig in zip((72001, 72002), reading.mig, strict=False))
    assert all(p.gpu_instance_id is not None for p in reading.processes)


# --- MIG layout and a new counters CSV ----------------------------------------------------------

def test_mig_layouts_are_logged_once_per_gpu_with_every_instance() -> None:
    with rig("mig-h100", TEMPERATURE) as (sampler, _fake, clock, logs):
        assert sampler.initialise()
        for _ in range(2):
            clock.t += 1.0
            snapshot = sampler.run_cycle()
    layouts = [(fields["gpu"], fields["uuid"], fields["enabled"], fields["devices"])
               for _level, message, fields in events(logs, logging.INFO) if message == "MIG layout"]
    expected = []
    for reading in snapshot.devices[:2]:
        devices = ",".join(f"{m.identity.profile}:GI{m.identity.gpu_instance_id}/CI{m.identity.compute_instance_id}"
                           for m in reading.mig)
        expected.append((reading.identity.index, reading.identity.uuid, True, devices))
    assert layouts == expected  # GPUs 2 and 3 keep MIG off: nothing to say about them


def test_gpus_with_the_same_mig_layout_each_say_so() -> None:
    scenario = "gpu_count: 2\ngpu_defaults: {model: H100-SXM5-80GB, mig: [{profile: 3g.40gb}]}\n"
    with rig(scenario, TEMPERATURE) as (sampler, _fake, clock, logs):
        assert sampler.initialise()
        clock.t += 1.0
        sampler.run_cycle()
    assert [(fields["gpu"], fields["devices"]) for _level, message, fields in events(logs, logging.INFO)
            if message == "MIG layout"] == [(0, "3g.40gb:GI1/CI0"), (1, "3g.40gb:GI1/CI0")]


def test_a_failing_mig_instance_does_not_hide_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = "gpu_count: 1\ngpu_defaults: {model: H100-SXM5-80GB, mig: [3g.40gb, 2g.20gb, 1g.10gb]}\n"
    with rig(scenario, "DCGM_FI_DEV_FB_USED, gauge, u\n") as (sampler, _fake, clock, logs):
        assert sampler.initialise()
        clock.t += 1.0
        before = sampler.run_cycle().devices[0].mig
        assert [len(instance.values) for instance in before] == [1, 1, 1]
        failing = before[0].identity.gpu_instance_id
        [handle] = [device.handle for device in sampler._states[0].mig.instances()
                    if device.identity.gpu_instance_id == failing]
        real = pynvml.nvmlDeviceGetMemoryInfo

        def memory(device: Any, *args: Any, **kwargs: Any) -> Any:
            if handle_value(device) == handle_value(handle):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
            return real(device, *args, **kwargs)

        monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", memory)
        clock.t += 1.0
        after = sampler.run_cycle().devices[0].mig
    assert [instance.identity.gpu_instance_id for instance in after] == [
        instance.identity.gpu_instance_id for instance in before[1:]]
    assert [instance.values for instance in after] == [instance.values for instance in before[1:]]
    assert events(logs, logging.WARNING) == [
        ("WARNING", "reading failed; skipped this cycle",
         {"gpu": 0, "reading": f"MIG instance {failing}", "error": "NVMLError_Timeout: Timeout"})]


def test_a_mig_gpu_without_instances_says_so() -> None:
    with rig("gpu_defaults: {model: H100-SXM5-80GB, mig: []}\n", TEMPERATURE) as (sampler, _fake, clock, logs):
        assert sampler.initialise()
        clock.t += 1.0
        sampler.run_cycle()
    assert [fields["devices"] for _level, message, fields in events(logs, logging.INFO)
            if message == "MIG layout"] == ["-"]


def test_new_counters_take_effect_at_the_next_cycle() -> None:
    with rig(csv=TEMPERATURE) as (sampler, _fake, clock, _logs):
        assert sampler.initialise()
        assert set(sampler.run_cycle().devices[0].values) == {"DCGM_FI_DEV_GPU_TEMP"}
        new = parse_counters("DCGM_FI_DEV_POWER_USAGE, gauge, p\nDCGM_FI_DEV_SLOWDOWN_TEMP, gauge, s\n", "new.csv")
        sampler.set_specs(new.field_specs(), load_counters(None).field_specs()[:0])
        clock.t += 1.0
        values = sampler.run_cycle().devices[0].values
    assert set(values) == {"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SLOWDOWN_TEMP"}  # static ones read afresh


# --- readings: rates, driver time stamps, scales, what is read how often ------------------------

A100_PCIE = "gpu_defaults: {model: A100-SXM4-80GB, pcie_tx: 100MiB/s, pcie_rx: 300MiB/s}\n"
PCIE_TX = "DCGM_FI_PROF_PCIE_TX_BYTES"


def _stamped(monkeypatch: pytest.MonkeyPatch, stamp_us: list[int], broken: set[int] = frozenset()) -> None:  # type: ignore[assignment]
    """NVML's field values with the driver's time stamps the test chooses (and some undecodable)."""
    real = pynvml.nvmlDeviceGetFieldValues

    def stamped(handle: Any, field_ids: Any) -> Any:
        entries = real(handle, field_ids)
        for entry in entries:
            entry.timestamp = stamp_us[0]
            if entry.fieldId in broken:
                entry.valueType = 99  # no such value type
        return entries

    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", stamped)


def test_a_rate_is_the_counter_difference_over_the_drivers_time_between_samples(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stamp = [101_000_000]
    _stamped(monkeypatch, stamp)
    with rig(A100_PCIE, PCIE_PROF) as (sampler, _fake, clock, _logs):
        assert sampler.initialise()
        clock.t = 101.0
        sampler.run_cycle()
        clock.t, stamp[0] = 102.0, 103_000_000  # the driver sampled the counter 2 s later
        values = sampler.run_cycle().devices[0].values
    assert values[PCIE_TX] == 100 * MIB // 2  # 100 MiB in 2 s of driver time (its microseconds, exactly)


def test_without_a_driver_time_stamp_the_rate_uses_the_exporters_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    _stamped(monkeypatch, [0])
    with rig(A100_PCIE, PCIE_PROF) as (sampler, _fake, clock, _logs):
        assert sampler.initialise()
        clock.t = 101.0
        sampler.run_cycle()
        clock.t = 103.0  # two seconds: a rate is per second, whatever the interval
        values = sampler.run_cycle().devices[0].values
    assert values[PCIE_TX] == pytest.approx(100 * MIB, rel=1e-3)
    assert values["DCGM_FI_PROF_PCIE_RX_BYTES"] == pytest.approx(300 * MIB, rel=1e-3)


def test_an_undecodable_field_value_is_omitted_and_the_rest_of_the_batch_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    energy = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
    _stamped(monkeypatch, [0], broken={energy})
    csv = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, e\nDCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, s\n"
    with rig(csv=csv) as (sampler, _fake, _clock, _logs):
        assert sampler.initialise()
        values = sampler.run_cycle().devices[0].values
    assert set(values) == {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"}


def test_field_values_are_converted_to_the_rows_unit() -> None:
    with rig(csv="DCGM_FI_DEV_ENFORCED_POWER_LIMIT, gauge, w\n") as (sampler, _fake, _clock, _logs):
        assert sampler.initialise()
        values = sampler.run_cycle().devices[0].values
        limit_mw = pynvml.nvmlDeviceGetEnforcedPowerLimit(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert values["DCGM_FI_DEV_ENFORCED_POWER_LIMIT"] == pytest.approx(limit_mw / 1000)  # mW -> W


def test_static_readings_are_read_once_per_gpu() -> None:
    with rig(csv="DCGM_FI_DEV_SLOWDOWN_TEMP, gauge, s\n" + TEMPERATURE) as (sampler, fake, clock, _logs):
        assert sampler.initialise()
        for _ in range(3):
            clock.t += 1.0
            values = sampler.run_cycle().devices[0].values
        assert fake.calls["nvmlDeviceGetTemperatureThreshold"] == 8
    assert "DCGM_FI_DEV_SLOWDOWN_TEMP" in values


def test_a_mig_gpu_reads_its_framebuffer_per_instance_only_and_its_other_readings_still() -> None:
    scenario = "gpu_defaults: {model: H100-SXM5-80GB, mig: [3g.40gb, 2g.20gb, 1g.10gb]}\n"
    csv = "DCGM_FI_DEV_FB_USED, gauge, f\n" + TEMPERATURE
    with rig(scenario, csv) as (sampler, fake, clock, _logs):
        assert sampler.initialise()
        sampler.run_cycle()
        asked = fake.calls["nvmlDeviceGetMemoryInfo_v2"]
        clock.t += 1.0
        reading = sampler.run_cycle().devices[0]
        assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] - asked == 3  # one per instance, none for the parent
    assert set(reading.values) == {"DCGM_FI_DEV_GPU_TEMP"}
    assert all("DCGM_FI_DEV_FB_USED" in mig.values for mig in reading.mig)


def test_a_gpu_with_gpm_does_not_read_the_counters_behind_the_fallback() -> None:
    pcie_tx_bytes = 197  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES: served by GPM on Hopper
    with rig("gpu_defaults: {model: H100-SXM5-80GB}\n", PCIE_PROF) as (sampler, fake, clock, logs):
        fake.inject_error("nvmlDeviceGetFieldValues", "Timeout", field=pcie_tx_bytes)
        assert sampler.initialise()
        for _ in range(3):
            clock.t += 1.0
            values = sampler.run_cycle().devices[0].values
    assert PCIE_TX in values and events(logs, logging.WARNING) == []  # never asked, so never failed


def test_the_status_says_how_long_a_cycle_took_and_when_it_ended() -> None:
    with installed("default") as fake:
        fake.set_latency("nvmlDeviceGetTemperatureV", 0.002)  # 8 GPUs: at least 16 ms
        sampler = Sampler(parse_counters(TEMPERATURE, "t.csv").field_specs(), 1.0,
                          clock=lambda: 500.0, wall_clock=lambda: 1_700_000_000.0)
        assert sampler.initialise()
        real = Sampler(parse_counters(TEMPERATURE, "t.csv").field_specs(), 1.0)
        assert real.initialise()
        status = sampler.run_cycle().status
        timed = real.run_cycle().status
    assert (status.last_sample_monotonic, status.last_sample_wall_time, status.nvml_error) == (
        500.0, 1_700_000_000.0, "")
    assert 0.016 <= timed.last_cycle_duration_s < 60


def test_gpus_that_appear_after_a_start_without_any_are_announced(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sampler_module.discover
    empty = [True]

    def later(nvml: Any) -> Inventory:
        inventory = real(nvml)
        return Inventory(system=inventory.system, devices=()) if empty[0] else inventory

    monkeypatch.setattr(sampler_module, "discover", later)
    with rig(csv=TEMPERATURE) as (sampler, _fake, _clock, logs):
        assert sampler.initialise()
        assert sampler.initialise()  # still none: nothing new to say
        empty[0] = False  # the driver install finished
        assert sampler.initialise()
        empty[0] = True  # and the GPUs went away again (a driver reload that finds none)
        assert sampler.initialise()
    none = ("NVML found no GPU", {})
    assert [(message, fields) for _level, message, fields in events(logs, logging.INFO)] == [
        ("NVML initialised", {"driver_version": "550.90.07", "gpus": 0}), none,
        ("NVML initialised", {"driver_version": "550.90.07", "gpus": 8}),
        ("NVML initialised", {"driver_version": "550.90.07", "gpus": 0}), none,
    ]


def test_a_failed_reprobe_of_a_lost_gpu_costs_one_call() -> None:
    with rig(csv=TEMPERATURE) as (sampler, fake, clock, _logs):
        assert sampler.initialise()
        sampler.run_cycle()
        fake.lose_gpu(3)
        clock.t += 1.0
        sampler.run_cycle()
        before = fake.total_calls()
        clock.t += 1.0
        sampler.run_cycle()
        quiet = fake.total_calls() - before  # the seven other GPUs
        before = fake.total_calls()
        clock.t += LOST_REPROBE_S
        assert not sampler.run_cycle().devices[3].up
        assert fake.total_calls() - before == quiet + 1  # nvmlDeviceGetUUID, nothing else


def test_mig_devices_that_lack_a_reading_are_logged_once_per_gpu() -> None:
    scenario = "gpu_count: 2\ngpu_defaults: {model: H100-SXM5-80GB, mig: [3g.40gb, 1g.10gb]}\n"
    with rig(scenario, "DCGM_FI_DEV_FB_USED, gauge, f\n") as (sampler, fake, clock, logs):
        for symbol in ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2"):
            fake.inject_error(symbol, "NotSupported")
        assert sampler.initialise()
        for _ in range(2):
            clock.t += 1.0
            sampler.run_cycle()
    lines = [(level, message, fields) for level, message, fields in events(logs, logging.INFO)
             if "MIG devices" in message]
    assert lines == [("INFO", "reading not supported on this GPU's MIG devices; it is omitted",
                      {"gpu": gpu, "reading": "memory"}) for gpu in (0, 1)]


def test_a_failing_mig_layout_check_is_logged_as_that_reading() -> None:
    scenario = "gpu_defaults: {model: H100-SXM5-80GB, mig: [3g.40gb]}\n"
    with rig(scenario, TEMPERATURE) as (sampler, fake, clock, logs):
        fake.inject_error("nvmlDeviceGetMigMode", "Timeout", gpu=0)
        assert sampler.initialise()
        clock.t += 1.0
        assert "DCGM_FI_DEV_GPU_TEMP" in sampler.run_cycle().devices[0].values  # the GPU is still read
    assert [fields for _level, message, fields in events(logs, logging.WARNING)] == [
        {"gpu": 0, "reading": "MIG layout", "error": "NVMLError_Timeout: Timeout"}]


def test_only_the_profiling_rows_whose_metric_a_gpu_lacks_are_listed_unsupported() -> None:
    scenario = "gpu_defaults: {model: H100-SXM5-80GB, features: {nvlink_links: 0}}\n"  # Hopper without NVLink
    csv = GR_ENGINE + "DCGM_FI_PROF_NVLINK_TX_BYTES, gauge, n\n"
    with rig(scenario, csv) as (sampler, _fake, clock, _logs):
        assert sampler.initialise()
        for _ in range(3):
            clock.t += 1.0
            snapshot = sampler.run_cycle()
    assert snapshot.status.unsupported_fields == ((0, "DCGM_FI_PROF_NVLINK_TX_BYTES"),)
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in snapshot.devices[0].values


def test_mig_instances_of_a_gpu_without_gpm_are_not_sampled() -> None:
    scenario = "gpu_defaults: {model: A100-SXM4-80GB, mig: [3g.40gb, 4g.40gb]}\n"
    with rig(scenario, GR_ENGINE) as (sampler, fake, clock, logs):
        assert sampler.initialise()
        for _ in range(3):
            clock.t += 1.0
            sampler.run_cycle()
        assert fake.calls["nvmlGpmMigSampleGet"] == 0
    assert [message for _level, message, _fields in events(logs, logging.WARNING)] == [
        "profiling metrics need NVML GPM (Hopper or newer), which this GPU does not support; their rows are "
        "omitted for it"]
