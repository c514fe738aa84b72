"""`./scripts/test --soak N`: a wrong N is refused at once, before any install, with one line and exit 2."""

from __future__ import annotations

import subprocess

import pytest

from tests.deploy.chart_support import REPO


@pytest.mark.parametrize("args", [["--soak"], ["--soak", "five"], ["--soak", "0"], ["--soak", "-3"]])
def test_a_soak_without_a_run_count_is_refused_before_anything_runs(args: list[str]) -> None:
    result = subprocess.run([str(REPO / "scripts" / "test"), *args], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == "scripts/test: --soak needs a number of runs (e.g. --soak 5)"
    assert result.stdout == ""  # no install, no lint: nothing ran
