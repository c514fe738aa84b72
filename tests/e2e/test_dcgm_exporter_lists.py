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
from tests.e2e.exporter_process import REPO_ROOT, parse_samples, running_exporter, wait_for

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
