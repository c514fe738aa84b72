"""NVML call latencies: measured on the real driver (GPU nodes), and the measuring harness proven on the simulator.

On a GPU node the file lands in the output directory (scripts/test-gpu: ``build/real-gpu``), and
the test fails if the sampler called a symbol the simulator's fake library does not implement. The
same harness runs here against the fake library, so a GPU node never meets it for the first time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pynvml
import pytest

from simulator.fakenvml import FakeNvmlLibrary
from simulator.scenario import load_scenario
from tests.gpu.latency import check_file, measure


@pytest.mark.gpu
def test_measure_nvml_latency_on_the_real_driver(output_dir: Path) -> None:
    check_file(measure(output_dir))


def test_the_harness_on_the_simulator(tmp_path: Path) -> None:
    library = FakeNvmlLibrary(load_scenario("default"))
    library.install()
    try:
        path = measure(tmp_path, cycles=3)
    finally:
        library.uninstall()
    assert pynvml.nvmlLib is None  # nothing of the fake is left behind
    check_file(path)
    document = json.loads(path.read_text(encoding="utf-8"))
    latency = document["latency_seconds"]
    for symbol in ("nvmlInitWithFlags", "nvmlDeviceGetFieldValues", "nvmlDeviceGetMemoryInfo_v2",
                   "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlGpmSampleGet", "nvmlDeviceRegisterEvents"):
        assert latency[symbol]["calls"] >= 1, symbol
    assert latency["nvmlDeviceGetUtilizationRates"]["calls"] == 3 * 8
    assert document["measured_on"]["gpus"] == 8
    assert "field_value_seconds_per_entry" in document
