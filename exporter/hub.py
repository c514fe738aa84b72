"""The hub every source installs into: built first, so the exposition cache exists before any source.

The composition root (``exporter.composition``) builds one ``Hub`` from the counters and the core
settings, then hands it to each optional source's ``install(hub, settings)`` (Kubernetes, health,
HPC jobs, ConfigMap counters, simulation), then builds the ``App`` around it. A source never sees the
App and nothing is attached to the App after it is built: everything a source contributes goes
through the registration methods below, and everything it may call back (``invalidate``,
``set_counters``, ``inventory``) exists from the hub's first line.

What a source can contribute, one method each:

* ``add_service(start, stop)``: runs with the app; ``before_nvml`` ones (the simulator's fake library)
  start before the sampler's first NVML initialisation, the others after it, in install order; all
  stop in reverse order;
* ``add_families(builder)``: metric families rendered after the built-in ones;
* ``set_attribution(hook)``: once per render, the join of GPUs to workloads (the Kubernetes
  attribution: at most one per app) and the workload label sets it gives each series;
* ``add_label_source(source)``: once per render, a transform of each series' workload label sets
  (the one way to add a pod label source: docs/extending.md);
* ``on_snapshot(consumer)`` / ``on_inventory(consumer)``: the sampler's published values;
* ``require_readings(specs)``: readings sampled every cycle whatever the counters CSV exports.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import Metric

from exporter.metrics.catalog import FieldSpec
from exporter.metrics.counters import CounterSet
from exporter.metrics.render import DEFAULT_BUILDERS, FamilyBuilder, RenderContext, RenderOptions, owned_family, render
from exporter.nvml.inventory import Inventory
from exporter.nvml.sampler import Sampler
from exporter.snapshot import DeviceIdentity, InFlight, Snapshot
from exporter.supervisor import SUPERVISOR, Supervisor
from exporter.web.cache import ExpositionCache

LabelSets = Sequence[Mapping[str, str]]


class LabelTransform(Protocol):
    """One render's transform of a series' workload label sets (``hub.add_label_source``)."""

    def __call__(self, identity: DeviceIdentity, gpu_instance_id: int | None, label_sets: LabelSets) -> LabelSets:
        """The label sets the series is exported with: ``label_sets`` extended, repeated or unchanged."""


# Called once per render: the transform bound to this render's value of the source, or None to leave
# every series as it is (the source has nothing to add right now).
LabelSource = Callable[[], LabelTransform | None]


class Source(Protocol):
    """An optional source: built from its own settings, then ``install(hub)`` registers what it adds."""

    def install(self, hub: Hub) -> None:
        """Register services, families, label sources and consumers with ``hub``; start nothing yet."""


@dataclass(frozen=True)
class SamplerSettings:
    """What the sampler needs from the configuration (built at the composition root)."""

    interval_s: float
    process_interval_s: float | None  # None: NVML's process lists are not read
    peak_window_s: float


@dataclass(frozen=True)
class _Service:
    start: Callable[[], None]
    stop: Callable[[], None]
    before_nvml: bool


def with_label_sources(ctx: RenderContext, sources: Sequence[LabelSource]) -> RenderContext:
    """``ctx`` whose workload label sets go through each source's transform for this render, in order."""
    transforms = [transform for source in sources if (transform := source()) is not None]
    if not transforms:
        return ctx
    inner = ctx.workloads

    def workloads(identity: DeviceIdentity, gpu_instance_id: int | None) -> LabelSets:
        label_sets = inner(identity, gpu_instance_id)
        for transform in transforms:
            label_sets = transform(identity, gpu_instance_id, label_sets)
        return label_sets

    return dataclasses.replace(ctx, workloads=workloads)


