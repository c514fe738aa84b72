"""Pure arithmetic: fetched series -> the report's rows. No I/O, so tests feed it plain values.

Integration: every point of a series stands for the ``step`` seconds before it, so a value of
``v`` whole-GPU equivalents at one point adds ``v * step / 3600`` GPU-hours. A missing point
adds nothing (a gap under-bills rather than guesses). Energy points are joules over the 5
minutes before them (``...:increase5m``) and add ``joules * step / 300``: exact at a 5-minute
step, an average of overlapping windows at a shorter one.

Idle: the held fraction whose device's utilisation was below the idle threshold at that point.
A device without a utilisation reading is "unmeasured": neither busy nor idle, and counted as in
use when looking for GPUs to give back (nothing is taken from what cannot be seen).

GPUs to give back: for each namespace, "in use" at a point is what it held minus its idle part;
its p95 (or peak) over the points where the namespace held anything is what it needs, and what
it held at the end of the window beyond that could be given back.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from exporter.prometheus.client import Series
from exporter.report.collect import Fetched
from exporter.report.model import (
    ClusterCapacity,
    DailyUsage,
    PodRow,
    ReclaimRow,
    Report,
    Settings,
    Usage,
    UsageRow,
    Window,
)
from exporter.report.pricing import PriceSheet
from exporter.report.sources import (
    BUSY,
    ENERGY,
    HOLDER_FRACTION,
    HOLDER_UTILIZATION,
    MEASURED,
    MEMORY,
    Presence,
    Source,
    cluster_name,
    missing_notes,
    splits,
)
from exporter.report.timespec import format_day, format_time

UNASSIGNED = "unassigned"
ENERGY_WINDOW_S = 300.0
EPSILON = 1e-9


def aligned(series: Series, window: Window) -> list[float]:
    """The series' values at the window's points (index 0 is ``start + step``), 0 where missing."""
    values = [0.0] * window.points
    for timestamp, value in series.points:
        index = round((timestamp - window.start) / window.step) - 1
        if 0 <= index < window.points and math.isfinite(value):
            values[index] = value
    return values


def present(series: Series, window: Window) -> list[bool]:
    mask = [False] * window.points
    for timestamp, _ in series.points:
        index = round((timestamp - window.start) / window.step) - 1
        if 0 <= index < window.points:
            mask[index] = True
    return mask


def nearest_rank(values: list[float], percentile: float) -> float:
    """The nearest-rank percentile: the smallest value with ``percentile`` % of values at or below it."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(percentile / 100.0 * len(ordered)) - 1)]


def team_of(labels: Mapping[str, str]) -> str:
    return labels.get("team") or UNASSIGNED


@dataclass
class _Totals:
    """Running sums of one row (hours, GiB-hours, kWh, money)."""

    allocated: float = 0.0
    busy: float = 0.0
    measured: float = 0.0
    idle: float = 0.0
    memory: float = 0.0
    energy: float = 0.0
    cost: float = 0.0
    idle_cost: float = 0.0
    unpriced: bool = False


