"""MIG in the fake library, through pynvml's real wrappers: slots, identities, memory, reconfiguration."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pynvml
import pytest

from simulator.models import MIB, MIG_PROFILES
from simulator.scenario import ScenarioError, load_scenario

from .conftest import FixedClock

MIXED = """
gpu_count: 2
gpu_defaults: {model: H100-SXM5-80GB}
gpus:
  0:
    mig:
      - {profile: 3g.40gb, load: 80, processes: [{pid: 501, used_memory: 30GiB}]}
      - {profile: 2g.20gb, load: 40, memory_used: 12GiB}
      - 1g.10gb
  1: {load: 50}
"""
MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def walk(parent: Any) -> dict[int, Any]:
    """Slot -> MIG handle, skipping empty slots like NVIDIA's own code does."""
    found = {}
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
        try:
            found[slot] = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
        except pynvml.NVMLError_NotFound:
            continue
    return found


def test_mig_mode_and_device_count_follow_the_layout(nvml: Any) -> None:
    nvml(MIXED)
    mig_gpu, whole_gpu = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    assert pynvml.nvmlDeviceGetMigMode(mig_gpu) == [pynvml.NVML_DEVICE_MIG_ENABLE] * 2
    assert pynvml.nvmlDeviceGetMigMode(whole_gpu) == [pynvml.NVML_DEVICE_MIG_DISABLE] * 2
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(mig_gpu) == 7
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(whole_gpu) == 0
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(mig_gpu, 3)  # three instances: slots 3-6 are empty
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(mig_gpu, 7)


def test_a_board_without_mig_says_not_supported(nvml: Any) -> None:
    nvml("gpu_defaults: {model: L4}\n")
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigMode(handle)
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 0


def test_mig_devices_have_identities_like_a_real_driver(nvml: Any) -> None:
    nvml(MIXED)
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    devices = walk(parent)
    assert sorted(devices) == [0, 1, 2]
    seen = []
    for handle in devices.values():
        assert bool(pynvml.nvmlDeviceIsMigDeviceHandle(handle))
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        assert MIG_UUID.match(uuid)
        name = pynvml.nvmlDeviceGetName(handle)
        assert name.startswith("NVIDIA H100 80GB HBM3 MIG ")
        seen.append((name.rsplit(" ", 1)[1], pynvml.nvmlDeviceGetGpuInstanceId(handle),
                     pynvml.nvmlDeviceGetComputeInstanceId(handle)))
        back = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
        assert pynvml.nvmlDeviceGetUUID(back) == pynvml.nvmlDeviceGetUUID(parent)
        assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByUUID(uuid)) == uuid
    assert seen == [("3g.40gb", 1, 0), ("2g.20gb", 3, 0), ("1g.10gb", 7, 0)]
    assert not bool(pynvml.nvmlDeviceIsMigDeviceHandle(parent))
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceId(parent)