class Hub:
    """The core every source plugs into: counters, sampler, exposition cache and the registrations."""

    def __init__(self, counters: CounterSet, sampler: SamplerSettings, options: RenderOptions, *,
                 clock: Callable[[], float] = time.monotonic, supervisor: Supervisor | None = None) -> None:
        self.counters = counters
        self.supervisor = supervisor or SUPERVISOR
        self.options = options
        self._builders: list[FamilyBuilder] = []
        self._attribution: Callable[[RenderContext], RenderContext] | None = None
        self._label_sources: list[LabelSource] = []
        self._snapshot_consumers: list[Callable[[Snapshot], None]] = []
        self._inventory_consumers: list[Callable[[Inventory], None]] = []
        self._services: list[_Service] = []
        self._readings: list[FieldSpec] = []
        self._counters_lock = threading.Lock()
        self.stall: InFlight | None = None  # set by the app's watchdog
        self.cache = ExpositionCache(self.render)
        self.sampler = Sampler(counters.field_specs(), sampler.interval_s, on_snapshot=self.publish_snapshot,
                               process_interval_s=sampler.process_interval_s, clock=clock,
                               peak_window_s=sampler.peak_window_s, on_inventory=self.publish_inventory)

    # -- registration (sources' install functions) -------------------------------------------------

    def add_service(self, start: Callable[[], None], stop: Callable[[], None], *, before_nvml: bool = False) -> None:
        self._services.append(_Service(start, stop, before_nvml))

    def add_families(self, builder: FamilyBuilder) -> None:
        self._builders.append(builder)

    def set_attribution(self, hook: Callable[[RenderContext], RenderContext]) -> None:
        """The render's join of GPUs to workloads; labels from anywhere else are label sources."""
        if self._attribution is not None:
            raise ValueError("an attribution is installed already; add labels with add_label_source")
        self._attribution = hook

    def add_label_source(self, source: LabelSource) -> None:
        self._label_sources.append(source)

    def on_snapshot(self, consumer: Callable[[Snapshot], None]) -> None:
        self._snapshot_consumers.append(consumer)

    def on_inventory(self, consumer: Callable[[Inventory], None]) -> None:
        """Called on the sampling thread right after NVML initialised (each time), before its first cycle."""
        self._inventory_consumers.append(consumer)

    def require_readings(self, specs: Sequence[FieldSpec]) -> None:
        self._readings.extend(specs)
        self.sampler.set_specs(self.counters.field_specs(), self._readings)

    # -- what sources may call ---------------------------------------------------------------------

    def invalidate(self) -> None:
        """A source's published value changed: re-render (from any thread)."""
        self.cache.invalidate()

    def inventory(self) -> Inventory | None:
        """The sampler's current NVML inventory (None while NVML is down)."""
        return self.sampler.inventory

    def set_counters(self, counters: CounterSet) -> None:
        """Export another counters CSV from now on (``-m``: the ConfigMap changed). The renderer uses it
        at once; the sampler reads the new fields from its next cycle."""
        with self._counters_lock:
            self.counters = counters
            self.sampler.set_specs(counters.field_specs(), self._readings)
        self.cache.invalidate()

    # -- the app's side ----------------------------------------------------------------------------

    @property
    def readings(self) -> tuple[FieldSpec, ...]:
        return tuple(self._readings)

    def services(self, *, before_nvml: bool) -> list[tuple[Callable[[], None], Callable[[], None]]]:
        return [(service.start, service.stop) for service in self._services if service.before_nvml is before_nvml]

    def stops(self) -> list[Callable[[], None]]:
        """Every service's stop, the last installed first."""
        return [service.stop for service in reversed(self._services)]

    @property
    def families(self) -> tuple[FamilyBuilder, ...]:
        """The sources' family builders, in install order."""
        return tuple(self._builders)

    def builders(self) -> tuple[FamilyBuilder, ...]:
        return (*DEFAULT_BUILDERS, *self._builders, self._thread_families)

    def render_context(self) -> RenderContext:
        ctx = RenderContext(snapshot=self.sampler.snapshot, counters=self.counters, options=self.options,
                            stall=self.stall)
        if self._attribution is not None:
            ctx = self._attribution(ctx)
        return with_label_sources(ctx, self._label_sources)

    def render(self) -> list[Metric]:
        return render(self.render_context(), self.builders())

    def _thread_families(self, _ctx: RenderContext) -> list[Metric]:
        family = owned_family("gpu_pod_exporter_thread_restarts_total")
        for name, restarts in sorted(self.supervisor.restarts().items()):
            family.add_sample("gpu_pod_exporter_thread_restarts_total", {"thread": name}, restarts)
        return [family]

    def publish_snapshot(self, snapshot: Snapshot) -> None:
        for consumer in self._snapshot_consumers:
            consumer(snapshot)
        self.cache.invalidate()

    def publish_inventory(self, inventory: Inventory) -> None:
        for consumer in self._inventory_consumers:
            consumer(inventory)