class _Builder:
    def __init__(self, fetched: Fetched, settings: Settings, prices: PriceSheet, top_pods: int) -> None:
        self.fetched = fetched
        self.window = fetched.window
        self.settings = settings
        self.prices = prices
        self.top_pods = top_pods
        self.presence: Presence = fetched.presence
        self.hours_per_point = self.window.step / 3600.0
        self.unpriced_models: set[str] = set()

    # --------------------------------------------------------------------------------- rows
    def row_key(self, labels: Mapping[str, str]) -> tuple[str, str]:
        cluster = labels.get("cluster", "")
        return (cluster, team_of(labels)) if self.settings.by == "team" else (cluster, labels.get("namespace", ""))

    def related(self, labels: Mapping[str, str]) -> str:
        return labels.get("namespace", "") if self.settings.by == "team" else team_of(labels)

    def rows(self) -> tuple[list[UsageRow], Usage]:
        totals: dict[tuple[str, str], _Totals] = defaultdict(_Totals)
        related: dict[tuple[str, str], set[str]] = defaultdict(set)
        models: dict[tuple[str, str], set[str]] = defaultdict(set)
        groups = self.fetched.groups
        for series in groups.get("fraction", []):
            key = self.row_key(series.labels)
            hours = sum(aligned(series, self.window)) * self.hours_per_point
            totals[key].allocated += hours
            related[key].add(self.related(series.labels))
            model = series.labels.get("modelName", "")
            models[key].add(model)
            price = self.prices.price(model)
            if price is None:
                if hours > 0 and not self.prices.empty:
                    totals[key].unpriced = True
                    self.unpriced_models.add(model or "(no modelName)")
            else:
                totals[key].cost += hours * price
        for field, source_key, scale in (("busy", "busy", self.hours_per_point),
                                         ("measured", "measured", self.hours_per_point),
                                         ("memory", "memory", self.hours_per_point / 1024.0),
                                         ("energy", "energy", self.window.step / ENERGY_WINDOW_S / 3.6e6)):
            for series in groups.get(source_key, []):
                key = self.row_key(series.labels)
                setattr(totals[key], field, getattr(totals[key], field)
                        + sum(aligned(series, self.window)) * scale)
        for series in groups.get("idle", []):
            key = self.row_key(series.labels)
            hours = sum(aligned(series, self.window)) * self.hours_per_point
            totals[key].idle += hours
            price = self.prices.price(series.labels.get("modelName", ""))
            if price is not None:
                totals[key].idle_cost += hours * price
        rows = []
        for key in sorted(totals, key=lambda k: (k[0], -totals[k].allocated, k[1])):
            if totals[key].allocated <= EPSILON and key not in related:
                continue  # busy/memory without an allocation: a rule's lag at a pod's edge, not a row
            rows.append(UsageRow(key[0], key[1], tuple(sorted(related[key])), self.usage(key[0], totals[key]),
                                 tuple(sorted(models[key]))))
        return rows, self.total(rows)

    def usage(self, cluster: str, sums: _Totals) -> Usage:
        def available(*sources: Source) -> bool:
            return all(self.presence.has(source, cluster) for source in sources)

        priced = self.prices.empty is False and not sums.unpriced
        idle_ok = available(HOLDER_FRACTION, HOLDER_UTILIZATION)
        return Usage(
            allocated_gpu_hours=sums.allocated,
            busy_gpu_hours=sums.busy if available(BUSY) else None,
            idle_gpu_hours=sums.idle if idle_ok else None,
            unmeasured_gpu_hours=max(0.0, sums.allocated - sums.measured) if available(MEASURED) else None,
            memory_gib_hours=sums.memory if available(MEMORY) else None,
            energy_kwh=sums.energy if available(ENERGY) else None,
            cost=sums.cost if priced else None,
            idle_cost=sums.idle_cost if priced and idle_ok else None,
            measured_gpu_hours=sums.measured if available(MEASURED) else None,
        )

    @staticmethod
    def total(rows: list[UsageRow]) -> Usage:
        def add(values: Iterable[float | None]) -> float | None:
            known = [value for value in values if value is not None]
            return math.fsum(known) if known else None

        usages = [row.usage for row in rows]
        return Usage(
            allocated_gpu_hours=math.fsum(u.allocated_gpu_hours for u in usages),
            busy_gpu_hours=add(u.busy_gpu_hours for u in usages),
            idle_gpu_hours=add(u.idle_gpu_hours for u in usages),
            unmeasured_gpu_hours=add(u.unmeasured_gpu_hours for u in usages),
            memory_gib_hours=add(u.memory_gib_hours for u in usages),
            energy_kwh=add(u.energy_kwh for u in usages),
            cost=add(u.cost for u in usages),
            idle_cost=add(u.idle_cost for u in usages),
            measured_gpu_hours=add(u.measured_gpu_hours for u in usages),
        )

    # -------------------------------------------------------------------------------- daily
    def daily(self) -> list[DailyUsage]:
        days = [format_day(t - self.window.step) for t in self.window.times()]
        allocated: dict[tuple[str, str, str], float] = defaultdict(float)
        busy: dict[tuple[str, str, str], float] = defaultdict(float)
        for target, source_key in ((allocated, "fraction"), (busy, "busy")):
            for series in self.fetched.groups.get(source_key, []):
                cluster, key = self.row_key(series.labels)
                for index, value in enumerate(aligned(series, self.window)):
                    if value:
                        target[(days[index], cluster, key)] += value * self.hours_per_point
        result = []
        for day, cluster, key in sorted(set(allocated) | set(busy)):
            busy_hours = busy.get((day, cluster, key), 0.0) if self.presence.has(BUSY, cluster) else None
            result.append(DailyUsage(day, cluster, key, allocated.get((day, cluster, key), 0.0), busy_hours))
        return result

    # ------------------------------------------------------------------------------ reclaim
    def reclaim(self) -> tuple[list[ReclaimRow], list[str]]:
        points = self.window.points
        held: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * points)
        idle: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * points)
        teams: dict[tuple[str, str], set[str]] = defaultdict(set)
        for target, source_key in ((held, "fraction"), (idle, "idle")):
            for series in self.fetched.groups.get(source_key, []):
                key = (series.labels.get("cluster", ""), series.labels.get("namespace", ""))
                values = aligned(series, self.window)
                sums = target[key]
                for index in range(points):
                    sums[index] += values[index]
                if source_key == "fraction":
                    teams[key].add(team_of(series.labels))
        rows, skipped = [], set()
        for key in sorted(held):
            cluster, namespace = key
            if not (self.presence.has(HOLDER_FRACTION, cluster) and self.presence.has(HOLDER_UTILIZATION, cluster)):
                skipped.add(cluster)
                continue
            allocation = held[key]
            in_use = [max(0.0, a - i) for a, i in zip(allocation, idle[key], strict=True)]
            while_held = [u for a, u in zip(allocation, in_use, strict=True) if a > EPSILON]
            if not while_held:
                continue
            peak = max(while_held)
            p95 = nearest_rank(while_held, 95.0)
            needed = peak if self.settings.reclaim_by == "peak" else p95
            held_at_end = allocation[-1]
            rows.append(ReclaimRow(cluster, namespace, tuple(sorted(teams[key])), held_at_end, peak, p95,
                                   max(0.0, held_at_end - needed),
                                   math.fsum(idle[key]) * self.hours_per_point,
                                   math.fsum(allocation) * self.hours_per_point))
        rows.sort(key=lambda r: (-round(r.give_back, 9), -r.idle_gpu_hours, r.cluster, r.namespace))
        notes = [f"{cluster_name(c)}: GPUs to give back are not computed (needs {HOLDER_FRACTION.series} and "
                 f"{HOLDER_UTILIZATION.series})." for c in sorted(skipped)]
        return rows, notes

    # --------------------------------------------------------------------------------- pods
    def idle_pods(self) -> list[PodRow]:
        sums: dict[tuple[str, str, str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for source_key, series_list in self.fetched.pods.items():
            for series in series_list:
                labels = series.labels
                key = (labels.get("cluster", ""), labels.get("namespace", ""), labels.get("pod", ""), team_of(labels))
                sums[key][source_key] += sum(aligned(series, self.window)) * self.hours_per_point
        rows = [PodRow(cluster, namespace, pod, team, values.get("fraction", 0.0), values.get("idle", 0.0),
                       values.get("busy", 0.0), values.get("measured", 0.0))
                for (cluster, namespace, pod, team), values in sums.items() if values.get("idle", 0.0) > EPSILON]
        rows.sort(key=lambda r: (-round(r.idle_gpu_hours, 9), -r.allocated_gpu_hours, r.cluster, r.namespace, r.pod))
        return rows[: self.top_pods]

    # ----------------------------------------------------------------------------- capacity
    def capacity(self, rows: list[UsageRow]) -> list[ClusterCapacity]:
        allocated: dict[str, float] = defaultdict(float)
        for row in rows:
            allocated[row.cluster] += row.usage.allocated_gpu_hours
        result = []
        for series in self.fetched.capacity:
            cluster = series.labels.get("cluster", "")
            values = aligned(series, self.window)
            mask = present(series, self.window)
            result.append(ClusterCapacity(
                cluster=cluster,
                gpus_at_end=values[-1],
                capacity_gpu_hours=math.fsum(values) * self.hours_per_point,
                allocated_gpu_hours=allocated.get(cluster, 0.0),
                coverage_percent=100.0 * sum(mask) / len(mask),
                gaps=tuple(self.gaps(mask)),
            ))
        return sorted(result, key=lambda c: c.cluster)

    def gaps(self, mask: list[bool]) -> list[tuple[float, float]]:
        """Runs of missing points as (from, to) times, the longest first (at most five)."""
        runs: list[tuple[float, float]] = []
        start = None
        times = self.window.times()
        for index, seen in enumerate([*mask, True]):
            if not seen and start is None:
                start = index
            elif seen and start is not None:
                runs.append((times[start] - self.window.step, times[index - 1]))
                start = None
        runs.sort(key=lambda run: (run[0] - run[1], run[0]))
        return runs[:5]

    def capacity_notes(self, capacity: list[ClusterCapacity]) -> list[str]:
        notes = []
        for item in capacity:
            if item.coverage_percent < 100.0 - EPSILON:
                spans = ", ".join(f"{format_time(a)} to {format_time(b)}" for a, b in item.gaps)
                notes.append(f"{cluster_name(item.cluster)}: recorded series cover {item.coverage_percent:.1f} % of "
                             f"the window (missing: {spans}); time without data is not billed.")
        return notes


def build_report(fetched: Fetched, settings: Settings, prices: PriceSheet, top_pods: int = 10) -> Report:
    """The whole report from fetched series (pure)."""
    builder = _Builder(fetched, settings, prices, top_pods)
    rows, total = builder.rows()
    reclaim, reclaim_notes = builder.reclaim()
    capacity = builder.capacity(rows)
    notes = [*missing_notes(fetched.presence), *builder.capacity_notes(capacity), *reclaim_notes]
    if builder.unpriced_models:
        notes.append("no price for " + ", ".join(sorted(builder.unpriced_models))
                     + ": rows using them have no cost (add --price-per-gpu-hour 'MODEL=PRICE' or a default price)")
    return Report(
        window=fetched.window,
        settings=settings,
        rows=tuple(rows),
        total=total,
        capacity=tuple(capacity),
        reclaim=tuple(reclaim),
        idle_pods=tuple(builder.idle_pods()),
        daily=tuple(builder.daily()),
        splits=splits(fetched.presence),
        notes=tuple(notes),
        warnings=fetched.warnings,
    )
