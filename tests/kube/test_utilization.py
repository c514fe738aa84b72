"""Per-process utilization samples joined to containers by the memory attribution's own join.

Known samples go in; the test checks which container each lands on: pods time-slicing a GPU, MPS
clients (whose figures overlap and may add up to more than the GPU), a PID that has exited since
it was last listed, and PIDs of no pod. Then the families they become.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client.core import Metric

from exporter.composition import kubernetes_settings
from exporter.config import Config
from exporter.kube.allocation import build_allocation_index
from exporter.kube.attribution import (
    AttributionSnapshot,
    AttributionStatus,
    KubernetesAttribution,
    Utilization,
    WorkloadFactory,
    _ProcessInput,
    join_attribution,
)
from exporter.kube.deviceids import DeviceCatalog
from exporter.kube.metadata import MetadataView, NamespaceMetadata, PodMetadata
from exporter.kube.podresources.listing import (
    AssignedDevice,
    ContainerAssignment,
    PodAssignment,
    PodResourcesListing,
)
from exporter.kube.processes import CgroupIdentity, ProcessCgroupResolver
from exporter.kube.series import LabeledDevice, attribution_families
from exporter.snapshot import GpuProcess, ProcessUtilization, ProcessUtilizationSample

from .helpers import DEVICES, GPU0, GPU1, GPU2, MIG_A, MIGS, poll, write_cgroup
from .test_attribution import FAST, Cluster, _ready, cluster

__all__ = ["cluster"]  # the fake kubelet, API server and /proc of test_attribution.py

SHARED = "nvidia.com/gpu.shared"
# GPU0: three pods time-slicing it (replicas 0-2). GPU1: MPS, two client pods (replicas 0-1), one of
# them with two processes, and the MPS server, a host process. GPU2: MIG (no per-process samples).
PODS = {  # pod -> (uid, container ID, devices)
    "chat-0": ("11111111-0000-0000-0000-000000000001", "a" * 64, (f"{GPU0}::0",)),
    "embed-0": ("11111111-0000-0000-0000-000000000002", "b" * 64, (f"{GPU0}::1",)),
    "rerank-0": ("11111111-0000-0000-0000-000000000003", "c" * 64, (f"{GPU0}::2",)),
    "sim-0": ("11111111-0000-0000-0000-000000000004", "d" * 64, (f"{GPU1}::0",)),
    "solver-0": ("11111111-0000-0000-0000-000000000005", "e" * 64, (f"{GPU1}::1",)),
    "mig-0": ("11111111-0000-0000-0000-000000000006", "f" * 64, (MIG_A,)),
}
OWNER = {101: "chat-0", 102: "embed-0", 103: "rerank-0", 201: "sim-0", 202: "sim-0", 203: "solver-0"}
HOST_PID = 300  # a process outside Kubernetes (here: the MPS server)
GONE_POD_PID = 400  # its cgroup names a pod the API no longer knows
UNREADABLE_PID = 500  # exited before its cgroup could ever be read


def view() -> MetadataView:
    pods = {(("hpc" if name.startswith("s") else "serving"), name): PodMetadata(
        "hpc" if name.startswith("s") else "serving", name, uid, containers=((cid, "main"),))
        for name, (uid, cid, _) in PODS.items()}
    return MetadataView(
        version=1, pods_by_name=pods, pods_by_uid={pod.uid: pod for pod in pods.values()},
        containers_by_id={pod.containers[0][0]: (pod, "main") for pod in pods.values()},
        namespaces={"serving": NamespaceMetadata("serving", (("team", "serving"),)), "hpc": NamespaceMetadata("hpc")})


def index() -> object:
    listing = PodResourcesListing(pods=tuple(
        PodAssignment("hpc" if name.startswith("s") else "serving", name, (ContainerAssignment("main", tuple(
            AssignedDevice(SHARED if "::" in device else "nvidia.com/mig-3g.40gb", device) for device in devices)),))
        for name, (_, _, devices) in PODS.items()))
    built = build_allocation_index(listing, DeviceCatalog(DEVICES, MIGS))
    assert not built.unmatched_device_ids
    return built


def identities() -> dict[int, CgroupIdentity | None]:
    found: dict[int, CgroupIdentity | None] = {
        pid: CgroupIdentity(PODS[pod][0], PODS[pod][1]) for pid, pod in OWNER.items()}
    found[HOST_PID] = None  # /system.slice/nvidia-mps.service: no pod
    found[GONE_POD_PID] = CgroupIdentity("99999999-0000-0000-0000-000000000000", "9" * 64)
    found[UNREADABLE_PID] = None
    return found


def sample(pid: int, sm: float, memory: float = 0.0, encoder: float = 0.0, decoder: float = 0.0
           ) -> ProcessUtilizationSample:
    return ProcessUtilizationSample(pid, sm, memory, encoder, decoder)


UTILIZATION = {
    # time-sliced: chat uses 60 %, embed 25 %, rerank nothing (NVML lists no sample for it)
    GPU0: ProcessUtilization((sample(101, 60, 30, 0, 12), sample(102, 25, 10), sample(UNREADABLE_PID, 4, 1),
                              sample(GONE_POD_PID, 3)), 5.0),
    # MPS: clients overlap, so their figures add up to more than the GPU's busy time (here 130 %)
    GPU1: ProcessUtilization((sample(201, 50, 20), sample(202, 30, 10), sample(203, 50, 25), sample(HOST_PID, 2)),
                             5.0),
}
LISTS = {GPU0: (GpuProcess(101, 1 << 30), GpuProcess(102, 1 << 30), GpuProcess(103, 1 << 30)),
         GPU1: (GpuProcess(201, 1 << 30), GpuProcess(202, 1 << 30), GpuProcess(203, 1 << 30),
                GpuProcess(HOST_PID, 1 << 20)),
         GPU2: (GpuProcess(601, 1 << 30, gpu_instance_id=3, compute_instance_id=0),)}


def joined(utilization: dict[str, ProcessUtilization] | None = None) -> AttributionSnapshot:
    config = kubernetes_settings(Config(kubernetes=True, process_attribution=True))
    parts = join_attribution(index(), True, _ProcessInput(LISTS, identities(), UTILIZATION if utilization is None
                                                          else utilization), view(), WorkloadFactory(config.workloads))
    return AttributionSnapshot(status=AttributionStatus(enabled=True, process_attribution=True),
                               allocation_known=True, allocations=parts.allocations,
                               container_memory=parts.container_memory, processes=parts.processes,
                               unattributed_bytes=parts.unattributed_bytes, process_gpus=parts.process_gpus,
                               container_utilization=parts.container_utilization,
                               unattributed_utilization=parts.unattributed_utilization,
                               utilization_gpus=parts.utilization_gpus)


def test_time_sliced_pods_each_get_their_own_processes_samples() -> None:
    snapshot = joined()
    used = {item.workload.pod: item.utilization for item in snapshot.utilization(GPU0)}
    assert used == {"chat-0": Utilization(60, 30, 0, 12), "embed-0": Utilization(25, 10, 0, 0),
                    "rerank-0": Utilization()}  # a holder without a sample was idle: 0, not missing
    # a PID whose cgroup was never read and one of a pod the API no longer knows: no container's
    assert snapshot.unattributed_utilization[GPU0] == Utilization(7, 1, 0, 0)


def test_mps_clients_are_joined_the_same_way_and_their_overlap_is_not_hidden() -> None:
    snapshot = joined()
    used = {item.workload.pod: item.utilization.sm for item in snapshot.utilization(GPU1)}
    assert used == {"sim-0": 80.0, "solver-0": 50.0}  # sim-0's two processes add up; 130 % in all
    assert snapshot.unattributed_utilization[GPU1] == Utilization(2, 0, 0, 0)  # the MPS server


def test_mig_gpus_and_gpus_without_samples_get_no_utilization() -> None:
    snapshot = joined()
    assert snapshot.utilization_gpus == {GPU0, GPU1}
    assert not snapshot.utilization(GPU2)
    assert {item.workload.pod for item in snapshot.container_memory if item.uuid == GPU2} == {"mig-0"}
    assert not joined({}).container_utilization  # nothing sampled (e.g. per-process utilization unsupported)


def samples_of(families: Sequence[Metric], name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(s.labels), s.value) for family in families for s in family.samples if s.name == name]


def test_the_families_carry_the_gpu_and_workload_labels() -> None:
    devices = [LabeledDevice(GPU0, None, {"gpu": "0", "UUID": GPU0}),
               LabeledDevice(GPU1, None, {"gpu": "1", "UUID": GPU1}),
               LabeledDevice(GPU2, 3, {"gpu": "2", "UUID": GPU2, "GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": "3"})]
    families = attribution_families(joined(), devices, kubernetes_settings(
            Config(kubernetes=True, process_attribution=True)).series)
    sm = samples_of(families, "DCGM_EXP_CONTAINER_SM_UTIL")
    assert sm[:2] == [({"gpu": "0", "UUID": GPU0, "container": "main", "namespace": "serving", "pod": "chat-0",
                        "team": "serving"}, 60.0),
                      ({"gpu": "0", "UUID": GPU0, "container": "main", "namespace": "serving", "pod": "embed-0",
                        "team": "serving"}, 25.0)]
    assert [(labels["gpu"], labels["pod"], value) for labels, value in sm] == [
        ("0", "chat-0", 60.0), ("0", "embed-0", 25.0), ("0", "rerank-0", 0.0), ("1", "sim-0", 80.0),
        ("1", "solver-0", 50.0)]
    assert [(labels["pod"], value) for labels, value in samples_of(families, "DCGM_EXP_CONTAINER_DEC_UTIL")
            if labels["gpu"] == "0"] == [("chat-0", 12.0), ("embed-0", 0.0), ("rerank-0", 0.0)]
    assert samples_of(families, "DCGM_EXP_UNATTRIBUTED_SM_UTIL") == [
        ({"gpu": "0", "UUID": GPU0}, 7.0), ({"gpu": "1", "UUID": GPU1}, 2.0)]
    assert samples_of(families, "DCGM_EXP_UNATTRIBUTED_MEM_UTIL") == [
        ({"gpu": "0", "UUID": GPU0}, 1.0), ({"gpu": "1", "UUID": GPU1}, 0.0)]


def test_a_pid_that_left_keeps_the_container_it_was_read_in(tmp_path: Path) -> None:
    """Its last samples arrive after it exited: the cgroup read while it ran still says whose they are."""
    proc = tmp_path / "proc"
    write_cgroup(proc, 101, PODS["chat-0"][0], PODS["chat-0"][1])
    resolver = ProcessCgroupResolver(proc)
    before = resolver.resolve(101)
    assert before == CgroupIdentity(PODS["chat-0"][0], PODS["chat-0"][1])
    for name in ("stat", "cgroup"):
        (proc / "101" / name).unlink()
    assert resolver.resolve(101) == before
    resolver.retain(())  # no longer on any GPU list and no longer sampled: forgotten
    assert resolver.resolve(101) is None
    # A PID reused by another process (another start time) is read again.
    write_cgroup(proc, 102, PODS["embed-0"][0], PODS["embed-0"][1])
    assert resolver.resolve(102) is not None
    (proc / "102" / "stat").write_text("102 (sh) S 1 102 102 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 999 0 0\n")
    (proc / "102" / "cgroup").write_text("0::/system.slice/cron.service\n")
    assert resolver.resolve(102) is None


@pytest.mark.parametrize("process_attribution", [True], ids=["process-attribution"])  # samples need it
def test_the_facade_joins_samples_of_a_pid_that_left_and_of_no_pod(cluster: Cluster) -> None:
    """Real fake kubelet, API server and /proc: GPU1 is time-sliced by eval-0 (PID 200) and nb (PID 300);
    PID 400 runs in no pod's cgroup (tests/kube/test_attribution.py)."""
    attribution = KubernetesAttribution(cluster.config, watch_timeouts=FAST)
    attribution.start()
    try:
        poll(lambda: _ready(attribution), what="kubelet and API data joined")
        lists = {GPU1: [GpuProcess(200, 1 << 30), GpuProcess(300, 1 << 30), GpuProcess(400, 1 << 20)]}
        attribution.update_processes(lists, {GPU1: ProcessUtilization((sample(200, 45), sample(400, 5)), 5.0)})
        snapshot = attribution.snapshot(DEVICES, MIGS)
        assert snapshot.utilization_gpus == {GPU1}  # the GPUs the utilization families are served for
        assert {item.workload.pod: item.utilization.sm for item in snapshot.utilization(GPU1)} == {
            "eval-0": 45.0, "nb": 0.0}
        assert snapshot.unattributed_utilization[GPU1].sm == 5.0
        # PID 200 exits; its last samples come with the next read, after it left the process list.
        for name in ("stat", "cgroup"):
            (cluster.proc / "200" / name).unlink()
        attribution.update_processes({GPU1: [GpuProcess(300, 1 << 30)]},
                                     {GPU1: ProcessUtilization((sample(200, 20), sample(300, 70)), 5.0)})
        snapshot = attribution.snapshot(DEVICES, MIGS)
        assert {item.workload.pod: item.utilization.sm for item in snapshot.utilization(GPU1)} == {
            "eval-0": 20.0, "nb": 70.0}
        assert snapshot.unattributed_utilization[GPU1].sm == 0.0
        # Once it is in neither, it is forgotten: a stray later sample cannot be placed any more.
        attribution.update_processes({GPU1: [GpuProcess(300, 1 << 30)]}, {GPU1: ProcessUtilization((), 5.0)})
        attribution.update_processes({GPU1: [GpuProcess(300, 1 << 30)]},
                                     {GPU1: ProcessUtilization((sample(200, 1),), 5.0)})
        snapshot = attribution.snapshot(DEVICES, MIGS)
        assert snapshot.unattributed_utilization[GPU1].sm == 1.0
        assert {item.workload.pod: item.utilization.sm for item in snapshot.utilization(GPU1)} == {
            "eval-0": 0.0, "nb": 0.0}
    finally:
        attribution.stop()


