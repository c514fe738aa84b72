"""The README's run command: ``gpu-pod-exporter --simulate`` serves every default-CSV metric for 8 GPUs
with dcgm-exporter's exact label set, and promtool finds nothing beyond the compatibility contract."""

from __future__ import annotations

import subprocess

from exporter.metrics.counters import load_counters
from tests.support.exporter_process import parse_samples, running_exporter
from tests.support.polling import wait_for
from tests.support.programs import require_program

BASE_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname", "DCGM_FI_DRIVER_VERSION"]
WORKLOAD_LABELS = {"container", "namespace", "pod", "pod_uid", "team", "vgpu"}
XID_LABELS = {"err_code", "err_msg"}  # dcgm-exporter's extra labels on DCGM_FI_DEV_XID_ERRORS
# Per-row labels of the exporter's own counts (dcgm-exporter's names for them).
COUNT_LABELS = {"xid", "window_size_in_ms", "clock_event"}
# Default rows without a series on the default scenario's healthy H100s, and why.
NO_SERIES_ON_A_HEALTHY_H100 = {
    "DCGM_FI_DEV_RETIRED_PENDING": "page retirement predates Ampere: an H100 answers NotSupported (row remapping)",
    "DCGM_EXP_XID_ERRORS_TOTAL": "one series per Xid code, born with the first Xid",
}

# promtool lints names by Prometheus conventions; dcgm-exporter's names are the contract we must keep:
# the camelCase label `modelName`, counters without `_total`, and the counter named *_COUNTER.
# Nothing else may be reported.
CONTRACT_FINDINGS = (
    "label names should be written in 'snake_case' not 'camelCase'",
    'counter metrics should have "_total" suffix',
    "metric name should not include type 'counter'",
)


def series_by_metric(text: str) -> dict[str, list[dict[str, str]]]:
    found: dict[str, list[dict[str, str]]] = {}
    for name, labels, _value in parse_samples(text):
        found.setdefault(name, []).append(labels)
    return found


def test_simulate_serves_every_default_metric_for_eight_gpus_with_dcgm_labels() -> None:
    counters = load_counters(None)
    assert counters.warnings == ()  # every default row is served (Xid through events, PROF through GPM)
    served_rows = [row for row in counters.metrics if row.name not in NO_SERIES_ON_A_HEALTHY_H100]
    with running_exporter(["--simulate", "--node-name", "gpu-node-1", "--collect-interval", "200"]) as exporter:
        exporter.wait_healthy()

        def complete() -> dict[str, list[dict[str, str]]] | None:
            series = series_by_metric(exporter.metrics())
            return series if all(len(series.get(row.name, [])) >= 8 for row in served_rows) else None

        series = wait_for(complete, 20.0, "every default metric for 8 GPUs")
    for row in served_rows:
        gpus = {labels["gpu"] for labels in series[row.name]}
        assert gpus == {str(index) for index in range(8)}, row.name
        for labels in series[row.name]:
            keys = list(labels)
            assert keys[: len(BASE_LABELS)] == BASE_LABELS, (row.name, keys)
            assert set(keys[len(BASE_LABELS):]) <= WORKLOAD_LABELS | XID_LABELS | COUNT_LABELS, (row.name, keys)
            assert labels["hostname"] == "gpu-node-1"
            assert labels["device"] == f"nvidia{labels['gpu']}"
            assert labels["modelName"] == "NVIDIA H100 80GB HBM3"
            assert labels["UUID"].startswith("GPU-")
    for name in NO_SERIES_ON_A_HEALTHY_H100:
        assert name not in series


def test_promtool_reports_nothing_beyond_the_dcgm_naming_contract() -> None:
    promtool = require_program("promtool")
    with running_exporter(["--simulate", "--collect-interval", "200"]) as exporter:
        exporter.wait_healthy()
        wait_for(lambda: "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{" in exporter.metrics(), 10.0, "rates")
        body = exporter.metrics()
    result = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True,
                            timeout=60, check=False)
    findings = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    unexpected = [line for line in findings
                  if not (line.startswith("DCGM_") and line.endswith(CONTRACT_FINDINGS))]
    assert unexpected == []
    # The self-metrics are fully lint-clean.
    assert not [line for line in findings if line.startswith("gpu_pod_exporter_")]
