"""The Xid ledger: every Xid the event watcher receives, counted exactly, readable at any time.

The watcher thread writes (``record``), the renderer reads (``view``): the ledger is the only state
they share, behind one lock, and a view is an immutable copy. Three questions are answered from it:

* the **last** Xid per GPU (``DCGM_FI_DEV_XID_ERRORS``): 0 until the first one, never a missing series;
* how many of each code since the exporter started (``DCGM_EXP_XID_ERRORS_TOTAL``): exact, every
  event counted, however many arrive between two scrapes;
* how many of each code within the sliding window (``DCGM_EXP_XID_ERRORS_COUNT``, ``-x``), and so
  whether a fatal Xid happened "recently" (the GPU health gauge uses the same window).

Window bookkeeping keeps one (time, count) entry per code per 10 ms of arrival time, so a storm of
thousands of Xids costs a handful of entries, and an event counts in the window while
``now - arrival < window`` (arrivals inside one 10 ms bucket share the bucket's first time).
Xid 0 is not an error and is not counted (as dcgm-exporter's totals).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from exporter.xid_codes import FATAL_XIDS

BUCKET_S = 0.010


@dataclass(frozen=True)
class XidSource:
    """Where an Xid happened: a GPU, plus the MIG instance when NVML attributed it to one."""

    gpu_uuid: str
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class XidTally:
    """What one source has reported: its last code, totals since start, counts within the window.

    ``in_window`` has an entry for every code in ``totals`` (0 once it left the window).
    ``last_sequence`` orders the last events of different sources (larger is later).
    """

    last_xid: int
    last_sequence: int
    totals: Mapping[int, int]
    in_window: Mapping[int, int]


@dataclass(frozen=True)
class XidView:
    """An immutable copy of the ledger at one moment."""

    window_s: float
    tallies: Mapping[XidSource, XidTally] = field(default_factory=dict)

    def last_xid(self, gpu_uuid: str) -> int:
        """The last Xid anywhere on this GPU (whole device or any of its MIG instances); 0 when none."""
        last, sequence = 0, -1
        for source, tally in self.tallies.items():
            if source.gpu_uuid == gpu_uuid and tally.last_sequence > sequence:
                last, sequence = tally.last_xid, tally.last_sequence
        return last

    def recent(self, gpu_uuid: str, codes: Collection[int] = FATAL_XIDS) -> tuple[int, ...]:
        """Codes out of ``codes`` seen on this GPU (any instance) within the window, ascending."""
        seen = {code for source, tally in self.tallies.items() if source.gpu_uuid == gpu_uuid
                for code, count in tally.in_window.items() if count and code in codes}
        return tuple(sorted(seen))


@dataclass
class _Entry:
    last_xid: int = 0
    last_sequence: int = -1
    totals: dict[int, int] = field(default_factory=dict)
    arrivals: dict[int, deque[list[float]]] = field(default_factory=dict)  # code -> [time, count] buckets


class XidLedger:
    """Thread-safe Xid counts. ``clock`` is monotonic seconds; tests inject one to move time."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if window_s <= 0:
            raise ValueError("the Xid window must be positive")
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[XidSource, _Entry] = {}
        self._sequence = 0

    def record(self, source: XidSource, xid: int, count: int = 1) -> None:
        """Count ``count`` occurrences of ``xid`` on ``source``, arriving now."""
        if xid <= 0 or count <= 0:
            return
        now = self._clock()
        with self._lock:
            entry = self._entries.setdefault(source, _Entry())
            self._sequence += 1
            entry.last_xid = xid
            entry.last_sequence = self._sequence
            entry.totals[xid] = entry.totals.get(xid, 0) + count
            buckets = entry.arrivals.setdefault(xid, deque())
            if buckets and now - buckets[-1][0] < BUCKET_S:
                buckets[-1][1] += count
            else:
                buckets.append([now, count])
            self._expire(buckets, now)

    def view(self) -> XidView:
        now = self._clock()
        tallies: dict[XidSource, XidTally] = {}
        with self._lock:
            for source, entry in self._entries.items():
                in_window: dict[int, int] = {}
                for code, buckets in entry.arrivals.items():
                    self._expire(buckets, now)
                    in_window[code] = int(sum(count for _, count in buckets))
                tallies[source] = XidTally(last_xid=entry.last_xid, last_sequence=entry.last_sequence,
                                           totals=MappingProxyType(dict(entry.totals)),
                                           in_window=MappingProxyType(in_window))
        return XidView(window_s=self.window_s, tallies=MappingProxyType(tallies))

    def _expire(self, buckets: deque[list[float]], now: float) -> None:
        while buckets and now - buckets[0][0] >= self.window_s:
            buckets.popleft()
