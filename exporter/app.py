"""Lifecycle: start the sources and the HTTP server, re-render on change, stop cleanly on SIGTERM.

The app is the last thing the composition root (``exporter.composition``) builds: the ``Hub`` (counters,
sampler, exposition cache) exists first, every optional source has installed itself into it, and the
app only runs what the hub holds. Nothing is attached to an app after it is built.

Start-up order matters for events: NVML delivers only events raised after registration, so NVML is
initialised first and the hub's inventory consumers (the Xid watcher registers its event set there) run
on the sampling thread right after it; only then do the other services (the Kubernetes connections),
the renderer and the HTTP listener start. An Xid raised while they start is counted. Services marked
``before_nvml`` (the simulator's fake library) start before the sampler.

Sources publish immutable values and call ``invalidate`` on the exposition cache; a watchdog thread
turns "the sampler is stuck inside an NVML call" into a state change too, so the stall shows up in
self-metrics even though no new snapshot arrives.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from exporter.config import Config
from exporter.hub import Hub
from exporter.logs import get_logger
from exporter.metrics.counters import CounterSet
from exporter.nvml.sampler import Sampler
from exporter.supervisor import supervised
from exporter.web.cache import ExpositionCache
from exporter.web.health import HealthReport, evaluate, stalled_call
from exporter.web.server import ExporterHTTPServer, WebSecurity

log = get_logger("app")

WATCHDOG_PERIOD_S = 0.5
# How long start() waits for the first NVML initialisation before starting the rest. It takes
# milliseconds on a healthy driver; the cap only bounds how late a hanging nvmlInit makes the listener.
FIRST_INIT_WAIT_S = 5.0


@dataclass(frozen=True)
class ServeSettings:
    """What the app itself needs from the configuration (``exporter.composition.serve_settings``)."""

    address: str
    collect_interval_s: float
    max_connections: int
    read_timeout_s: float | None = None  # None: the server's own default
    write_timeout_s: float | None = None


def node_hostname(config: Config) -> str | None:
    if config.no_hostname:
        return None
    return config.node_name or socket.gethostname()


class App:
    """Runs a composed hub: its services, the renderer, the HTTP listener and the stall watchdog.

    ``config`` is the resolved configuration the app was composed from, kept for introspection (tests,
    logs); the app itself reads only ``settings``.
    """

    def __init__(self, hub: Hub, settings: ServeSettings, config: Config, *, security: WebSecurity | None = None,
                 clock: Callable[[], float] = time.monotonic, listener: socket.socket | None = None) -> None:
        self.hub = hub
        self.settings = settings
        self.config = config
        self._clock = clock
        self.server = ExporterHTTPServer(settings.address, hub.cache, self.health, security,
                                         listener=listener, max_connections=settings.max_connections,
                                         read_timeout_s=settings.read_timeout_s,
                                         write_timeout_s=settings.write_timeout_s,
                                         sampling_interval_s=settings.collect_interval_s)
        self.supervisor = hub.supervisor
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None

    @property
    def sampler(self) -> Sampler:
        return self.hub.sampler

    @property
    def cache(self) -> ExpositionCache:
        return self.hub.cache

    @property
    def counters(self) -> CounterSet:
        return self.hub.counters

    def health(self) -> HealthReport:
        down = self.supervisor.down()
        if down:
            now = self._clock()
            return HealthReport(False, "; ".join(
                f"thread {thread.name} is down after an unexpected error ({thread.error}), {now - thread.since:.1f} s "
                "ago; restarting it" for thread in down))
        return evaluate(self.sampler.snapshot, self._clock(), self.settings.collect_interval_s,
                        self.sampler.in_flight())

    def _watch(self) -> None:
        """Notice a stuck NVML call (no snapshot will arrive to say so) and re-render when it starts/ends."""
        while not self._stop.wait(WATCHDOG_PERIOD_S):
            stall = stalled_call(self.sampler.in_flight(), self._clock(), self.settings.collect_interval_s)
            if (stall is None) != (self.hub.stall is None):
                if stall is not None:
                    log.error("sampler stalled inside NVML; serving the last snapshot",
                              extra={"fields": {"function": stall.function, "gpu": stall.gpu}})
                else:
                    log.warning("sampler recovered from an NVML stall")
                self.hub.stall = stall
                self.hub.invalidate()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        for start, _stop in self.hub.services(before_nvml=True):
            start()
        self.sampler.start()
        if not self.sampler.wait_first_attempt(FIRST_INIT_WAIT_S):
            log.warning("NVML initialisation has not returned yet; starting the rest without waiting for it",
                        extra={"fields": {"waited_seconds": FIRST_INIT_WAIT_S}})
        for start, _stop in self.hub.services(before_nvml=False):
            start()
        self.cache.start()
        self.server.start()
        self._watchdog = supervised(self._watch, name="watchdog", stop=self._stop)
        self._watchdog.start()
        log.info("listening", extra={"fields": {"address": self.settings.address, "port": self.server.port,
                                                "collect_interval_ms": round(self.settings.collect_interval_s * 1000),
                                                "counters": self.counters.source}})

    def stop(self) -> None:
        self._stop.set()
        self.server.stop()
        self.sampler.stop(timeout=2.0)  # a thread stuck inside NVML is a daemon; do not wait for it
        self.cache.stop()
        for stop in self.hub.stops():
            try:
                stop()
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
