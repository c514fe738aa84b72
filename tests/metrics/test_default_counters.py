"""The shipped counter sets: gpu-pod-exporter's default, and dcgm-exporter 4.8's two lists for -f.

Three CSVs ship, each with one job:

* ``exporter/metrics/data/default-counters.csv``: what the exporter (and the Helm chart, and the
  plain manifests) exports with no ``-f``. It must be dcgm-exporter 4.8's default set, row for row,
  plus every row that the shipped alerts, recording rules and dashboards read, so that a default
  install feeds all of them (tests/e2e/test_default_install.py proves that end to end).
* ``exporter/metrics/data/dcgm-exporter/default-counters.csv`` and ``.../dcp-metrics-included.csv``:
  dcgm-exporter 4.8's own lists, which the image installs under ``/etc/dcgm-exporter/`` (from
  ``etc/dcgm-exporter/``, links to them) and the package serves for those paths outside the image, so
  that ``-f /etc/dcgm-exporter/...`` command lines keep working and export exactly what they did.

The reference they are compared with, ``tests/fixtures/dcgm-exporter-4.8-default-counters.csv``, is
dcgm-exporter's ``etc/default-counters.csv`` as published in release 4.5.3-4.8.2, byte for byte (its
git blob id is checked below), so a drifting name, type or help text cannot go unnoticed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from exporter.metrics.catalog import CATALOG, FromExporter
from exporter.metrics.counters import CounterSet, default_counters_text, load_counters
from exporter.metrics.upstream_paths import resolve_collectors
from tests.dashboards.dashboard_queries import all_queries
from tests.dashboards.promql_names import names_in, recorded_names, rule_groups

REPO = Path(__file__).resolve().parents[2]
UPSTREAM_48 = REPO / "tests" / "fixtures" / "dcgm-exporter-4.8-default-counters.csv"
# `git hash-object etc/default-counters.csv` at NVIDIA/dcgm-exporter tag 4.5.3-4.8.2 (commit 691c927).
UPSTREAM_48_BLOB = "2eed7a651db300797554cb91591908f410902f21"
DCGM_EXPORTER_DATA = REPO / "exporter" / "metrics" / "data" / "dcgm-exporter"
DCGM_EXPORTER_LISTS = {name: DCGM_EXPORTER_DATA / name for name in ("default-counters.csv", "dcp-metrics-included.csv")}
PRODUCT_DEFAULT = REPO / "exporter" / "metrics" / "data" / "default-counters.csv"
RULE_FILES = sorted((REPO / "deploy" / "rules").glob("*.yaml"))
# Any value will do for the dashboards' template variables: only the metric names matter here.
DASHBOARD_VARIABLES = {"datasource": "prometheus", "cluster": "", "Hostname": "node", "gpu": "0", "modelName": "model",
                       "team": "team", "namespace": "namespace", "instance": "instance"}
NOT_SERVED_UPSTREAM_ROWS = {"DCGM_FI_DEV_VGPU_LICENSE_STATUS"}  # only meaningful inside a vGPU guest
# Types that dcgm-exporter corrected after 4.8.2, which our default and catalog follow: NVLink bandwidth is a rate,
# a gauge from 4.8.3 on (dcgm-exporter PR 658, "correct Prometheus type for NVLink bandwidth fields from counter to
# gauge"). The 4.8.2 reference file and the packaged 4.8 lists keep counter, as released.
TYPES_CORRECTED_IN_483 = {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "gauge"}


def as_of_483(row: tuple[str, str, str]) -> tuple[str, str, str]:
    """A 4.8.2 row with the type dcgm-exporter 4.8.3 gives it."""
    name, prom_type, help_text = row
    return name, TYPES_CORRECTED_IN_483.get(name, prom_type), help_text


def rows(counters: CounterSet) -> list[tuple[str, str, str]]:
    """(name, type, help) of every metric and label row, in file order."""
    everything = sorted([*counters.metrics, *counters.labels], key=lambda row: row.line)
    return [(row.name, row.prom_type, row.help) for row in everything]


def upstream_rows() -> list[tuple[str, str, str]]:
    """Every active row of dcgm-exporter 4.8's default list, served or not."""
    served = rows(load_counters(str(UPSTREAM_48)))
    text = UPSTREAM_48.read_text(encoding="utf-8")
    skipped = [line.split(",", 2) for line in text.splitlines()
               if line.split(",")[0].strip() in NOT_SERVED_UPSTREAM_ROWS]
    assert len(skipped) == len(NOT_SERVED_UPSTREAM_ROWS)
    return sorted([*served, *((n.strip(), t.strip(), h.strip()) for n, t, h in skipped)],
                  key=lambda row: text.index(f"\n{row[0]}"))


def test_the_reference_is_dcgm_exporters_published_48_file_byte_for_byte() -> None:
    content = UPSTREAM_48.read_bytes()
    blob = hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()
    assert blob == UPSTREAM_48_BLOB


def test_the_reference_has_the_25_metrics_and_the_driver_label_of_dcgm_exporter_48() -> None:
    reference = upstream_rows()
    assert len(reference) == 26
    assert ("DCGM_FI_DRIVER_VERSION", "label", "Driver Version") in reference
    assert ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
            "Total number of NVLink bandwidth counters for all lanes.") in reference