def test_holders_of_a_sampled_gpu_show_idle_even_when_its_process_list_was_not_read() -> None:
    lists = {uuid: listed for uuid, listed in LISTS.items() if uuid != GPU0}
    config = kubernetes_settings(Config(kubernetes=True, process_attribution=True))
    parts = join_attribution(index(), True, _ProcessInput(lists, identities(), UTILIZATION), view(),
                             WorkloadFactory(config.workloads))
    used = {item.workload.pod: item.utilization for item in parts.container_utilization if item.uuid == GPU0}
    assert used == {"chat-0": Utilization(60, 30, 0, 12), "embed-0": Utilization(25, 10, 0, 0),
                    "rerank-0": Utilization()}


def test_a_container_with_a_process_on_a_gpu_it_does_not_hold_shows_there_even_when_idle() -> None:
    """solver-0 (a holder of GPU1) has a process listed on GPU0 too, without a sample: it shows there at 0."""
    lists = {**LISTS, GPU0: (*LISTS[GPU0], GpuProcess(203, 1 << 20))}
    config = kubernetes_settings(Config(kubernetes=True, process_attribution=True))
    parts = join_attribution(index(), True, _ProcessInput(lists, identities(), UTILIZATION), view(),
                             WorkloadFactory(config.workloads))
    used = {item.workload.pod: item.utilization for item in parts.container_utilization if item.uuid == GPU0}
    assert used["solver-0"] == Utilization()
    assert set(used) == {"chat-0", "embed-0", "rerank-0", "solver-0"}


def test_every_engine_adds_up_per_container_and_for_no_pod() -> None:
    snapshot = joined({GPU1: ProcessUtilization((sample(201, 50, 20, 10, 5), sample(202, 30, 10, 20, 1),
                                                 sample(HOST_PID, 2, 1, 7, 3)), 5.0)})
    assert {item.workload.pod: item.utilization for item in snapshot.utilization(GPU1)} == {
        "sim-0": Utilization(80, 30, 30, 6), "solver-0": Utilization()}
    assert snapshot.unattributed_utilization[GPU1] == Utilization(2, 1, 7, 3)
