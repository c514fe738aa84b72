"""Fixtures for the deployment tests (helpers live in chart_support.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.deploy.chart_support import (
    CHART_DIR,
    PROMTOOL_TEST,
    REPO,
    SAMPLE_DASHBOARD,
    SAMPLE_RULES,
    SAMPLE_RULES_2,
    Rendered,
    render,
)


@pytest.fixture
def repo_copy(tmp_path: Path) -> Iterator[Path]:
    """A copy of the repository parts the chart is built from, with sample rules and dashboards.

    deploy/rules/ and deploy/dashboards/ belong to another part of the project; the tests use
    their own small files so the chart's handling is checked whatever those directories hold.
    """
    root = tmp_path / "repo"
    shutil.copytree(CHART_DIR, root / "deploy" / "helm" / "gpu-pod-exporter")
    data = root / "exporter" / "metrics" / "data"
    data.mkdir(parents=True)
    shutil.copy(REPO / "exporter" / "metrics" / "data" / "default-counters.csv", data / "default-counters.csv")
    rules = root / "deploy" / "rules"
    rules.mkdir(parents=True)
    (rules / "gpu.yaml").write_text(SAMPLE_RULES, encoding="utf-8")
    (rules / "gpu-extra.yaml").write_text(SAMPLE_RULES_2, encoding="utf-8")
    (rules / "gpu_test.yaml").write_text(PROMTOOL_TEST, encoding="utf-8")
    dashboards = root / "deploy" / "dashboards"
    dashboards.mkdir(parents=True)
    (dashboards / "GPU_Pods.json").write_text(json.dumps(SAMPLE_DASHBOARD, indent=2) + "\n", encoding="utf-8")
    yield root


@pytest.fixture
def render_chart() -> Callable[..., Rendered]:
    return render
