"""The real-GPU suite: runs where an NVIDIA driver answers, is skipped (with the reason) everywhere else.

Whether a driver is present is asked once per session in a separate interpreter (``nvmlInit`` and
``nvmlDeviceGetCount``), so probing never loads the real library into a test process that later
installs the simulator's fake one. ``scripts/test-gpu`` sets ``GPU_POD_EXPORTER_REQUIRE_GPU=1``: a
node that was supposed to have a GPU then fails the suite instead of skipping it. CI machines have
no GPU: there these tests are reported as skipped, never as passed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REQUIRE_GPU = "GPU_POD_EXPORTER_REQUIRE_GPU"
OUTPUT_DIR = "GPU_POD_EXPORTER_REAL_GPU_OUT"  # where scripts/test-gpu wants the measurements
PROBE = ("import pynvml\n"
         "try:\n"
         "    pynvml.nvmlInit()\n"
         "    print(pynvml.nvmlDeviceGetCount())\n"
         "except pynvml.NVMLError as error:\n"
         "    print(f'{type(error).__name__}: {error}')\n")


@cache
def driver_state() -> tuple[int, str]:
    """(GPU count, why not) of this machine's NVIDIA driver, asked in a child interpreter."""
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False)
    answer = (result.stdout.strip().splitlines() or [result.stderr.strip() or "no answer"])[-1]
    if answer.isdigit() and int(answer) > 0:
        return int(answer), ""
    reason = "NVML sees no GPU" if answer == "0" else answer
    return 0, reason


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    count, reason = driver_state()
    if count:
        return
    message = f"no NVIDIA driver here ({reason}); run scripts/test-gpu on a GPU node"
    if os.environ.get(REQUIRE_GPU) == "1":
        raise pytest.UsageError(f"{REQUIRE_GPU}=1 but {message}")
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=message))


@pytest.fixture(scope="session")
def gpu_count() -> int:
    return driver_state()[0]


@pytest.fixture(scope="session")
def output_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where measurements go: $GPU_POD_EXPORTER_REAL_GPU_OUT (scripts/test-gpu), else a temporary directory."""
    chosen = os.environ.get(OUTPUT_DIR)
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("real-gpu")
    path.mkdir(parents=True, exist_ok=True)
    return path
