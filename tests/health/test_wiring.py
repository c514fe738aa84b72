"""The health telemetry wired into a real App on the fake NVML library: events reach the exposition."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import App
from exporter.composition import health_settings, render_options, sampler_settings, serve_settings
from exporter.config import load_config
from exporter.health.wiring import HealthTelemetry
from exporter.hub import Hub
from exporter.metrics.counters import load_counters
from exporter.nvml import events as events_module
from exporter.nvml import sampler as sampler_module
from simulator.fakenvml import FakeNvmlLibrary
from simulator.scenario import parse_scenario
from tests.support.polling import wait_for

HEALTH_CSV = str(Path(__file__).resolve().parents[1] / "fixtures" / "health-counters.csv")
DEADLINE_S = 15.0


class Running:
    def __init__(self, app: App, fake: FakeNvmlLibrary, telemetry: HealthTelemetry) -> None:
        self.app, self.fake, self.telemetry = app, fake, telemetry

    def samples(self, name: str) -> dict[tuple[str, ...], float]:
        text = self.app.cache.current.body(openmetrics=False, compressed=False).decode()
        found: dict[tuple[str, ...], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                # prometheus-client's parser appends _total to counter samples that lack it
                if sample.name in (name, f"{name}_total"):
                    labels = dict(sample.labels)
                    found[(labels["gpu"], labels.get("xid", labels.get("reason", "")))] = sample.value
        return found


@pytest.fixture
def running() -> Iterator[Running]:
    config = load_config(["--address", "127.0.0.1:0", "-c", "100", "--collectors", HEALTH_CSV, "-x", "60000"])
    counters = load_counters(HEALTH_CSV)
    fake = FakeNvmlLibrary(parse_scenario("gpu_count: 4\n", "storm.yaml", "storm"))
    hub = Hub(counters, sampler_settings(config), render_options(config))
    hub.add_service(fake.install, fake.uninstall, before_nvml=True)
    telemetry = HealthTelemetry(health_settings(config), counters, wait_timeout_ms=50)
    telemetry.install(hub)
    app = App(hub, serve_settings(config), config)
    app.start()
    try:
        yield Running(app, fake, telemetry)
    finally:
        app.stop()
        fake.release_hangs()


def test_an_xid_storm_reaches_the_exposition_counted_exactly(running: Running) -> None:
    wait_for(lambda: running.telemetry.watcher.registered_gpus == (0, 1, 2, 3), DEADLINE_S, "event registration")
    # Registration now comes before the first sampling cycle: wait for the first snapshot's series.
    zeros = {("0", ""): 0, ("1", ""): 0, ("2", ""): 0, ("3", ""): 0}
    wait_for(lambda: running.samples("DCGM_FI_DEV_XID_ERRORS") == zeros, DEADLINE_S, "every GPU's Xid gauge at 0")
    running.fake.inject_xid(0, 31, count=60)
    running.fake.inject_xid(1, 13, count=40)
    expected = {("0", "31"): 60, ("1", "13"): 40}
    wait_for(lambda: running.samples("DCGM_EXP_XID_ERRORS_TOTAL") == expected, DEADLINE_S, "exact totals")
    counts = running.samples("DCGM_EXP_XID_ERRORS_COUNT")
    assert counts == {("0", "31"): 60, ("1", "13"): 40, ("2", ""): 0, ("3", ""): 0}
    assert running.samples("DCGM_EXP_GPU_HEALTHY") == {("0", "ok"): 1, ("1", "ok"): 1, ("2", "ok"): 1, ("3", "ok"): 1}


def test_a_fatal_xid_then_a_lost_gpu_turn_its_health_gauge_to_zero(running: Running) -> None:
    wait_for(lambda: running.telemetry.watcher.registered_gpus == (0, 1, 2, 3), DEADLINE_S, "event registration")
    running.fake.inject_xid(3, 79)
    wait_for(lambda: running.samples("DCGM_EXP_GPU_HEALTHY").get(("3", "fatal_xid")) == 0, DEADLINE_S,
             "reason fatal_xid")
    running.fake.lose_gpu(3)
    wait_for(lambda: running.samples("DCGM_EXP_GPU_HEALTHY").get(("3", "gpu_lost")) == 0, DEADLINE_S,
             "reason gpu_lost")
    assert running.samples("DCGM_EXP_GPU_HEALTHY") == {("0", "ok"): 1, ("1", "ok"): 1, ("2", "ok"): 1,
                                                       ("3", "gpu_lost"): 0}


@pytest.fixture
def fast_recovery(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lost GPUs are probed again after 0.2 s instead of 30 s (set before the app is built)."""
    monkeypatch.setattr(sampler_module, "LOST_REPROBE_S", 0.2)
    monkeypatch.setattr(events_module, "REREGISTER_S", 0.2)


