"""Scenario files for the benchmark matrix: N simulated GPUs, optionally a node full of GPU pods.

Every GPU is an H100 SXM with a noisy load, NVLink traffic and at least one process, and every NVML
call costs what it costs on a real driver (``latency_profile: realistic``, whose measured per-call
figures are medians from flightlessmango/MangoHud#2104). With pods, the node runs ``pods`` pods (110 is Kubernetes'
default maximum per node) and every one of them holds a time-sliced replica of GPU ``i mod N`` and
runs one GPU process: the worst case for attribution, because every pod shows up on a GPU's series
and in the kubelet's List answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SEED = 9
MODEL = "H100-SXM5-80GB"
NAMESPACES = ("ml-training", "ml-inference", "research", "batch")
FIRST_POD_PID = 200_000
HOST_PID = 9000
GIB = 1024**3


def scenario_document(gpus: int, pods: int = 0, *, kubernetes: bool = True) -> dict[str, Any]:
    """The scenario as a plain mapping (``scenario_yaml`` serialises it).

    ``kubernetes=False`` leaves the ``kubernetes:`` section out (the GPUs and their processes stay the
    same): the exporter gets that copy and reaches the cluster, run elsewhere, through its flags.
    """
    if gpus < 1:
        raise ValueError("a benchmark scenario needs at least one GPU")
    if pods < 0:
        raise ValueError("pods must be zero or positive")
    document: dict[str, Any] = {
        "description": f"benchmark: {gpus} x {MODEL}, {pods} GPU pods, realistic NVML latency",
        "seed": SEED,
        "gpu_count": gpus,
        "latency_profile": "realistic",
        "gpu_defaults": {
            "model": MODEL,
            "load": {"pattern": "noise", "low": 40, "high": 95, "period": "6s"},
            "nvlink_tx": "30GB/s",
            "nvlink_rx": "30GB/s",
            "processes": [{"pid": HOST_PID, "used_memory": "20GiB"}],
        },
    }
    if pods:
        per_gpu: dict[int, list[dict[str, Any]]] = {index: [] for index in range(gpus)}
        pod_entries = []
        for number in range(pods):
            gpu = number % gpus
            replica = number // gpus
            pid = FIRST_POD_PID + number
            namespace = NAMESPACES[number % len(NAMESPACES)]
            per_gpu[gpu].append({"pid": pid, "used_memory": f"{max(1, 60 // ((pods + gpus - 1) // gpus))}GiB"})
            pod_entries.append({
                "name": f"worker-{number:03d}",
                "namespace": namespace,
                "labels": {"app": f"job-{number % 7}", "team": f"team-{number % 5}"},
                "containers": [{"name": "main", "gpus": [{"gpu": gpu, "replica": replica}], "pids": [pid]}],
            })
        document["gpus"] = {index: {"processes": processes} for index, processes in per_gpu.items() if processes}
        if kubernetes:
            document["kubernetes"] = {
                "node": "bench-node",
                "process_attribution": True,  # per-container memory: the attribution's worst case
                "namespaces": [{"name": name, "labels": {"team": name.split("-")[0]}} for name in NAMESPACES],
                "pods": pod_entries,
            }
    return document


def scenario_yaml(gpus: int, pods: int = 0, *, kubernetes: bool = True) -> str:
    return yaml.safe_dump(scenario_document(gpus, pods, kubernetes=kubernetes), sort_keys=False)


def write_scenario(directory: Path, gpus: int, pods: int = 0, *, kubernetes: bool = True) -> Path:
    suffix = "" if kubernetes or not pods else "-gpus-only"
    path = directory / f"bench-{gpus}gpu-{pods}pods{suffix}.yaml"
    path.write_text(scenario_yaml(gpus, pods, kubernetes=kubernetes), encoding="utf-8")
    return path
