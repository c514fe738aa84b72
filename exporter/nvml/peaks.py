"""Peaks between scrapes: the highest value of a few readings over a trailing window of samples.

Why: the sampler reads every GPU once per collect interval (1 s by default), while Prometheus keeps
one reading per scrape (15-60 s). A framebuffer spike that lasts ten seconds before an out-of-memory
kill, a power excursion or a thermal spike falls between two scrapes and never shows. The exporter
already holds every sample, so it keeps, per GPU and reading, the maximum over the last
``window_s`` seconds and publishes it beside the sample (``DCGM_EXP_*_PEAK``).

Why a trailing-window maximum (a gauge) rather than a max-since-last-scrape: the value depends only
on the samples and the sampler's clock, never on who scraped when, so two Prometheus replicas that
scrape at different moments both see every spike that happened within the window before their
scrape (no per-scraper state, nothing reset by a scrape), and the exposition stays cached per
snapshot. A window at least as long as the scrape interval leaves no gap between scrapes.

MIG: each GPU instance with its own readings (framebuffer used) has its own windows, kept by GPU-
instance id and dropped when the layout changes.

Cost: no NVML call (it reads the values the cycle already took), one monotonic deque per GPU and
reading, at most ``window_s / interval`` entries each and usually far fewer (a falling sequence is
all a window maximum needs to keep), O(1) amortised work per sample. Readings the counters CSV does
not ask for are not read, so they have no peak either.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from exporter.metrics.owned import PEAK_FAMILIES

DEFAULT_WINDOW_S = 60.0


class WindowMax:
    """The maximum of the samples taken in the last ``window_s`` seconds (the newest one always counts).

    Keeps a deque of (time, value) whose values strictly decrease from the front: a sample that a
    later, higher-or-equal sample dominates can never be the maximum again, so it is dropped.
    """

    __slots__ = ("_items", "window_s")

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._items: deque[tuple[float, float]] = deque()

    def add(self, now: float, value: float) -> float:
        items = self._items
        while items and items[-1][1] <= value:
            items.pop()
        items.append((now, value))
        horizon = now - self.window_s
        while items[0][0] <= horizon:
            items.popleft()
        return items[0][1]

    def __len__(self) -> int:
        return len(self._items)


class DevicePeaks:
    """The window maxima of one GPU's peak readings; owned by the sampling thread only."""

    __slots__ = ("_windows", "window_s")

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._windows: dict[str, WindowMax] = {}

    def add(self, now: float, values: Mapping[str, float]) -> dict[str, float]:
        """Take this cycle's values; return the peak of each peak reading present in this cycle.

        A reading absent this cycle (a transient failure) publishes no peak, as it publishes no sample,
        but its window keeps the samples before the gap: a spike just before a failed read still
        shows beside the next sample. Samples older than the window leave it at that next sample.
        """
        peaks: dict[str, float] = {}
        windows = self._windows
        for name in PEAK_FAMILIES:
            value = values.get(name)
            if value is None:
                continue
            window = windows.get(name)
            if window is None:
                window = windows[name] = WindowMax(self.window_s)
            peaks[name] = window.add(now, value)
        return peaks

    def clear(self) -> None:
        """The GPU was lost: its peaks restart with its next sample."""
        self._windows.clear()
