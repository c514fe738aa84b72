"""Wiring the health telemetry into the app: the event watcher, the ledgers and their metric families.

``HealthTelemetry(...).install(hub)`` (the shape every optional source has) adds the builders, the
snapshot consumer and the readings the health gauge needs, and gives the watcher the sampler's
inventory and the exposition cache to invalidate when an event arrives (both exist before any source),
so a new Xid shows up at the next scrape instead of the next sampling cycle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from exporter.health.clock_events import ClockEventTracker
from exporter.health.families import (
    CLOCK_EVENTS_COUNT,
    CLOCK_EVENTS_TOTAL,
    clock_event_families,
    health_family,
    xid_families,
)
from exporter.health.verdict import HEALTH_READINGS
from exporter.health.xid import XidLedger, XidSource
from exporter.hub import Hub
from exporter.logs import StateLog, get_logger
from exporter.metrics.catalog import CATALOG, FieldSpec
from exporter.metrics.counters import CounterSet
from exporter.nvml.events import WAIT_TIMEOUT_MS, DeviceEvent, EventWatcher
from exporter.nvml.inventory import Inventory
from exporter.xid_codes import xid_message

log = get_logger("health")

XID_LOG_INTERVAL_S = 60.0  # one log line per GPU and Xid code per minute; the metrics count every one


@dataclass(frozen=True)
class HealthSettings:
    """The health telemetry's settings (``-x`` and ``--clock-events-count-window-size``), in milliseconds."""

    xid_count_window_ms: int
    clock_events_window_ms: int


class HealthTelemetry:
    """The Xid ledger, the clock-event tracker (when the CSV asks for it) and the event watcher."""

    def __init__(self, settings: HealthSettings, counters: CounterSet, *, clock: Callable[[], float] = time.monotonic,
                 wait_timeout_ms: int = WAIT_TIMEOUT_MS) -> None:
        self.settings = settings
        self.ledger = XidLedger(settings.xid_count_window_ms / 1000, clock)
        wants_clock_events = any(row.spec.name in (CLOCK_EVENTS_COUNT, CLOCK_EVENTS_TOTAL) for row in counters.metrics)
        self.clock_events = ClockEventTracker(settings.clock_events_window_ms / 1000, clock) \
            if wants_clock_events else None
        self.watcher = EventWatcher(self._inventory, self._on_event, wait_timeout_ms=wait_timeout_ms, clock=clock)
        self._hub: Hub | None = None  # set by install
        self._log = StateLog(log)
        self._clock = clock
        self._xid_logged: dict[tuple[str, int], float] = {}

    def install(self, hub: Hub) -> None:
        self._hub = hub
        hub.add_families(xid_families(self.ledger, self.settings.xid_count_window_ms))
        hub.add_families(health_family(self.ledger))
        if self.clock_events is not None:
            hub.add_families(clock_event_families(self.clock_events, self.settings.clock_events_window_ms))
            hub.on_snapshot(self.clock_events.observe)
        hub.require_readings(health_dependencies())
        hub.on_inventory(self.watcher.prepare)  # registered right after NVML init
        hub.add_service(self.watcher.start, self._stop)

    def _inventory(self) -> Inventory | None:
        return self._hub.inventory() if self._hub is not None else None

    def _on_event(self, event: DeviceEvent) -> None:
        identity = event.identity
        if event.is_xid:
            self.ledger.record(XidSource(identity.uuid, event.gpu_instance_id, event.compute_instance_id), event.data)
            now = self._clock()
            last = self._xid_logged.get((identity.uuid, event.data))
            if last is None or now - last >= XID_LOG_INTERVAL_S:
                self._xid_logged[(identity.uuid, event.data)] = now
                # Say that repeats are only counted: in a storm this one line stands for thousands.
                fields: dict[str, object] = {"gpu": identity.index, "uuid": identity.uuid, "xid": event.data,
                                             "meaning": xid_message(event.data)}
                if event.gpu_instance_id is not None:
                    fields["gpu_instance_id"] = event.gpu_instance_id
                log.warning("Xid error reported; more of this Xid on this GPU within %.0f s are counted in "
                            "DCGM_EXP_XID_ERRORS_TOTAL, not logged", XID_LOG_INTERVAL_S, extra={"fields": fields})
        else:
            self._log.once(("event", identity.uuid, event.type_name), logging.WARNING,
                           "GPU reported an NVML event; its counters show the details",
                           gpu=identity.index, uuid=identity.uuid, event=event.type_name)
        if self._hub is not None:
            self._hub.invalidate()

    def _stop(self) -> None:
        if not self.watcher.stop():
            log.warning("the event watcher is still inside NVML; its event set is left to the process exit")


def health_dependencies() -> list[FieldSpec]:
    """The readings the health gauge needs every cycle, whatever the CSV exports."""
    specs = [CATALOG.lookup(name) for name in HEALTH_READINGS]
    return [spec for spec in specs if spec is not None]
