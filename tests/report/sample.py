"""The sample report in docs/cost-report/: the report of the backfilled test data, as text, HTML and PNGs.

It is the very report whose numbers ``test_backfill_exact`` checks by hand, so the sample in the
docs is known to be right; ``test_docs_sample`` regenerates it and compares. Regenerate with

    .venv/bin/python -m tests.report.sample

(needs promtool and prometheus, and matplotlib from the ``report`` extra).
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import tempfile
from pathlib import Path

from exporter.report.cli import main, make_report, options
from exporter.report.html import render_plots
from tests.report.synthetic import A100

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_DIR = REPO_ROOT / "docs" / "cost-report"
SHOWN_URL = "http://prometheus.example:9090"
ARGS = ["--start", "2025-06-02T00:00:00Z", "--end", "2025-06-04T00:00:00Z", "--step", "2m",
        "--price-per-gpu-hour", "2.50", "--price-per-gpu-hour", f"{A100}=1.50"]
COMMAND = ("gpu-pod-exporter report --prometheus " + SHOWN_URL + " " + " ".join(
    f"'{arg}'" if " " in arg else arg for arg in ARGS))
IMAGE = re.compile(r'src="data:image/png;base64,[^"]*"')


def report(url: str, *extra: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--prometheus", url, *ARGS, *extra])
    if code != 0:
        raise RuntimeError(f"the report failed with {code}")
    return out.getvalue().replace(url, SHOWN_URL)


def without_images(html: str) -> str:
    """The HTML with its inline PNGs replaced (their bytes depend on matplotlib's and FreeType's versions)."""
    return IMAGE.sub('src="data:image/png;base64,..."', html)


def generate(url: str, directory: Path = SAMPLE_DIR) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sample-report.txt").write_text(f"$ {COMMAND}\n" + report(url), encoding="utf-8")
    (directory / "sample-report.html").write_text(report(url, "--format", "html"), encoding="utf-8")
    for name, png in render_plots(make_report(options(["--prometheus", url, *ARGS], 0.0))).items():
        (directory / f"{name}.png").write_bytes(png)


def _main() -> int:
    from tests.report.conftest import build  # noqa: PLC0415
    from tests.report.tsdb import BackfilledPrometheus  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="report-sample-") as workdir:
        prometheus = BackfilledPrometheus(Path(workdir))
        try:
            backfilled = build(prometheus)
            generate(backfilled.url)
        finally:
            prometheus.stop()
    print(f"wrote {SAMPLE_DIR.relative_to(REPO_ROOT)}/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
