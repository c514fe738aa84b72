"""The fake nodes of a test cluster, read from a nodes file.

A nodes file is YAML::

    nodes:
      - name: gke-a100            # required, a DNS-1123 name
        labels: {cloud.google.com/gke-accelerator: nvidia-tesla-a100}
        annotations: {}
        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
        capacity: {nvidia.com/gpu: "8"}   # added to cpu 16, memory 64Gi, pods 110

Every node is annotated for kwok (``kwok.x-k8s.io/node: fake``) so that kwok keeps it Ready and
plays its pods' status. ``data/nodes.yaml`` is the default set: one node per way a real provider
marks a GPU node, CPU-only nodes and a control-plane node.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from exporter import inputfile, safeyaml

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
DEFAULT_CAPACITY = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_KEYS = ("name", "labels", "annotations", "taints", "capacity")


class NodesFileError(Exception):
    """A nodes file that cannot be used; the message names the file, the node and the key."""


def load(path: Path) -> list[dict[str, Any]]:
    """The Node objects (API JSON) the file describes."""
    try:
        text = inputfile.read_text(path)
        node = safeyaml.compose(text)
        doc = safeyaml.construct(node) if node is not None else None
    except inputfile.InputFileError as exc:
        raise NodesFileError(f"{path}: {exc}") from None
    except safeyaml.YamlInputError as exc:
        where = f"{path}:{exc.line}" if exc.line else str(path)
        raise NodesFileError(f"{where}: {exc.message}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list) or not doc["nodes"]:
        raise NodesFileError(f"{path}: expected a mapping with a non-empty list `nodes:`")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, entry in enumerate(doc["nodes"]):
        where = f"{path}: nodes[{i}]"
        if not isinstance(entry, dict):
            raise NodesFileError(f"{where}: expected a mapping")
        for key in entry:
            if key not in _KEYS:
                raise NodesFileError(f"{where}: {safeyaml.unknown_key(str(key), _KEYS)}")
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise NodesFileError(f"{where}.name: expected a lower-case DNS name, got {name!r}")
        if name in seen:
            raise NodesFileError(f"{where}.name: {name} appears twice")
        seen.add(name)
        labels = _string_map(entry.get("labels"), f"{where}.labels")
        annotations = _string_map(entry.get("annotations"), f"{where}.annotations")
        capacity = dict(DEFAULT_CAPACITY) | _string_map(entry.get("capacity"), f"{where}.capacity")
        taints = entry.get("taints") or []
        if not isinstance(taints, list) or not all(isinstance(t, dict) and "key" in t and "effect" in t
                                                   for t in taints):
            raise NodesFileError(f"{where}.taints: expected a list of {{key, value, effect}}")
        out.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                           "kubernetes.io/arch": "amd64", "type": "kwok"} | labels,
                "annotations": {KWOK_ANNOTATION: "fake"} | annotations,
            },
            "spec": {"taints": [{k: str(v) for k, v in t.items()} for t in taints]} if taints else {},
            # Node status may be set at create: capacity is what a kubelet would report.
            "status": {"capacity": capacity},
        })
    return out


def _string_map(value: object, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise NodesFileError(f"{where}: expected a mapping of strings")
    return {str(k): "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in value.items()}
