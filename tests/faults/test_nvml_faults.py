"""NVML going wrong under the real process: it stays up, and /health, self-metrics and the log tell the truth.

Each test runs ``python -m exporter --simulate <scenario>`` (the fake NVML library installed as
pynvml's C library) and looks only at what an operator sees: HTTP answers, metrics and log lines.
Scenario times count from process start, so the test scenarios below put faults seconds in.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from exporter.metrics.catalog import CATALOG, FromFieldValue
from tests.faults.support import log_lines, value, wait_value, write_scenario
from tests.support.exporter_process import running_exporter
from tests.support.polling import wait_for

pytestmark = pytest.mark.e2e

FAST = ["--collect-interval", "100"]


def test_nvml_library_missing_keeps_the_exporter_up_and_says_why() -> None:
    with running_exporter(["--simulate", "no-driver", *FAST]) as exporter:
        health = exporter.wait_listening()
        assert health.status == 503
        assert health.text.startswith("NVML not available: NVMLError_LibraryNotFound")
        # it keeps retrying (each attempt is one nvmlInit call) and logs the state once, not per retry
        wait_for(lambda: (value(exporter, "gpu_pod_exporter_nvml_calls_total") or 0) >= 3, 20, "init retries")
        assert value(exporter, "gpu_pod_exporter_nvml_up") == 0
        assert value(exporter, "gpu_pod_exporter_devices") == 0
        assert "DCGM_FI_DEV_GPU_TEMP{" not in exporter.metrics()
        assert len(log_lines(exporter, "NVML is not available")) == 1
        assert exporter.get("/health").status == 503
        exporter.assert_running()


def test_init_fails_then_recovers(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, "init-recovers", """\
description: the driver is still loading for the first 7 s, then 2 x A100 appear (like init-recovers)
gpu_count: 2
gpu_defaults: {model: A100-SXM4-80GB}
library:
  init_fails: {error: DriverNotLoaded, until: 7s}
""")
    # 7 s: the scenario's clock starts when the fake library loads, and a loaded machine can take seconds
    # from there to the listener, whose first answer must still fall in the driver's loading time. The
    # init retries' back-to-back jittered windows are [0,1) [1,3) [3,7) [7,15) s from the first failure:
    # the attempt in [3,7) still fails, the one in [7,15) succeeds, so the recovery comes by 15 s whatever
    # the jitter draws (at 10 s, an attempt at 9 s would push it into [15,31)).
    with running_exporter(["--simulate", scenario, *FAST]) as exporter:
        early = exporter.wait_listening()
        assert early.status == 503
        assert "NVML not available: NVMLError_DriverNotLoaded" in early.text
        assert value(exporter, "gpu_pod_exporter_nvml_up") == 0
        wait_for(lambda: (response := exporter.try_get("/health")) is not None and response.status == 200
                 and response, 45, "/health to recover")
        assert exporter.get("/health").text.startswith("OK: 2 GPUs")
        # /health reads the sampler's state as it is; /metrics serves the last rendered snapshot, which
        # shows the recovery at the renderer's next pass: wait for that state (a race under load).
        wait_value(exporter, "gpu_pod_exporter_nvml_up", 1)
        wait_value(exporter, "gpu_pod_exporter_devices", 2)
        wait_for(lambda: len(exporter.samples("DCGM_FI_DEV_GPU_TEMP")) == 2 or None, 20, "both GPUs' temperatures")
        assert len(log_lines(exporter, "NVML is not available")) == 1
        assert len(log_lines(exporter, "NVML initialised")) == 1


def test_a_field_the_gpu_does_not_support_is_absent_listed_and_logged_once() -> None:
    spec = CATALOG.lookup("DCGM_FI_DEV_MEMORY_TEMP")
    assert spec is not None and isinstance(spec.read, FromFieldValue)
    with running_exporter(["--simulate", "consumer-gpu", *FAST]) as exporter:
        exporter.wait_healthy()
        wait_for(lambda: (value(exporter, "gpu_pod_exporter_sampling_cycles_total") or 0) >= 10, 20, "10 cycles")
        metrics = exporter.metrics()
        assert "DCGM_FI_DEV_GPU_TEMP{" in metrics  # the GPU is served ...
        assert "DCGM_FI_DEV_MEMORY_TEMP{" not in metrics  # ... without the reading it cannot give
        assert value(exporter, "gpu_pod_exporter_field_unsupported", gpu="0", field="DCGM_FI_DEV_MEMORY_TEMP") == 1
        assert value(exporter, "gpu_pod_exporter_field_unsupported", gpu="0", field="DCGM_FI_DEV_GPU_TEMP") is None
        lines = log_lines(exporter, f'reading="field {spec.read.field_id}"')
        assert len(lines) == 1, lines  # once, although it was skipped in every one of 10+ cycles
        assert "not supported" in lines[0]


def test_a_gpu_lost_mid_run_drops_out_while_the_others_continue(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, "gpu-lost-fast", """\
description: 4 x H100, GPU 3 falls off the bus at t=2 s (like gpu-lost, sooner)
seed: 79
gpu_count: 4
gpu_defaults: {model: H100-SXM5-80GB}
faults:
  - {type: gpu_lost, gpu: 3, at: 2s}
