"""``scripts/test-gpu`` refuses to run without a driver (exit 2 and why), instead of skipping everything."""

from __future__ import annotations

import subprocess

import pytest

from tests.gpu.conftest import driver_state
from tests.support.paths import REPO_ROOT


def test_without_a_driver_it_says_so_and_exits_2() -> None:
    if driver_state()[0]:
        pytest.skip("this node has a GPU: scripts/test-gpu is the real suite here, not a refusal")
    result = subprocess.run([str(REPO_ROOT / "scripts" / "test-gpu")], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 2
    assert "run it on a node with the NVIDIA driver" in result.stderr
