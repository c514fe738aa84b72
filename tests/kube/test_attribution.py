"""The facade end to end: fake kubelet + fake API server + fake /proc, real sockets and threads.

What these tests prove is the facade's own behaviour (change notification and memoising, sources
going down and stale data dropped, callbacks that fail, log lines once per change, the pure
joins); the API server only feeds them pods, so the fake stays, where an outage can be switched on.
The join with real Pod and Namespace objects (real UIDs, statuses, namespace teams) runs against the
real control plane: tests/platform/test_attribution.py (docs/testing.md lists where each test went).
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.composition import kubernetes_settings
from exporter.config import Config
from exporter.kube import attribution as attribution_module
from exporter.kube.allocation import AllocationIndex, build_allocation_index
from exporter.kube.attribution import LOG as attribution_log
from exporter.kube.attribution import (
    AttributionSnapshot,
    KubernetesAttribution,
    WorkloadFactory,
    join_attribution,
)
from exporter.kube.deviceids import DeviceCatalog
from exporter.kube.dra import DraContext
from exporter.kube.metadata import MetadataView, PodMetadata, WatchTimeouts
from exporter.kube.podresources.listing import (
    AssignedDevice,
    ContainerAssignment,
    PodAssignment,
    PodResourcesListing,
)
from exporter.kube.series import LabeledDevice, workload_label_sets
from exporter.kube.settings import KubernetesSettings
from exporter.snapshot import GpuProcess
from simulator.fakeapiserver import FakeApiServer
from simulator.fakekubelet import FakeContainer, FakeKubelet, FakePod

from .helpers import DEVICES, GPU0, GPU1, GPU2, MIG_A, MIGS, poll, write_cgroup

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
    config: KubernetesSettings


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
    write_cgroup(proc, 100, trainer["metadata"]["uid"], TRAINER_CID)
    write_cgroup(proc, 200, evaluation["metadata"]["uid"], EVAL_CID)
    write_cgroup(proc, 300, notebook["metadata"]["uid"], NB_CID)
    (proc / "400").mkdir()
    (proc / "400" / "cgroup").write_text("0::/system.slice/leftover.service\n")
    config = kubernetes_settings(Config(
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
    ))
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


def _key(uuid: str, gpu_instance_id: int | None = None) -> object:
    from exporter.kube.deviceids import GpuKey  # noqa: PLC0415

    return GpuKey(uuid, gpu_instance_id)


def test_on_change_only_fires_on_change_and_snapshot_is_memoised(cluster: Cluster) -> None:
    changes = Counter()
    attribution = KubernetesAttribution(cluster.config, changes, watch_timeouts=FAST)
    attribution.start()
    try:
        poll(lambda: _ready(attribution), what="initial data")
        # ready is not settled: the other watch's first list or the first process read may still land
        # after it; settled is the count that ten kubelet polls in a row leave unchanged
        settled, calls = -1, 0
        while changes.count != settled:
            settled, calls = changes.count, cluster.kubelet.list_calls
            poll(lambda c=calls, s=settled: cluster.kubelet.list_calls >= c + 10 or changes.count != s,
                 what="ten kubelet polls without a change")
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
        # Waited for as a state: a List in flight while the kubelet stops is answered UNAVAILABLE before its
        # socket file is removed; the state the sources settle in is the missing socket and the refused API.
        snapshot = poll(
            lambda: (
                (s := attribution.snapshot(DEVICES, MIGS))
                and not s.status.kubelet_up
                and not s.status.api_up
                and "kubelet socket not found" in s.status.kubelet_error
                and s
            ),
            what="both sources seen down, the kubelet's socket gone",
        )
        assert not snapshot.status.kubelet_up
        poll(
            lambda: not attribution.snapshot(DEVICES, MIGS).allocation_known, what="stale allocation dropped"
        )
        poll(
            lambda: attribution.snapshot(DEVICES, MIGS).status.pods_known == 0, what="stale metadata dropped"
        )
        device0 = LabeledDevice(GPU0, None, {"gpu": "0"})
        assert workload_label_sets(attribution.snapshot(DEVICES, MIGS), device0, cluster.config.series) == [{}]

        cluster.kubelet.start()
        cluster.api.set_outage(None)
        poll(lambda: _ready(attribution), what="recovery")
    finally:
        attribution.stop()


def test_disabled_kubernetes_mode_does_nothing(cluster: Cluster) -> None:
    attribution = KubernetesAttribution(kubernetes_settings(Config()), Counter())
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
                    config: KubernetesSettings) -> list[dict[str, str]]:
    listing = PodResourcesListing(pods=tuple(
        PodAssignment("ml", f"{container}-0", (ContainerAssignment(container, tuple(
            sorted(AssignedDevice("nvidia.com/gpu.shared", device) for device in ids))),))
        for container, ids in holders))
    index = build_allocation_index(listing, DeviceCatalog(DEVICES, MIGS))
    assert not index.unmatched_device_ids
    parts = join_attribution(index, True, None, MetadataView(), WorkloadFactory(config.workloads))
    snapshot = AttributionSnapshot(allocation_known=True, allocations=parts.allocations)
    device = LabeledDevice(uuid, gpu_instance_id, {"gpu": "0", "UUID": uuid})
    return workload_label_sets(snapshot, device, config.series)


@pytest.mark.parametrize("case", [case for case in _REPLICA_CASES if not case.startswith("two")])
def test_a_device_held_by_one_container_carries_its_labels_however_it_is_named(case: str) -> None:
    holders, uuid, gpu_instance_id = _REPLICA_CASES[case]
    config = kubernetes_settings(Config(kubernetes=True))
    assert _replica_labels(holders, uuid, gpu_instance_id, config) == [
        {"container": "trainer", "namespace": "ml", "pod": "trainer-0"}]


@pytest.mark.parametrize("case", [case for case in _REPLICA_CASES if case.startswith("two")])
def test_a_device_held_by_two_containers_carries_no_single_pod(case: str) -> None:
    holders, uuid, gpu_instance_id = _REPLICA_CASES[case]
    assert _replica_labels(holders, uuid, gpu_instance_id, kubernetes_settings(
            Config(kubernetes=True))) == [{}]


def test_virtual_gpu_mode_repeats_per_container_with_its_lowest_replica() -> None:
    config = kubernetes_settings(Config(kubernetes=True, kubernetes_virtual_gpus=True))
    holders, uuid, gpu_instance_id = _REPLICA_CASES["two containers through replicas"]
    assert _replica_labels(holders, uuid, gpu_instance_id, config) == [
        {"container": "eval", "namespace": "ml", "pod": "eval-0", "vgpu": "1"},
        {"container": "trainer", "namespace": "ml", "pod": "trainer-0", "vgpu": "0"},
    ]
    holders, uuid, gpu_instance_id = _REPLICA_CASES["several replicas of one GPU"]
    assert _replica_labels(holders, uuid, gpu_instance_id, config) == [
        {"container": "trainer", "namespace": "ml", "pod": "trainer-0", "vgpu": "1"}]


# --- what mutation testing found unguarded (docs/testing.md) --------------------------------------

def _started(config: KubernetesSettings) -> KubernetesAttribution:
    attribution = KubernetesAttribution(config, Counter(), watch_timeouts=FAST)
    attribution.start()
    return attribution


def _render_through_polls(attribution: KubernetesAttribution, cluster: Cluster, polls: int = 5) -> None:
    """Render (snapshot) until the kubelet has been asked ``polls`` more times: a deadline, not a sleep."""
    target = cluster.kubelet.list_calls + polls
    poll(lambda: attribution.snapshot(DEVICES, MIGS) and cluster.kubelet.list_calls >= target,
         what=f"{polls} more kubelet polls")


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.name == attribution_log.name and record.levelno == level]


UNKNOWN_IDS = [f"GPU-{number:08x}-0000-0000-0000-000000000000" for number in range(12)]
FORMS = ("(forms understood: GPU-<uuid>, MIG-<uuid>, MIG-GPU-<uuid>/<gi>/<ci>, nvidia<minor>[/gi<id>][/vgpu<n>], "
         "each optionally with ::<replica>)")


def test_device_ids_that_name_no_gpu_here_are_logged_once_per_change(cluster: Cluster,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The first thing to read when pods get no labels: which IDs, and which forms would have matched."""
    ghost = FakePod("ml", "ghost", (FakeContainer("ghost", tuple(("nvidia.com/gpu", i) for i in UNKNOWN_IDS)),))
    cluster.kubelet.add_pod(ghost)
    trainer = next(pod for pod in cluster.kubelet.pods() if pod.name == "trainer-0")
    warning = (f"kubelet lists GPU device IDs that match no GPU on this node: {', '.join(UNKNOWN_IDS[:10])} "
               + FORMS)
    with caplog.at_level(logging.INFO, logger=attribution_log.name):
        attribution = _started(cluster.config)
        try:
            poll(lambda: _ready(attribution), what="kubelet and API data joined")
            _render_through_polls(attribution, cluster)
            assert _messages(caplog, logging.WARNING) == [warning]  # ten IDs at most, once

            cluster.kubelet.remove_pod("ml", "ghost")
            cluster.kubelet.remove_pod("ml", "trainer-0")
            poll(lambda: attribution.snapshot(DEVICES, MIGS).allocation(GPU0) is None, what="the new listing")
            _render_through_polls(attribution, cluster)
            assert _messages(caplog, logging.WARNING) == [warning]  # nothing to say when they are gone

            cluster.kubelet.add_pod(ghost)
            cluster.kubelet.add_pod(trainer)
            poll(lambda: attribution.snapshot(DEVICES, MIGS).allocation(GPU0), what="the listing with them again")
            assert _messages(caplog, logging.WARNING) == [warning, warning]
        finally:
            attribution.stop()
    assert _messages(caplog, logging.INFO) == []  # the plugin names GPUs as configured (uid)


