"""Text, CSV and JSON renderings of a report (HTML is in ``html``)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from typing import Any

from exporter.report.model import Report
from exporter.report.tables import TABLES, Table, all_tables, format_cell, formatted
from exporter.report.timespec import format_time
from exporter.units import format_duration

TEXT_CELL_LIMIT = 48


def header_lines(report: Report) -> list[str]:
    """What the report covers and how it counted, in the words of the docs."""
    window, settings = report.window, report.settings
    lines = [
        f"GPU cost and waste report, {format_time(window.start)} to {format_time(window.end)} "
        f"({format_duration(window.end - window.start)} in {format_duration(window.step)} steps), by {settings.by}",
        f"Source: {settings.prometheus}" + (f" (clusters: {', '.join(settings.clusters)})" if settings.clusters
                                            else ""),
        f"Idle: utilisation below {settings.idle_threshold_percent:g} % while allocated. "
        "GPU-hours are whole-GPU equivalents (a MIG slice counts its fraction of the GPU).",
    ]
    if settings.priced:
        prices = [] if settings.default_price is None else [
            f"{settings.default_price:g} {settings.currency} per GPU-hour"]
        prices += [f"{model}: {price:g}" for model, price in settings.model_prices]
        if prices:
            lines.append("Price: " + "; ".join(prices))
    if settings.pricing_file is not None:
        lines.append(f"Prices: {settings.pricing_file} (the usage table prices each model's GPU-hours; the "
                     "chargeback applies node pools, MIG profiles and energy too)")
    return lines


def _text_table(table: Table) -> list[str]:
    headings, rows, total = formatted(table)
    rows = [[_clip(cell) for cell in row] for row in rows]
    body = [*rows, *([total] if total is not None else [])]
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(headings)]

    def line(cells: list[str]) -> str:
        parts = [cell.rjust(width) if column.numeric else cell.ljust(width)
                 for cell, width, column in zip(cells, widths, table.columns, strict=True)]
        return "  ".join(parts).rstrip()

    out = [table.title, "-" * len(table.title), line(headings)]
    if not rows:
        out.append(table.empty)
    out += [line(row) for row in rows]
    if total is not None and rows:
        out.append(line(["-" * w if c.numeric else "" for w, c in zip(widths, table.columns, strict=True)]))
        out.append(line(total))
    return out


def _clip(cell: str) -> str:
    return cell if len(cell) <= TEXT_CELL_LIMIT else cell[: TEXT_CELL_LIMIT - 3] + "..."


def render_text(report: Report) -> str:
    out = header_lines(report)
    if report.warnings:
        out += ["", "WARNING: Prometheus answered with warnings; the data may be incomplete:"]
        out += [f"  - {warning}" for warning in report.warnings]
    for table in all_tables(report):
        out += ["", *_text_table(table)]
    out += ["", "How shared GPUs are split", "-------------------------"]
    out += [f"- {name}: {text}" for name, text in report.splits.items()]
    if report.notes:
        out += ["", "Notes", "-----", *(f"- {note}" for note in report.notes)]
    return "\n".join(out) + "\n"


def render_csv(report: Report, table_key: str = "usage") -> str:
    """One table as CSV (numbers unrounded beyond 6 decimals, empty for n/a)."""
    table = TABLES[table_key](report)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([column.heading for column in table.columns])
    rows = list(table.rows) + ([table.total] if table.total is not None and table.rows else [])
    for row in rows:
        writer.writerow(["" if cell is None else
                         (f"{cell:.6f}".rstrip("0").rstrip(".") if isinstance(cell, float) else
                          format_cell(cell, column))
                         for cell, column in zip(row, table.columns, strict=True)])
    return buffer.getvalue()


def report_dict(report: Report) -> dict[str, Any]:
    """Everything in the report as plain JSON types (GPU-hours etc. unrounded)."""
    def usage(value: Any) -> dict[str, Any]:
        data = asdict(value)
        data["utilization_percent"] = value.utilization_percent
        data["idle_percent"] = value.idle_percent
        return data

    window = report.window
    return {
        "window": {"start": format_time(window.start), "end": format_time(window.end),
                   "step_seconds": window.step, "points": window.points, "hours": window.hours},
        "settings": asdict(report.settings),
        "rows": [{"cluster": row.cluster, report.settings.by: row.key,
                  ("namespaces" if report.settings.by == "team" else "teams"): list(row.related),
                  "models": list(row.models), **usage(row.usage)} for row in report.rows],
        "total": usage(report.total),
        "capacity": [{**asdict(c), "unallocated_gpu_hours": c.unallocated_gpu_hours,
                      "allocated_percent": c.allocated_percent,
                      "gaps": [[format_time(a), format_time(b)] for a, b in c.gaps]} for c in report.capacity],
        "reclaim": [asdict(row) for row in report.reclaim],
        "idle_pods": [{**asdict(pod), "idle_percent": pod.idle_percent,
                       "utilization_percent": pod.utilization_percent} for pod in report.idle_pods],
        "daily": [asdict(day) for day in report.daily],
        "splits": report.splits,
        "notes": list(report.notes),
        "warnings": list(report.warnings),
        "chargeback": None if report.chargeback is None else {
            "group_by": report.chargeback.group_by, "share_idle": report.chargeback.share_idle,
            "currency": report.chargeback.currency,
            "previous_period": None if report.chargeback.previous is None else [
                format_time(report.chargeback.previous.start), format_time(report.chargeback.previous.end)],
            "lines": [{**asdict(line), "cost": line.cost} for line in report.chargeback.lines],
            "totals": [{**asdict(total), "comparable": total.comparable, "change_percent": total.change_percent}
                       for total in report.chargeback.totals],
        },
    }


def render_json(report: Report) -> str:
    return json.dumps(report_dict(report), indent=2, sort_keys=False) + "\n"
