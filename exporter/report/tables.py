"""The report's tables as columns and cells, shared by the text, CSV and HTML formats.

A cell is a number (formatted per column), a string, or None ("n/a": the cluster lacks the
series; the notes say which). Keeping one definition of every table means the three formats
cannot disagree about what a column is called or what it holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from exporter.report.chargeback import Chargeback, GroupTotal
from exporter.report.model import Report, Usage
from exporter.report.timespec import format_time

Cell = str | float | None


@dataclass(frozen=True)
class Column:
    title: str
    unit: str = ""
    decimals: int | None = 2  # None: a text column

    @property
    def numeric(self) -> bool:
        return self.decimals is not None

    @property
    def heading(self) -> str:
        return f"{self.title} ({self.unit})" if self.unit else self.title


@dataclass(frozen=True)
class Table:
    key: str
    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]
    total: tuple[Cell, ...] | None = None
    empty: str = "(none)"


def format_cell(value: Cell, column: Column) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    if column.decimals is None:
        return str(value)
    return f"{value:,.{column.decimals}f}"


def _usage_cells(usage: Usage, priced: bool) -> list[Cell]:
    cells: list[Cell] = [usage.allocated_gpu_hours, usage.busy_gpu_hours, usage.utilization_percent,
                         usage.idle_gpu_hours, usage.idle_percent, usage.unmeasured_gpu_hours,
                         usage.memory_gib_hours, usage.energy_kwh]
    if priced:
        cells += [usage.cost, usage.idle_cost]
    return cells


def usage_table(report: Report) -> Table:
    settings = report.settings
    by_team = settings.by == "team"
    columns: list[Column] = []
    if report.multi_cluster:
        columns.append(Column("cluster", decimals=None))
    columns += [Column("team" if by_team else "namespace", decimals=None),
                Column("namespaces" if by_team else "team", decimals=None),
                Column("allocated", "GPU-h"), Column("busy", "GPU-h"), Column("util", "%", 1),
                Column("idle", "GPU-h"), Column("idle", "%", 1), Column("unmeasured", "GPU-h"),
                Column("memory", "GiB-h", 1), Column("energy", "kWh")]
    if settings.priced:
        columns += [Column("cost", settings.currency), Column("idle cost", settings.currency)]
    rows = []
    for row in report.rows:
        cells: list[Cell] = [row.cluster] if report.multi_cluster else []
        cells += [row.key, ", ".join(row.related), *_usage_cells(row.usage, settings.priced)]
        rows.append(tuple(cells))
    total: list[Cell] = [""] if report.multi_cluster else []
    total += ["total", "", *_usage_cells(report.total, settings.priced)]
    title = f"GPU usage and cost by {settings.by}"
    return Table("usage", title, tuple(columns), tuple(rows), tuple(total))


def capacity_table(report: Report) -> Table:
    columns = (Column("cluster", decimals=None), Column("GPUs at end", decimals=0),
               Column("capacity", "GPU-h"), Column("allocated", "GPU-h"), Column("unallocated", "GPU-h"),
               Column("allocated", "%", 1), Column("data coverage", "%", 1))
    rows = tuple((c.cluster or "(no cluster label)", c.gpus_at_end, c.capacity_gpu_hours, c.allocated_gpu_hours,
                  c.unallocated_gpu_hours, c.allocated_percent, c.coverage_percent) for c in report.capacity)
    return Table("capacity", "Cluster capacity", columns, rows)


def reclaim_table(report: Report) -> Table:
    measure = "peak" if report.settings.reclaim_by == "peak" else "p95"
    columns: list[Column] = []
    if report.multi_cluster:
        columns.append(Column("cluster", decimals=None))
    columns += [Column("namespace", decimals=None), Column("team", decimals=None),
                Column("held at end", "GPUs"), Column("peak in use", "GPUs"), Column("p95 in use", "GPUs"),
                Column("could give back", "GPUs"), Column("allocated", "GPU-h"), Column("idle", "GPU-h")]
    rows = []
    for row in report.reclaim:
        cells: list[Cell] = [row.cluster] if report.multi_cluster else []
        cells += [row.namespace, ", ".join(row.teams), row.held_at_end, row.peak_in_use, row.p95_in_use,
                  row.give_back, row.allocated_gpu_hours, row.idle_gpu_hours]
        rows.append(tuple(cells))
    title = (f"GPUs each namespace could give back (held at the end minus the {measure} of GPUs in use "
             "while it held any)")
    return Table("reclaim", title, tuple(columns), tuple(rows))


def pods_table(report: Report) -> Table:
    columns: list[Column] = []
    if report.multi_cluster:
        columns.append(Column("cluster", decimals=None))
    columns += [Column("namespace", decimals=None), Column("pod", decimals=None), Column("team", decimals=None),
                Column("allocated", "GPU-h"), Column("idle", "GPU-h"), Column("idle", "%", 1),
                Column("util", "%", 1)]
    rows = []
    for pod in report.idle_pods:
        cells: list[Cell] = [pod.cluster] if report.multi_cluster else []
        cells += [pod.namespace, pod.pod, pod.team, pod.allocated_gpu_hours, pod.idle_gpu_hours,
                  pod.idle_percent, pod.utilization_percent]
        rows.append(tuple(cells))
    title = f"The {len(report.idle_pods)} most idle pods" if report.idle_pods else "The most idle pods"
    return Table("pods", title, tuple(columns), tuple(rows))


def chargeback_table(report: Report) -> Table:
    """Per cluster and cost group: what it pays, the unallocated capacity shared to it, the previous period."""
    chargeback = report.chargeback
    currency = chargeback.currency if chargeback is not None else report.settings.currency
    columns = (Column("cluster", decimals=None), Column("cost group", decimals=None),
               Column("allocated", "GPU-h"), Column("idle", "GPU-h"), Column("GPU cost", currency),
               Column("energy cost", currency), Column("unallocated share", currency), Column("total", currency),
               Column("previous period", currency), Column("previous data", "%", 1), Column("change", "%", 1))
    if chargeback is None:
        return Table("chargeback", "Chargeback", columns, (), empty="(no chargeback: give --pricing or --group-by)")
    rows = tuple((t.cluster, t.group, t.gpu_hours, t.idle_gpu_hours, t.gpu_cost, t.energy_cost, t.unallocated_cost,
                  t.cost, t.previous_cost, t.previous_coverage_percent, t.change_percent) for t in chargeback.totals)
    return Table("chargeback", _chargeback_title(chargeback), columns, rows, _chargeback_total(chargeback.totals))


def _sum_known(values: list[float | None]) -> float | None:
    """The sum of the values that are known (None when none is)."""
    known = [v for v in values if v is not None]
    return math.fsum(known) if known else None


def _chargeback_total(totals: Sequence[GroupTotal]) -> tuple[Cell, ...]:
    """The total row: sums of what is known; the change only when every group's periods are comparable."""
    now, before = _sum_known([t.cost for t in totals]), _sum_known([t.previous_cost for t in totals])
    known = [t.previous_coverage_percent for t in totals if t.previous_coverage_percent is not None]
    shown = now is not None and bool(before) and all(t.comparable for t in totals)
    return ("", "total", math.fsum(t.gpu_hours for t in totals), math.fsum(t.idle_gpu_hours for t in totals),
            _sum_known([t.gpu_cost for t in totals]), _sum_known([t.energy_cost for t in totals]),
            _sum_known([t.unallocated_cost for t in totals]), now, before, min(known) if known else None,
            100.0 * (now - before) / before if shown and now is not None and before else None)


