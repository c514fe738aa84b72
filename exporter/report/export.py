"""The chargeback as files with a stable, versioned schema: CSV and Parquet, one pair per period.

A billing system reads these files month after month, so their columns are a contract:
``SCHEMA`` is it (name, Parquet type, meaning; docs/cost.md, "Chargeback export schema", is
checked against it by a test), ``SCHEMA_VERSION`` is written in every row and in the Parquet
file's metadata, and a change that removes, renames or retypes a column must raise the version.
Adding a column at the end is compatible and keeps it.

Parquet is written with pyarrow (the ``report`` extra); without it ``--export-dir`` says so and
exits 2, like ``--format html`` without matplotlib.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from exporter.report.chargeback import Chargeback
from exporter.report.timespec import format_time

SCHEMA_VERSION = "1"
PARQUET_METADATA_KEY = b"gpu_pod_exporter.chargeback.schema_version"

# (column, Parquet type, meaning)
SCHEMA: tuple[tuple[str, str, str], ...] = (
    ("schema_version", "string", "version of this schema (1)"),
    ("period_start", "string", "start of the billed period, RFC 3339 UTC"),
    ("period_end", "string", "end of the billed period, RFC 3339 UTC (a point stands for the step before it)"),
    ("currency", "string", "currency of every money column"),
    ("cluster", "string", "value of the cluster label (empty without one)"),
    ("group_by", "string", "what a cost group is: team, namespace, label:KEY or annotation:KEY"),
    ("cost_group", "string", "the cost group billed (unlabelled, unassigned or (unallocated) where none applies)"),
    ("kind", "string", "allocated: GPUs the group's pods held; unallocated: capacity nobody held, shared "
                       "to the group by --share-idle or billed to (unallocated)"),
    ("model", "string", "GPU model (modelName)"),
    ("mig_profile", "string", "MIG profile (GPU_I_PROFILE), empty for whole GPUs and unallocated lines"),
    ("node_pool", "string", "node pool the GPUs are on (pricing file), empty when none"),
    ("gpu_hours", "double", "whole-GPU equivalent hours"),
    ("instance_hours", "double", "device-hours (a MIG instance counts 1); empty on unallocated lines"),
    ("busy_gpu_hours", "double", "utilisation-weighted GPU-hours; empty on unallocated lines"),
    ("idle_gpu_hours", "double", "allocated GPU-hours below the idle threshold; empty on unallocated lines"),
    ("energy_kwh", "double", "measured energy attributed to the line; empty on unallocated lines"),
    ("price_per_gpu_hour", "double", "effective price of one GPU-hour on this line; empty without a price"),
    ("gpu_cost", "double", "GPU-hours priced (per MIG instance-hour where the profile has a price)"),
    ("energy_cost", "double", "energy_kwh times the energy price; empty without one"),
    ("cost", "double", "gpu_cost plus energy_cost: what the line bills"),
)
COLUMNS = tuple(name for name, _, _ in SCHEMA)


def rows(chargeback: Chargeback) -> list[dict[str, Any]]:
    """The chargeback lines as records of ``SCHEMA`` (None for an empty cell)."""
    common = {"schema_version": SCHEMA_VERSION, "period_start": format_time(chargeback.window.start),
              "period_end": format_time(chargeback.window.end), "currency": chargeback.currency,
              "group_by": chargeback.group_by}
    return [{**common, "cluster": line.cluster, "cost_group": line.group, "kind": line.kind, "model": line.model,
             "mig_profile": line.mig_profile, "node_pool": line.node_pool, "gpu_hours": line.gpu_hours,
             "instance_hours": line.instance_hours, "busy_gpu_hours": line.busy_gpu_hours,
             "idle_gpu_hours": line.idle_gpu_hours, "energy_kwh": line.energy_kwh,
             "price_per_gpu_hour": line.price_per_gpu_hour, "gpu_cost": line.gpu_cost,
             "energy_cost": line.energy_cost, "cost": line.cost} for line in chargeback.lines]


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6f}".rstrip("0").rstrip(".") if math.isfinite(value) else ""
    return str(value)


def render_csv(chargeback: Chargeback) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for record in rows(chargeback):
        writer.writerow([_csv_cell(record[name]) for name in COLUMNS])
    return buffer.getvalue()


class MissingParquetLibraryError(RuntimeError):
    """pyarrow is not installed (it comes with the ``report`` extra)."""


def require_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401, PLC0415
    except ImportError:
        raise MissingParquetLibraryError(
            "writing Parquet needs pyarrow: pip install 'gpu-pod-exporter[report]'") from None


def parquet_schema() -> Any:
    """The pyarrow schema of ``SCHEMA``, with the version in its metadata."""
    import pyarrow as pa  # noqa: PLC0415

    types = {"string": pa.string(), "double": pa.float64()}
    return pa.schema([pa.field(name, types[kind], nullable=True) for name, kind, _ in SCHEMA],
                     metadata={PARQUET_METADATA_KEY: SCHEMA_VERSION.encode()})


def write_parquet(chargeback: Chargeback, path: Path) -> None:
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    records = rows(chargeback)
    table = pa.Table.from_pylist(records, schema=parquet_schema()) if records else parquet_schema().empty_table()
    pq.write_table(table, path)


def period_name(chargeback: Chargeback) -> str:
    """``chargeback-<start>_<end>``: the file name of one period (sortable, no colons)."""
    def stamp(seconds: float) -> str:
        return format_time(seconds).replace(":", "").replace("-", "")

    return f"chargeback-{stamp(chargeback.window.start)}_{stamp(chargeback.window.end)}"


def export(chargeback: Chargeback, directory: Path) -> list[Path]:
    """Write ``<period>.csv`` and ``<period>.parquet`` into ``directory``; the paths written."""
    require_pyarrow()
    base = directory / period_name(chargeback)
    csv_path, parquet_path = base.with_suffix(".csv"), base.with_suffix(".parquet")
    for path, write in ((csv_path, lambda p: p.write_text(render_csv(chargeback), encoding="utf-8")),
                        (parquet_path, lambda p: write_parquet(chargeback, p))):
        partial = path.with_name(path.name + ".partial")
        write(partial)
        partial.replace(path)  # a reader never sees half a file
    return [csv_path, parquet_path]
