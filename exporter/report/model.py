"""The report's values: plain frozen dataclasses that every output format renders.

Units are in the names: GPU-hours are whole-GPU equivalents times hours (a MIG 3g slice of a
7-slice GPU held for an hour is 3/7 GPU-hour), memory is GiB-hours, energy kWh, money in the
price's currency. ``None`` means "not available for this row" (its cluster lacks the series;
the report's notes say which), never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporter.report.chargeback import Chargeback


@dataclass(frozen=True)
class Window:
    """The report's time range: ``points`` points at ``start + k * step`` for k = 1..points.

    Each point stands for the ``step`` seconds before it, so the window covers (start, end].
    """

    start: float
    end: float
    step: float

    @property
    def points(self) -> int:
        return round((self.end - self.start) / self.step)

    @property
    def hours(self) -> float:
        return self.points * self.step / 3600.0

    def times(self) -> list[float]:
        return [self.start + k * self.step for k in range(1, self.points + 1)]


@dataclass(frozen=True)
class Usage:
    """Totals for one row of the bill (or the whole report)."""

    allocated_gpu_hours: float
    busy_gpu_hours: float | None
    idle_gpu_hours: float | None
    unmeasured_gpu_hours: float | None
    memory_gib_hours: float | None
    energy_kwh: float | None
    cost: float | None
    idle_cost: float | None
    measured_gpu_hours: float | None = None

    @property
    def utilization_percent(self) -> float | None:
        """Busy / measured GPU-hours: the average utilisation of what was allocated and measured."""
        if self.busy_gpu_hours is None or not self.measured_gpu_hours:
            return None
        return 100.0 * self.busy_gpu_hours / self.measured_gpu_hours

    @property
    def idle_percent(self) -> float | None:
        if self.idle_gpu_hours is None or not self.allocated_gpu_hours:
            return None
        return 100.0 * self.idle_gpu_hours / self.allocated_gpu_hours


@dataclass(frozen=True)
class UsageRow:
    """One team or one namespace (``key``) in one cluster, with the other dimension listed."""

    cluster: str
    key: str
    related: tuple[str, ...]
    usage: Usage
    models: tuple[str, ...] = ()


@dataclass(frozen=True)
class DailyUsage:
    """GPU-hours of one row key on one UTC day."""

    day: str
    cluster: str
    key: str
    allocated_gpu_hours: float
    busy_gpu_hours: float | None


@dataclass(frozen=True)
class ReclaimRow:
    """A namespace's allocation now against the GPUs it actually kept busy."""

    cluster: str
    namespace: str
    teams: tuple[str, ...]
    held_at_end: float
    peak_in_use: float
    p95_in_use: float
    give_back: float
    idle_gpu_hours: float
    allocated_gpu_hours: float


@dataclass(frozen=True)
class PodRow:
    """One pod's allocation and idleness."""

    cluster: str
    namespace: str
    pod: str
    team: str
    allocated_gpu_hours: float
    idle_gpu_hours: float
    busy_gpu_hours: float
    measured_gpu_hours: float

    @property
    def idle_percent(self) -> float:
        return 100.0 * self.idle_gpu_hours / self.allocated_gpu_hours if self.allocated_gpu_hours else 0.0

    @property
    def utilization_percent(self) -> float | None:
        return 100.0 * self.busy_gpu_hours / self.measured_gpu_hours if self.measured_gpu_hours else None


@dataclass(frozen=True)
class ClusterCapacity:
    """A cluster's GPUs, how much of them was allocated, and how much of the window has data."""

    cluster: str
    gpus_at_end: float
    capacity_gpu_hours: float
    allocated_gpu_hours: float
    coverage_percent: float
    gaps: tuple[tuple[float, float], ...] = ()

    @property
    def unallocated_gpu_hours(self) -> float:
        return max(0.0, self.capacity_gpu_hours - self.allocated_gpu_hours)

    @property
    def allocated_percent(self) -> float | None:
        return 100.0 * self.allocated_gpu_hours / self.capacity_gpu_hours if self.capacity_gpu_hours else None


@dataclass(frozen=True)
class Settings:
    """The choices a report was made with (printed in its header)."""

    prometheus: str
    by: str
    idle_threshold_percent: float
    reclaim_by: str
    currency: str
    default_price: float | None
    model_prices: tuple[tuple[str, float], ...] = ()
    clusters: tuple[str, ...] = ()
    pricing_file: str | None = None

    @property
    def priced(self) -> bool:
        return self.default_price is not None or bool(self.model_prices) or self.pricing_file is not None


@dataclass(frozen=True)
class Report:
    window: Window
    settings: Settings
    rows: tuple[UsageRow, ...]
    total: Usage
    capacity: tuple[ClusterCapacity, ...]
    reclaim: tuple[ReclaimRow, ...]
    idle_pods: tuple[PodRow, ...]
    daily: tuple[DailyUsage, ...]
    splits: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    chargeback: Chargeback | None = None

    @property
    def multi_cluster(self) -> bool:
        return len({row.cluster for row in self.rows} | {c.cluster for c in self.capacity}) > 1 or any(
            row.cluster for row in self.rows)
