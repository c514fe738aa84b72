"""The real exporter process attributes GPUs to pods through a fake kubelet and a fake API server.

Each test runs its own node (tests/support/kube_cluster.py) and starts ``python -m exporter --simulate
<scenario> -k ...`` against it, exactly as a DaemonSet would be configured, then reads /metrics.
Each runs in the default mode (as the chart installs it: allocation labels, no process lists) and
with process attribution on (tests/attribution_modes.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from simulator.scenario import GpuSpec
from tests.attribution_modes import attribution_modes, process_families, served_names
from tests.support.exporter_process import ExporterProcess, running_exporter
from tests.support.kube_cluster import NodeCluster, PodSpec, node_cluster, replica, scenario_gpus, series_for, whole_gpu
from tests.support.polling import wait_for

SCENARIO = Path(__file__).resolve().parents[1] / "fixtures" / "attribution-node.yaml"
GPUS = scenario_gpus(SCENARIO)
GIB_IN_MIB = 1024.0
WORKLOAD_LABELS = ("container", "namespace", "pod", "pod_uid", "team", "vgpu")

TRAINER = PodSpec("ml", "trainer-0", "trainer", (whole_gpu(GPUS[0]),), pids=(1001,), labels=(("app", "trainer"),))
TUNER = PodSpec("ml", "tuner-0", "tuner", (whole_gpu(GPUS[1]),), pids=(1101,), labels=(("team", "vision"),))
SHARING = (  # three inference pods time-slicing GPU 2, one process each (5, 3 and 1 GiB)
    PodSpec("serving", "chat-0", "server", (replica(GPUS[2], 0),), pids=(2001,)),
    PodSpec("serving", "embed-0", "embedder", (replica(GPUS[2], 1),), pids=(2002,)),
    PodSpec("serving", "rerank-0", "reranker", (replica(GPUS[2], 2),), pids=(2003,)),
)


def _populate(cluster: NodeCluster, pods: tuple[PodSpec, ...]) -> None:
    cluster.add_namespace("ml", {"team": "research"})
    cluster.add_namespace("serving", {"team": "serving"})
    cluster.add_pods(pods)
    cluster.host_process(3001)  # GPU 3's process belongs to no pod


@pytest.fixture
def cluster() -> Iterator[NodeCluster]:
    with node_cluster() as node:
        _populate(node, (TRAINER, TUNER, *SHARING))
        yield node


@contextmanager
def _start(cluster: NodeCluster, process_attribution: bool, *extra: str) -> Iterator[ExporterProcess]:
    args = ["--simulate", str(SCENARIO), "-c", "200", *cluster.exporter_args(process_attribution=process_attribution)]
    with running_exporter([*args, *extra]) as exporter:
        exporter.wait_healthy()
        yield exporter


def _wait_attributed(exporter: ExporterProcess, pods: int, process_attribution: bool) -> None:
    """Until the kubelet's allocation, the API's metadata and (with process attribution) the process
    memory all arrived."""
    def ready() -> bool:
        info = exporter.samples("DCGM_EXP_GPU_ALLOCATION_INFO")
        memory = exporter.samples("DCGM_EXP_CONTAINER_FB_USED")
        return (len(info) == pods and all("team" in labels for labels, _ in info)
                and (not process_attribution or sum(value for _, value in memory) > 0))

    wait_for(ready, 20.0, f"{pods} attributed containers with teams" + (" and memory" if process_attribution else ""))


def _assert_no_process_families(exporter: ExporterProcess) -> None:
    """The default mode serves nothing that needs NVML's process lists and the host's /proc."""
    assert process_families(served_names(exporter.metrics())) == set()


def _workload(labels: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in labels.items() if name in WORKLOAD_LABELS}


@attribution_modes
def test_exclusive_and_time_sliced_gpus(cluster: NodeCluster, process_attribution: bool) -> None:
    with _start(cluster, process_attribution, "--kubernetes-enable-pod-uid") as exporter:
        _wait_attributed(exporter, pods=5, process_attribution=process_attribution)
        temperature = exporter.samples("DCGM_FI_DEV_GPU_TEMP")

        # Exclusive GPUs: the workload labels follow the base labels, in the documented order.
        [(trainer, _)] = series_for(temperature, GPUS[0].uuid)
        assert list(trainer)[-5:] == ["container", "namespace", "pod", "pod_uid", "team"]
        assert _workload(trainer) == {"container": "trainer", "namespace": "ml", "pod": "trainer-0",
                                      "pod_uid": TRAINER.uid, "team": "research"}  # team from the namespace
        [(tuner, _)] = series_for(temperature, GPUS[1].uuid)
        assert _workload(tuner)["team"] == "vision"  # the pod's own team label wins over its namespace's

        # The time-sliced GPU: no device series names one of the sharing pods...
        for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL"):
            shared = series_for(exporter.samples(name), GPUS[2].uuid)
            assert len(shared) == 1 and _workload(shared[0][0]) == {}, name
        # ...the allocation info lists all three...
        info = series_for(exporter.samples("DCGM_EXP_GPU_ALLOCATION_INFO"), GPUS[2].uuid)
        assert sorted((labels["pod"], labels["vgpu"], labels["team"]) for labels, _ in info) == [
            ("chat-0", "0", "serving"), ("embed-0", "1", "serving"), ("rerank-0", "2", "serving")]
        allocated = {labels["gpu"]: value for labels, value in exporter.samples("DCGM_EXP_GPU_ALLOCATED")}
        assert allocated == {"0": 1.0, "1": 1.0, "2": 1.0, "3": 0.0, "4": 0.0, "5": 0.0}
        assert exporter.samples("gpu_pod_exporter_kubelet_up") == [({}, 1.0)]
        assert exporter.samples("gpu_pod_exporter_kube_api_up") == [({}, 1.0)]
        assert exporter.samples("gpu_pod_exporter_kubernetes_pods") == [({}, 5.0)]
        assert "DCGM_EXP_PROCESS_FB_USED" not in exporter.metrics()  # per-process series are opt-in
        if not process_attribution:
            _assert_no_process_families(exporter)
            return

        # With process attribution: each sharing pod's memory is its own processes' memory...
        memory = {labels["pod"]: value for labels, value in series_for(
            exporter.samples("DCGM_EXP_CONTAINER_FB_USED"), GPUS[2].uuid)}
        assert memory == {"chat-0": 5 * GIB_IN_MIB, "embed-0": 3 * GIB_IN_MIB, "rerank-0": 1 * GIB_IN_MIB}
        [(_, device_used)] = series_for(exporter.samples("DCGM_FI_DEV_FB_USED"), GPUS[2].uuid)
        assert sum(memory.values()) <= device_used  # the per-pod parts never exceed the device
        # ...and memory outside any pod shows per GPU.
        unattributed = {labels["gpu"]: value for labels, value in exporter.samples("DCGM_EXP_UNATTRIBUTED_FB_USED")}
        assert unattributed == {"0": 0.0, "1": 0.0, "2": 0.0, "3": 2 * GIB_IN_MIB, "4": 0.0, "5": 0.0}


@pytest.mark.parametrize("process_metrics", [False, True], ids=["virtual", "virtual+process-metrics"])
def test_virtual_gpus_repeat_the_shared_device_once_per_pod(cluster: NodeCluster, process_metrics: bool) -> None:
    # Virtual mode reads the process lists itself (each pod's GPU_UTIL and FB_USED come from its processes).
    extra = ["--kubernetes-virtual-gpus", *(["--kubernetes-process-metrics"] if process_metrics else [])]
    with _start(cluster, True, *extra) as exporter:
        _wait_attributed(exporter, pods=5, process_attribution=True)
        shared = series_for(exporter.samples("DCGM_FI_DEV_GPU_TEMP"), GPUS[2].uuid)
        assert sorted((labels["pod"], labels["vgpu"]) for labels, _ in shared) == [
            ("chat-0", "0"), ("embed-0", "1"), ("rerank-0", "2")]
        assert len({value for _, value in shared}) == 1  # the same device reading, repeated
        # FB_USED: the device series once, then each pod with its own processes' memory (dcgm-exporter 4.8.2,
        # pull request 594), not the device total copied onto every pod.
        used = series_for(exporter.samples("DCGM_FI_DEV_FB_USED"), GPUS[2].uuid)
        [device_used] = [value for labels, value in used if "pod" not in labels]
        own = {labels["pod"]: value for labels, value in used if "pod" in labels}
        assert own == {"chat-0": 5 * GIB_IN_MIB, "embed-0": 3 * GIB_IN_MIB, "rerank-0": 1 * GIB_IN_MIB}
        # Each pod's own series carries pod_uid without --kubernetes-enable-pod-uid, as dcgm-exporter's do;
        # the repeated device readings (GPU_TEMP above) follow the flag and have none.
        assert all(labels.get("pod_uid") for labels, _ in used if "pod" in labels)
        assert not any("pod_uid" in labels for labels, _ in shared)
        assert device_used >= sum(own.values())
        # Their peaks likewise: the device's once, then each pod's own peak (steady memory here: its own
        # memory), never the device's peak under a pod's labels.
        peaks = series_for(exporter.samples("DCGM_EXP_FB_USED_PEAK"), GPUS[2].uuid)
        assert {labels["pod"]: value for labels, value in peaks if "pod" in labels} == own
        [device_peak] = [value for labels, value in peaks if "pod" not in labels]
        assert device_peak >= device_used
        if not process_metrics:
            assert "DCGM_EXP_PROCESS_FB_USED" not in exporter.metrics()
            return
        processes = {labels["pid"]: (labels.get("pod"), value)
                     for labels, value in exporter.samples("DCGM_EXP_PROCESS_FB_USED")}
        assert processes["2002"] == ("embed-0", 3 * GIB_IN_MIB)
        assert processes["3001"] == (None, 2 * GIB_IN_MIB)


def _gke(gpu: GpuSpec, suffix: str = "") -> tuple[str, str]:
    return ("nvidia.com/gpu", f"nvidia{gpu.minor}{suffix}")


@attribution_modes
def test_gke_device_names_map_by_minor_number(process_attribution: bool) -> None:
    pods = (
        PodSpec("ml", "trainer-0", "trainer", (_gke(GPUS[0]),), pids=(1001,)),
        PodSpec("serving", "chat-0", "server", (_gke(GPUS[2], "/vgpu0"),), pids=(2001,)),
        PodSpec("serving", "embed-0", "embedder", (_gke(GPUS[2], "/vgpu1"),), pids=(2002,)),
    )
    with node_cluster() as cluster:
        _populate(cluster, pods)
        with _start(cluster, process_attribution, "--kubernetes-gpu-id-type", "device-name") as exporter:
            _wait_attributed(exporter, pods=3, process_attribution=process_attribution)
            pods_by_gpu = {labels["gpu"]: labels.get("pod") for labels, _ in exporter.samples("DCGM_FI_DEV_GPU_TEMP")}
            # nvidia3 is GPU index 0 (minor 3), not index 3; nvidia0/vgpuN is index 2 (minor 0), shared.
            assert pods_by_gpu == {"0": "trainer-0", "1": None, "2": None, "3": None, "4": None, "5": None}
            info = series_for(exporter.samples("DCGM_EXP_GPU_ALLOCATION_INFO"), GPUS[2].uuid)
            assert sorted(labels["pod"] for labels, _ in info) == ["chat-0", "embed-0"]


# -- MIG -------------------------------------------------------------------------------------------

MIG_SCENARIO = """\
description: one MIG-enabled H100 (3g.40gb + 1g.10gb) beside a whole GPU
seed: 11
gpu_count: 2
gpu_defaults: {model: H100-SXM5-80GB}
gpus:
  0:
    mig:
      - {profile: 3g.40gb, processes: [{pid: 7101, used_memory: 20GiB}]}
      - {profile: 1g.10gb, processes: [{pid: 7102, used_memory: 4GiB}]}
  1: {processes: [{pid: 7201, used_memory: 8GiB}]}
