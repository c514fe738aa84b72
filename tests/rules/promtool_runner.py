"""Locating and running promtool for the rule tests.

Why a module: every rule test needs the same decision when promtool is missing. On a developer
machine without Prometheus installed the tests skip with the reason; under CI (CI=true) a
missing promtool is a failure, because a skipped rule suite would let broken alerts land.

The rules must pass both supported Prometheus generations, so the rule tests run under each
engine's promtool (``ENGINES``): Debian's 2.42 and the 3.x built from Prometheus' Go module
(``scripts/cluster bin promtool``), located by ``tests.support.prometheus.prometheus_engine``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.prometheus import ENGINES, prometheus_engine

REPO_ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = REPO_ROOT / "deploy" / "rules"
RULE_FILES = sorted(RULES_DIR.glob("*.yaml"))
RULE_TEST_FILES = sorted((RULES_DIR / "tests").glob("*.yaml"))
ENGINE_IDS = [f"promtool-{engine}" for engine in ENGINES]

__all__ = ["ENGINES", "ENGINE_IDS", "REPO_ROOT", "RULES_DIR", "RULE_FILES", "RULE_TEST_FILES", "promtool",
           "run_promtool"]


def promtool(engine: str = "2.42") -> str:
    """The promtool executable of ``engine`` (skip locally, fail under CI=true when absent)."""
    return prometheus_engine(engine, "promtool")


def run_promtool(*args: str | Path, cwd: Path = REPO_ROOT, engine: str = "2.42") -> subprocess.CompletedProcess[str]:
    """Run ``engine``'s promtool with arguments; output is captured (stdout and stderr together)."""
    return subprocess.run([promtool(engine), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)
