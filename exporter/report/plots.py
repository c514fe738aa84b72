"""The report's plots (PNG), drawn with matplotlib from the ``report`` extra.

matplotlib is imported here only, and only when a plot is drawn: the exporter never needs it
and its image does not ship it. ``require_matplotlib`` turns a missing install into one line
that says how to get it. Figures are built with ``matplotlib.figure.Figure`` (no pyplot, no
global backend state) and saved without a timestamp, so the same report gives the same bytes.
"""

from __future__ import annotations

import io
from collections import defaultdict
from typing import TYPE_CHECKING

from exporter.report.model import Report

if TYPE_CHECKING:
    from matplotlib.figure import Figure

INSTALL_HINT = ("--format html draws plots with matplotlib, which is not installed: "
                "pip install 'gpu-pod-exporter[report]' (or pip install matplotlib)")
MAX_SERIES = 12  # more teams than this are drawn as the 11 largest and "other"


class MissingPlotLibraryError(RuntimeError):
    """matplotlib is not importable."""


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401, PLC0415 - optional extra, imported only for --format html
    except ImportError:
        raise MissingPlotLibraryError(INSTALL_HINT) from None


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


def _label(report: Report, cluster: str, key: str) -> str:
    return f"{cluster}/{key}" if report.multi_cluster else key


def daily_gpu_hours(report: Report) -> bytes:
    """Stacked bars: allocated GPU-hours per UTC day, one colour per team (or namespace)."""
    require_matplotlib()
    from matplotlib.figure import Figure  # noqa: PLC0415

    days = sorted({item.day for item in report.daily})
    per_key: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for item in report.daily:
        per_key[_label(report, item.cluster, item.key)][item.day] += item.allocated_gpu_hours
    keys = sorted(per_key, key=lambda k: -sum(per_key[k].values()))
    if len(keys) > MAX_SERIES:
        other: dict[str, float] = defaultdict(float)
        for key in keys[MAX_SERIES - 1:]:
            for day, value in per_key[key].items():
                other[day] += value
        keys = [*keys[: MAX_SERIES - 1], "other"]
        per_key["other"] = other
    figure = Figure(figsize=(9, 4.5))
    axes = figure.add_subplot()
    bottoms = [0.0] * len(days)
    for key in keys:
        values = [per_key[key].get(day, 0.0) for day in days]
        axes.bar(days, values, bottom=bottoms, label=key)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    busy = [sum(item.busy_gpu_hours or 0.0 for item in report.daily if item.day == day) for day in days]
    axes.plot(days, busy, color="black", marker="o", linestyle="--", label=f"busy, all {report.settings.by}s")
    axes.set_ylabel("GPU-hours (bars: allocated)")
    axes.set_title(f"Allocated GPU-hours per day and {report.settings.by} (UTC days)")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    axes.tick_params(axis="x", labelrotation=45)
    figure.tight_layout()
    return _png(figure)


def allocated_vs_busy(report: Report) -> bytes:
    """Per team (or namespace): allocated, busy and idle GPU-hours side by side."""
    require_matplotlib()
    from matplotlib.figure import Figure  # noqa: PLC0415

    rows = sorted(report.rows, key=lambda r: r.usage.allocated_gpu_hours)[-MAX_SERIES:]
    labels = [_label(report, row.cluster, row.key) for row in rows]
    positions = list(range(len(rows)))
    height = 0.27
    figure = Figure(figsize=(9, max(3.0, 0.6 * len(rows) + 1.5)))
    axes = figure.add_subplot()
    series = (("allocated", [r.usage.allocated_gpu_hours for r in rows], -height),
              ("busy (utilisation-weighted)", [r.usage.busy_gpu_hours or 0.0 for r in rows], 0.0),
              (f"idle (< {report.settings.idle_threshold_percent:g} %)", [r.usage.idle_gpu_hours or 0.0 for r in rows],
               height))
    for name, values, offset in series:
        axes.barh([p + offset for p in positions], values, height=height, label=name)
    axes.set_yticks(positions, labels)
    axes.set_xlabel("GPU-hours")
    axes.set_title(f"Allocated vs busy GPU-hours per {report.settings.by}")
    axes.legend(loc="lower right", fontsize="small")
    figure.tight_layout()
    return _png(figure)


PLOTS = {"daily-gpu-hours": daily_gpu_hours, "allocated-vs-busy": allocated_vs_busy}