def test_memory_is_per_instance_and_the_parent_adds_them_up(nvml: Any) -> None:
    nvml(MIXED)
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    profiles = MIG_PROFILES["H100-SXM5-80GB"]
    used = []
    for handle, profile, expected in zip(walk(parent).values(), ("3g.40gb", "2g.20gb", "1g.10gb"),
                                         (30 * 1024 * MIB + MIB // 2, 12 * 1024 * MIB, MIB // 2), strict=True):
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        assert memory.total == profiles[profile].memory_bytes
        assert memory.used == expected
        assert memory.free == memory.total - memory.reserved - memory.used
        assert pynvml.nvmlDeviceGetAttributes_v2(handle).memorySizeMB == profiles[profile].memory_bytes // MIB
        used.append(memory.used)
    assert pynvml.nvmlDeviceGetMemoryInfo(parent, version=pynvml.nvmlMemory_v2).used == sum(used)


def test_utilization_is_not_supported_on_a_mig_enabled_gpu(nvml: Any) -> None:
    nvml(MIXED)
    mig_gpu, whole_gpu = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    for call in (pynvml.nvmlDeviceGetUtilizationRates, pynvml.nvmlDeviceGetEncoderUtilization,
                 pynvml.nvmlDeviceGetDecoderUtilization):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call(mig_gpu)
        for handle in walk(mig_gpu).values():
            with pytest.raises(pynvml.NVMLError_NotSupported):
                call(handle)
    assert pynvml.nvmlDeviceGetUtilizationRates(whole_gpu).gpu == 50


def test_processes_carry_their_gpu_and_compute_instance(nvml: Any) -> None:
    nvml(MIXED)
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    [process] = pynvml.nvmlDeviceGetComputeRunningProcesses(parent)
    assert (process.pid, process.gpuInstanceId, process.computeInstanceId) == (501, 1, 0)
    first, second, _ = walk(parent).values()
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(first)] == [501]
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(second) == []


def test_the_parent_is_as_busy_as_its_instances(nvml: Any, clock: FixedClock) -> None:
    fake = nvml(MIXED)
    # (3 slices x 80 % + 2 slices x 40 % + 1 slice x 0 %) / 7 slices
    assert fake.devices[0].load(1.0) == pytest.approx((3 * 80 + 2 * 40) / 7)


def test_compute_instances_split_a_gpu_instance(nvml: Any) -> None:
    nvml("gpu_defaults:\n  mig: [{profile: 3g.40gb, compute_instances: 3}]\n")
    devices = walk(pynvml.nvmlDeviceGetHandleByIndex(0)).values()
    names = [pynvml.nvmlDeviceGetName(h).rsplit(" ", 1)[1] for h in devices]
    assert names == ["1c.3g.40gb"] * 3
    assert [(pynvml.nvmlDeviceGetGpuInstanceId(h), pynvml.nvmlDeviceGetComputeInstanceId(h))
            for h in devices] == [(1, 0), (1, 1), (1, 2)]
    assert len({pynvml.nvmlDeviceGetUUID(h) for h in devices}) == 3


def test_reconfiguring_keeps_surviving_instances_and_leaves_holes(nvml: Any) -> None:
    fake = nvml(MIXED)
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    before = {slot: pynvml.nvmlDeviceGetUUID(h) for slot, h in walk(parent).items()}
    old_middle = walk(parent)[1]
    fake.set_mig_layout(0, ["3g.40gb", "1g.10gb"])  # the 2g.20gb instance is destroyed
    after = {slot: pynvml.nvmlDeviceGetUUID(h) for slot, h in walk(parent).items()}
    assert after == {0: before[0], 2: before[2]}  # survivors keep slot and UUID; slot 1 is a hole
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMemoryInfo(old_middle, version=pynvml.nvmlMemory_v2)
    fake.set_mig_layout(0, ["3g.40gb", "1g.10gb", "1g.10gb"])
    after = {slot: pynvml.nvmlDeviceGetUUID(h) for slot, h in walk(parent).items()}
    assert sorted(after) == [0, 1, 2] and after[1] not in before.values()  # new instance, lowest free slot
    # The handle value of the destroyed instance's slot now names the new instance (nvml.h: handles are reused).
    assert pynvml.nvmlDeviceGetName(old_middle).endswith("1g.10gb")
    assert pynvml.nvmlDeviceGetGpuInstanceId(old_middle) == 8
    fake.set_mig_layout(0, ["1g.10gb"])
    assert {slot: pynvml.nvmlDeviceGetUUID(h) for slot, h in walk(parent).items()} == {2: before[2]}
    fake.set_mig_layout(0, None)
    assert pynvml.nvmlDeviceGetMigMode(parent)[0] == pynvml.NVML_DEVICE_MIG_DISABLE
    assert pynvml.nvmlDeviceGetUtilizationRates(parent).gpu == 0


def test_a_stale_mig_handle_is_an_invalid_argument(nvml: Any) -> None:
    fake = nvml(MIXED)
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    last = walk(parent)[2]
    fake.set_mig_layout(0, ["3g.40gb"])
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMemoryInfo(last, version=pynvml.nvmlMemory_v2)


def test_impossible_layouts_are_refused(nvml: Any) -> None:
    fake = nvml(MIXED)
    with pytest.raises(ValueError, match="slices"):
        fake.set_mig_layout(0, ["4g.40gb", "4g.40gb"])
    with pytest.raises(ValueError, match=r"unknown MIG profile '1g\.18gb'"):
        fake.set_mig_layout(0, ["1g.18gb"])
    volta = nvml("gpu_defaults: {model: V100-SXM2-32GB}\n")
    with pytest.raises(ValueError, match="does not support MIG"):
        volta.set_mig_layout(0, ["1g.10gb"])


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mig.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(("text", "line", "key", "message"), [
    ("gpu_defaults:\n  mig: [1g.5gb]\n", 2, "gpu_defaults.mig[0]", "unknown MIG profile on H100-SXM5-80GB '1g.5gb'"),
    ("gpu_defaults:\n  mig: [7g.80gb, 1g.10gb]\n", 2, "gpu_defaults.mig", "8 compute and 9 memory slices"),
    ("gpu_defaults:\n  model: L4\n  mig: [1g.10gb]\n", 3, "gpu_defaults.mig", "L4 does not support MIG"),
    ("gpu_defaults:\n  features: {mig: false}\n  mig: []\n", 3, "gpu_defaults.mig", "MIG is not supported"),
    ("gpu_defaults:\n  mig: [{profile: 3g.40gb, compute_instances: 2}]\n", 2,
     "gpu_defaults.mig[0].compute_instances", "splits into 1 or a divisor"),
    ("gpu_defaults:\n  mig: [{profile: 1g.10gb, memory_used: 20GiB}]\n", 2, "gpu_defaults.mig[0].memory_used",
     "out of range"),
    ("gpu_defaults:\n  mig: [{load: 5}]\n", 2, "gpu_defaults.mig[0]", "needs 'profile'"),
    ("gpu_defaults:\n  profiling: {workload: gaming}\n", 2, "gpu_defaults.profiling.workload",
     "unknown workload 'gaming'"),
])
def test_mig_and_profiling_mistakes_name_file_line_and_key(
        tmp_path: Path, text: str, line: int, key: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value).startswith(f"{path}:{line}: {key}: "), str(caught.value)
    assert message in str(caught.value)


def test_the_builtin_mig_scenario_has_a_seven_way_and_a_mixed_layout() -> None:
    scenario = load_scenario("mig-h100")
    layouts = [None if gpu.mig is None else [i.profile for i in gpu.mig] for gpu in scenario.gpus]
    assert layouts == [["1g.10gb"] * 7, ["3g.40gb", "2g.20gb", "1g.10gb"], None, None]
