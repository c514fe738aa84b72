"""The chargeback export: CSV and Parquet in the documented, versioned schema."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest

from exporter.report.chargeback import Chargeback, ChargeLine, GroupTotal
from exporter.report.export import COLUMNS, PARQUET_METADATA_KEY, SCHEMA, SCHEMA_VERSION, export, render_csv
from exporter.report.model import Window
from tests.report.plotting import require_pyarrow

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cost.md"
JUNE = Window(1748736000.0, 1751328000.0, 600.0)


def sample() -> Chargeback:
    lines = (
        ChargeLine("eu", "cc-ai", "allocated", "H100", "", "spot", 10.0, 10.0, 8.5, 1.0, 4.2, 3.0, 30.0, 0.84),
        ChargeLine("eu", "cc-ai", "unallocated", "H100", "", "spot", 2.5, None, None, None, None, 3.0, 7.5, None),
        ChargeLine("eu", "unlabelled", "allocated", "A100", "1g.10gb", "", 1 / 7, 1.0, None, None, 0.1, None, None,
                   None),
    )
    totals = (GroupTotal("eu", "cc-ai", 10.0, 1.0, 30.0, 0.84, 7.5, 38.34, 20.0),)
    return Chargeback(JUNE, None, "label:cost-center", "even", "EUR", lines, totals)


def test_the_csv_has_the_schema_columns_and_empty_cells_for_what_does_not_apply() -> None:
    rows = list(csv.DictReader(io.StringIO(render_csv(sample()))))
    assert tuple(rows[0]) == COLUMNS
    assert rows[0]["schema_version"] == SCHEMA_VERSION == "1"
    assert rows[0]["period_start"] == "2025-06-01T00:00:00Z"
    assert rows[0]["period_end"] == "2025-07-01T00:00:00Z"
    assert rows[0]["cost"] == "30.84"
    assert rows[1]["kind"] == "unallocated"
    assert rows[1]["instance_hours"] == rows[1]["energy_kwh"] == ""
    assert rows[2]["gpu_hours"] == "0.142857"
    assert rows[2]["cost"] == ""


def test_the_parquet_file_has_the_schema_its_version_and_the_same_rows(tmp_path: Path) -> None:
    require_pyarrow()
    import pyarrow.parquet as pq  # noqa: PLC0415

    csv_path, parquet_path = export(sample(), tmp_path)
    assert csv_path.name == "chargeback-20250601T000000Z_20250701T000000Z.csv"
    assert parquet_path.name == "chargeback-20250601T000000Z_20250701T000000Z.parquet"
    assert sorted(p.name for p in tmp_path.iterdir()) == [csv_path.name, parquet_path.name]  # no .partial left
    table = pq.read_table(parquet_path)
    assert table.schema.names == list(COLUMNS)
    assert [str(table.schema.field(name).type) for name, _, _ in SCHEMA] == [
        {"string": "string", "double": "double"}[kind] for _, kind, _ in SCHEMA]
    assert table.schema.metadata[PARQUET_METADATA_KEY] == b"1"
    records = table.to_pylist()
    assert [r["cost_group"] for r in records] == ["cc-ai", "cc-ai", "unlabelled"]
    assert records[0]["cost"] == pytest.approx(30.84)
    assert records[1]["instance_hours"] is None


def test_docs_cost_md_documents_exactly_this_schema() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## Chargeback export schema", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z_]+)` \| (string|double) \| (.+) \|$", section, flags=re.MULTILINE)
    assert [(name, kind) for name, kind, _ in documented] == [(name, kind) for name, kind, _ in SCHEMA]
    assert f"version **{SCHEMA_VERSION}**" in section
