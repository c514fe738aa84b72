"""The report on a live ``gpu-pod-exporter --simulate`` agrees with the exporter's own series.

A real Prometheus scrapes the simulated node every second and evaluates the shipped recording
rules every second. Once 30 evaluations of the report's rules are stored, the report runs over
exactly those seconds (``--step 1s``) and its totals are checked against the raw exporter series
queried at the same points: allocation (4 GPUs research, the time-sliced GPU 4 shared by three
serving pods, GPU 5 recsys), capacity (8 GPUs, 2 free), memory and busy GPU-hours.

Energy is only checked for being there: its rule is a 5-minute increase, which a 30-second run
cannot fill; its arithmetic is proven exactly on the backfilled TSDB (test_backfill_exact).
Busy and idle allow a few points of difference: a rule evaluated between two scrapes reads the
previous scrape, the raw query at the same second the next one.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from typing import Any

import pytest

from exporter.report.cli import main
from tests.support.exporter_process import running_exporter
from tests.support.paths import REPO_ROOT
from tests.support.prometheus import PrometheusHarness

RECORDING_RULES = REPO_ROOT / "deploy" / "rules" / "gpu-pod-exporter-recording.yaml"
POINTS = 30
HOUR = 3600.0


def raw_by(prometheus: PrometheusHarness, expr: str, first: float, last: float, label: str) -> dict[str, float]:
    """Sum over the points of a raw-series query, in GPU-hours-like units (value x 1 s / 3600), by label."""
    totals: dict[str, float] = {}
    for series in prometheus.query_range(expr, first, last, 1.0):
        key = series.labels.get(label, "")
        totals[key] = totals.get(key, 0.0) + sum(value for _, value in series.points) / HOUR
    return totals


@pytest.mark.e2e
def test_the_report_on_the_simulator_matches_the_exporter_s_series() -> None:
    # Without per-process utilization every shared GPU is split by allocation share, which is what the
    # raw queries below compute; the measured split is tested in test_measured_split.py.
    with running_exporter(["--simulate", "--kubernetes-process-attribution=false"]) as exporter, \
            PrometheusHarness([f"127.0.0.1:{exporter.port}"], rule_files=[RECORDING_RULES]) as prometheus:
        exporter.wait_healthy()
        prometheus.wait_for_targets_up(deadline_s=60)
        prometheus.wait_for("namespace_team_model:gpu_busy_fraction:sum", lambda s: len(s) == 3, deadline_s=60)
        [first_sample] = prometheus.query("min(timestamp(namespace_team_model:gpu_busy_fraction:sum))")
        start = math.ceil(first_sample.value) + 1
        [latest] = prometheus.wait_for("max(timestamp(namespace_team_model:gpu_busy_fraction:sum))",
                                       lambda s: bool(s) and s[0].value >= start + POINTS + 1, deadline_s=120)
        end = start + POINTS
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["--prometheus", prometheus.url, "--start", str(start), "--end", str(end), "--step", "1s",
                         "--price-per-gpu-hour", "2", "--format", "json"])
        assert code == 0
        report: dict[str, Any] = json.loads(out.getvalue())
        first, last = start + 1.0, float(end)
        share = ("DCGM_EXP_GPU_ALLOCATION_INFO / on (UUID, GPU_I_ID) group_left () "
                 "count by (UUID, GPU_I_ID) (DCGM_EXP_GPU_ALLOCATION_INFO)")
        allocated = raw_by(prometheus, f"sum by (team) ({share})", first, last, "team")
        busy = raw_by(prometheus, f"sum by (team) ({share} * on (UUID) group_left () "
                                  "max by (UUID) (DCGM_FI_DEV_GPU_UTIL) / 100)", first, last, "team")
        idle = raw_by(prometheus, f"sum by (team) ({share} and on (UUID) "
                                  "(max by (UUID) (DCGM_FI_DEV_GPU_UTIL) < 5))", first, last, "team")
        memory = raw_by(prometheus, f"sum by (team) ({share} * on (UUID) group_left () "
                                    "max by (UUID) (DCGM_FI_DEV_FB_USED) / 1024)", first, last, "team")
        gpus = raw_by(prometheus, "count(DCGM_EXP_GPU_ALLOCATED)", first, last, "")
        assert latest.value >= end

    rows = {row["team"]: row for row in report["rows"]}
    point = 1.0 / HOUR
    assert set(rows) == {"research", "serving", "recsys"}
    # the scenario's allocation: GPUs 0-3, GPU 4 shared by three pods (1/3 each), GPU 5
    for team, held in {"research": 4, "serving": 1, "recsys": 1}.items():
        assert rows[team]["allocated_gpu_hours"] == pytest.approx(held * POINTS * point)
        assert rows[team]["allocated_gpu_hours"] == pytest.approx(allocated[team])
        assert rows[team]["memory_gib_hours"] == pytest.approx(memory[team], abs=2 * memory[team] / POINTS)
        assert rows[team]["busy_gpu_hours"] == pytest.approx(busy[team], abs=3 * held * point)
        assert rows[team]["idle_gpu_hours"] == pytest.approx(idle.get(team, 0.0), abs=3 * held * point)
        assert rows[team]["energy_kwh"] > 0
        assert rows[team]["cost"] == pytest.approx(2 * held * POINTS * point)
        assert rows[team]["unmeasured_gpu_hours"] == 0
    assert rows["serving"]["namespaces"] == ["inference"] and rows["recsys"]["namespaces"] == ["batch"]
    [capacity] = report["capacity"]
    assert capacity["gpus_at_end"] == 8
    assert capacity["capacity_gpu_hours"] == pytest.approx(gpus[""]) == pytest.approx(8 * POINTS * point)
    assert capacity["unallocated_gpu_hours"] == pytest.approx(2 * POINTS * point)
    assert capacity["coverage_percent"] == 100.0
    assert report["notes"] == [] and report["warnings"] == []
    namespaces = {r["namespace"]: r for r in report["reclaim"]}
    assert namespaces["ml-training"]["held_at_end"] == 4 and namespaces["inference"]["held_at_end"] == 1
