"""A Kubernetes node for whole-process tests: fake kubelet, fake API server and fake /proc, run by the test.

The exporter process under test is pointed at them with the same flags a DaemonSet uses
(``exporter_args``). Pods are added and removed at runtime on all three at once, as the kubelet,
the API server and the container runtime would see them: the kubelet lists the pod's device IDs,
the API has its UID, labels and container IDs, and each GPU process has a cgroup file naming the
pod and container.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from simulator.fakeapiserver import FakeApiServer
from simulator.fakekubelet import FakeContainer, FakeKubelet, FakePod
from simulator.fakewrites import stable_uid
from simulator.scenario import GpuSpec, load_scenario

NODE = "gpu-node-e2e"


@dataclass(frozen=True)
class PodSpec:
    namespace: str
    name: str
    container: str
    devices: tuple[tuple[str, str], ...]  # (resource name, device ID) as the kubelet lists them
    pids: tuple[int, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def uid(self) -> str:
        return stable_uid("pod", self.namespace, self.name)

    @property
    def container_id(self) -> str:
        return hashlib.sha256(f"{self.uid}/{self.container}".encode()).hexdigest()


def whole_gpu(gpu: GpuSpec) -> tuple[str, str]:
    return ("nvidia.com/gpu", gpu.uuid)


def replica(gpu: GpuSpec, number: int) -> tuple[str, str]:
    """A time-slicing replica of ``gpu`` under the name renameByDefault advertises."""
    return ("nvidia.com/gpu.shared", f"{gpu.uuid}::{number}")


class NodeCluster:
    """The fakes of one node plus a fake /proc, all under one short temporary directory."""

    def __init__(self, root: Path, node: str = NODE) -> None:
        self.root = root
        self.node = node
        self.socket_path = root / "kubelet.sock"
        self.proc_root = root / "proc"
        self.proc_root.mkdir()
        self.api = FakeApiServer(node, bookmark_interval_s=1.0).start()
        self.kubelet = FakeKubelet(self.socket_path).start()
        self.kubeconfig = self.api.write_kubeconfig(root / "kubeconfig")
        self._start_times: dict[int, int] = {}

    def exporter_args(self, *, process_attribution: bool) -> list[str]:
        """The flags that point an exporter at this node: Kubernetes mode, and process attribution
        on or left at its default (off), as the test asks (tests/attribution_modes.py)."""
        attribution = ["--kubernetes-process-attribution", "--proc-root", str(self.proc_root),
                       "--process-interval", "1000"] if process_attribution else []
        return ["-k", "--pod-resources-kubelet-socket", str(self.socket_path), "--kubeconfig", str(self.kubeconfig),
                "--node-name", self.node, *attribution, "--pod-resources-interval", "1000"]

    def stop(self) -> None:
        self.kubelet.stop()
        self.api.stop()

    # -- pods ------------------------------------------------------------------------------------

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        self.api.add_namespace(name, labels)

    def add_pod(self, pod: PodSpec) -> None:
        """The pod as the API server, the kubelet and /proc see it once its container runs."""
        self.api.add_pod(pod.namespace, pod.name, uid=pod.uid, labels=dict(pod.labels),
                         containers=[(pod.container, "containerd://" + pod.container_id)])
        self.kubelet.add_pod(FakePod(pod.namespace, pod.name, (FakeContainer(pod.container, pod.devices),)))
        for pid in pod.pids:
            slice_uid = pod.uid.replace("-", "_")
            self.write_process(pid, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                               f"{slice_uid}.slice/cri-containerd-{pod.container_id}.scope")

    def add_pods(self, pods: Sequence[PodSpec]) -> None:
        for pod in pods:
            self.add_pod(pod)

    def remove_pod(self, pod: PodSpec) -> None:
        self.kubelet.remove_pod(pod.namespace, pod.name)
        self.api.delete_pod(pod.namespace, pod.name)

    def write_process(self, pid: int, cgroup: str) -> None:
        """(Re)create /proc/<pid>; a new start time each time, as for a new process reusing the PID."""
        directory = self.proc_root / str(pid)
        directory.mkdir(exist_ok=True)
        start = self._start_times.get(pid, 1000) + 1
        self._start_times[pid] = start
        (directory / "cgroup").write_text(f"0::{cgroup}\n", encoding="utf-8")
        (directory / "stat").write_text(
            f"{pid} (python3) S 1 {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n", encoding="utf-8")

    def host_process(self, pid: int) -> None:
        """A GPU process outside every pod (e.g. left behind by a pod that exited)."""
        self.write_process(pid, "/system.slice/leftover.service")


@contextmanager
def node_cluster(node: str = NODE) -> Iterator[NodeCluster]:
    root = Path(tempfile.mkdtemp(prefix="gpe-e2e-"))  # short: unix socket paths are limited to 107 bytes
    cluster = NodeCluster(root, node)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def scenario_gpus(path: Path) -> tuple[GpuSpec, ...]:
    """The GPUs the fake NVML library will report for a scenario file (UUIDs, minor numbers)."""
    return load_scenario(str(path)).gpus


def series_for(samples: Sequence[tuple[dict[str, str], float]], uuid: str) -> list[tuple[dict[str, str], float]]:
    return [(labels, value) for labels, value in samples if labels.get("UUID") == uuid]