"""


@attribution_modes
def test_mig_instances_map_to_their_pods(tmp_path: Path, process_attribution: bool) -> None:
    scenario = tmp_path / "mig.yaml"
    scenario.write_text(MIG_SCENARIO)
    gpus = scenario_gpus(scenario)
    with node_cluster() as cluster:
        cluster.add_namespace("ml", {"team": "research"})
        args = ["--simulate", str(scenario), "-c", "200", "--kubernetes-gpu-id-type", "device-name",
                *cluster.exporter_args(process_attribution=process_attribution)]
        with running_exporter(args) as exporter:
            exporter.wait_healthy()

            def instances() -> dict[str, dict[str, str]]:
                return {labels["GPU_I_ID"]: labels for labels, _ in exporter.samples("DCGM_FI_DEV_FB_USED")
                        if "GPU_I_ID" in labels}

            found = wait_for(lambda: len(instances()) == 2 and instances(), 20.0, "two MIG instances")
            big = next(gi for gi, labels in found.items() if labels["GPU_I_PROFILE"] == "3g.40gb")
            # GKE names a MIG instance nvidia<minor>/gi<id>; the NVIDIA plugin's MIG-<uuid> form is
            # covered by the unit tests, as the MIG UUIDs are not visible from outside the process.
            cluster.add_pod(PodSpec("ml", "mig-trainer-0", "trainer",
                                    (("nvidia.com/mig-3g.40gb", f"nvidia{gpus[0].minor}/gi{big}"),), pids=(7101,)))
            _wait_attributed(exporter, pods=1, process_attribution=process_attribution)
            by_instance = {labels.get("GPU_I_ID"): labels.get("pod")
                           for labels, _ in series_for(exporter.samples("DCGM_FI_DEV_FB_USED"), gpus[0].uuid)}
            assert by_instance[big] == "mig-trainer-0"
            assert [pod for gi, pod in by_instance.items() if gi != big] == [None] * (len(by_instance) - 1)
            allocated = {labels.get("GPU_I_ID"): value for labels, value in
                         series_for(exporter.samples("DCGM_EXP_GPU_ALLOCATED"), gpus[0].uuid)}
            assert allocated == {big: 1.0, next(gi for gi in found if gi != big): 0.0}  # none for the parent
            if not process_attribution:
                _assert_no_process_families(exporter)
                return
            memory = series_for(exporter.samples("DCGM_EXP_CONTAINER_FB_USED"), gpus[0].uuid)
            assert [(labels["GPU_I_ID"], labels["pod"], value) for labels, value in memory] == [
                (big, "mig-trainer-0", 20 * GIB_IN_MIB)]