def test_a_device_plugin_naming_gpus_otherwise_than_configured_is_said_once(cluster: Cluster,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    config = dataclasses.replace(cluster.config, kubernetes_gpu_id_type="device-name")
    with caplog.at_level(logging.INFO, logger=attribution_log.name):
        attribution = _started(config)
        try:
            poll(lambda: _ready(attribution), what="kubelet and API data joined")
            cluster.kubelet.remove_pod("ml", "trainer-0")  # a new listing is matched again
            poll(lambda: attribution.snapshot(DEVICES, MIGS).allocation(GPU0) is None, what="the new listing")
            _render_through_polls(attribution, cluster)
        finally:
            attribution.stop()
    assert _messages(caplog, logging.INFO) == [
        "the device plugin names GPUs as uid, not device-name as --kubernetes-gpu-id-type says; both forms are "
        "understood, so attribution works either way"]


def test_without_node_name_it_says_once_which_node_it_watches(cluster: Cluster,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    no_node_name = dataclasses.replace(cluster.config.api, node_name="")
    attribution = KubernetesAttribution(dataclasses.replace(cluster.config, api=no_node_name), Counter(),
                                        watch_timeouts=FAST)
    with caplog.at_level(logging.WARNING, logger=attribution_log.name):
        attribution.start()
        attribution.start()  # a second start is a no-op
    attribution.stop()
    assert _messages(caplog, logging.WARNING) == [
        f"NODE_NAME is not set; watching pods with spec.nodeName={socket.gethostname()} (this machine's hostname). "
        "Set NODE_NAME from the downward API (spec.nodeName)."]


def test_outside_kubernetes_mode_no_source_is_started(cluster: Cluster) -> None:
    before = set(threading.enumerate())
    attribution = KubernetesAttribution(dataclasses.replace(cluster.config, kubernetes=False), Counter())
    attribution.start()
    try:
        assert [thread.name for thread in set(threading.enumerate()) - before] == []
        attribution.update_processes({GPU0: [GpuProcess(100, 1)]})
        assert attribution.snapshot(DEVICES, MIGS) == AttributionSnapshot()
    finally:
        attribution.stop()


def test_the_status_says_when_each_source_last_answered_and_why_it_is_down(cluster: Cluster) -> None:
    attribution = _started(cluster.config)
    try:
        status = poll(lambda: _ready(attribution), what="kubelet and API data joined").status
        assert status.enabled and status.process_attribution is cluster.config.processes.process_attribution
        assert 0 < status.kubelet_last_success <= time.time() and 0 < status.api_last_success <= time.time()
        cluster.api.set_outage("503")
        # first "resuming the Kubernetes API watches" (the watch ended), then the failed relist's answer
        down = poll(lambda: (s := attribution.snapshot(DEVICES, MIGS).status) and not s.api_up
                    and "answered 503" in s.api_error and s, what="the API seen down with its answer")
        assert down.api_last_success >= status.api_last_success  # when it last worked stays visible
    finally:
        attribution.stop()


def test_process_lists_are_ignored_while_process_attribution_is_off(cluster: Cluster) -> None:
    """The default install: allocation labels only; no process or per-container memory series."""
    changes = Counter()
    off = dataclasses.replace(cluster.config.processes, process_attribution=False)
    attribution = KubernetesAttribution(dataclasses.replace(cluster.config, processes=off), changes,
                                        watch_timeouts=FAST)
    attribution.start()
    try:
        snapshot = poll(lambda: _ready(attribution), what="kubelet and API data joined")
        assert not snapshot.status.process_attribution
        before = changes.count
        attribution.update_processes({GPU0: [GpuProcess(100, 8 << 30)]})
        snapshot = attribution.snapshot(DEVICES, MIGS)
        assert (snapshot.container_memory, snapshot.processes, snapshot.process_gpus) == ((), (), frozenset())
        assert changes.count == before
    finally:
        attribution.stop()


@pytest.mark.parametrize("process_attribution", [True], ids=["process-attribution"])  # process lists need it
def test_container_memory_counts_exactly_what_nvml_reported_per_gpu_instance(cluster: Cluster) -> None:
    attribution = _started(cluster.config)
    try:
        poll(lambda: _ready(attribution), what="kubelet and API data joined")
        attribution.update_processes({
            # GPU0 (held by trainer-0) has no process list: NVML did not read one, so nothing is claimed
            GPU1: [GpuProcess(200, None),  # eval-0: NVML does not know this process's memory
                   GpuProcess(100, 5 << 20)],  # trainer-0 uses a GPU it was not allocated
            GPU2: [GpuProcess(300, 2 << 20, gpu_instance_id=5, compute_instance_id=0),
                   GpuProcess(100, 1 << 20, gpu_instance_id=3, compute_instance_id=0)],
        })
        snapshot = attribution.snapshot(DEVICES, MIGS)
    finally:
        attribution.stop()
    assert [(m.uuid, m.gpu_instance_id, m.workload.pod, m.used_bytes) for m in snapshot.container_memory] == [
        (GPU1, None, "nb", 0),  # holds a replica, runs nothing there
        (GPU1, None, "eval-0", 0),
        (GPU1, None, "trainer-0", 5 << 20),
        (GPU2, 3, "nb", 0),  # per GPU instance, in instance order
        (GPU2, 3, "trainer-0", 1 << 20),
        (GPU2, 5, "nb", 2 << 20),
    ]
    assert [(p.uuid, p.gpu_instance_id, p.pid, p.used_bytes, p.workload.pod if p.workload else None)
            for p in snapshot.processes] == [
        (GPU1, None, 100, 5 << 20, "trainer-0"),
        (GPU1, None, 200, None, "eval-0"),
        (GPU2, 3, 100, 1 << 20, "trainer-0"),
        (GPU2, 5, 300, 2 << 20, "nb"),
    ]
    assert dict(snapshot.unattributed_bytes) == {}
    mig = snapshot.allocation(GPU2, 3)
    assert mig is not None and (mig.uuid, mig.gpu_instance_id) == (GPU2, 3)


def test_an_unchanged_kubelet_answer_is_not_matched_again(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A render costs a few comparisons while nothing changed (the kubelet answers every 20 ms here)."""
    builds: list[PodResourcesListing] = []

    def counting(listing: PodResourcesListing, catalog: DeviceCatalog,
                 dra: DraContext | None = None) -> AllocationIndex:
        builds.append(listing)
        return build_allocation_index(listing, catalog, dra)

    monkeypatch.setattr(attribution_module, "build_allocation_index", counting)
    attribution = _started(cluster.config)
    try:
        poll(lambda: _ready(attribution), what="kubelet and API data joined")
        matched = len(builds)
        _render_through_polls(attribution, cluster, polls=10)
        assert len(builds) == matched
    finally:
        attribution.stop()


def test_only_allowlisted_pod_labels_are_copied() -> None:
    pod = PodMetadata("ml", "trainer-0", "uid-1", labels=(("app", "trainer"), ("tier", "batch")))
    view = MetadataView(pods_by_name={("ml", "trainer-0"): pod})
    config = kubernetes_settings(
            Config(kubernetes=True, kubernetes_enable_pod_labels=True, kubernetes_pod_label_allowlist_regex=("^app$",)))
    workload = WorkloadFactory(config.workloads).build("ml", "trainer-0", "trainer", view)
    assert workload.pod_labels == (("app", "trainer"),)


def test_a_failing_callback_is_logged_with_its_traceback(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> None:
        raise RuntimeError("renderer bug")

    attribution = KubernetesAttribution(cluster.config, broken, watch_timeouts=FAST)
    with caplog.at_level(logging.ERROR, logger=attribution_log.name):
        attribution.start()
        try:
            poll(lambda: _messages(caplog, logging.ERROR), what="the callback's failure logged")
        finally:
            attribution.stop()
    record = next(record for record in caplog.records if record.levelno == logging.ERROR)
    assert record.getMessage() == "attribution on_change callback failed"
    assert record.exc_info is not None and str(record.exc_info[1]) == "renderer bug"
