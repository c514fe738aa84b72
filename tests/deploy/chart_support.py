"""Helpers for the deployment tests: render the Helm chart with Helm's own engine.

helm-python-sdk binds Helm's Go SDK (libhelm_c), so these renders run the real template engine,
the real values coalescing and the real values.schema.json validation, with no helm binary.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from helm_python import Chart, _native

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "deploy" / "helm" / "gpu-pod-exporter"
CI_VALUES = sorted((CHART_DIR / "ci").glob("*-values.yaml"))
RELEASE = "gpu-pod-exporter"
NAMESPACE = "gpu-monitoring"
MONITORING_APIS = ("monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule")


@dataclass
class Rendered:
    """A chart render, parsed: the objects and the NOTES.txt text."""

    objects: list[dict[str, Any]]
    notes: str
    raw: dict[str, str] = field(repr=False)

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [obj for obj in self.all(kind) if name is None or obj["metadata"]["name"] == name]
        names = [obj["metadata"]["name"] for obj in found]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {names}"
        return found[0]

    def kinds(self) -> set[str]:
        return {obj["kind"] for obj in self.objects}

    # Shortcuts into the DaemonSet.
    @property
    def pod_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.one("DaemonSet")["spec"]["template"]["spec"]
        return spec

    @property
    def container(self) -> dict[str, Any]:
        containers = self.pod_spec["containers"]
        assert len(containers) == 1
        container: dict[str, Any] = containers[0]
        return container

    @property
    def env(self) -> dict[str, Any]:
        """Environment variable name -> value (or the valueFrom mapping)."""
        names = [item["name"] for item in self.container["env"]]
        assert len(names) == len(set(names)), f"duplicate environment variables: {names}"
        return {item["name"]: item.get("value", item.get("valueFrom")) for item in self.container["env"]}

    @property
    def volumes(self) -> dict[str, dict[str, Any]]:
        return {volume["name"]: volume for volume in self.pod_spec["volumes"]}

    @property
    def mounts(self) -> dict[str, dict[str, Any]]:
        return {mount["name"]: mount for mount in self.container["volumeMounts"]}


def load_ci_values(path: Path) -> dict[str, Any]:
    values = yaml.safe_load(path.read_text(encoding="utf-8"))
    return values or {}


def render(
    values: dict[str, Any] | None = None,
    *,
    chart_dir: Path = CHART_DIR,
    api_versions: tuple[str, ...] = (),
    namespace: str = NAMESPACE,
    name: str = RELEASE,
) -> Rendered:
    """Render like `helm template` would; api_versions plays the cluster's advertised APIs.

    The Python wrapper's Chart.render() has no api_versions option, but the C library's render
    call accepts it (the same option struct as `helm template --api-versions`), so a render that
    has to see the Prometheus Operator APIs goes through that call directly.
    """
    with Chart.load(chart_dir) as chart:
        if api_versions:
            options = {"name": name, "namespace": namespace, "api_versions": list(api_versions)}
            payload = _native.call_string(
                "helm_render", chart._raw(), json.dumps(values or {}), json.dumps(options)
            )
            raw: dict[str, str] = json.loads(payload)
        else:
            raw = chart.render(values=values or {}, name=name, namespace=namespace)
    objects: list[dict[str, Any]] = []
    notes = ""
    for template, text in sorted(raw.items()):
        if template.endswith("NOTES.txt"):
            notes = text
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return Rendered(objects, notes, raw)


def load_script(name: str) -> ModuleType:
    """Import scripts/<name>.py (a file name with hyphens) as a module."""
    path = REPO / "scripts" / f"{name}.py"
    module_name = name.replace("-", "_")
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


SAMPLE_RULES = """\
groups:
  - name: gpu-pod-exporter.test
    rules:
      - alert: GPUHot
        expr: DCGM_FI_DEV_GPU_TEMP > 85
        for: 5m
        labels:
          severity: warning
        annotations:
          summary: "GPU {{ $labels.gpu }} of {{ $labels.pod }} is hot"
      - record: namespace:gpu_util:avg
        expr: avg by (namespace) (DCGM_FI_DEV_GPU_UTIL{namespace!=""})
"""

SAMPLE_RULES_2 = """\
# A second file with two groups: every group of every file must reach the chart.
groups:
  - name: first
    rules:
      - record: gpu:fb_used:sum
        expr: sum(DCGM_FI_DEV_FB_USED)
  - name: second
    interval: 1m
    rules:
      - alert: GPUExporterDown
        expr: absent(up{job="gpu-pod-exporter"})
"""

PROMTOOL_TEST = """\
rule_files: [gpu.yaml]
tests: []
"""

SAMPLE_DASHBOARD = {
    "title": "GPU pods",
    "uid": "gpu-pods",
    "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
    "panels": [
        {"type": "timeseries", "title": "{{pod}}", "targets": [{"expr": 'DCGM_FI_DEV_GPU_UTIL{pod=~"$pod"}'}]}
    ],
}
