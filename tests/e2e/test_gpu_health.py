"""Error and health telemetry through the real process: a GPU falls off the bus, an Xid storm is counted."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.exporter_process import ExporterProcess, running_exporter, wait_for

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HEALTH_CSV = str(FIXTURES / "health-counters.csv")
DEADLINE_S = 30.0


def series(exporter: ExporterProcess, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """Samples of ``name`` keyed by the values of ``keys`` (counter samples may carry a parser-added _total)."""
    found: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(exporter.metrics()):
        for sample in family.samples:
            if sample.name in (name, f"{name}_total"):
                found[tuple(sample.labels.get(key, "") for key in keys)] = sample.value
    return found


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


def test_an_xid_storm_is_counted_exactly() -> None:
    args = ["--simulate", "xid-storm", "--collectors", HEALTH_CSV, "-c", "200"]
    expected = {("0", "31"): 50, ("0", "43"): 10, ("1", "13"): 40}
    with running_exporter(args) as exporter:
        exporter.wait_healthy()

        def counted() -> dict[tuple[str, ...], float] | None:
            exporter.assert_running()
            totals = series(exporter, "DCGM_EXP_XID_ERRORS_TOTAL", "gpu", "xid")
            return totals if sum(totals.values()) >= 100 else None

        assert wait_for(counted, DEADLINE_S, "100 Xids") == expected
        window = series(exporter, "DCGM_EXP_XID_ERRORS_COUNT", "gpu", "xid", "window_size_in_ms")
        assert window == {("0", "31", "300000"): 50, ("0", "43", "300000"): 10, ("1", "13", "300000"): 40,
                          ("2", "", "300000"): 0, ("3", "", "300000"): 0}
        assert series(exporter, "DCGM_EXP_GPU_HEALTHY", "gpu", "reason") == {
            ("0", "ok"): 1, ("1", "ok"): 1, ("2", "ok"): 1, ("3", "ok"): 1}  # application Xids: no drain
