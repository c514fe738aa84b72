"""The sample report in docs/cost-report/ is what the report prints for the backfilled test data.

Its numbers are the ones test_backfill_exact checks by hand; this test keeps the committed text
and HTML (images aside: PNG bytes depend on the matplotlib and FreeType versions) from drifting
away from what the code prints. Regenerate with ``.venv/bin/python -m tests.report.sample``.
"""

from __future__ import annotations

from tests.report.conftest import Backfilled
from tests.report.plotting import require_matplotlib
from tests.report.sample import COMMAND, SAMPLE_DIR, report, without_images

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
