"""Both exporters start under the launcher on the same fake NVML, and the probe sees their calls."""

from dataclasses import replace
from pathlib import Path

import pytest

from bench import exposition, runner, scenarios


@pytest.mark.parametrize("exporter", ["ours", "nvitop"])
def test_exporter_runs_on_the_fake_and_the_probe_counts_its_cycles(exporter: str, tmp_path: Path):
    scenario = scenarios.write_scenario(tmp_path, 2)
    settings = replace(runner.QUICK, pin=False)
    server = runner.RunningExporter(exporter, scenario, settings, tmp_path, [])
    try:
        runner._wait(lambda: (text := runner._text(server.port)) and exposition.gpus_present(exporter, text) == 2,
                     60, "metrics of both GPUs", server.process)
        reading = runner._wait(lambda: (probe := server.probe())["cycles"] >= 2 and probe, 60, "two cycles",
                               server.process, interval_s=0.05)
    finally:
        server.stop()
    assert reading["installed"] is True
    assert reading["calls"]["nvmlDeviceGetUtilizationRates"] >= 2 * 2
    assert reading["driver_latency_s"] > 0
    # The design rule (never call the 20 ms blocking PCIe throughput query) holds for ours only.
    pcie_calls = reading["calls"].get("nvmlDeviceGetPcieThroughput", 0)
    assert (pcie_calls == 0) if exporter == "ours" else (pcie_calls >= 2 * 2 * 2)
