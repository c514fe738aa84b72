"""Error and health telemetry through the real process: a GPU falls off the bus.

The Xid storm is a row of the fault matrix: tests/faults/test_xid_storm.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.exporter_process import running_exporter, series
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HEALTH_CSV = str(FIXTURES / "health-counters.csv")
DEADLINE_S = 30.0


def test_a_gpu_that_falls_off_the_bus_stays_visible_as_unhealthy_and_the_others_continue() -> None:
    args = ["--simulate", str(FIXTURES / "gpu3-falls-off-bus.yaml"), "--collectors", HEALTH_CSV, "-c", "200"]
    with running_exporter(args) as exporter:
        exporter.wait_healthy()
        before = series(exporter, "DCGM_FI_DEV_XID_ERRORS", "gpu", "err_code", "err_msg")
        assert before[("0", "0", "No Error")] == 0  # every GPU has the series from the start

        def lost() -> dict[tuple[str, ...], float] | None:
            exporter.assert_running()
            health = series(exporter, "DCGM_EXP_GPU_HEALTHY", "gpu", "reason")
            return health if health.get(("3", "gpu_lost")) == 0 else None

        health = wait_for(lost, DEADLINE_S, "GPU 3 reported lost")
        assert health == {("0", "ok"): 1, ("1", "row_remap_pending"): 0, ("2", "ok"): 1, ("3", "gpu_lost"): 0}
        assert series(exporter, "DCGM_FI_DEV_XID_ERRORS", "gpu", "err_code", "err_msg")[
            ("3", "79", "GPU has fallen off the bus")] == 79
        assert series(exporter, "DCGM_EXP_XID_ERRORS_TOTAL", "gpu", "xid") == {("3", "79"): 1}
        assert series(exporter, "gpu_pod_exporter_device_up", "gpu") == {("0",): 1, ("1",): 1, ("2",): 1, ("3",): 0}
        # The other GPUs keep reporting; GPU 3's readings are gone, its health series is not.
        temperatures = series(exporter, "DCGM_FI_DEV_GPU_TEMP", "gpu")
        assert set(temperatures) == {("0",), ("1",), ("2",)}
        cycles = series(exporter, "gpu_pod_exporter_sampling_cycles_total", "gpu")[("",)]
        wait_for(lambda: series(exporter, "gpu_pod_exporter_sampling_cycles_total", "gpu")[("",)] > cycles + 3,
                 DEADLINE_S, "sampling to continue")
        assert exporter.get("/health").status == 200
        exporter.assert_running()
    assert exporter.process.returncode == 0, exporter.log()

