"""The doctor's table: one line per check, the fix under every problem, colour only on a terminal.

Counter rows are many (every CSV row on every GPU), so by default a GPU's counter rows that are
fine collapse into one summary line ("25 served, 2 not supported: ..."); problems are always
listed one by one. ``--verbose`` lists every row; ``--json`` always carries every row.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TextIO

from exporter.doctor.report import Report, Row, Verdict

COLOURS = {Verdict.OK: "32", Verdict.DEGRADED: "33", Verdict.FAILED: "31", Verdict.SKIPPED: "2"}
LABELS = {Verdict.OK: "ok", Verdict.DEGRADED: "DEGRADED", Verdict.FAILED: "FAILED", Verdict.SKIPPED: "skipped"}


def use_colour(stream: TextIO) -> bool:
    """ANSI colour only for a terminal, and never when NO_COLOR is set or TERM is dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _collapse(rows: Iterable[Row]) -> list[Row]:
    """Fine counter rows of one section become one summary row placed where the first of them was."""
    rows = list(rows)
    result: list[Row] = []
    done: set[str] = set()
    for row in rows:
        if row.data.get("kind") != "counter" or row.verdict.is_problem:
            result.append(row)
            continue
        if row.section in done:
            continue
        done.add(row.section)
        fine = [item for item in rows if item.section == row.section and item.data.get("kind") == "counter"
                and not item.verdict.is_problem]
        served = sum(1 for item in fine if item.data.get("state") == "served")
        unsupported = [str(item.data.get("counter")) for item in fine if item.data.get("state") == "unsupported"]
        skipped_rows = [item for item in fine if item.verdict is Verdict.SKIPPED]
        text = f"{served} served"
        if unsupported:
            text += f", {len(unsupported)} not supported on this GPU ({', '.join(unsupported)})"
        if skipped_rows:
            text += f", {len(skipped_rows)} not checked"
        result.append(Row(row.section, "counters", Verdict.OK, text))
    return result


def render_table(report: Report, stream: TextIO, *, verbose: bool = False, colour: bool | None = None) -> None:
    colour = use_colour(stream) if colour is None else colour
    rows = list(report.rows) if verbose else _collapse(report.rows)
    title = "gpu-pod-exporter doctor"
    if report.node:
        title += f": node {report.node}"
    if report.simulated:
        title += f" (simulated: {report.simulated})"
    stream.write(title + "\n\n")
    verdict_width = max(len(label) for label in LABELS.values())
    section_width = max([len("SECTION"), *(len(row.section) for row in rows)])
    check_width = min(40, max([len("CHECK"), *(len(row.check) for row in rows)]))
    stream.write(f"{'VERDICT':<{verdict_width}}  {'SECTION':<{section_width}}  {'CHECK':<{check_width}}  DETAIL\n")
    for row in rows:
        label = f"{LABELS[row.verdict]:<{verdict_width}}"
        if colour:
            label = f"\033[{COLOURS[row.verdict]}m{label}\033[0m"
        stream.write(f"{label}  {row.section:<{section_width}}  {row.check:<{check_width}}  {row.detail}\n")
        if row.hint:
            indent = " " * (verdict_width + 2)
            stream.write(f"{indent}fix: {row.hint}\n")
    counts = report.counts()
    summary = ", ".join(f"{counts[verdict.value]} {verdict.value}" for verdict in Verdict if counts[verdict.value])
    stream.write(f"\n{LABELS[report.verdict].upper()}: {summary} (exit code {report.exit_code})\n")
