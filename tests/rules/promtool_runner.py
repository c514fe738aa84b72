"""Locating and running promtool for the rule tests.

Why a module: every rule test needs the same decision when promtool is missing. On a developer
machine without Prometheus installed the tests skip with the reason; under CI (CI=true) a
missing promtool is a failure, because a skipped rule suite would let broken alerts land.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.tools import require_program

REPO_ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = REPO_ROOT / "deploy" / "rules"
RULE_FILES = sorted(RULES_DIR.glob("*.yaml"))
RULE_TEST_FILES = sorted((RULES_DIR / "tests").glob("*.yaml"))


def promtool() -> str:
    """The promtool executable (skip locally, fail under CI=true when absent)."""
    return require_program("promtool")


def run_promtool(*args: str | Path, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    """Run promtool with arguments; output is captured (stdout and stderr together)."""
    return subprocess.run([promtool(), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)
