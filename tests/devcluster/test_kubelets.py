"""What scripts/cluster's real kubelet nodes advertise and how they are configured (no kubelet runs
here: tests/platform/test_kubelet.py runs them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devcluster import build, kubelets
from devcluster.control_plane import ClusterError
from devcluster.kubelets import Gpu, KubeletNode

GPUS = [Gpu("GPU-11111111-2222-3333-4444-555555555555", 3), Gpu("GPU-66666666-7777-8888-9999-aaaaaaaaaaaa", 0),
        Gpu("GPU-bbbbbbbb-cccc-dddd-eeee-ffffffffffff", 1)]
MIG = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def test_each_device_mode_advertises_its_providers_shape() -> None:
    assert kubelets.device_resources("whole", GPUS) == {"nvidia.com/gpu": [g.uuid for g in GPUS]}
    replicas = kubelets.device_resources("time-slicing", GPUS)["nvidia.com/gpu"]
    assert len(replicas) == len(GPUS) * kubelets.REPLICAS
    assert replicas[:2] == [f"{GPUS[0].uuid}::0", f"{GPUS[0].uuid}::1"]
    assert kubelets.device_resources("gke", GPUS) == {"nvidia.com/gpu": ["nvidia3", "nvidia0", "nvidia1"]}
    migs = kubelets.device_resources("mig", GPUS)["nvidia.com/mig-1g.10gb"]
    assert len(migs) == len(set(migs)) == len(GPUS) * kubelets.MIG_PER_GPU
    assert all(MIG.match(m) for m in migs), migs
    mixed = kubelets.device_resources("mixed", GPUS)
    assert mixed["nvidia.com/gpu"] == [GPUS[0].uuid]
    assert len(mixed["nvidia.com/mig-1g.10gb"]) == 2 * kubelets.MIG_PER_GPU


def test_an_unknown_mode_is_refused_before_anything_starts() -> None:
    with pytest.raises(ClusterError, match="one of whole, time-slicing"):
        kubelets.device_resources("vgpu", GPUS)


def test_the_kubelet_configuration_carries_what_this_machine_needs(tmp_path: Path) -> None:
    node = KubeletNode(index=0, name="kubelet-0", root_dir=str(tmp_path / "k0"), port=1, healthz_port=2, mode="whole")
    config = kubelets.kubelet_configuration(node, "unix:///x/cri.sock", tmp_path / "ca.crt")
    assert config["failCgroupV1"] is False and config["cgroupsPerQOS"] is False
    assert config["enforceNodeAllocatable"] == [] and config["failSwapOn"] is False
    assert config["cgroupDriver"] == "cgroupfs" and config["containerRuntimeEndpoint"] == "unix:///x/cri.sock"
    assert config["readOnlyPort"] == 0 and config["address"] == "127.0.0.1"
    assert config["registerWithTaints"] == [{"key": kubelets.TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    assert kubelets.toleration()["key"] == kubelets.TAINT_KEY
    assert node.pod_resources_socket == tmp_path / "k0" / "pod-resources" / "kubelet.sock"


def test_the_kubelet_and_our_node_programs_are_built_like_the_control_plane() -> None:
    assert build.BINARIES["kubelet"].component == "kubelet"  # its own key: the control plane's is untouched
    pins = {build.pinned_version(c, "k8s.io/kubernetes") for c in ("kubelet", "kubernetes")}
    assert pins == {"v1.36.3"}
    assert "gitVersion=v1.36.3" in build.ldflags("kubelet")
    assert build.BINARIES["gpu-node"].package == "gpu-pod-exporter/tools/platform/gpu-node"