@pytest.mark.parametrize("name", sorted(DCGM_EXPORTER_LISTS))
def test_dcgm_exporter_lists_have_exactly_the_48_rows(name: str) -> None:
    """-f /etc/dcgm-exporter/<name> exports what dcgm-exporter 4.8 exports with it: same rows, order,
    types and help text (the vGPU row loads with one warning, not an error)."""
    path = DCGM_EXPORTER_LISTS[name]
    counters = load_counters(str(path))
    served = rows(counters)
    assert served == [row for row in upstream_rows() if row[0] not in NOT_SERVED_UPSTREAM_ROWS]
    assert len(counters.warnings) == 1
    assert counters.warnings[0].startswith(f"{path}:") and "DCGM_FI_DEV_VGPU_LICENSE_STATUS" in counters.warnings[0]


def test_the_product_default_starts_with_the_48_rows_unchanged() -> None:
    default = rows(load_counters(None))
    upstream = [as_of_483(row) for row in upstream_rows() if row[0] not in NOT_SERVED_UPSTREAM_ROWS]
    assert default[:len(upstream)] == upstream
    assert load_counters(None).warnings == ()
    assert PRODUCT_DEFAULT.read_text(encoding="utf-8") == default_counters_text()  # the packaged file


def read_by_shipped_rules_and_dashboards() -> dict[str, str]:
    """Metric name -> one place that reads it, over every rule and every dashboard query."""
    read: dict[str, str] = {}
    for _, rule in rule_groups(RULE_FILES):
        for name in names_in(str(rule["expr"])).metrics:
            read.setdefault(name, f"rule {rule.get('alert') or rule.get('record')}")
    for query in all_queries():
        expr = query.resolved(DASHBOARD_VARIABLES)
        for name in names_in(expr).metrics:
            read.setdefault(name, f"{query.dashboard} {query.source}")
    return read


def test_every_csv_row_the_shipped_rules_and_dashboards_read_is_in_the_default() -> None:
    """A series that only a CSV row turns on must be on by default if anything we ship reads it."""
    default = {row.name for row in load_counters(None).metrics}
    recorded = recorded_names(RULE_FILES)
    missing = {name: where for name, where in read_by_shipped_rules_and_dashboards().items()
               if name not in recorded and CATALOG.lookup(name) is not None and name not in default}
    assert missing == {}


def test_the_additions_are_only_rows_something_we_ship_reads_or_their_window_twins() -> None:
    """Part 2 holds what the rules and dashboards read, plus the Xid window count (dcgm-exporter's
    DCGM_EXP_XID_ERRORS_COUNT, which dashboards written for it use). Nothing else: every row costs driver
    time or series on every node."""
    upstream = {row[0] for row in upstream_rows()}
    added = {row.name for row in load_counters(None).metrics} - upstream
    read = set(read_by_shipped_rules_and_dashboards())
    companions = {"DCGM_EXP_XID_ERRORS_COUNT"}
    assert added - read == companions
    for name in added:
        spec = CATALOG.lookup(name)
        assert spec is not None and spec.served, name
        assert not isinstance(spec.read, FromExporter) or name.startswith("DCGM_EXP_")


def test_help_text_of_added_rows_is_the_catalogs() -> None:
    """The added rows describe themselves as the catalog (and the README's metric table) does."""
    upstream = {row[0] for row in upstream_rows()}
    for row in load_counters(None).metrics:
        if row.name not in upstream:
            spec = CATALOG.lookup(row.name)
            assert spec is not None
            assert (row.prom_type, row.help) == (spec.prom_type, spec.help), row.name


def test_the_catalog_describes_upstream_rows_as_dcgm_exporter_does() -> None:
    """The README's metric table and a row-less lookup use the catalog's type and help: the same words."""
    for name, prom_type, help_text in upstream_rows():
        spec = CATALOG.lookup(name)
        assert spec is not None, name
        if name not in NOT_SERVED_UPSTREAM_ROWS:
            assert (spec.prom_type, spec.help) == as_of_483((name, prom_type, help_text))[1:], name


def test_nvlink_bandwidth_is_served_as_a_gauge_by_default_and_as_the_csv_says_otherwise() -> None:
    """The default CSV (and the chart's copy) says gauge, as dcgm-exporter 4.8.3+; a 4.8.2 CSV saying counter keeps
    counter: the type served is the row's, the catalog does not force one."""
    default = {row.name: row.prom_type for row in load_counters(None).metrics}
    assert default["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "gauge"
    chart = REPO / "deploy" / "helm" / "gpu-pod-exporter" / "files" / "default-counters.csv"
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, gauge," in chart.read_text(encoding="utf-8")
    old = {row.name: row.prom_type for row in load_counters(str(UPSTREAM_48)).metrics}
    assert old["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "counter"


def test_the_image_paths_in_etc_are_links_to_the_packaged_lists() -> None:
    """etc/dcgm-exporter/ mirrors the image's /etc/dcgm-exporter/; the packaged copies are the one source."""
    for name, packaged in DCGM_EXPORTER_LISTS.items():
        link = REPO / "etc" / "dcgm-exporter" / name
        assert link.is_symlink() and link.resolve() == packaged.resolve()


def test_a_missing_dcgm_exporter_path_is_served_by_the_packaged_copy_not_the_default() -> None:
    for name, packaged in DCGM_EXPORTER_LISTS.items():
        resolved = resolve_collectors(f"/etc/dcgm-exporter/{name}", exists=False)
        assert Path(resolved.path).read_bytes() == packaged.read_bytes()
        assert "packaged copy" in resolved.note
