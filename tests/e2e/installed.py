"""What a cluster runs after a default install, read from the install's own objects.

Why: a test that starts the exporter with hand-picked flags, a counters file from tests/fixtures and
the repository's rule files proves what the developers run, not what users get. Here everything
comes from the objects a user applies: the Helm chart rendered by Helm's own engine with its
default values (``helm_install``), or the plain manifests in deploy/manifests/ (``manifests_install``):

* the exporter container's ``args`` and ``env``, exactly, with the pod's volumes standing in for
  their mount paths (the counters ConfigMap is written to a directory and the environment values
  that name a file under its mount path point there) and ``fieldRef: spec.nodeName`` filled in
  with the node's name, as the kubelet does;
* the PrometheusRule objects' groups, written to one rule file for Prometheus;
* the dashboards from the Grafana sidecar ConfigMaps.

``hostPath`` mounts (the kubelet's pod-resources directory, the host's /proc) are left as the chart
writes them: under ``--simulate`` the simulated node's socket and /proc stand in for the host's
(simulator/cluster_wiring.py), and without a simulated node the paths are simply missing on
this machine, as on a node without a kubelet.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.chart_support import MONITORING_APIS, REPO, render

MANIFESTS = REPO / "deploy" / "manifests"
MANIFEST_FILES = ("gpu-pod-exporter.yaml", "prometheus-operator/gpu-pod-exporter.yaml",
                  "grafana/gpu-pod-exporter-dashboards.yaml")
DASHBOARD_LABEL = "grafana_dashboard"
# What the container gets besides its spec's env (the image's PATH; Python unbuffered for the log).
CONTAINER_BASE_ENV = ("PATH", "LANG", "LC_ALL", "TMPDIR")


@dataclass(frozen=True)
class Install:
    """The parts of one install that decide what the exporter serves and what Prometheus does with it."""

    source: str  # "helm (default values)", "deploy/manifests"
    container: dict[str, Any]
    volumes: dict[str, dict[str, Any]]
    configmaps: dict[str, dict[str, str]]  # ConfigMap name -> data
    rule_groups: list[dict[str, Any]]
    dashboards: dict[str, dict[str, Any]]  # file name -> Grafana dashboard JSON
    service_monitor: dict[str, Any] | None = field(default=None)

    @classmethod
    def from_objects(cls, source: str, objects: list[dict[str, Any]]) -> Install:
        [daemonset] = [obj for obj in objects if obj["kind"] == "DaemonSet"]
        pod = daemonset["spec"]["template"]["spec"]
        [container] = pod["containers"]
        configmaps = {obj["metadata"]["name"]: dict(obj.get("data", {}))
                      for obj in objects if obj["kind"] == "ConfigMap"}
        dashboards: dict[str, dict[str, Any]] = {}
        for obj in objects:
            if obj["kind"] == "ConfigMap" and obj["metadata"].get("labels", {}).get(DASHBOARD_LABEL):
                for name, text in obj["data"].items():
                    dashboards[name] = json.loads(text)
        groups = [group for obj in objects if obj["kind"] == "PrometheusRule" for group in obj["spec"]["groups"]]
        monitors = [obj for obj in objects if obj["kind"] == "ServiceMonitor"]
        return cls(source, container, {volume["name"]: volume for volume in pod.get("volumes", [])}, configmaps,
                   groups, dashboards, monitors[0] if monitors else None)

    # ------------------------------------------------------------------------------ the exporter
    def environment(self, node_name: str) -> dict[str, str]:
        """The container's environment as the kubelet sets it (before volume paths are mapped)."""
        env: dict[str, str] = {}
        for item in self.container.get("env", []):
            if "value" in item:
                env[item["name"]] = str(item["value"])
                continue
            field_path = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            if field_path != "spec.nodeName":
                raise AssertionError(f"{self.source}: cannot stand in for {item['name']}'s valueFrom {item}")
            env[item["name"]] = node_name
        return env

    def mounted_volumes(self, root: Path) -> dict[str, Path]:
        """Mount path -> local directory for the volumes whose files the exporter reads (ConfigMaps),
        written under ``root`` as the kubelet would project them."""
        mapped: dict[str, Path] = {}
        for mount in self.container.get("volumeMounts", []):
            volume = self.volumes[mount["name"]]
            if "configMap" in volume:
                directory = root / mount["name"]
                directory.mkdir(parents=True, exist_ok=True)
                for key, text in self.configmaps[volume["configMap"]["name"]].items():
                    (directory / key).write_text(text, encoding="utf-8")
                mapped[mount["mountPath"]] = directory
        return mapped

    def launch(self, root: Path, node_name: str) -> tuple[list[str], dict[str, str]]:
        """(args, env) that start the exporter as this install's container would run on ``node_name``.

        Environment values naming a file under a ConfigMap mount point at the projected copy.
        """
        mounts = self.mounted_volumes(root)
        env = self.environment(node_name)
        for name, value in env.items():
            for mount_path, directory in mounts.items():
                if value == mount_path or value.startswith(mount_path + "/"):
                    env[name] = str(directory) + value[len(mount_path):]
        return [str(arg) for arg in self.container.get("args", [])], env

    def counters_csv(self) -> str:
        """The counters CSV the exporter reads (the file DCGM_EXPORTER_COLLECTORS names)."""
        path = self.environment("node")["DCGM_EXPORTER_COLLECTORS"]
        for mount in self.container.get("volumeMounts", []):
            if path.startswith(mount["mountPath"] + "/"):
                volume = self.volumes[mount["name"]]
                return self.configmaps[volume["configMap"]["name"]][path[len(mount["mountPath"]) + 1:]]
        raise AssertionError(f"{self.source}: {path} is on no ConfigMap mount")

    # ------------------------------------------------------------------------------ Prometheus
    def write_rule_file(self, path: Path) -> Path:
        """The PrometheusRule groups as one Prometheus rule file (what the operator generates)."""
        path.write_text(yaml.safe_dump({"groups": self.rule_groups}, sort_keys=False), encoding="utf-8")
        return path

    def essentials(self) -> dict[str, Any]:
        """What the exporter and Prometheus get from this install, independent of object names."""
        return {"args": self.container.get("args", []), "env": self.container.get("env", []),
                "counters": self.counters_csv(), "rule_groups": self.rule_groups, "dashboards": self.dashboards,
                "honor_labels": (self.service_monitor or {}).get("spec", {}).get("endpoints", [{}])[0].get(
                    "honorLabels")}


def helm_install(values: Mapping[str, Any] | None = None) -> Install:
    """The chart rendered by Helm's engine for a cluster with the Prometheus Operator's APIs."""
    rendered = render(dict(values or {}), api_versions=MONITORING_APIS)
    what = "default values" if not values else json.dumps(values, sort_keys=True)
    return Install.from_objects(f"helm ({what})", rendered.objects)


def manifests_install(directory: Path = MANIFESTS) -> Install:
    """deploy/manifests/: the core file, the Prometheus Operator objects and the dashboards."""
    objects: list[dict[str, Any]] = []
    for name in MANIFEST_FILES:
        objects += [doc for doc in yaml.safe_load_all((directory / name).read_text(encoding="utf-8")) if doc]
    return Install.from_objects("deploy/manifests", objects)


def container_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of the exporter process: the container's, plus what the image provides.

    Nothing else of the test process leaks in (no KUBECONFIG, CI, DCGM_* of the machine running the
    tests): only the install decides the exporter's settings.
    """
    base = {name: os.environ[name] for name in CONTAINER_BASE_ENV if name in os.environ}
    return {**base, "PYTHONUNBUFFERED": "1", **env}
