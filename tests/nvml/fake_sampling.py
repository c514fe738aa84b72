"""A Sampler reading the fake NVML library, both on one clock the test moves by hand."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pynvml
from prometheus_client.core import Metric

from exporter.metrics.counters import CounterSet, default_counters_text, parse_counters
from exporter.metrics.render import RenderContext, RenderOptions, render
from exporter.nvml.sampler import Sampler
from exporter.snapshot import Snapshot
from simulator.fakenvml import FIXED_WALL_EPOCH, FakeNvmlLibrary
from simulator.scenario import load_scenario, parse_scenario


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Rig:
    """What a test drives: ``cycle(at)`` runs one sampling cycle at scenario time ``at``."""

    def __init__(self, fake: FakeNvmlLibrary, sampler: Sampler, clock: Clock, counters: CounterSet) -> None:
        self.fake = fake
        self.sampler = sampler
        self.clock = clock
        self.counters = counters

    def cycle(self, at: float) -> Snapshot:
        self.clock.t = at
        return self.sampler.run_cycle()

    def render(self) -> list[Metric]:
        return render(RenderContext(snapshot=self.sampler.snapshot, counters=self.counters,
                                    options=RenderOptions(hostname="node-1")))


def samples(families: Sequence[Metric], name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(sample.labels), sample.value) for family in families for sample in family.samples
            if sample.name == name]


@contextmanager
def sampling(scenario: str, extra_rows: str = "", *, mig_check_interval_s: float = 60.0,
             process_interval_s: float | None = None) -> Iterator[Rig]:
    """Install a fake for ``scenario`` (built-in name or YAML text) and initialise a Sampler on it.

    The counters are the built-in default CSV plus ``extra_rows`` (CSV text). With
    ``process_interval_s`` the sampler reads process lists and per-process utilization, and its wall
    clock moves with the scenario clock (NVML's per-process samples carry wall-clock timestamps).
    """
    loaded = parse_scenario(scenario, "test.yaml", "test") if "\n" in scenario else load_scenario(scenario)
    clock = Clock()
    fake = FakeNvmlLibrary(loaded, clock)
    fake.install()
    counters = parse_counters(default_counters_text() + extra_rows, "test.csv")
    wall = (lambda: FIXED_WALL_EPOCH + clock.t) if process_interval_s is not None else (lambda: FIXED_WALL_EPOCH)
    sampler = Sampler(counters.field_specs(), 1.0, clock=clock, wall_clock=wall,
                      mig_check_interval_s=mig_check_interval_s, process_interval_s=process_interval_s)
    try:
        assert sampler.initialise()
        yield Rig(fake, sampler, clock, counters)
    finally:
        while pynvml.nvmlLib is fake and pynvml._nvmlLib_refcount > 0:
            pynvml.nvmlShutdown()
        fake.uninstall()


class Records(logging.Handler):
    """Collects the exporter's log records (its loggers do not always propagate to pytest's)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self, level: int = logging.DEBUG) -> list[str]:
        return [record.getMessage() for record in self.records if record.levelno >= level]


@contextmanager
def captured_logs(name: str = "gpu_pod_exporter") -> Iterator[Records]:
    logger = logging.getLogger(name)
    handler = Records()
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
