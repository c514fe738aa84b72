"""``--simulate`` with a scenario ``kubernetes:`` section: run the simulated cluster beside the fake GPUs.

The section (validated by ``kube_scenario``) describes pods, namespaces, teams and GPU processes.
This module starts a fake kubelet on a unix socket, a fake API server on 127.0.0.1 and a fake
``/proc`` with a cgroup file per scenario PID, and points the exporter at them: Kubernetes mode
on, the socket, a kubeconfig, the node name, the ``/proc`` root and the device-ID scheme. So
``gpu-pod-exporter --simulate`` shows pod, namespace, container and team labels with no cluster at
hand, through the same production code a DaemonSet runs.

Process attribution stays as a real install has it (off) unless the scenario asks for it
(``kubernetes: process_attribution: true``, as ``shared-gpus`` does) or the user turns it on
(``--kubernetes-process-attribution``): a demo that showed more than the default install would
hide what the default install lacks.

A setting the user chose wins over the simulated cluster's: a flag, a config-file key or an
environment variable (``-k false`` keeps Kubernetes off and nothing is started). Four variables are
ambient rather than chosen, because they say where the machine's own cluster endpoints are, not
how to simulate: ``KUBECONFIG`` (set for kubectl on many workstations), ``NODE_NAME`` (set by
DaemonSets), and the kubelet socket and host ``/proc`` paths the Helm chart sets
(``DCGM_POD_RESOURCES_KUBELET_SOCKET``, ``GPU_POD_EXPORTER_PROC_ROOT``). So they do not pull the
demo away from its own cluster: the chart's ``simulator`` value shows the simulated pods, not
a mix of simulated GPUs and the real kubelet's device IDs. A node name you choose becomes the
simulated node's name too, so its pods stay on the node being watched.

Everything lives in one temporary directory, created when the configuration is resolved (its
paths are part of it) and removed when the app stops. GPU identities (UUID, minor number) and MIG
devices come from the scenario's GPU definitions through the fake library's own code, so they are
exactly what the fake NVML library will report.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
from functools import partial
from pathlib import Path

from exporter.config import Config
from exporter.hub import Hub
from exporter.logs import get_logger
from exporter.nvml.mig import profile_from_name
from exporter.snapshot import DeviceIdentity, MigIdentity
from simulator.kube_scenario import (
    MAX_SOCKET_PATH,
    KubernetesScenario,
    SimulatedCluster,
    device_id,
    dra_plan,
    parse_kubernetes_section,
    start_simulated_cluster,
)
from simulator.miglayout import MigLayout
from simulator.patterns import channel_key
from simulator.scenario import Scenario

log = get_logger("simulate")

# Settings whose environment variables describe the machine, not a choice about the simulation.
AMBIENT_ENVIRONMENT = {"kubeconfig": "environment variable KUBECONFIG",
                       "node_name": "environment variable NODE_NAME",
                       "pod_resources_socket": "environment variable DCGM_POD_RESOURCES_KUBELET_SOCKET",
                       "proc_root": "environment variable GPU_POD_EXPORTER_PROC_ROOT"}


def scenario_devices(scenario: Scenario) -> tuple[DeviceIdentity, ...]:
    """The identities the fake NVML library reports for the scenario's GPUs."""
    return tuple(DeviceIdentity(index=gpu.index, uuid=gpu.uuid, pci_bus_id=gpu.pci_bus_id, minor=gpu.minor,
                                model=gpu.name, serial=gpu.serial, vbios_version=gpu.vbios_version)
                 for gpu in scenario.gpus)


def scenario_migs(scenario: Scenario) -> tuple[MigIdentity, ...]:
    """The MIG devices the fake library creates at start, built by the same layout code (same UUIDs
    and GPU-instance ids), so the simulated kubelet can hand them out as ``MIG-<uuid>``."""
    migs: list[MigIdentity] = []
    for gpu in scenario.gpus:
        if gpu.mig is None:
            continue
        layout = MigLayout.create(gpu.index, gpu.model, gpu.name, scenario.seed,
                                  partial(channel_key, scenario.seed, gpu.index), specs=gpu.mig)
        for _slot, device in sorted(layout.slots.items()):
            migs.append(MigIdentity(parent_uuid=gpu.uuid, uuid=device.uuid, gpu_instance_id=device.gpu_instance_id,
                                    compute_instance_id=device.compute_instance_id,
                                    profile=profile_from_name(device.name)))
    return tuple(migs)


