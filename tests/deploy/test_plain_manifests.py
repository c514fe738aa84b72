"""deploy/manifests/ is the chart's default render (scripts/render-manifests.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.deploy.chart_support import REPO, load_script

render_manifests = load_script("render-manifests")
MANIFESTS = REPO / "deploy" / "manifests"


def objects(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def test_manifests_equal_the_charts_default_render() -> None:
    """Fails when the chart changed without `python scripts/render-manifests.py`."""
    assert render_manifests.drift() == []


@pytest.mark.parametrize("hash_seed", ["0", "4242"])
def test_a_fresh_interpreter_renders_the_same_files(hash_seed: str) -> None:
    """Set and dict orders change with the string hash seed: the rendered files must not."""
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "render-manifests.py"), "--check"],
                            check=False, capture_output=True, text=True, cwd=REPO, timeout=300,
                            env={**os.environ, "PYTHONHASHSEED": hash_seed})
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_file_applies_on_any_cluster() -> None:
    core = objects(MANIFESTS / "gpu-pod-exporter.yaml")
    namespace = core[0]
    assert namespace["kind"] == "Namespace" and namespace["metadata"]["name"] == "gpu-monitoring"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    kinds = [obj["kind"] for obj in core]
    assert kinds.index("ServiceAccount") < kinds.index("DaemonSet")
    assert "ServiceMonitor" not in kinds and "PrometheusRule" not in kinds
    for obj in core:
        kubernetes_validate.validate(obj, "1.35.0", strict=True)
        if obj["kind"] != "Namespace" and obj["kind"] not in {"ClusterRole", "ClusterRoleBinding"}:
            assert obj["metadata"]["namespace"] == "gpu-monitoring"


def test_operator_objects_are_kept_apart() -> None:
    operator = objects(MANIFESTS / "prometheus-operator" / "gpu-pod-exporter.yaml")
    assert {obj["kind"] for obj in operator} <= {"ServiceMonitor", "PrometheusRule"}
    monitor = next(obj for obj in operator if obj["kind"] == "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_drift_is_detected_in_a_copy(tmp_path: Path) -> None:
    render_manifests.write(output=tmp_path)
    assert render_manifests.drift(output=tmp_path) == []
    core = tmp_path / "gpu-pod-exporter.yaml"
    core.write_text(core.read_text(encoding="utf-8").replace("memory: 256Mi", "memory: 1Gi"), encoding="utf-8")
    (tmp_path / "grafana").mkdir(exist_ok=True)
    stale = tmp_path / "grafana" / "gpu-pod-exporter-dashboards.yaml"
    if not stale.exists():
        stale.write_text("# left over\n", encoding="utf-8")
        assert f"stale: {stale} (the chart renders nothing for it)" in render_manifests.drift(output=tmp_path)
    assert f"out of date: {core}" in render_manifests.drift(output=tmp_path)
