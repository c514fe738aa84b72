"""Run a scenario's simulated cluster (fake kubelet, fake API server, fake /proc) in its own process.

``python -m bench.cluster SCENARIO WORKDIR`` prints one JSON line with the exporter flags that point
at the cluster, then serves until SIGTERM. Keeping the fakes out of the exporter's process keeps
their CPU and memory out of the exporter's figures: the exporter talks to them exactly as it talks
to a real kubelet socket and API server (``-k --pod-resources-kubelet-socket ... --kubeconfig ...``).

The GPU identities the kubelet hands out come from the same scenario through the same fake NVML
library, so UUIDs match the ones the exporter discovers.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from exporter.nvml.client import NvmlClient
from exporter.nvml.inventory import discover
from simulator.fakenvml import installed
from simulator.kube_scenario import load_kubernetes_section, start_simulated_cluster


def exporter_flags(overrides: dict[str, object]) -> list[str]:
    """The command-line flags equivalent to ``SimulatedCluster.config_overrides()``.

    Process attribution (per-container GPU memory from NVML's process lists and /proc) is on, as
    the benchmark scenarios ask ``--simulate`` to turn it on (``kubernetes: process_attribution``):
    with time-sliced GPUs it is what splits a GPU's memory between the pods sharing it.
    """
    flags = ["--kubernetes", "--kubernetes-process-attribution"]
    names = {"pod_resources_socket": "--pod-resources-kubelet-socket", "kubeconfig": "--kubeconfig",
             "proc_root": "--proc-root", "node_name": "--node-name",
             "kubernetes_gpu_id_type": "--kubernetes-gpu-id-type"}
    for key, flag in names.items():
        if key in overrides:
            flags += [flag, str(overrides[key])]
    return flags


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 2:
        print("usage: python -m bench.cluster SCENARIO WORKDIR", file=sys.stderr)
        return 2
    scenario, workdir = args
    section = load_kubernetes_section(scenario)
    if section is None:
        print(f"{scenario}: no kubernetes: section", file=sys.stderr)
        return 2
    with installed(scenario):
        import pynvml  # noqa: PLC0415

        pynvml.nvmlInit()
        inventory = discover(NvmlClient())
        pynvml.nvmlShutdown()
    devices = [device.identity for device in inventory.devices]
    cluster = start_simulated_cluster(section, devices, (), Path(workdir))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(json.dumps({"flags": exporter_flags(cluster.config_overrides()), "pods": len(section.pods)}), flush=True)
    try:
        stop.wait()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
