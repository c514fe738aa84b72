"""The sampler's reads as plug-ins: ordered by what they need, chosen by the plan, one more plugs in."""

from __future__ import annotations

import logging
from typing import Any

from exporter.logs import StateLog
from exporter.metrics.counters import parse_counters
from exporter.nvml.client import NvmlClient
from exporter.nvml.plan import SamplingPlan
from exporter.nvml.reads import READS, chosen_reads
from exporter.nvml.reads.base import DeviceCycle, DeviceState, ReadContext
from exporter.nvml.sampler import Sampler
from tests.simulator.conftest import FixedClock

PROFILING = "DCGM_FI_PROF_SM_ACTIVE, gauge, a\n"
TEMPERATURE = "DCGM_FI_DEV_GPU_TEMP, gauge, t\n"


def context_for(csv: str, process_interval_s: float | None = None) -> ReadContext:
    plan = SamplingPlan.for_specs(parse_counters(csv, "c.csv").field_specs())
    return ReadContext(nvml=NvmlClient(lambda: 0.0), plan=plan, clock=lambda: 0.0, wall=lambda: 0.0,
                       log=StateLog(logging.getLogger("test")), process_interval_s=process_interval_s,
                       peak_window_s=60.0)


def test_each_read_comes_after_the_reads_that_produce_what_it_needs() -> None:
    produced: set[str] = set()
    for read in READS:
        assert read.needs <= produced, f"{read.name} needs {sorted(read.needs - produced)} before it runs"
        produced |= read.produces


def test_the_plan_chooses_which_reads_run() -> None:
    def names(context: ReadContext) -> list[str]:
        return [read.name for read in chosen_reads(context)]

    temperature = names(context_for(TEMPERATURE))
    assert "GPM" not in temperature and "processes" not in temperature  # no profiling row, no process interval
    assert "GPM" in names(context_for(TEMPERATURE + PROFILING))
    assert "processes" in names(context_for(TEMPERATURE, process_interval_s=10.0))
    assert names(context_for(TEMPERATURE))[0] == "MIG layout"  # the layout decides what exists: always first


class PowerLimitFraction:
    """An example read added without touching the Sampler: power draw over the limit, from this cycle's values."""

    name = "power fraction"
    needs = frozenset({"values"})
    produces = frozenset({"values"})

    def __init__(self) -> None:
        self.asked: list[int] = []

    def chosen(self, context: ReadContext) -> bool:
        return True

    def supported(self, state: DeviceState) -> bool:
        self.asked.append(state.device.identity.index)
        return state.device.identity.index == 0  # as if only GPU 0 could answer

    def read(self, context: ReadContext, cycle: DeviceCycle) -> None:
        cycle.values["EXAMPLE_POWER_FRACTION"] = cycle.values["DCGM_FI_DEV_POWER_USAGE"] / 1000.0


def test_a_new_kind_of_read_plugs_in_and_is_skipped_where_unsupported(nvml: Any, clock: FixedClock) -> None:
    nvml("gpu_count: 2\ngpus:\n  0: {model: A100-SXM4-80GB}\n  1: {model: A100-SXM4-80GB}\n", init=False)
    counters = parse_counters("DCGM_FI_DEV_POWER_USAGE, gauge, p\n", "c.csv")
    extra = PowerLimitFraction()
    sampler = Sampler(counters.field_specs(), 1.0, clock=clock, reads=(*READS, extra))
    assert sampler.initialise()
    gpu0, gpu1 = sampler.run_cycle().devices
    assert gpu0.values["EXAMPLE_POWER_FRACTION"] == gpu0.values["DCGM_FI_DEV_POWER_USAGE"] / 1000.0
    assert "EXAMPLE_POWER_FRACTION" not in gpu1.values and "DCGM_FI_DEV_POWER_USAGE" in gpu1.values
    assert extra.asked == [0, 1]