def chosen_by_user(config: Config, attr: str) -> bool:
    source = config.sources.get(attr)
    return source is not None and source != AMBIENT_ENVIRONMENT.get(attr)


class SimulatedClusterRunner:
    """Starts and stops one simulated cluster in a directory fixed at construction."""

    def __init__(self, section: KubernetesScenario, devices: tuple[DeviceIdentity, ...],
                 migs: tuple[MigIdentity, ...]) -> None:
        self.section = section
        self.devices = devices
        self.migs = migs
        # Validate every GPU reference now: a mistake is a scenario error at start-up (exit 2).
        for pod in section.pods:
            for container in pod.containers:
                for ref in container.gpus:
                    device_id(ref, devices, migs, section.gpu_id_type)
        dra_plan(section, devices, migs)  # DRA claims' GPUs and slices' GPUs too
        self.workdir = Path(tempfile.mkdtemp(prefix="gpe-sim-"))
        if len(str(self.socket_path)) > MAX_SOCKET_PATH:  # a long TMPDIR: unix socket paths are short
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = Path(tempfile.mkdtemp(prefix="gpe-sim-", dir="/tmp"))
        self.cluster: SimulatedCluster | None = None
        self._lock = threading.Lock()

    @property
    def socket_path(self) -> Path:
        return self.workdir / "pod-resources" / "kubelet.sock"

    def settings(self) -> dict[str, object]:
        """Config fields pointing at this cluster (the same ones ``SimulatedCluster.config_overrides`` names)."""
        return {"kubernetes": True, "pod_resources_socket": str(self.socket_path),
                "kubeconfig": str(self.workdir / "kubeconfig"), "proc_root": str(self.workdir / "proc"),
                "node_name": self.section.node, "kubernetes_gpu_id_type": self.section.gpu_id_type,
                "process_attribution": self.section.process_attribution}

    def dra_settings(self) -> dict[str, object]:
        """A ``dra:`` section turns DRA attribution on, for the driver it simulates."""
        dra = self.section.dra
        if dra is None:
            return {}
        return {"kubernetes_enable_dra": True, "kubernetes_dra_driver_names": (dra.driver,)}

    def install(self, hub: Hub) -> None:
        """Start the planned cluster with the app (before the sources that read it) and stop it after."""
        hub.add_service(self.start, self.stop)

    def start(self) -> None:
        with self._lock:
            if self.cluster is not None:
                return
            self.cluster = start_simulated_cluster(self.section, self.devices, self.migs, self.workdir)
        log.info("simulating a Kubernetes node", extra={"fields": {
            "node": self.section.node, "pods": len(self.section.pods),
            "namespaces": len(self.section.namespaces), "kubelet_socket": self.cluster.socket_path,
            "api_server": self.cluster.apiserver.url}})

    def stop(self) -> None:
        with self._lock:
            cluster, self.cluster = self.cluster, None
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def plan_simulated_cluster(config: Config, scenario: Scenario) -> tuple[Config, SimulatedClusterRunner | None]:
    """Plan the scenario's cluster: the configuration pointing at it, and the runner that starts it.

    Part of resolving the configuration (``exporter.composition.resolve``), before anything is wired: the
    runner's directory is fixed now, so every component reads the final paths. Nothing happens
    (``(config, None)``) when the scenario has no ``kubernetes:`` section or the user turned
    Kubernetes mode off. Raises ``ConfigError`` (file:line: key) for a bad section.
    """
    if scenario.kubernetes is None:
        return config, None
    if chosen_by_user(config, "kubernetes") and not config.kubernetes:
        log.info("the scenario describes a Kubernetes node, but Kubernetes mode is off; not simulating it")
        return config, None
    section = parse_kubernetes_section(scenario.kubernetes.node, scenario.kubernetes.source)
    if chosen_by_user(config, "node_name") and config.node_name:
        section = dataclasses.replace(section, node=config.node_name)  # the simulated pods run on your node
    runner = SimulatedClusterRunner(section, scenario_devices(scenario), scenario_migs(scenario))
    planned = {**runner.settings(), **runner.dra_settings()}
    overrides = {attr: value for attr, value in planned.items() if not chosen_by_user(config, attr)}
    return dataclasses.replace(config, **overrides), runner  # type: ignore[arg-type]
