"""An Xid storm under the real process: every event counted exactly, scrapes answered, the log not flooded.

The scenario raises 12,001 Xids within about four seconds on three GPUs (an application crash-looping
through page faults, an engine-exception burst, a second burst of the same code a few seconds
later, and one fatal double-bit ECC error). NVML queues each event in the event set; the watcher
takes every one out, so the totals must be exact, not "about right". The operator's log gets one
line per GPU and Xid code per minute (``XID_LOG_INTERVAL_S``), however many events arrive.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.health.wiring import XID_LOG_INTERVAL_S
from tests.faults.support import log_lines, value, write_scenario
from tests.support.exporter_process import running_exporter, series
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

HEALTH_CSV = str(Path(__file__).resolve().parents[1] / "fixtures" / "health-counters.csv")

# (gpu, xid) -> events, as the scenario below raises them
EXPECTED_TOTALS = {("0", "31"): 4000 + 2000, ("0", "43"): 1000, ("1", "13"): 5000, ("2", "48"): 1}
STORM = """\
description: 4 x H100; 12,001 Xids between t=2 s and t=6 s on GPUs 0-2 (GPU 3 stays quiet)
seed: 31
gpu_count: 4
gpu_defaults: {model: H100-SXM5-80GB, load: 50}
xid_events:
  - {gpu: 0, xid: 31, at: 2s, count: 4000, over: 2s}
  - {gpu: 0, xid: 43, at: 2.5s, count: 1000, over: 1s}
  - {gpu: 1, xid: 13, at: 2s, count: 5000, over: 2s}
  - {gpu: 2, xid: 48, at: 3s}
  - {gpu: 0, xid: 31, at: 5s, count: 2000, over: 1s}
"""


def test_xid_storm(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, "xid-storm-large", STORM)
    expected_events = sum(EXPECTED_TOTALS.values())
    with running_exporter(["--simulate", scenario, "--collectors", HEALTH_CSV, "-c", "200"]) as exporter:
        exporter.wait_healthy()
        # registered (0.2 s in) before the storm starts at t=2 s
        wait_for(lambda: log_lines(exporter, "receiving NVML events"), 10.0, "event registration")

        # Scrape all through the storm: every scrape answers, and the counts only ever grow.
        seen: list[float] = []

        def counted() -> dict[tuple[str, ...], float] | None:
            response = exporter.get("/metrics")
            assert response.status == 200
            totals = series(exporter, "DCGM_EXP_XID_ERRORS_TOTAL", "gpu", "xid")
            seen.append(sum(totals.values()))
            return totals if seen[-1] >= expected_events else None

        totals = wait_for(counted, 30.0, f"{expected_events} Xids counted")
        assert totals == {key: float(count) for key, count in EXPECTED_TOTALS.items()}
        assert seen == sorted(seen)
        assert len(seen) > 1  # scraped while the storm was still being counted, not only after it

        window = series(exporter, "DCGM_EXP_XID_ERRORS_COUNT", "gpu", "xid", "window_size_in_ms")
        assert window == {**{(gpu, xid, "300000"): float(count) for (gpu, xid), count in EXPECTED_TOTALS.items()},
                          ("3", "", "300000"): 0.0}
        last = series(exporter, "DCGM_FI_DEV_XID_ERRORS", "gpu", "err_code")
        assert last == {("0", "31"): 31, ("1", "13"): 13, ("2", "48"): 48, ("3", "0"): 0}
        # Application Xids leave a GPU usable; the double-bit ECC error takes GPU 2 out of service.
        assert series(exporter, "DCGM_EXP_GPU_HEALTHY", "gpu", "reason") == {
            ("0", "ok"): 1, ("1", "ok"): 1, ("2", "fatal_xid"): 0, ("3", "ok"): 1}

        # The readings of every GPU go on, and /health is about seeing GPUs, which the storm does not stop.
        cycles = value(exporter, "gpu_pod_exporter_sampling_cycles_total") or 0
        wait_for(lambda: (value(exporter, "gpu_pod_exporter_sampling_cycles_total") or 0) >= cycles + 3, 20,
                 "sampling to continue")
        assert sorted(labels["gpu"] for labels, _ in exporter.samples("DCGM_FI_DEV_GPU_TEMP")) == ["0", "1", "2", "3"]
        assert exporter.get("/health").status == 200

        # One line per GPU and code, although 6,000 Xid 31 arrived on GPU 0 in two bursts: the storm
        # lasts 4 s, well inside the rate limit's interval, and each line says that repeats are counted.
        assert XID_LOG_INTERVAL_S > 10
        lines = log_lines(exporter, "Xid error reported")
        logged = sorted((re.search(r" gpu=(\d+) ", line)[1], re.search(r" xid=(\d+)", line)[1])  # type: ignore[index]
                        for line in lines)
        assert logged == sorted(EXPECTED_TOTALS), lines
        assert all("counted in DCGM_EXP_XID_ERRORS_TOTAL, not logged" in line for line in lines), lines
        assert any('meaning="Double Bit ECC Error"' in line and " gpu=2 " in line for line in lines), lines
        exporter.assert_running()
    assert exporter.process.returncode == 0, exporter.log()
