"""The sample report in docs/cost-report/ is what the report prints for the backfilled test data.

Its numbers are the ones test_backfill_exact checks by hand; this test keeps the committed text
and HTML (images aside: PNG bytes depend on the matplotlib and FreeType versions) from drifting
away from what the code prints. Regenerate with ``.venv/bin/python -m tests.report.sample``.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict

from exporter.report.export import COLUMNS, parquet_schema
from tests.report.conftest import Backfilled
from tests.report.plotting import require_matplotlib, require_pyarrow
from tests.report.sample import (
    COMMAND,
    FLEET_COMMAND,
    FLEET_CSV,
    FLEET_HTML,
    FLEET_PRICING,
    FLEET_SCHEMA,
    FLEET_TEXT,
    SAMPLE_DIR,
    report,
    without_images,
)

REGENERATE = "regenerate with: .venv/bin/python -m tests.report.sample"


def test_the_sample_text_is_the_report_of_the_test_data(backfilled: Backfilled) -> None:
    committed = (SAMPLE_DIR / "sample-report.txt").read_text(encoding="utf-8")
    assert committed == f"$ {COMMAND}\n" + report(backfilled.url), REGENERATE


def test_the_sample_html_is_the_report_of_the_test_data(backfilled: Backfilled) -> None:
    require_matplotlib()
    committed = (SAMPLE_DIR / "sample-report.html").read_text(encoding="utf-8")
    assert without_images(committed) == without_images(report(backfilled.url, "--format", "html")), REGENERATE
    assert committed.count("data:image/png;base64,") == 2
    for name in ("daily-gpu-hours", "allocated-vs-busy"):
        assert (SAMPLE_DIR / f"{name}.png").read_bytes().startswith(b"\x89PNG")


def test_docs_cost_md_shows_the_committed_sample() -> None:
    document = (SAMPLE_DIR.parent / "cost.md").read_text(encoding="utf-8")
    sample = (SAMPLE_DIR / "sample-report.txt").read_text(encoding="utf-8")
    assert sample.rstrip("\n") in document
    for name in ("daily-gpu-hours.png", "allocated-vs-busy.png", "sample-report.html", "sample-report.txt"):
        assert f"(cost-report/{name})" in document


def test_the_fleet_chargeback_files_agree_with_each_other_and_the_export_schema() -> None:
    """The monthly fleet sample is regenerated on request (minutes of backfill): its files must still agree."""
    require_pyarrow()
    rows = list(csv.DictReader(io.StringIO(FLEET_CSV.read_text(encoding="utf-8"))))
    assert rows and tuple(rows[0]) == COLUMNS
    assert {row["period_start"] for row in rows} == {"2025-06-01T00:00:00Z"}
    assert {row["cluster"] for row in rows} == {"eu-west", "us-east"}
    assert {row["kind"] for row in rows} == {"allocated", "unallocated"}
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for row in rows:
        totals[(row["cluster"], row["cost_group"])] += float(row["cost"] or 0)
    text = FLEET_TEXT.read_text(encoding="utf-8")
    assert text.startswith(f"$ {FLEET_COMMAND}\n")
    table = text.split("\nChargeback by ", 1)[1].split("\n\n", 1)[0].splitlines()
    for (cluster, group), cost in totals.items():
        [line] = [line for line in table if line.split()[:2] == [cluster, group]]
        assert f"{cost:,.2f}" in line.split(), (cluster, group, line)
    assert "Chargeback by label:cost-center" in without_images(FLEET_HTML.read_text(encoding="utf-8"))
    assert FLEET_SCHEMA.read_text(encoding="utf-8") == parquet_schema().to_string(show_schema_metadata=True) + "\n"
    document = (SAMPLE_DIR.parent / "cost.md").read_text(encoding="utf-8")
    assert "\n".join(table) in document, "docs/cost.md shows the fleet's chargeback table"
    for path in (FLEET_TEXT, FLEET_HTML, FLEET_CSV, FLEET_SCHEMA, FLEET_PRICING):
        assert f"(cost-report/{path.name})" in document
