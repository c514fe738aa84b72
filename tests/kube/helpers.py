"""Test helpers for the Kubernetes tests: GPU identities and polling with a deadline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from exporter.snapshot import DeviceIdentity, MigIdentity
from tests.support.polling import wait_for

T = TypeVar("T")

GPU0 = "GPU-11111111-2222-3333-4444-555555555555"
GPU1 = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"
GPU2 = "GPU-bbbbbbbb-cccc-dddd-eeee-ffffffffffff"
MIG_A = "MIG-0a0a0a0a-1b1b-2c2c-3d3d-4e4e4e4e4e4e"
MIG_B = "MIG-5f5f5f5f-6a6a-7b7b-8c8c-9d9d9d9d9d9d"

# Three GPUs whose /dev minor numbers differ from their NVML indexes (as on some hosts), and two
# MIG devices (GPU instances 3 and 5) on the third.
DEVICES = (
    DeviceIdentity(index=0, uuid=GPU0, pci_bus_id="00000000:18:00.0", minor=2, model="NVIDIA H100 80GB HBM3"),
    DeviceIdentity(index=1, uuid=GPU1, pci_bus_id="00000000:2A:00.0", minor=0, model="NVIDIA H100 80GB HBM3"),
    DeviceIdentity(index=2, uuid=GPU2, pci_bus_id="00000000:3B:00.0", minor=1, model="NVIDIA A100-SXM4-80GB"),
)
MIGS = (
    MigIdentity(parent_uuid=GPU2, uuid=MIG_A, gpu_instance_id=3, compute_instance_id=0, profile="3g.40gb"),
    MigIdentity(parent_uuid=GPU2, uuid=MIG_B, gpu_instance_id=5, compute_instance_id=0, profile="1g.10gb"),
)


def poll(predicate: Callable[[], T], timeout_s: float = 10.0, what: str = "condition") -> T:
    """Return the predicate's first truthy value; fail after ``timeout_s`` (a deadline, not a sleep).

    The in-process tests' spelling of ``tests.support.polling.wait_for``: a short interval, because
    what they wait for is a thread of the same process.
    """
    return wait_for(predicate, timeout_s, what, interval_s=0.005)


def write_cgroup(proc: Path, pid: int, uid: str, container_id: str) -> None:
    """A process of a Burstable pod's container as /proc shows it: its cgroup path (systemd driver,
    containerd) carries the pod's UID and the container's ID."""
    directory = proc / str(pid)
    directory.mkdir(parents=True)
    slice_uid = uid.replace("-", "_")
    (directory / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slice_uid}.slice/"
        f"cri-containerd-{container_id}.scope\n"
    )
    (directory / "stat").write_text(
        f"{pid} (python3) S 1 {pid} {pid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {pid * 7} 0 0\n"
    )
