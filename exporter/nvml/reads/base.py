"""What every kind of NVML read shares: the interface, one GPU's state, one cycle's readings, failures.

A read (``DeviceRead``) says which parts of the cycle it ``produces`` (and ``needs`` from reads
before it), whether the sampling plan has it run at all (``chosen``), whether this GPU can answer it
(``supported``: False skips it without an NVML call), and reads (``read``) into the ``DeviceCycle``.
Failures are sorted by one function (``handle_error``): unsupported (omitted, logged once),
transient (skipped this cycle), a lost GPU or NVML gone (raised: the sampler ends the GPU's or the
whole cycle).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from exporter.logs import StateLog
from exporter.metrics.catalog import FromFieldRate
from exporter.nvml.client import ErrorClass, NvmlClient, classify, describe
from exporter.nvml.gpm import GpmReader
from exporter.nvml.inventory import Device
from exporter.nvml.mig import MigTracker
from exporter.nvml.peaks import DEFAULT_WINDOW_S, DevicePeaks
from exporter.nvml.plan import SamplingPlan
from exporter.nvml.process_utilization import ProcessUtilizationReader
from exporter.nvml.queries import QueryState
from exporter.snapshot import GpuProcess, MigReading, ProcessUtilization


class DeviceLostError(Exception):
    """The GPU stopped answering (GpuIsLost, Unknown, ResetRequired): its cycle ends, it is re-probed later."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NvmlDownError(Exception):
    """NVML itself went away: the whole cycle ends and the sampler initialises again."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class DeviceState:
    """Mutable per-GPU bookkeeping, owned by the sampling thread only."""

    device: Device
    query_state: QueryState = field(default_factory=QueryState)
    unsupported_queries: set[str] = field(default_factory=set)
    unsupported_fields: set[tuple[int, int]] = field(default_factory=set)
    static_results: dict[str, dict[str, float]] | None = None
    previous_fields: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    lost_reason: str = ""
    lost_checked_at: float = 0.0
    processes: tuple[GpuProcess, ...] | None = None
    processes_read_at: float = float("-inf")
    utilization: ProcessUtilizationReader = field(default_factory=ProcessUtilizationReader)
    process_utilization: ProcessUtilization | None = None  # the last read's, kept until the next one
    mig: MigTracker = field(default_factory=MigTracker)
    mig_query_state: QueryState = field(default_factory=QueryState)
    mig_unsupported_queries: set[str] = field(default_factory=set)  # not asked again until the layout changes
    gpm: GpmReader = field(default_factory=GpmReader)
    peaks: DevicePeaks = field(default_factory=lambda: DevicePeaks(DEFAULT_WINDOW_S))
    mig_peaks: dict[int, DevicePeaks] = field(default_factory=dict)  # by GPU-instance id; reset with the layout

    # What this GPU answered NotSupported to, as the catalog's Read variants ask it (``Unsupported``).

    @property
    def gpm_supported(self) -> bool | None:
        return self.gpm.supported

    def query_unsupported(self, query: str) -> bool:
        return query in self.unsupported_queries

    def field_unsupported(self, key: tuple[int, int]) -> bool:
        return key in self.unsupported_fields

    def gpm_metric_unsupported(self, metric_id: int) -> bool:
        return any(metric == metric_id for _, metric in self.gpm.unsupported_metrics)


@dataclass
class DeviceCycle:
    """What one cycle read from one GPU, filled by the reads in order; the catalog's ``Read`` variants take
    it as ``CycleValues`` (``query_item``, ``field``, ``gpm``, ``rate``).

    ``rate`` keeps one remembered sample per rate definition in the GPU's state, so a rate needs
    two cycles; a counter that went backwards (driver reload, GPU reset) restarts it.
    """

    state: DeviceState
    now: float
    results: dict[str, dict[str, float]] = field(default_factory=dict)
    field_values: dict[tuple[int, int], float] = field(default_factory=dict)
    field_times: dict[tuple[int, int], float] = field(default_factory=dict)
    gpm_values: dict[int, float] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    processes: tuple[GpuProcess, ...] | None = None
    mig: tuple[MigReading, ...] = ()

    @property
    def gpm_supported(self) -> bool | None:
        return self.state.gpm.supported

    def query_item(self, query: str, item: str) -> float | None:
        return self.results.get(query, {}).get(item)

    def field(self, key: tuple[int, int]) -> float | None:
        return self.field_values.get(key)

    def gpm(self, metric_id: int) -> float | None:
        return self.gpm_values.get(metric_id)

    def rate(self, read: FromFieldRate) -> float | None:
        keys = read.field_keys
        if any(key not in self.field_values for key in keys):
            return None
        total = sum(self.field_values[key] for key in keys)
        stamp = max(self.field_times[key] for key in keys)
        rate_key = (-1, hash(read))  # one remembered sample per rate definition
        previous = self.state.previous_fields.get(rate_key)
        self.state.previous_fields[rate_key] = (total, stamp)
        if previous is None or stamp <= previous[1] or total < previous[0]:
            return None  # first sample, no time passed, or the counter was reset
        return (total - previous[0]) / (stamp - previous[1])


@dataclass(frozen=True)
class ReadContext:
    """What the sampler lends every read for one cycle: NVML, the plan, clocks, settings, its log."""

    nvml: NvmlClient
    plan: SamplingPlan
    clock: Callable[[], float]
    wall: Callable[[], float]
    log: StateLog
    process_interval_s: float | None  # None: process lists are not read
    peak_window_s: float

    def handle_error(self, state: DeviceState, exc: Exception, what: str) -> bool:
        """Log and classify a failed reading; True when it is unsupported (stop asking for it).

        Raises DeviceLostError / NvmlDownError for failures that end the GPU's or NVML's cycle.
        """
        kind = classify(exc)
        reason = describe(exc)
        identity = state.device.identity
        if kind is ErrorClass.UNSUPPORTED:
            self.log.once(("unsupported", identity.uuid, what), logging.INFO,
                          "reading not supported on this GPU; it is omitted and not asked again",
                          gpu=identity.index, reading=what, error=reason)
            return True
        if kind is ErrorClass.DEVICE_LOST:
            raise DeviceLostError(reason) from None
        if kind is ErrorClass.NVML_DOWN:
            raise NvmlDownError(reason) from None
        self.log.once(("transient", identity.uuid, what, reason), logging.WARNING,
                      "reading failed; skipped this cycle", gpu=identity.index, reading=what, error=reason)
        return False


class DeviceRead(Protocol):
    """One kind of NVML read (see the module docstring); the sampler runs the chosen ones in order."""

    name: str
    needs: frozenset[str]  # parts of the DeviceCycle earlier reads must have produced
    produces: frozenset[str]  # parts of the DeviceCycle (or of the GPU's state) this read fills

    def chosen(self, context: ReadContext) -> bool:
        """Whether this cycle's plan (and the sampler's settings) need this read at all."""
        ...

    def supported(self, state: DeviceState) -> bool:
        """Whether this GPU can answer (False: skipped without an NVML call, e.g. a GPU without GPM)."""
        ...

    def read(self, context: ReadContext, cycle: DeviceCycle) -> None:
        """Read the GPU of ``cycle.state`` into ``cycle``; raises only DeviceLostError / NvmlDownError."""
        ...
