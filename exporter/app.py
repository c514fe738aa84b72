"""Lifecycle: start the sources and the HTTP server, re-render on change, stop cleanly on SIGTERM.

Start-up order matters for events: NVML delivers only events raised after registration, so NVML is
initialised first and the ``on_inventory`` hooks (the Xid watcher registers its event set there) run
on the sampling thread right after it; only then do the other sources (the Kubernetes connections),
the renderer and the HTTP listener start. An Xid raised while they start is counted.

Wiring only; each concern lives in its own module. Sources publish immutable values and call
``invalidate`` on the exposition cache; a watchdog thread turns "the sampler is stuck inside an
NVML call" into a state change too, so the stall shows up in self-metrics even though no new
snapshot arrives.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from prometheus_client.core import Metric

from exporter.config import Config
from exporter.logs import get_logger
from exporter.metrics.catalog import FieldSpec
from exporter.metrics.counters import CounterSet
from exporter.metrics.render import (
    DEFAULT_BUILDERS,
    FamilyBuilder,
    RenderContext,
    RenderOptions,
    owned_family,
    render,
)
from exporter.metrics.selection import effective_selection
from exporter.nvml.inventory import Inventory
from exporter.nvml.sampler import Sampler
from exporter.snapshot import InFlight, Snapshot
from exporter.supervisor import SUPERVISOR, Supervisor, supervised
from exporter.web.cache import ExpositionCache
from exporter.web.health import HealthReport, evaluate, stalled_call
from exporter.web.server import ExporterHTTPServer, WebSecurity

log = get_logger("app")

WATCHDOG_PERIOD_S = 0.5
# How long start() waits for the first NVML initialisation before starting the rest. It takes
# milliseconds on a healthy driver; the cap only bounds how late a hanging nvmlInit makes the listener.
FIRST_INIT_WAIT_S = 5.0


@dataclass
class Extensions:
    """Optional components wired around the core (simulator, attribution, event watcher, ...)."""

    builders: list[FamilyBuilder] = field(default_factory=list)
    # Called once per render, in order: each may return an extended context (RenderContext.attribution,
    # a workload labeler bound to this render's inputs), so a source is consulted once per render.
    context_hooks: list[Callable[[RenderContext], RenderContext]] = field(default_factory=list)
    # Run before NVML is initialised (the simulator installs its fake library here).
    before_nvml: list[Callable[[], None]] = field(default_factory=list)
    # Run on the sampling thread right after NVML initialised (each time), before its first cycle.
    on_inventory: list[Callable[[Inventory], None]] = field(default_factory=list)
    on_start: list[Callable[[], None]] = field(default_factory=list)
    on_stop: list[Callable[[], None]] = field(default_factory=list)
    on_snapshot: list[Callable[[Snapshot], None]] = field(default_factory=list)
    # Readings a component needs every cycle whether or not the CSV exports them (GPU health flags).
    sampler_dependencies: list[FieldSpec] = field(default_factory=list)


def _if_set(config: Config, attr: str) -> float | None:
    """A setting's value when the user gave one, else None (the component keeps its own default)."""
    return float(getattr(config, attr)) if attr in config.sources else None


def node_hostname(config: Config) -> str | None:
    if config.no_hostname:
        return None
    return config.node_name or socket.gethostname()


