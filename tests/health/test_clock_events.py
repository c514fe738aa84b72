"""Clock-event episodes from the per-cycle reasons bitmask: edge counting and the sliding window."""

from __future__ import annotations

from exporter.health.clock_events import ClockEventTracker
from exporter.snapshot import DeviceIdentity, DeviceReading, SamplerStatus, Snapshot
from tests.simulator.conftest import FixedClock

GPU0 = DeviceIdentity(index=0, uuid="GPU-0", pci_bus_id="00000000:8D:00.0", minor=0, model="H100")
GPU1 = DeviceIdentity(index=1, uuid="GPU-1", pci_bus_id="00000000:9D:00.0", minor=1, model="H100")
POWER_CAP, HW_SLOWDOWN, HW_THERMAL = 0x4, 0x8, 0x40


def snapshot(t: float, *masks: int | None, up: bool = True) -> Snapshot:
    readings = tuple(
        DeviceReading(identity=identity, up=up,
                      values={} if mask is None else {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": mask})
        for identity, mask in zip((GPU0, GPU1), masks, strict=False))
    return Snapshot(devices=readings, status=SamplerStatus(nvml_up=True, last_sample_monotonic=t))


def test_totals_count_inactive_to_active_edges_per_reason() -> None:
    tracker = ClockEventTracker(300.0, FixedClock(100.0))
    for t, mask in ((1, 0), (2, POWER_CAP), (3, POWER_CAP), (4, 0), (5, POWER_CAP | HW_SLOWDOWN | HW_THERMAL),
                    (6, HW_SLOWDOWN | HW_THERMAL), (7, 0)):
        tracker.observe(snapshot(t, mask))
    tallies = tracker.view()["GPU-0"]
    assert tallies["power_cap"].total == 2
    assert tallies["hw_slowdown"].total == 1 and tallies["hw_thermal"].total == 1
    assert tallies["sw_thermal"].total == 0 and tallies["gpu_idle"].total == 0
    assert set(tallies) == {"gpu_idle", "clocks_setting", "power_cap", "hw_slowdown", "sync_boost", "sw_thermal",
                            "hw_thermal", "hw_power_brake", "display_clocks"}


def test_a_reason_already_active_at_start_counts_once() -> None:
    tracker = ClockEventTracker(300.0, FixedClock(10.0))
    for t in (1, 2, 3):
        tracker.observe(snapshot(t, POWER_CAP))
    assert tracker.view()["GPU-0"]["power_cap"].total == 1


def test_the_window_counts_episodes_overlapping_it_and_decays_after() -> None:
    clock = FixedClock()
    tracker = ClockEventTracker(10.0, clock)
    for t, mask in ((0, POWER_CAP), (1, 0), (2, POWER_CAP), (3, 0)):
        tracker.observe(snapshot(t, mask))
    clock.t = 5.0
    assert tracker.view()["GPU-0"]["power_cap"].in_window == 2
    clock.t = 11.0  # the first episode ended at 1 s: out of the window; the second ended at 3 s
    assert tracker.view()["GPU-0"]["power_cap"].in_window == 1
    clock.t = 13.0
    tally = tracker.view()["GPU-0"]["power_cap"]
    assert (tally.in_window, tally.total) == (0, 2)


def test_an_episode_still_going_counts_one_however_long_ago_it_started() -> None:
    clock = FixedClock()
    tracker = ClockEventTracker(10.0, clock)
    tracker.observe(snapshot(0, POWER_CAP))
    clock.t = 3600.0
    tracker.observe(snapshot(3600, POWER_CAP))
    assert tracker.view()["GPU-0"]["power_cap"].in_window == 1


def test_gpus_without_the_bitmask_and_lost_gpus_have_no_edges() -> None:
    tracker = ClockEventTracker(10.0, FixedClock())
    tracker.observe(snapshot(0, POWER_CAP, None))
    tracker.observe(snapshot(1, 0, None, up=False))  # lost: nothing changes for either GPU
    view = tracker.view()
    assert set(view) == {"GPU-0"}
    assert view["GPU-0"]["power_cap"].in_window == 1
