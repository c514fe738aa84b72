"""The facade end to end: fake kubelet + fake API server + fake /proc, real sockets and threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.config import Config
from exporter.kube.allocation import build_allocation_index
from exporter.kube.attribution import (
    AttributionSnapshot,
    KubernetesAttribution,
    Workload,
    WorkloadFactory,
    join_attribution,
)
from exporter.kube.deviceids import DeviceCatalog
from exporter.kube.metadata import MetadataView, WatchTimeouts
from exporter.kube.podresources.listing import (
    AssignedDevice,
    ContainerAssignment,
    PodAssignment,
    PodResourcesListing,
)
from exporter.kube.series import LabeledDevice, workload_label_sets
from exporter.simulate.fakeapiserver import FakeApiServer
from exporter.simulate.fakekubelet import FakeContainer, FakeKubelet, FakePod
from exporter.snapshot import GpuProcess

from .helpers import DEVICES, GPU0, GPU1, GPU2, MIG_A, MIGS, poll

NODE = "node-a"
TRAINER_CID = "1" * 64
EVAL_CID = "2" * 64
NB_CID = "3" * 64
FAST = WatchTimeouts(
    connect_s=1.0,
    list_read_s=1.0,
    watch_s=5,
    watch_read_slack_s=1.0,
    backoff_initial_s=0.02,
    backoff_max_s=0.1,
)


@dataclass
class Cluster:
    kubelet: FakeKubelet
    api: FakeApiServer
    proc: Path
    config: Config


def _cgroup(proc: Path, pid: int, uid: str, container_id: str) -> None:
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


@pytest.fixture
def cluster(short_tmp: Path, process_attribution: bool) -> Iterator[Cluster]:
    """The node, watched in both modes (tests/kube/conftest.py): the default and process attribution on."""
    api = FakeApiServer(NODE, bookmark_interval_s=0.2).start()
    api.add_namespace("ml", {"team": "research"})
    api.add_namespace("lab", {})
    trainer = api.add_pod(
        "ml",
        "trainer-0",
        labels={"app": "trainer", "team": "vision"},
        containers=[("trainer", "containerd://" + TRAINER_CID)],
    )
    evaluation = api.add_pod(
        "ml", "eval-0", labels={"app": "eval"}, containers=[("eval", "containerd://" + EVAL_CID)]
    )
    notebook = api.add_pod("lab", "nb", containers=[("jupyter", "containerd://" + NB_CID)])
    kubelet = FakeKubelet(
        short_tmp / "kubelet.sock",
        [
            FakePod("ml", "trainer-0", (FakeContainer("trainer", (("nvidia.com/gpu", GPU0),)),)),
            FakePod("ml", "eval-0", (FakeContainer("eval", (("nvidia.com/gpu.shared", f"{GPU1}::0"),)),)),
            FakePod(
                "lab",
                "nb",
                (
                    FakeContainer(
                        "jupyter",
                        (("nvidia.com/gpu.shared", f"{GPU1}::3"), ("nvidia.com/mig-3g.40gb", MIG_A)),
                    ),
                ),
            ),
        ],
        seed=3,
    ).start()
    proc = short_tmp / "proc"
    _cgroup(proc, 100, trainer["metadata"]["uid"], TRAINER_CID)
    _cgroup(proc, 200, evaluation["metadata"]["uid"], EVAL_CID)
    _cgroup(proc, 300, notebook["metadata"]["uid"], NB_CID)
    (proc / "400").mkdir()
    (proc / "400" / "cgroup").write_text("0::/system.slice/leftover.service\n")
    config = Config(
        kubernetes=True,
        node_name=NODE,
        pod_resources_socket=kubelet.socket_path,
        pod_resources_interval_ms=20,
        kubeconfig=str(api.write_kubeconfig(short_tmp / "kubeconfig")),
        proc_root=str(proc),
        process_attribution=process_attribution,
        kubernetes_enable_pod_uid=True,
        kubernetes_enable_pod_labels=True,
        kubernetes_pod_label_allowlist_regex=("^app$",),
    )
    yield Cluster(kubelet, api, proc, config)
    kubelet.stop()
    api.stop()


class Counter:
    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.count += 1


def _ready(attribution: KubernetesAttribution) -> AttributionSnapshot | None:
    snapshot = attribution.snapshot(DEVICES, MIGS)
    trainer = snapshot.allocation(GPU0)
    if (
        trainer is None
        or trainer.holders[0].workload.pod_uid is None
        or not snapshot.status.api_up
        or not attribution.metadata.synced
    ):
        return None
    return snapshot


def test_joins_allocation_metadata_and_processes(cluster: Cluster) -> None:
    changes = Counter()
    attribution = KubernetesAttribution(cluster.config, changes, watch_timeouts=FAST)
    attribution.start()
    try:
        snapshot = poll(lambda: _ready(attribution), what="kubelet and API data joined")
        trainer = snapshot.allocation(GPU0)
        assert trainer is not None and not trainer.shared
        workload = trainer.holders[0].workload
        assert workload == Workload(
            "ml",
            "trainer-0",
            "trainer",
            pod_uid=workload.pod_uid,
            team="vision",
            pod_labels=(("app", "trainer"),),
        )
        shared = snapshot.allocation(GPU1)
        assert shared is not None and shared.shared
        assert [(h.workload.pod, h.replica_ids, h.workload.team) for h in shared.holders] == [
            ("nb", ("3",), None),
            ("eval-0", ("0",), "research"),
        ]
        mig = snapshot.allocation(GPU2, 3)
        assert mig is not None and mig.holders[0].workload.pod == "nb"
        assert snapshot.status.kubelet_up and snapshot.status.pods_known == 3

        device0 = LabeledDevice(GPU0, None, {"gpu": "0", "UUID": GPU0})
        assert workload_label_sets(snapshot, device0, cluster.config) == [
            {
                "container": "trainer",
                "namespace": "ml",
                "pod": "trainer-0",
                "pod_uid": workload.pod_uid,
                "team": "vision",
                "app": "trainer",
            }
        ]

        before = changes.count
        attribution.update_processes(
            {
                GPU0: [GpuProcess(100, 8 << 30)],
                GPU1: [GpuProcess(200, 2 << 30), GpuProcess(300, 1 << 30), GpuProcess(400, 512 << 20)],
                GPU2: [GpuProcess(300, 3 << 30, gpu_instance_id=3, compute_instance_id=0)],
            }
        )
        snapshot = attribution.snapshot(DEVICES, MIGS)
        assert snapshot.status.process_attribution is cluster.config.process_attribution
        if not cluster.config.process_attribution:  # the default: process lists are not read at all
            assert changes.count == before
            assert (snapshot.container_memory, snapshot.processes, dict(snapshot.unattributed_bytes)) == ((), (), {})
            assert snapshot.allocation(GPU0) == trainer  # the allocation stands on its own
            return
        assert changes.count == before + 1
        memory = {
            (m.uuid, m.gpu_instance_id, m.workload.pod): m.used_bytes for m in snapshot.container_memory
        }
        assert memory == {
            (GPU0, None, "trainer-0"): 8 << 30,
            (GPU1, None, "eval-0"): 2 << 30,
            (GPU1, None, "nb"): 1 << 30,
            (GPU2, 3, "nb"): 3 << 30,
        }
        assert dict(snapshot.unattributed_bytes) == {_key(GPU1): 512 << 20}
        assert [(p.pid, p.workload.pod if p.workload else None) for p in snapshot.processes] == [
            (100, "trainer-0"),
            (200, "eval-0"),
            (300, "nb"),
            (400, None),
            (300, "nb"),
        ]

        # The same lists again: nothing changed, nobody is woken up.
        attribution.update_processes(
            {
                GPU0: [GpuProcess(100, 8 << 30)],
                GPU1: [GpuProcess(200, 2 << 30), GpuProcess(300, 1 << 30), GpuProcess(400, 512 << 20)],
                GPU2: [GpuProcess(300, 3 << 30, gpu_instance_id=3, compute_instance_id=0)],
            }
        )
        assert changes.count == before + 1
    finally:
        attribution.stop()


def _key(uuid: str, gpu_instance_id: int | None = None) -> object:
    from exporter.kube.deviceids import GpuKey  # noqa: PLC0415

    return GpuKey(uuid, gpu_instance_id)


def test_on_change_only_fires_on_change_and_snapshot_is_memoised(cluster: Cluster) -> None:
    changes = Counter()
    attribution = KubernetesAttribution(cluster.config, changes, watch_timeouts=FAST)
    attribution.start()
    try:
        poll(lambda: _ready(attribution), what="initial data")
        settled = changes.count
        calls = cluster.kubelet.list_calls
        poll(lambda: cluster.kubelet.list_calls >= calls + 10, what="ten more kubelet polls")
        cluster.api.send_bookmarks()
        assert changes.count == settled  # identical answers and bookmarks change nothing
        first, second = attribution.snapshot(DEVICES, MIGS), attribution.snapshot(DEVICES, MIGS)
        assert first.allocations is second.allocations  # no recomputation without a change

        cluster.kubelet.remove_pod("ml", "trainer-0")
        poll(lambda: attribution.snapshot(DEVICES, MIGS).allocation(GPU0) is None, what="the pod's GPU freed")
        assert changes.count > settled
    finally:
        attribution.stop()


def test_sources_down_keep_last_labels_then_drop_them(cluster: Cluster) -> None:
    attribution = KubernetesAttribution(
        cluster.config,
        Counter(),
        stale_after_s=0.5,
        watch_timeouts=WatchTimeouts(
            connect_s=0.5,
            list_read_s=0.5,
            watch_s=5,
            watch_read_slack_s=0.5,
            backoff_initial_s=0.02,
            backoff_max_s=0.05,
            stale_after_s=0.5,
        ),
    )
    attribution.start()
    try:
        poll(lambda: _ready(attribution), what="initial data")
        cluster.kubelet.stop()
        cluster.api.set_outage("refuse")
        snapshot = poll(
            lambda: (
                (s := attribution.snapshot(DEVICES, MIGS))
                and not s.status.kubelet_up
                and not s.status.api_up
                and s
            ),
            what="both sources seen down",
        )
        assert "kubelet socket not found" in snapshot.status.kubelet_error
        poll(
            lambda: not attribution.snapshot(DEVICES, MIGS).allocation_known, what="stale allocation dropped"
        )
        poll(
            lambda: attribution.snapshot(DEVICES, MIGS).status.pods_known == 0, what="stale metadata dropped"
        )
        device0 = LabeledDevice(GPU0, None, {"gpu": "0"})
        assert workload_label_sets(attribution.snapshot(DEVICES, MIGS), device0, cluster.config) == [{}]

        cluster.kubelet.start()
        cluster.api.set_outage(None)
        poll(lambda: _ready(attribution), what="recovery")
    finally:
        attribution.stop()


def test_disabled_kubernetes_mode_does_nothing(cluster: Cluster) -> None:
    attribution = KubernetesAttribution(Config(), Counter())
    attribution.start()
    attribution.update_processes({GPU0: [GpuProcess(100, 1)]})
    assert attribution.snapshot(DEVICES, MIGS) == AttributionSnapshot()
    assert cluster.kubelet.list_calls == 0
    attribution.stop()


def test_a_failing_callback_does_not_kill_the_sources(cluster: Cluster) -> None:
    def broken() -> None:
        raise RuntimeError("renderer bug")

    attribution = KubernetesAttribution(cluster.config, broken, watch_timeouts=FAST)
    attribution.start()
    try:
        poll(lambda: _ready(attribution), what="data despite the callback failing")
        cluster.kubelet.remove_pod("ml", "trainer-0")
        poll(lambda: attribution.snapshot(DEVICES, MIGS).allocation(GPU0) is None, what="later changes")
    finally:
        attribution.stop()


# --- time-slicing / MPS replica IDs: who gets the device's labels ---------------------------------
# From the kubelet's device IDs to the workload labels on the GPU's own series, through the same
# pure steps the facade runs (index -> join -> label sets): a device held by exactly one container,
# whole or through any number of replica IDs, carries that container's labels; a device held by
# several containers carries none (default) or one copy per container (--kubernetes-virtual-gpus).

_REPLICA_CASES = {
    "whole GPU": ([("trainer", [GPU0])], GPU0, None),
    "one replica": ([("trainer", [f"{GPU0}::0"])], GPU0, None),
    "several replicas of one GPU": ([("trainer", [f"{GPU0}::1", f"{GPU0}::5", f"{GPU0}::3"])], GPU0, None),
    "GKE time-sharing slot": ([("trainer", ["nvidia2/vgpu0"])], GPU0, None),  # minor 2 is GPU0
    "GKE name with a replica suffix": ([("trainer", ["nvidia2::4"])], GPU0, None),
    "replicated MIG device": ([("trainer", [f"{MIG_A}::7"])], GPU2, 3),
    "GKE MIG name with a replica suffix": ([("trainer", ["nvidia1/gi3::2"])], GPU2, 3),
    "two containers through replicas": ([("trainer", [f"{GPU0}::0"]), ("eval", [f"{GPU0}::1"])], GPU0, None),
    "two containers, the same plain ID": ([("trainer", [GPU0]), ("eval", [GPU0])], GPU0, None),
}


def _replica_labels(holders: list[tuple[str, list[str]]], uuid: str, gpu_instance_id: int | None,
                    config: Config) -> list[dict[str, str]]:
    listing = PodResourcesListing(pods=tuple(
        PodAssignment("ml", f"{container}-0", (ContainerAssignment(container, tuple(
            sorted(AssignedDevice("nvidia.com/gpu.shared", device) for device in ids))),))
        for container, ids in holders))
    index = build_allocation_index(listing, DeviceCatalog(DEVICES, MIGS))
    assert not index.unmatched_device_ids
    parts = join_attribution(index, True, None, MetadataView(), WorkloadFactory(config))
    snapshot = AttributionSnapshot(allocation_known=True, allocations=parts.allocations)
    device = LabeledDevice(uuid, gpu_instance_id, {"gpu": "0", "UUID": uuid})
    return workload_label_sets(snapshot, device, config)


@pytest.mark.parametrize("case", [case for case in _REPLICA_CASES if not case.startswith("two")])
def test_a_device_held_by_one_container_carries_its_labels_however_it_is_named(case: str) -> None:
    holders, uuid, gpu_instance_id = _REPLICA_CASES[case]
    config = Config(kubernetes=True)
    assert _replica_labels(holders, uuid, gpu_instance_id, config) == [
        {"container": "trainer", "namespace": "ml", "pod": "trainer-0"}]


@pytest.mark.parametrize("case", [case for case in _REPLICA_CASES if case.startswith("two")])
def test_a_device_held_by_two_containers_carries_no_single_pod(case: str) -> None:
    holders, uuid, gpu_instance_id = _REPLICA_CASES[case]
    assert _replica_labels(holders, uuid, gpu_instance_id, Config(kubernetes=True)) == [{}]


def test_virtual_gpu_mode_repeats_per_container_with_its_lowest_replica() -> None:
    config = Config(kubernetes=True, kubernetes_virtual_gpus=True)
    holders, uuid, gpu_instance_id = _REPLICA_CASES["two containers through replicas"]
    assert _replica_labels(holders, uuid, gpu_instance_id, config) == [
        {"container": "eval", "namespace": "ml", "pod": "eval-0", "vgpu": "1"},
        {"container": "trainer", "namespace": "ml", "pod": "trainer-0", "vgpu": "0"},
    ]
    holders, uuid, gpu_instance_id = _REPLICA_CASES["several replicas of one GPU"]
    assert _replica_labels(holders, uuid, gpu_instance_id, config) == [
        {"container": "trainer", "namespace": "ml", "pod": "trainer-0", "vgpu": "1"}]