""")
    with running_exporter(["--simulate", scenario, *FAST]) as exporter:
        exporter.wait_healthy()
        wait_value(exporter, "gpu_pod_exporter_device_up", 0, gpu="3")
        cycles = value(exporter, "gpu_pod_exporter_sampling_cycles_total") or 0
        wait_for(lambda: (value(exporter, "gpu_pod_exporter_sampling_cycles_total") or 0) >= cycles + 5, 20,
                 "sampling to continue after the loss")
        assert sorted(labels["gpu"] for labels, _ in exporter.samples("DCGM_FI_DEV_GPU_TEMP")) == ["0", "1", "2"]
        assert [value(exporter, "gpu_pod_exporter_device_up", gpu=gpu) for gpu in "0123"] == [1, 1, 1, 0]
        health = exporter.get("/health")
        assert health.status == 200  # three GPUs are still watched; the loss is stated, not hidden
        assert "1 of 4 GPUs lost" in health.text
        lost = log_lines(exporter, "GPU lost")
        assert len(lost) == 1 and "gpu=3" in lost[0]


def hang_scenario(tmp_path: Path, duration: str) -> str:
    return write_scenario(tmp_path, "hang-fast", f"""\
description: 2 x H100; 1 s in, the next NVML call on GPU 1 blocks for {duration} (like hang)
seed: 5
gpu_count: 2
gpu_defaults: {{model: H100-SXM5-80GB}}
faults:
  - {{type: hang, symbol: "*", gpu: 1, at: 1s, duration: {duration}}}
""")


def test_a_hung_nvml_call_does_not_block_scrapes_and_is_reported(tmp_path: Path) -> None:
    with running_exporter(["--simulate", hang_scenario(tmp_path, "60s"), *FAST]) as exporter:
        exporter.wait_listening()
        wait_value(exporter, "gpu_pod_exporter_sampler_stalled", 1)
        health = exporter.get("/health")
        assert health.status == 503
        assert "on GPU 1 has not returned for" in health.text and "NVML call nvmlDevice" in health.text
        # While the call hangs (60 s), every scrape is answered from the last snapshot. Judged on the state,
        # not a stopwatch: a scrape that waited on the sampler would wait for the rest of the hang (or hit
        # the client's 5 s timeout), far past the 10 s bound below, which a loaded machine never reaches by
        # merely being slow. The latencies are printed.
        latencies = []
        bodies = set()
        for _ in range(20):
            started = time.monotonic()
            response = exporter.get("/metrics")
            latencies.append(time.monotonic() - started)
            assert response.status == 200
            bodies.add(tuple(line for line in response.text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")))
            time.sleep(0.1)
        print(f"scrape latencies during the hang (s): max {max(latencies):.3f}, all {latencies}")
        assert max(latencies) < 10, f"a scrape waited on the hung sampler: {latencies}"
        assert len(bodies) == 1  # the same (last) snapshot: the sampler is stuck, nothing new is invented
        assert value(exporter, "gpu_pod_exporter_sampler_stalled") == 1
        assert len(log_lines(exporter, "sampler stalled inside NVML")) == 1


def test_the_exporter_recovers_when_the_hung_call_returns(tmp_path: Path) -> None:
    with running_exporter(["--simulate", hang_scenario(tmp_path, "3s"), *FAST]) as exporter:
        exporter.wait_listening()
        wait_value(exporter, "gpu_pod_exporter_sampler_stalled", 1)
        wait_value(exporter, "gpu_pod_exporter_sampler_stalled", 0)
        exporter.wait_healthy()
        assert len(log_lines(exporter, "sampler stalled inside NVML")) == 1
        assert len(log_lines(exporter, "sampler recovered from an NVML stall")) == 1
