"""PID -> cgroup -> pod/container, with real /proc/<pid>/cgroup contents in a fake proc root."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.kube.deviceids import GpuKey
from exporter.kube.metadata import MetadataCache, PodMetadata
from exporter.kube.processes import (
    CgroupIdentity,
    ProcessCgroupResolver,
    ProcessOwner,
    attribute_processes,
    owner_of,
    parse_cgroup_file,
    read_start_time,
)
from exporter.snapshot import GpuProcess

from .helpers import GPU0, GPU2

UID = "6b2a1f3c-8d4e-4a5b-9c6d-7e8f9a0b1c2d"
UID_ = UID.replace("-", "_")
CID = "3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e"

BURSTABLE = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"
BESTEFFORT = f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice"

# Real-world /proc/<pid>/cgroup files, one per runtime, cgroup driver and cgroup version.
CGROUP_FILES = {
    "v2-systemd-containerd-burstable": f"0::{BURSTABLE}/cri-containerd-{CID}.scope\n",
    "v2-systemd-crio-besteffort": f"0::{BESTEFFORT}/crio-{CID}.scope\n",
    "v2-systemd-docker-guaranteed": f"0::/kubepods.slice/kubepods-pod{UID_}.slice/docker-{CID}.scope\n",
    "v2-cgroupfs-containerd": f"0::/kubepods/burstable/pod{UID}/{CID}\n",
    "v2-cgroup-namespace-relative": f"0::/../../kubepods-besteffort-pod{UID_}.slice/"
    f"cri-containerd-{CID}.scope\n",
    "v2-kind-nested": f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
    f"kubelet-kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
    "v1-cgroupfs-docker": (
        f"12:hugetlb:/kubepods/burstable/pod{UID}/{CID}\n"
        f"11:memory:/kubepods/burstable/pod{UID}/{CID}\n"
        f"10:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n"
        f"9:devices:/kubepods/burstable/pod{UID}/{CID}\n"
        f"1:name=systemd:/kubepods/burstable/pod{UID}/{CID}\n"
    ),
    "v1-cgroupfs-crio-guaranteed": (
        f"11:memory:/kubepods/pod{UID}/crio-{CID}\n4:pids:/kubepods/pod{UID}/crio-{CID}\n0::/\n"
    ),
    "v1-systemd-containerd": (
        f"12:perf_event:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope\n"
        f"5:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope\n"
        f"1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope\n"
        "0::/\n"
    ),
}


def _stat_line(pid: int, start_time: int, comm: str = "python3") -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    # cutime cstime priority nice threads itrealvalue starttime ...
    return (
        f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 2314 0 0 0 12 3 0 0 20 0 8 0 "
        f"{start_time} 1234567 890 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n"
    )


def _process(proc: Path, pid: int, cgroup: str, start_time: int = 4242, comm: str = "python3") -> None:
    directory = proc / str(pid)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cgroup").write_text(cgroup)
    (directory / "stat").write_text(_stat_line(pid, start_time, comm))


@pytest.mark.parametrize("name", sorted(CGROUP_FILES))
def test_every_runtime_driver_and_cgroup_version(name: str) -> None:
    assert parse_cgroup_file(CGROUP_FILES[name]) == CgroupIdentity(UID, CID)


@pytest.mark.parametrize(
    "text",
    [
        "0::/user.slice/user-1000.slice/session-3.scope\n",  # a login session
        "0::/system.slice/nvidia-persistenced.service\n",  # a host daemon
        "0::/\n",
        "",
        "garbage without colons\n",
    ],
)
def test_processes_outside_pods(text: str) -> None:
    assert parse_cgroup_file(text) is None


def test_pod_cgroup_without_a_container_segment() -> None:
    identity = parse_cgroup_file(f"0::/kubepods.slice/kubepods-pod{UID_}.slice\n")
    assert identity == CgroupIdentity(UID, None)


def test_static_pod_uid() -> None:
    static_uid = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    identity = parse_cgroup_file(f"0::/kubepods/besteffort/pod{static_uid}/{CID}\n")
    assert identity == CgroupIdentity(static_uid, CID)


def test_start_time_survives_odd_command_names(tmp_path: Path) -> None:
    _process(tmp_path, 77, "0::/\n", start_time=987654, comm="evil) S 1 (name")
    assert read_start_time(tmp_path, 77) == 987654
    assert read_start_time(tmp_path, 78) is None


def test_resolver_caches_per_pid_and_rereads_a_recycled_pid(tmp_path: Path) -> None:
    resolver = ProcessCgroupResolver(tmp_path)
    _process(tmp_path, 100, CGROUP_FILES["v2-systemd-containerd-burstable"], start_time=500)
    assert resolver.resolve(100) == CgroupIdentity(UID, CID)
    assert resolver.resolve(100) == CgroupIdentity(UID, CID)
    assert resolver.reads == 1  # the cgroup file is read once per process lifetime

    # PID 100 exits and the number is reused by a host process: new start time, new answer.
    _process(tmp_path, 100, "0::/system.slice/cron.service\n", start_time=900)
    assert resolver.resolve(100) is None
    assert resolver.reads == 2


def test_resolver_forgets_pids_that_left_the_gpus(tmp_path: Path) -> None:
    resolver = ProcessCgroupResolver(tmp_path)
    for pid in (1, 2, 3):
        _process(tmp_path, pid, CGROUP_FILES["v2-cgroupfs-containerd"])
        resolver.resolve(pid)
    resolver.retain([2])
    assert len(resolver) == 1


def test_vanished_process_is_unknown(tmp_path: Path) -> None:
    assert ProcessCgroupResolver(tmp_path).resolve(12345) is None


def _view(*pods: PodMetadata):  # type: ignore[no-untyped-def]
    cache = MetadataCache()
    for pod in pods:
        cache.upsert_pod(pod)
    return cache.view()


def test_owner_needs_the_pod_from_the_api() -> None:
    pod = PodMetadata("ml", "trainer-0", UID, containers=((CID, "trainer"), ("f" * 64, "sidecar")))
    assert owner_of(CgroupIdentity(UID, CID), _view(pod)) == ProcessOwner("ml", "trainer-0", "trainer", UID)
    assert owner_of(CgroupIdentity(UID, CID), _view()) is None  # pod unknown (gone, or API down)
    assert owner_of(CgroupIdentity(UID, "e" * 64), _view(pod)) is None  # ambiguous container
    single = PodMetadata("ml", "solo", UID, containers=(("a" * 64, "main"),))
    assert owner_of(CgroupIdentity(UID, "e" * 64), _view(single)) == ProcessOwner("ml", "solo", "main", UID)
    assert owner_of(None, _view(pod)) is None


def test_attribute_processes_keys_mig_processes_by_gpu_instance() -> None:
    pod = PodMetadata("ml", "trainer-0", UID, containers=((CID, "trainer"),))
    processes = {
        GPU0: (GpuProcess(pid=10, used_memory_bytes=1 << 30), GpuProcess(pid=11, used_memory_bytes=None)),
        GPU2: (GpuProcess(pid=12, used_memory_bytes=2 << 30, gpu_instance_id=3, compute_instance_id=0),),
    }
    identities = {10: CgroupIdentity(UID, CID), 11: None, 12: CgroupIdentity(UID, CID)}
    records = attribute_processes(processes, identities, _view(pod))
    assert [(r.gpu, r.pid, r.used_memory_bytes, r.owner is not None) for r in records] == [
        (GpuKey(GPU0), 10, 1 << 30, True),
        (GpuKey(GPU0), 11, None, False),
        (GpuKey(GPU2, 3), 12, 2 << 30, True),
    ]


def test_a_pid_listed_twice_on_one_gpu_counts_once() -> None:
    pod = PodMetadata("ml", "trainer-0", UID, containers=((CID, "trainer"),))
    processes = {
        GPU0: (GpuProcess(pid=10, used_memory_bytes=None), GpuProcess(pid=10, used_memory_bytes=1 << 30))
    }
    records = attribute_processes(processes, {10: CgroupIdentity(UID, CID)}, _view(pod))
    assert [(r.pid, r.used_memory_bytes) for r in records] == [(10, 1 << 30)]