class App:
    def __init__(self, config: Config, counters: CounterSet, *, security: WebSecurity | None = None,
                 extensions: Extensions | None = None, clock: Callable[[], float] = time.monotonic,
                 listener: socket.socket | None = None, supervisor: Supervisor | None = None) -> None:
        self.config = config
        self.counters = counters
        self.extensions = extensions or Extensions()
        self._clock = clock
        self.options = RenderOptions(hostname=node_hostname(config),
                                     replace_blanks_in_model_name=config.replace_blanks_in_model_name,
                                     devices=effective_selection(config.devices, config.mig_chip_series),
                                     use_old_namespace=config.use_old_namespace,
                                     hostname_label=config.hostname_label)
        self.sampler = Sampler(
            counters.field_specs(),
            config.collect_interval_s,
            on_snapshot=self._on_snapshot,
            process_interval_s=config.process_interval_ms / 1000 if config.process_attribution else None,
            clock=clock,
            dependencies=self.extensions.sampler_dependencies,
            peak_window_s=config.peak_window_ms / 1000,
            on_inventory=self._on_inventory,
        )
        self.cache = ExpositionCache(self._render)
        self.server = ExporterHTTPServer(config.address, self.cache, self.health, security,
                                         listener=listener, max_connections=config.web_max_connections,
                                         read_timeout_s=_if_set(config, "web_read_timeout_s"),
                                         write_timeout_s=_if_set(config, "web_write_timeout_s"),
                                         sampling_interval_s=config.collect_interval_s)
        self.supervisor = supervisor or SUPERVISOR
        self.builders: Sequence[FamilyBuilder] = (*DEFAULT_BUILDERS, *self.extensions.builders,
                                                  self._thread_families)
        self._stall: InFlight | None = None
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None

    # -- wiring ----------------------------------------------------------------------------------

    def _on_snapshot(self, snapshot: Snapshot) -> None:
        for consumer in self.extensions.on_snapshot:
            consumer(snapshot)
        self.cache.invalidate()

    def _on_inventory(self, inventory: Inventory) -> None:
        for consumer in self.extensions.on_inventory:
            consumer(inventory)

    def render_context(self) -> RenderContext:
        ctx = RenderContext(snapshot=self.sampler.snapshot, counters=self.counters, options=self.options,
                            stall=self._stall)
        for hook in self.extensions.context_hooks:
            ctx = hook(ctx)
        return ctx

    def _render(self) -> list[Metric]:
        return render(self.render_context(), self.builders)

    def health(self) -> HealthReport:
        down = self.supervisor.down()
        if down:
            now = self._clock()
            return HealthReport(False, "; ".join(
                f"thread {thread.name} is down after an unexpected error ({thread.error}), {now - thread.since:.1f} s "
                "ago; restarting it" for thread in down))
        return evaluate(self.sampler.snapshot, self._clock(), self.config.collect_interval_s,
                        self.sampler.in_flight())

    def _thread_families(self, _ctx: RenderContext) -> list[Metric]:
        family = owned_family("gpu_pod_exporter_thread_restarts_total")
        for name, restarts in sorted(self.supervisor.restarts().items()):
            family.add_sample("gpu_pod_exporter_thread_restarts_total", {"thread": name}, restarts)
        return [family]

    def _watch(self) -> None:
        """Notice a stuck NVML call (no snapshot will arrive to say so) and re-render when it starts/ends."""
        while not self._stop.wait(WATCHDOG_PERIOD_S):
            stall = stalled_call(self.sampler.in_flight(), self._clock(), self.config.collect_interval_s)
            if (stall is None) != (self._stall is None):
                if stall is not None:
                    log.error("sampler stalled inside NVML; serving the last snapshot",
                              extra={"fields": {"function": stall.function, "gpu": stall.gpu}})
                else:
                    log.warning("sampler recovered from an NVML stall")
                self._stall = stall
                self.cache.invalidate()

    def set_counters(self, counters: CounterSet) -> None:
        """Export another counters CSV from now on (``-m``: the ConfigMap changed). The renderer uses it
        at once; the sampler reads the new fields from its next cycle."""
        self.counters = counters
        self.sampler.set_specs(counters.field_specs(), self.extensions.sampler_dependencies)
        self.cache.invalidate()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        for hook in self.extensions.before_nvml:
            hook()
        self.sampler.start()
        if not self.sampler.wait_first_attempt(FIRST_INIT_WAIT_S):
            log.warning("NVML initialisation has not returned yet; starting the rest without waiting for it",
                        extra={"fields": {"waited_seconds": FIRST_INIT_WAIT_S}})
        for hook in self.extensions.on_start:
            hook()
        self.cache.start()
        self.server.start()
        self._watchdog = supervised(self._watch, name="watchdog", stop=self._stop)
        self._watchdog.start()
        log.info("listening", extra={"fields": {"address": self.config.address, "port": self.server.port,
                                                "collect_interval_ms": self.config.collect_interval_ms,
                                                "counters": self.counters.source}})

    def stop(self) -> None:
        self._stop.set()
        self.server.stop()
        self.sampler.stop(timeout=2.0)  # a thread stuck inside NVML is a daemon; do not wait for it
        self.cache.stop()
        for hook in reversed(self.extensions.on_stop):
            try:
                hook()
            except Exception:
                log.exception("shutdown hook failed")

    def run(self) -> None:
        """Start, block until SIGTERM/SIGINT, stop."""
        stop = threading.Event()

        def request_stop(signum: int, _frame: FrameType | None) -> None:
            log.info("stopping", extra={"fields": {"signal": signal.Signals(signum).name}})
            stop.set()

        previous: dict[int, Any] = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            stop.wait()
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
