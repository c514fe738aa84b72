"""The sample reports in docs/cost-report/.

* The report of the backfilled test data, as text, HTML and PNGs. It is the very report whose
  numbers ``test_backfill_exact`` checks by hand, so the sample in the docs is known to be right;
  ``test_docs_sample`` regenerates it and compares. Regenerate with

      .venv/bin/python -m tests.report.sample

* The monthly chargeback of a simulated two-cluster fleet (tests/report/fleet.py, June 2025 against
  May): text, HTML, the exported CSV and the Parquet file's schema. Two months of a fleet take a few
  minutes to backfill, so it is regenerated on request and ``test_docs_sample`` checks the committed
  files against each other and against the export schema instead:

      .venv/bin/python -m tests.report.sample --fleet

(needs promtool and prometheus, and matplotlib and pyarrow from the ``report`` extra).
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import tempfile
from pathlib import Path

from exporter.report.chargeback import RECORDED_SERIES
from exporter.report.cli import main, make_report, options
from exporter.report.html import render_plots
from exporter.report.sources import SOURCES
from tests.report import fleet, synthetic
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


FLEET_PRICING = SAMPLE_DIR / "fleet-pricing.yaml"
FLEET_ARGS = ["--period", "2025-06", "--step", "1h", "--pricing", "FLEET_PRICING", "--group-by", "label:cost-center",
              "--share-idle", "proportional"]
FLEET_COMMAND = ("gpu-pod-exporter report --prometheus " + SHOWN_URL + " "
                 + " ".join(FLEET_ARGS).replace("FLEET_PRICING", "fleet-pricing.yaml"))
FLEET_TEXT = SAMPLE_DIR / "fleet-2025-06.txt"
FLEET_HTML = SAMPLE_DIR / "fleet-2025-06.html"
FLEET_CSV = SAMPLE_DIR / "chargeback-20250601T000000Z_20250701T000000Z.csv"
FLEET_SCHEMA = SAMPLE_DIR / "chargeback-parquet-schema.txt"


def build_fleet(prometheus: object) -> str:
    """Backfill the fleet's two months (raw series, then the rules) and start Prometheus; its URL."""
    from tests.report.tsdb import BackfilledPrometheus  # noqa: PLC0415

    assert isinstance(prometheus, BackfilledPrometheus)
    offset = prometheus.rule_offset(fleet.INTERVAL_S)
    # a report point reads the evaluation (interval - offset) old; a rule must not see the raw sample one
    # interval old
    prometheus.lookback = f"{int(fleet.INTERVAL_S - offset / 2)}s"
    prometheus.add_openmetrics("fleet", synthetic.openmetrics(
        fleet.fleet(), offset, fleet.UNTIL_H, origin=fleet.ORIGIN, sample_s=fleet.INTERVAL_S, from_h=fleet.FROM_H,
        energy_lead_s=fleet.ENERGY_LEAD_S))
    prometheus.backfill_rules([*(source.series for source in SOURCES), *RECORDED_SERIES],
                              fleet.ORIGIN + fleet.FROM_H * 3600, fleet.ORIGIN + fleet.UNTIL_H * 3600, fleet.INTERVAL_S)
    prometheus.start()
    return prometheus.url


def fleet_report(url: str, *extra: str) -> str:
    args = [str(FLEET_PRICING) if arg == "FLEET_PRICING" else arg for arg in FLEET_ARGS]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--prometheus", url, *args, *extra])
    if code != 0:
        raise RuntimeError(f"the report failed with {code}")
    return out.getvalue().replace(url, SHOWN_URL).replace(str(FLEET_PRICING), FLEET_PRICING.name)


def generate_fleet(url: str) -> None:
    import pyarrow.parquet as pq  # noqa: PLC0415

    FLEET_TEXT.write_text(f"$ {FLEET_COMMAND}\n" + fleet_report(url), encoding="utf-8")
    FLEET_HTML.write_text(fleet_report(url, "--format", "html"), encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="chargeback-") as export_dir:
        fleet_report(url, "--export-dir", export_dir)
        exported = Path(export_dir)
        FLEET_CSV.write_bytes((exported / FLEET_CSV.name).read_bytes())
        schema = pq.read_schema(exported / FLEET_CSV.with_suffix(".parquet").name)
        FLEET_SCHEMA.write_text(schema.to_string(show_schema_metadata=True) + "\n", encoding="utf-8")


def _main() -> int:
    from tests.report.conftest import build  # noqa: PLC0415
    from tests.report.tsdb import BackfilledPrometheus  # noqa: PLC0415

    if sys.argv[1:] == ["--fleet"]:
        with tempfile.TemporaryDirectory(prefix="report-fleet-") as workdir:
            prometheus = BackfilledPrometheus(Path(workdir), max_block_duration="240h")
            try:
                generate_fleet(build_fleet(prometheus))
            finally:
                prometheus.stop()
        print(f"wrote the fleet chargeback into {SAMPLE_DIR.relative_to(REPO_ROOT)}/", file=sys.stderr)
        return 0
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
