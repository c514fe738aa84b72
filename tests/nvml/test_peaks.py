"""Peaks between scrapes: the trailing-window maximum, and a spike that falls between two scrapes."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from exporter.metrics.counters import load_counters
from exporter.metrics.exposition import encode_text
from exporter.metrics.render import RenderContext, RenderOptions, render
from exporter.nvml.peaks import DevicePeaks, WindowMax
from exporter.nvml.sampler import Sampler
from simulator.fakenvml import installed
from simulator.scenario import parse_scenario
from tests.nvml.test_sampler import Clock

MIB = 1024 * 1024

# One GPU whose framebuffer use (and power) jumps for 5 s, at t=112..117, between scrapes at t=100 and t=130.
SPIKE = """
description: a 5-second framebuffer and power spike
gpu_count: 1
gpu_defaults: {model: H100-SXM5-80GB}
gpus:
  0:
    memory_used: {pattern: steps, steps: [[0, 20GiB], [112s, 76GiB], [117s, 20GiB]]}
    power: {pattern: steps, steps: [[0, 300W], [112s, 500W], [117s, 300W]]}
    temperature: 45
    load: 30
"""


def test_window_max_keeps_the_highest_sample_of_the_window_only() -> None:
    window = WindowMax(10.0)
    assert [window.add(t, value) for t, value in ((0, 5), (1, 9), (2, 3), (3, 4))] == [5, 9, 9, 9]
    assert window.add(11.0, 1) == 4  # t=1's 9 left the window at t=11; 4 (t=3) is the highest left
    assert window.add(14.0, 2) == 2  # everything older than 10 s is gone, the newest sample counts
    assert len(window) == 1


def test_window_max_holds_only_a_falling_sequence() -> None:
    window = WindowMax(1000.0)
    for t in range(500):
        window.add(float(t), float(t % 7))  # a sawtooth: each new 6 makes older smaller values useless
    assert len(window) <= 7


def test_a_missing_reading_publishes_no_peak_but_its_window_keeps_the_samples_before_the_gap() -> None:
    peaks = DevicePeaks(60.0)
    assert peaks.add(0.0, {"DCGM_FI_DEV_FB_USED": 900, "DCGM_FI_DEV_SM_CLOCK": 1980}) == {"DCGM_FI_DEV_FB_USED": 900}
    assert peaks.add(1.0, {}) == {}  # a failed read: no sample, so no peak beside it either
    assert peaks.add(2.0, {"DCGM_FI_DEV_FB_USED": 100}) == {"DCGM_FI_DEV_FB_USED": 900}  # the spike before the gap
    assert peaks.add(61.0, {"DCGM_FI_DEV_FB_USED": 100}) == {"DCGM_FI_DEV_FB_USED": 100}  # ... until it ages out


def _scrape(sampler: Sampler) -> dict[str, float]:
    """What Prometheus stores from one scrape of GPU 0: the exposition text, parsed."""
    context = RenderContext(snapshot=sampler.snapshot, counters=load_counters(None),
                            options=RenderOptions(hostname="node-1"))
    text = encode_text(render(context)).decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.labels.get("gpu") in ("0", None)}


def test_a_five_second_spike_between_two_scrapes_30_s_apart_shows_in_the_second() -> None:
    clock = Clock(start=100.0)
    with installed(parse_scenario(SPIKE, "spike.yaml", "spike"), clock):
        sampler = Sampler(load_counters(None).field_specs(), 1.0, clock=clock, peak_window_s=30.0)
        assert sampler.initialise()
        scrapes: dict[float, dict[str, float]] = {}
        while clock.now <= 150.0:  # one sampling cycle per scenario second, no sleeping
            sampler.run_cycle()
            if clock.now in (100.0, 125.0, 130.0, 131.0, 150.0):  # two Prometheus replicas: 100/130, 125/150
                scrapes[clock.now] = _scrape(sampler)
            clock.now += 1.0
    first, second = scrapes[100.0], scrapes[130.0]
    assert first["DCGM_FI_DEV_FB_USED"] == first["DCGM_EXP_FB_USED_PEAK"] == 20 * 1024
    # The plain gauge shows the calm after the spike; the peak shows the spike itself.
    assert second["DCGM_FI_DEV_FB_USED"] == 20 * 1024
    assert second["DCGM_EXP_FB_USED_PEAK"] == 76 * 1024
    assert second["DCGM_FI_DEV_POWER_USAGE"] == 300 and second["DCGM_EXP_POWER_USAGE_PEAK"] == 500
    assert second["DCGM_EXP_GPU_TEMP_PEAK"] == 45 and second["DCGM_EXP_GPU_UTIL_PEAK"] == 30
    assert second["gpu_pod_exporter_peak_window_seconds"] == 30
    # A second replica scraping at other moments sees the same spike (a scrape resets nothing) ...
    assert scrapes[125.0]["DCGM_EXP_FB_USED_PEAK"] == 76 * 1024
    assert scrapes[131.0]["DCGM_EXP_FB_USED_PEAK"] == 76 * 1024
    # ... and once the spike is older than the window, the peak is the calm level again.
    assert scrapes[150.0]["DCGM_EXP_FB_USED_PEAK"] == 20 * 1024


def test_a_lost_gpu_restarts_its_peaks() -> None:
    scenario = SPIKE + "faults:\n  - {type: gpu_lost, gpu: 0, at: 120s, until: 125s}\n"
    clock = Clock(start=110.0)
    with installed(parse_scenario(scenario, "lost.yaml", "lost"), clock):
        sampler = Sampler(load_counters(None).field_specs(), 1.0, clock=clock, peak_window_s=60.0)
        assert sampler.initialise()
        for _ in range(8):  # t=110..117: the spike is sampled
            sampler.run_cycle()
            clock.now += 1.0
        assert sampler.snapshot.devices[0].peaks["DCGM_FI_DEV_FB_USED"] == 76 * 1024
        clock.now = 121.0
        lost = sampler.run_cycle().devices[0]
        assert not lost.up and lost.peaks == {}
        clock.now = 152.0  # after the re-probe delay the GPU answers again
        back = sampler.run_cycle().devices[0]
    assert back.up and back.peaks["DCGM_FI_DEV_FB_USED"] == 20 * 1024  # the spike before the loss is not kept


MIG_SPIKE = """
description: a MIG instance whose framebuffer use spikes for 3 s
gpu_count: 1
gpu_defaults: {model: H100-SXM5-80GB}
gpus:
  0:
    mig:
      - {profile: 3g.40gb, memory_used: {pattern: steps, steps: [[0, 10GiB], [105s, 30GiB], [108s, 10GiB]]}}
      - {profile: 1g.10gb, memory_used: 2GiB}
