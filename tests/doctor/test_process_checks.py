"""Process attribution checks against a hand-made /proc: what a pod without hostPID looks like, and one with it."""

from __future__ import annotations

from pathlib import Path

from exporter.config import Config
from exporter.doctor.process_checks import check_processes
from exporter.snapshot import GpuProcess

POD_UID = "0a1b2c3d_4e5f_6071_8293_a4b5c6d7e8f9"
POD_CGROUP_V2 = (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID}.slice/"
                 "cri-containerd-" + "ab" * 32 + ".scope\n")
POD_CGROUP_V1 = ("12:memory:/kubepods/burstable/pod0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9/" + "cd" * 32 + "\n"
                 "11:cpu,cpuacct:/kubepods/burstable/pod0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9/" + "cd" * 32 + "\n"
                 "0::/\n")


def proc(tmp_path: Path, processes: dict[int, str], pid1: str = "", name: str = "proc") -> Path:
    root = tmp_path / name
    root.mkdir()
    for pid, cgroup in processes.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "cgroup").write_text(cgroup, encoding="utf-8")
    if pid1:
        (root / "1").mkdir(exist_ok=True)
        (root / "1" / "comm").write_text(pid1 + "\n", encoding="utf-8")
    return root


def on(root: Path) -> Config:
    return Config(process_attribution=True, proc_root=str(root))


def gpu_processes(*pids: int) -> dict[int, tuple[GpuProcess, ...]]:
    return {0: tuple(GpuProcess(pid, 1 << 30) for pid in pids)}


def test_off_is_skipped() -> None:
    [row] = check_processes(Config(), gpu_processes(1), nvml_up=True)
    assert row.verdict.value == "skipped" and "--kubernetes-process-attribution" in row.detail


def test_host_processes_visible_and_in_pods(tmp_path: Path) -> None:
    root = proc(tmp_path, {4242: POD_CGROUP_V2, 31337: "0::/system.slice/leftover.service\n"})
    host, cgroups = check_processes(on(root), gpu_processes(4242, 31337), nvml_up=True)
    assert host.verdict.value == "ok" and host.detail.startswith("2 of 2 GPU processes visible")
    assert cgroups.verdict.value == "ok" and "1 in a pod's cgroup; cgroup v2" in cgroups.detail


def test_cgroup_v1_is_recognised(tmp_path: Path) -> None:
    root = proc(tmp_path, {777: POD_CGROUP_V1})
    _, cgroups = check_processes(on(root), gpu_processes(777), nvml_up=True)
    assert cgroups.data["version"] == "cgroup v1" and cgroups.data["in_pods"] == 1


def test_container_pid_namespace_is_failed(tmp_path: Path) -> None:
    root = proc(tmp_path, {}, pid1="gpu-pod-exporter")
    host, _ = check_processes(on(root), gpu_processes(4242, 4243), nvml_up=True)
    assert host.verdict.value == "failed" and "hostPID: true" in host.hint


def test_no_gpu_process_falls_back_to_pid_1(tmp_path: Path) -> None:
    host, _ = check_processes(on(proc(tmp_path, {}, pid1="systemd", name="host")), {}, nvml_up=True)
    assert host.verdict.value == "ok" and "PID 1" in host.detail
    inside, _ = check_processes(on(proc(tmp_path, {}, pid1="python3", name="container")), {}, nvml_up=True)
    assert inside.verdict.value == "degraded" and "'python3'" in inside.detail


def test_some_processes_gone_is_degraded(tmp_path: Path) -> None:
    root = proc(tmp_path, {4242: POD_CGROUP_V2})
    host, _ = check_processes(on(root), gpu_processes(4242, 9999), nvml_up=True)
    assert host.verdict.value == "degraded" and host.data["missing"] == [9999]


def test_missing_proc_root(tmp_path: Path) -> None:
    [row] = check_processes(on(tmp_path / "nowhere"), gpu_processes(1), nvml_up=True)
    assert row.verdict.value == "failed" and "--proc-root" in row.hint
