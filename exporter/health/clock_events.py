"""Clock-event ("throttle") episodes per GPU and reason, from the reasons bitmask of every sampling cycle.

NVML only tells us which reasons are active *now* (``nvmlDeviceGetCurrentClocksEventReasons``). An
episode of a reason starts at the first cycle that sees its bit set after a cycle that did not (or
at the first cycle ever, if it is already set), and ends at the first cycle that sees it clear. Two
numbers come from that, per GPU and reason:

* ``DCGM_EXP_CLOCK_EVENTS_TOTAL``: episodes started since the exporter started (inactive -> active
  edges), as dcgm-exporter 4.8.3 counts them; a reason already active at start counts once.
* ``DCGM_EXP_CLOCK_EVENTS_COUNT``: episodes that overlap the last window
  (``--clock-events-count-window-size``): started in it, ended in it, or still going. A GPU held at
  its power cap for an hour shows 1, not 0, and the count no longer depends on the collect interval.
  (dcgm-exporter counts *samples* with the bit set, which changes with ``-c``.)

Episode boundaries are sample times, so the resolution is one collect interval; a reason that comes
and goes between two samples is not seen (NVML offers no edge events for it). Times come from the
snapshot (``last_sample_monotonic``), the window end from ``clock`` when rendering.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from exporter.snapshot import Snapshot

REASONS_READING = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"

# dcgm-exporter's clock_event label values and the NVML bits behind them (nvmlClocksEventReason*).
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", 0x001),
    ("clocks_setting", 0x002),
    ("power_cap", 0x004),
    ("hw_slowdown", 0x008),
    ("sync_boost", 0x010),
    ("sw_thermal", 0x020),
    ("hw_thermal", 0x040),
    ("hw_power_brake", 0x080),
    ("display_clocks", 0x100),
)


@dataclass(frozen=True)
class ClockEventTally:
    in_window: int  # episodes overlapping the window
    total: int  # episodes started since the exporter started


@dataclass
class _Reason:
    open_since: float | None = None
    total: int = 0
    ended: deque[float] = field(default_factory=deque)  # end times of finished episodes


class ClockEventTracker:
    """Consumes snapshots (``observe``, on the sampler thread); ``view`` is safe from any thread."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if window_s <= 0:
            raise ValueError("the clock-event window must be positive")
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._gpus: dict[str, dict[str, _Reason]] = {}

    def observe(self, snapshot: Snapshot) -> None:
        now = snapshot.status.last_sample_monotonic or self._clock()
        with self._lock:
            for reading in snapshot.devices:
                mask = reading.values.get(REASONS_READING) if reading.up else None
                if mask is None:
                    continue  # lost, or the GPU cannot report reasons: no edges either way
                reasons = self._gpus.setdefault(reading.identity.uuid,
                                                {name: _Reason() for name, _ in CLOCK_EVENT_REASONS})
                bits = int(mask)
                for name, bit in CLOCK_EVENT_REASONS:
                    self._step(reasons[name], bool(bits & bit), now)

    def view(self) -> Mapping[str, Mapping[str, ClockEventTally]]:
        """GPU UUID -> reason -> tally, for the GPUs that have reported the bitmask at least once."""
        now = self._clock()
        result: dict[str, Mapping[str, ClockEventTally]] = {}
        with self._lock:
            for uuid, reasons in self._gpus.items():
                tallies: dict[str, ClockEventTally] = {}
                for name, reason in reasons.items():
                    self._expire(reason, now)
                    ongoing = 1 if reason.open_since is not None else 0
                    tallies[name] = ClockEventTally(in_window=len(reason.ended) + ongoing, total=reason.total)
                result[uuid] = MappingProxyType(tallies)
        return MappingProxyType(result)

    def _step(self, reason: _Reason, active: bool, now: float) -> None:
        if active and reason.open_since is None:
            reason.open_since = now
            reason.total += 1
        elif not active and reason.open_since is not None:
            reason.open_since = None
            reason.ended.append(now)
        self._expire(reason, now)

    def _expire(self, reason: _Reason, now: float) -> None:
        while reason.ended and now - reason.ended[0] >= self.window_s:
            reason.ended.popleft()