def test_a_gpu_that_comes_back_has_its_series_health_and_xid_history_again(fast_recovery: None,
                                                                           running: Running) -> None:
    wait_for(lambda: running.telemetry.watcher.registered_gpus == (0, 1, 2, 3), DEADLINE_S, "event registration")
    running.fake.inject_xid(3, 31, count=2)
    wait_for(lambda: running.samples("DCGM_EXP_XID_ERRORS_TOTAL") == {("3", "31"): 2}, DEADLINE_S, "Xid 31 twice")
    running.fake.lose_gpu(3)
    wait_for(lambda: running.samples("DCGM_EXP_GPU_HEALTHY").get(("3", "gpu_lost")) == 0, DEADLINE_S,
             "reason gpu_lost")
    assert ("3", "") not in running.samples("DCGM_FI_DEV_GPU_TEMP")  # no readings from a lost GPU
    running.fake.restore_gpu(3)
    wait_for(lambda: running.samples("DCGM_EXP_GPU_HEALTHY").get(("3", "ok")) == 1, DEADLINE_S, "reason ok again")
    assert ("3", "") in running.samples("DCGM_FI_DEV_GPU_TEMP")
    assert running.samples("DCGM_EXP_XID_ERRORS_TOTAL") == {("3", "31"): 2}  # history kept across the loss
    wait_for(lambda: running.telemetry.watcher.registered_gpus == (0, 1, 2, 3), DEADLINE_S, "registered again")
    running.fake.inject_xid(3, 43)
    wait_for(lambda: running.samples("DCGM_EXP_XID_ERRORS_TOTAL") == {("3", "31"): 2, ("3", "43"): 1}, DEADLINE_S,
             "an Xid after the return")


def test_stopping_the_app_frees_the_event_set(running: Running) -> None:
    wait_for(lambda: running.fake.open_event_sets == 1, DEADLINE_S, "the event set")
    running.app.stop()
    assert running.fake.open_event_sets == 0 and not running.telemetry.watcher.running


def test_an_xid_raised_while_the_rest_of_start_up_runs_is_counted() -> None:
    """NVML delivers only events raised after registration. Here the start-up after NVML init is slow
    (another source takes 2 scenario seconds to connect, as a Kubernetes API server can under load),
    and GPU 1 raises a fatal Xid 1 s into it: the exporter still counts it, because the event set is
    registered right after NVML init, before anything slow starts."""
    now = [0.0]  # scenario time: moves only when the slow start-up step says so
    scenario = parse_scenario("gpu_count: 2\nxid_events:\n  - {gpu: 1, xid: 79, at: 1s}\n", "early.yaml", "early")
    fake = FakeNvmlLibrary(scenario, clock=lambda: now[0])

    def slow_source_start() -> None:
        now[0] = 2.0  # the Xid at 1 s happens while this source is still starting

    config = load_config(["--address", "127.0.0.1:0", "-c", "100", "--collectors", HEALTH_CSV, "-x", "60000"])
    counters = load_counters(HEALTH_CSV)
    hub = Hub(counters, sampler_settings(config), render_options(config))
    hub.add_service(fake.install, fake.uninstall, before_nvml=True)
    hub.add_service(slow_source_start, lambda: None)
    telemetry = HealthTelemetry(health_settings(config), counters, wait_timeout_ms=50)
    telemetry.install(hub)  # the watcher's thread starts after the slow step
    app = App(hub, serve_settings(config), config)
    app.start()
    try:
        running = Running(app, fake, telemetry)
        wait_for(lambda: running.samples("DCGM_EXP_XID_ERRORS_TOTAL") == {("1", "79"): 1}, DEADLINE_S,
                 "the start-up Xid counted")
        wait_for(lambda: running.samples("DCGM_FI_DEV_XID_ERRORS").get(("1", "")) == 79, DEADLINE_S,
                 "the last Xid of GPU 1")
        assert running.samples("DCGM_EXP_GPU_HEALTHY").get(("1", "fatal_xid")) == 0
    finally:
        app.stop()