"""


def test_each_mig_instance_has_its_own_framebuffer_peak_with_its_instance_labels() -> None:
    clock = Clock(start=100.0)
    with installed(parse_scenario(MIG_SPIKE, "mig-spike.yaml", "mig-spike"), clock):
        sampler = Sampler(load_counters(None).field_specs(), 1.0, clock=clock, peak_window_s=30.0)
        assert sampler.initialise()
        while clock.now <= 115.0:
            sampler.run_cycle()
            clock.now += 1.0
        context = RenderContext(snapshot=sampler.snapshot, counters=load_counters(None),
                                options=RenderOptions(hostname="node-1"))
        text = encode_text(render(context)).decode()
    used = {sample.labels.get("GPU_I_PROFILE"): sample for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == "DCGM_FI_DEV_FB_USED"}
    peaks = {sample.labels.get("GPU_I_PROFILE"): sample for family in text_string_to_metric_families(text)
             for sample in family.samples if sample.name == "DCGM_EXP_FB_USED_PEAK"}
    assert set(peaks) == set(used) >= {"3g.40gb", "1g.10gb"}
    assert used["3g.40gb"].value == 10 * 1024 and peaks["3g.40gb"].value == 30 * 1024
    assert peaks["1g.10gb"].value == used["1g.10gb"].value == 2 * 1024
    assert peaks["3g.40gb"].labels == used["3g.40gb"].labels  # GPU_I_ID and all: they divide one to one
