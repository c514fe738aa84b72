"""End to end: the shipped GpuMemoryNearlyFull rule, in a real Prometheus, fires on memory spikes between
scrapes that the plain framebuffer gauge never shows.

The exposition is the real renderer's, over a real sampler reading the fake NVML library. Each scrape
stands for a scrape 30 s after the previous one: before answering, the target runs 30 sampling cycles
on an injected scenario clock (no sleeping). The GPU's memory jumps from 60 GiB (75 %) to 78 GiB (98 %)
for 5 s of every 30 s and is back at 60 GiB at every scrape. The rule file is the shipped one, with only
that alert's ``for: 10m`` shortened so the test does not wait ten minutes of wall time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.metrics.counters import load_counters
from exporter.metrics.exposition import encode_text
from exporter.metrics.render import RenderContext, RenderOptions, render
from exporter.nvml.sampler import Sampler
from simulator.fakenvml import installed
from simulator.scenario import parse_scenario
from tests.support.prometheus import RULE_FILES, PrometheusHarness, require_prometheus, serve_metrics

ALERTS_FILE = next(path for path in RULE_FILES if path.name == "gpu-pod-exporter-alerts.yaml")
SCRAPE_GAP_S = 30
SPIKY = """
description: memory that spikes for 5 s of every 30 s, calm at every scrape
gpu_count: 1
gpu_defaults: {model: H100-SXM5-80GB}
gpus:
  0:
    memory_used: {pattern: square, low: 60GiB, high: 78GiB, period: 30s, duty: 0.16}
"""
PLAIN_RATIO = ("DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE"
               " + (DCGM_FI_DEV_FB_RESERVED or DCGM_FI_DEV_FB_USED * 0))")


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class SpikyTarget:
    """A scrape target whose every scrape is 30 scenario seconds after the last (spike in between)."""

    def __init__(self, sampler: Sampler, clock: Clock) -> None:
        self.sampler = sampler
        self.clock = clock
        self.lock = threading.Lock()

    def render(self) -> bytes:
        with self.lock:
            for _ in range(SCRAPE_GAP_S):
                self.clock.now += 1.0
                self.sampler.run_cycle()
            context = RenderContext(snapshot=self.sampler.snapshot, counters=load_counters(None),
                                    options=RenderOptions(hostname="node-a"))
            return encode_text(render(context))


@pytest.fixture
def alert_rules_without_the_wait(tmp_path: Path) -> Path:
    text = ALERTS_FILE.read_text(encoding="utf-8")
    start = text.index("- alert: GpuMemoryNearlyFull")
    wait = text.index("for: 10m", start)
    assert wait < text.index("- alert:", start + 1)  # the rule's own `for`, not the next rule's
    copy = tmp_path / ALERTS_FILE.name
    copy.write_text(text[:wait] + "for: 0s" + text[wait + len("for: 10m"):], encoding="utf-8")
    return copy


@pytest.fixture
def spiky_target() -> Iterator[SpikyTarget]:
    clock = Clock(100.0)  # t % 30 == 10 at every scrape: the 5 s spike (t % 30 < 5) lies between scrapes
    with installed(parse_scenario(SPIKY, "spiky.yaml", "spiky"), clock):
        sampler = Sampler(load_counters(None).field_specs(), 1.0, clock=clock, peak_window_s=float(SCRAPE_GAP_S))
        assert sampler.initialise()
        yield SpikyTarget(sampler, clock)


def test_memory_nearly_full_fires_on_spikes_the_plain_gauge_misses(
        alert_rules_without_the_wait: Path, spiky_target: SpikyTarget) -> None:
    require_prometheus()
    with serve_metrics(spiky_target.render) as target, \
            PrometheusHarness([target], rule_files=[alert_rules_without_the_wait]) as prom:
        prom.wait_for_targets_up(deadline_s=60)
        firing = prom.wait_for('ALERTS{alertname="GpuMemoryNearlyFull", alertstate="firing"}', bool,
                               deadline_s=90)
        assert firing[0].labels["gpu"] == "0" and firing[0].labels["Hostname"] == "node-a"
        [peak] = prom.query("DCGM_EXP_FB_USED_PEAK")
        [sample] = prom.query("max_over_time(DCGM_FI_DEV_FB_USED[10m])")
        # Every sample Prometheus stored shows 60 GiB: judged on the plain gauge the alert stays silent.
        assert sample.value == 60 * 1024
        assert prom.query(f"max_over_time(({PLAIN_RATIO})[10m:1s]) > 0.95") == []
        assert peak.value == 78 * 1024
