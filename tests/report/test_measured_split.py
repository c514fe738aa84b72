"""The report splits a shared GPU's busy time by measured per-container use where the exporters
measure it (issue #22), and says which split it used.

The end-to-end test runs ``--simulate shared-gpus`` (GPU 0 time-sliced by chat-api-0 ~60 %,
embedder-0 ~25 % and notebook-0 ~5 %; GPU 1 shared through MPS, where debug-0 holds a share and
never runs anything) under a real Prometheus with the shipped recording rules. By allocation
share every holder of a busy GPU would look busy; by measured use debug-0 is idle all along and
the research team's notebook carries a small part of GPU 0's busy time.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from typing import Any

import pytest

from exporter.report.cli import main
from exporter.report.sources import (
    BUSY_BY_ALLOCATION,
    BUSY_MEASURED,
    FRACTION,
    MEASURED_USE_SHARE,
    SPLITS,
    Presence,
    splits,
)
from tests.e2e.exporter_process import running_exporter
from tests.e2e.prometheus_harness import REPO_ROOT, PrometheusHarness

RECORDING_RULES = REPO_ROOT / "deploy" / "rules" / "gpu-pod-exporter-recording.yaml"
POINTS = 20
HOUR = 3600.0


def presence(allocated: set[str], measured: set[str]) -> Presence:
    return Presence({FRACTION.series: frozenset(allocated), MEASURED_USE_SHARE: frozenset(measured)})


def test_the_report_says_which_busy_split_each_cluster_used() -> None:
    assert splits(presence({"east", "west"}, set())) == SPLITS
    assert SPLITS["busy"].startswith(BUSY_BY_ALLOCATION) and "--kubernetes-process-attribution" in SPLITS["busy"]
    assert splits(presence({"east", "west"}, {"east", "west"}))["busy"] == BUSY_MEASURED
    mixed = splits(presence({"east", "west"}, {"west"}))["busy"]
    assert mixed == f"{BUSY_MEASURED} (in cluster west); {BUSY_BY_ALLOCATION} (in cluster east, which measure none)"
    assert splits(presence({""}, {""}))["busy"] == BUSY_MEASURED  # one Prometheus without a cluster label


@pytest.mark.e2e
def test_busy_time_of_shared_gpus_follows_measured_use() -> None:
    args = ["--simulate", "shared-gpus", "--process-interval", "1000"]
    with running_exporter(args) as exporter, \
            PrometheusHarness([f"127.0.0.1:{exporter.port}"], rule_files=[RECORDING_RULES]) as prometheus:
        exporter.wait_healthy()
        prometheus.wait_for_targets_up(deadline_s=60)
        prometheus.wait_for(MEASURED_USE_SHARE, lambda s: len(s) == 7, deadline_s=60)  # 3 + 4 holders
        [first] = prometheus.query(f"min(timestamp({MEASURED_USE_SHARE}))")
        start = math.ceil(first.value) + 1
        prometheus.wait_for("max(timestamp(namespace_team_model:gpu_busy_fraction:sum))",
                            lambda s: bool(s) and s[0].value >= start + POINTS + 1, deadline_s=120)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["--prometheus", prometheus.url, "--start", str(start), "--end", str(start + POINTS),
                         "--step", "1s", "--format", "json"])
        assert code == 0
    report: dict[str, Any] = json.loads(out.getvalue())
    assert report["splits"]["busy"] == BUSY_MEASURED
    point = 1.0 / HOUR
    busy = {row["team"]: row["busy_gpu_hours"] for row in report["rows"]}
    # GPU 0 (~90 % busy): serving's two pods did ~85 of ~90 measured points, research's notebook ~5;
    # by allocation share it would be 2/3 against 1/3.
    assert busy["serving"] > 8 * busy["research"] > 0, busy
    # GPU 1 is busy all along (65-79 %); all of that is physics's (hpc) pods, none of it debug-0's.
    assert busy["physics"] == pytest.approx(0.72 * POINTS * point, abs=0.1 * POINTS * point)
    pods = {pod["pod"]: pod for pod in report["idle_pods"]}
    # Idle: the holder that never runs anything, and the solver between its 20 s steps (every minute).
    assert "debug-0" in pods and set(pods) <= {"debug-0", "solver-0"}, pods
    assert pods["debug-0"]["idle_gpu_hours"] == pytest.approx(POINTS * point / 4)
    assert pods["debug-0"]["busy_gpu_hours"] == 0
