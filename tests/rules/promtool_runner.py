"""Locating and running promtool for the rule tests.

Why a module: every rule test needs the same decision when promtool is missing. On a developer
machine without Prometheus installed the tests skip with the reason; under CI (CI=true) a
missing promtool is a failure, because a skipped rule suite would let broken alerts land.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = REPO_ROOT / "deploy" / "rules"
RULE_FILES = sorted(RULES_DIR.glob("*.yaml"))
RULE_TEST_FILES = sorted((RULES_DIR / "tests").glob("*.yaml"))


def promtool() -> str:
    """The promtool executable; skips the test (fails it under CI=true) when there is none."""
    path = shutil.which("promtool")
    if path is None:
        message = "promtool is not installed (Debian: apt-get install prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; CI=true requires it")
        pytest.skip(message)
    return path


def run_promtool(*args: str | Path, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    """Run promtool with arguments; output is captured (stdout and stderr together)."""
    return subprocess.run([promtool(), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)
