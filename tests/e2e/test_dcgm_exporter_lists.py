"""``-f /etc/dcgm-exporter/default-counters.csv`` and ``.../dcp-metrics-included.csv`` keep working.

Many DaemonSets written for dcgm-exporter point ``-f`` (or DCGM_EXPORTER_COLLECTORS) at one of the
two lists its image ships. The gpu-pod-exporter image installs the same two files at the same paths
(the packaged copies in exporter/metrics/data/dcgm-exporter/); outside the image the package serves
those paths itself. With either, the exporter starts and serves exactly the metric families
dcgm-exporter 4.8 serves with it (the vGPU license row, meaningless outside a vGPU guest, is skipped
with one warning naming the file and line). The test passes the path exactly as a DaemonSet does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.metrics.catalog import CATALOG
from exporter.metrics.counters import load_counters
from tests.support.exporter_process import parse_samples, running_exporter
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

LISTS = sorted((REPO_ROOT / "exporter" / "metrics" / "data" / "dcgm-exporter").glob("*.csv"))


def test_both_lists_ship() -> None:
    assert [path.name for path in LISTS] == ["dcp-metrics-included.csv", "default-counters.csv"]


@pytest.mark.parametrize("path", LISTS, ids=lambda path: path.name)
def test_the_exporter_serves_exactly_the_lists_rows(path: Path) -> None:
    rows = {row.name for row in load_counters(str(path)).metrics}
    upstream_path = Path("/etc/dcgm-exporter") / path.name
    with running_exporter(["-f", str(upstream_path), "--simulate", "--collect-interval", "200"]) as exporter:
        exporter.wait_healthy()

        def dcgm_families() -> set[str] | None:
            names = {name for name, _, _ in parse_samples(exporter.metrics()) if name.startswith("DCGM_")}
            return names if rows <= names else None

        served = wait_for(dcgm_families, 20.0, f"every row of {path.name}")
        log = exporter.log()
    # Besides the list's rows only the exporter's own always-on families (health; attribution with -k):
    # no family a counters CSV selects.
    assert {name for name in served - rows if CATALOG.lookup(name) is not None} == set()
    assert "DCGM_FI_DEV_VGPU_LICENSE_STATUS" not in served
    assert log.count("DCGM_FI_DEV_VGPU_LICENSE_STATUS") == 1 and f"{path.name}:" in log
    if not upstream_path.exists():  # a machine that is not the image: the package stands in, and says so
        assert f"{upstream_path} does not exist on this machine; using the packaged copy" in log


def test_a_newer_dcgms_field_is_skipped_with_one_warning_and_counted_and_the_rest_is_served(tmp_path: Path) -> None:
    """dcgm-exporter 4.8.4's rows (fabric health, served here) plus a field of a DCGM newer than any this exporter
    knows: the exporter starts, logs one line naming file:line, and the skip is visible in /metrics."""
    csv = tmp_path / "counters.csv"
    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
                   "DCGM_FI_DEV_FABRIC_HEALTH_MASK, gauge, Fabric health mask.\n"
                   "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY, gauge, Fabric health summary.\n"
                   "DCGM_FI_DEV_FABRIC_FROM_DCGM_9, gauge, Something newer.\n", encoding="utf-8")
    with running_exporter(["-f", str(csv), "--simulate", "--collect-interval", "200"]) as exporter:
        exporter.wait_healthy()
        wait_for(lambda: "DCGM_FI_DEV_GPU_TEMP{" in exporter.metrics() or None, 20.0, "the GPU temperature")
        text = exporter.metrics()
        log = exporter.log()
    assert 'gpu_pod_exporter_counters_skipped_rows{reason="unknown_field"} 1\n' in text
    assert "DCGM_FI_DEV_FABRIC_FROM_DCGM_9" not in text
    # The default scenario's GPUs are on no NVLink fabric: the fabric rows load but have no series.
    assert "DCGM_FI_DEV_FABRIC_HEALTH_MASK{" not in text
    assert log.count("DCGM_FI_DEV_FABRIC_FROM_DCGM_9") == 1
    assert f"{csv}:4: DCGM_FI_DEV_FABRIC_FROM_DCGM_9: not a field of any DCGM release this exporter knows" in log