def _chargeback_title(chargeback: Chargeback) -> str:
    return (f"Chargeback by {chargeback.group_by} (unallocated capacity: "
            + {"none": "billed to (unallocated)", "even": "shared evenly among each cluster's cost groups",
               "proportional": "shared in proportion to each cost group's GPU cost"}[chargeback.share_idle]
            + "; previous period: " + (f"{format_time(chargeback.previous.start)} to "
                                       f"{format_time(chargeback.previous.end)}" if chargeback.previous else "none")
            + ")")


TABLES = {"usage": usage_table, "capacity": capacity_table, "reclaim": reclaim_table, "pods": pods_table,
          "chargeback": chargeback_table}


def all_tables(report: Report) -> list[Table]:
    return [build(report) for key, build in TABLES.items() if key != "chargeback" or report.chargeback is not None]


def formatted(table: Table) -> tuple[list[str], list[list[str]], list[str] | None]:
    """Headings, formatted rows and the formatted total row."""
    headings = [column.heading for column in table.columns]
    rows = [[format_cell(cell, column) for cell, column in zip(row, table.columns, strict=True)]
            for row in table.rows]
    total = None
    if table.total is not None:
        total = [format_cell(cell, column) for cell, column in zip(table.total, table.columns, strict=True)]
    return headings, rows, total
