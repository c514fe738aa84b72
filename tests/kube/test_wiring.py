"""The attribution wired into rendering: labels on payload series, families, MIG instances, process hand-off."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

import pytest
from prometheus_client.core import Metric

from exporter.composition import kubernetes_settings
from exporter.config import Config, with_implied_settings
from exporter.hub import Hub, SamplerSettings
from exporter.kube.attribution import (
    AllocationHolder,
    AttributionSnapshot,
    AttributionStatus,
    DeviceAllocation,
    KubernetesAttribution,
    Workload,
)
from exporter.kube.deviceids import GpuKey
from exporter.kube.metadata import WatchTimeouts
from exporter.kube.wiring import KubernetesWiring
from exporter.metrics.counters import load_counters
from exporter.metrics.render import DEFAULT_BUILDERS, RenderContext, RenderOptions, render
from exporter.snapshot import (
    DeviceIdentity,
    DeviceReading,
    GpuProcess,
    MigIdentity,
    MigReading,
    SamplerStatus,
    Snapshot,
)
from simulator.fakeapiserver import FakeApiServer
from simulator.fakekubelet import FakeContainer, FakeKubelet, FakePod
from tests.attribution_modes import process_families

from .helpers import DEVICES, GPU0, GPU2, MIG_A, MIGS, poll

STATUS = SamplerStatus(nvml_up=True, driver_version="550.90.07", device_count=3)
NB_CID = "3" * 64
TRAINER_CID = "1" * 64
FAST = WatchTimeouts(connect_s=1.0, list_read_s=1.0, watch_s=5, watch_read_slack_s=1.0,
                     backoff_initial_s=0.02, backoff_max_s=0.1)


def _mig_snapshot(processes: tuple[GpuProcess, ...] | None = None) -> Snapshot:
    """GPU 0 whole; GPU 2 MIG-enabled with GPU instances 3 and 5 (GPU 1 lost)."""
    return Snapshot(
        devices=(
            DeviceReading(DEVICES[0], values={"DCGM_FI_DEV_GPU_TEMP": 40, "DCGM_FI_DEV_FB_USED": 1000},
                          processes=() if processes is not None else None),
            DeviceReading(DEVICES[1], up=False, error="GPU is lost"),
            DeviceReading(DEVICES[2], values={"DCGM_FI_DEV_GPU_TEMP": 50},
                          mig=tuple(MigReading(mig, {"DCGM_FI_DEV_FB_USED": 100.0 * mig.gpu_instance_id})
                                    for mig in MIGS),
                          processes=processes),
        ),
        status=STATUS,
    )


def _render(wiring: KubernetesWiring, snapshot: Snapshot) -> list[Metric]:
    ctx = RenderContext(snapshot=snapshot, counters=load_counters(None), options=RenderOptions(hostname="node-a"))
    return render(wiring.extend_context(ctx), [*DEFAULT_BUILDERS, wiring.families])


def _samples(families: Sequence[Metric], name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(sample.labels), sample.value) for family in families for sample in family.samples
            if sample.name == name]


def _write_cgroup(proc: Path, pid: int, uid: str, container_id: str) -> None:
    directory = proc / str(pid)
    directory.mkdir(parents=True)
    (directory / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/cri-containerd-{container_id}.scope\n")
    (directory / "stat").write_text(f"{pid} (python3) S 1 {pid} {pid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0\n")


@pytest.fixture
def node(short_tmp: Path) -> Iterator[tuple[FakeApiServer, FakeKubelet, Path]]:
    api = FakeApiServer("node-a", bookmark_interval_s=0.2).start()
    api.add_namespace("lab", {"team": "research"})
    notebook = api.add_pod("lab", "nb", containers=[("jupyter", "containerd://" + NB_CID)])
    api.add_pod("lab", "trainer", containers=[("trainer", "containerd://" + TRAINER_CID)])
    proc = short_tmp / "proc"
    _write_cgroup(proc, 4242, notebook["metadata"]["uid"], NB_CID)
    kubelet = FakeKubelet(short_tmp / "kubelet.sock")
    yield api, kubelet, proc
    kubelet.stop()
    api.stop()


@pytest.mark.parametrize(("id_type", "mig_id"), [("uid", MIG_A), ("device-name", "nvidia1/gi3")])
def test_mig_instances_are_attributed_per_gpu_instance(
    node: tuple[FakeApiServer, FakeKubelet, Path], short_tmp: Path, id_type: str, mig_id: str,
    process_attribution: bool,
) -> None:
    api, kubelet, proc = node
    gpu0_id = GPU0 if id_type == "uid" else "nvidia2"  # GPU index 0 has minor 2 (tests/kube/helpers.py)
    kubelet.set_pods([FakePod("lab", "nb", (FakeContainer("jupyter", (("nvidia.com/mig-3g.40gb", mig_id),)),)),
                      FakePod("lab", "trainer", (FakeContainer("trainer", (("nvidia.com/gpu", gpu0_id),)),))])
    kubelet.start()
    config = kubernetes_settings(
            Config(kubernetes=True, pod_resources_socket=str(kubelet.socket_path), kubeconfig=str(
        api.write_kubeconfig(short_tmp / "kubeconfig")), node_name="node-a", kubernetes_gpu_id_type=id_type,
        process_attribution=process_attribution, proc_root=str(proc), pod_resources_interval_ms=50))
    attribution = KubernetesAttribution(config, watch_timeouts=FAST)
    wiring = KubernetesWiring(config, attribution)
    attribution.start()
    try:
        attribution.update_processes({GPU2: (GpuProcess(4242, 3 << 30, gpu_instance_id=3, compute_instance_id=0),)})
        snapshot = _mig_snapshot(processes=(GpuProcess(4242, 3 << 30, gpu_instance_id=3, compute_instance_id=0),))
        families = poll(lambda: (f := _render(wiring, snapshot)) and len(_samples(
            f, "DCGM_EXP_GPU_ALLOCATION_INFO")) == 2 and all(
            "team" in labels for labels, _ in _samples(f, "DCGM_EXP_GPU_ALLOCATION_INFO")) and (
            not process_attribution or any(value for _, value in _samples(f, "DCGM_EXP_CONTAINER_FB_USED")))
            and f)  # the pod known too
    finally:
        attribution.stop()

    fb = {(labels["UUID"], labels.get("GPU_I_ID")): labels.get("pod") for labels, _ in
          _samples(families, "DCGM_FI_DEV_FB_USED")}
    assert fb == {(GPU0, None): "trainer", (GPU2, "3"): "nb", (GPU2, "5"): None}
    temps = {labels["UUID"]: labels.get("pod") for labels, _ in _samples(families, "DCGM_FI_DEV_GPU_TEMP")}
    assert temps == {GPU0: "trainer", GPU2: None}  # the MIG parent's device readings belong to no pod
    allocated = [(labels["gpu"], labels.get("GPU_I_ID"), value)
                 for labels, value in _samples(families, "DCGM_EXP_GPU_ALLOCATED")]
    # one series per whole GPU (the lost one included) and per GPU instance, none for the MIG parent
    assert allocated == [("0", None, 1.0), ("1", None, 0.0), ("2", "3", 1.0), ("2", "5", 0.0)]
    [(info, _)] = [(labels, value) for labels, value in _samples(families, "DCGM_EXP_GPU_ALLOCATION_INFO")
                   if labels["pod"] == "nb"]
    assert (info["GPU_I_PROFILE"], info["GPU_I_ID"], info["team"]) == ("3g.40gb", "3", "research")
    if not process_attribution:  # the default: allocation labels only, no per-container memory
        assert process_families(sample.name for family in families for sample in family.samples) == set()
        return
    memory = [(labels["GPU_I_ID"], labels["pod"], value)
              for labels, value in _samples(families, "DCGM_EXP_CONTAINER_FB_USED")]
    assert memory == [("3", "nb", 3072.0)]


# -- with a stand-in for the attribution ---------------------------------------------------------


class StubAttribution:
    """Records what the wiring asks; answers a fixed snapshot."""

    def __init__(self, snapshot: AttributionSnapshot) -> None:
        self.value = snapshot
        self.snapshot_calls: list[tuple[tuple[DeviceIdentity, ...], tuple[MigIdentity, ...]]] = []
        self.updates: list[Mapping[str, Sequence[GpuProcess]]] = []
        self.fail_next_update = False
        self.updated = threading.Event()

    def snapshot(self, devices: Sequence[DeviceIdentity], migs: Sequence[MigIdentity]) -> AttributionSnapshot:
        self.snapshot_calls.append((tuple(devices), tuple(migs)))
        return self.value

    def update_processes(self, processes: Mapping[str, Sequence[GpuProcess]],
                         utilization: Mapping[str, object] | None = None) -> None:
        if self.fail_next_update:
            self.fail_next_update = False
            raise RuntimeError("a bug")
        self.updates.append(processes)
        self.updated.set()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


SHARED = AttributionSnapshot(
    status=AttributionStatus(enabled=True, kubelet_up=True, api_up=True, pods_known=2),
    allocation_known=True,
    allocations=MappingProxyType({GpuKey(GPU0): DeviceAllocation(GPU0, None, (
        AllocationHolder(Workload("ml", "a-0", "a"), ("0",)), AllocationHolder(Workload("ml", "b-0", "b"), ("1",))),
        shared=True)}),
)


def _stub_wiring(snapshot: AttributionSnapshot = SHARED, **config: object) -> tuple[KubernetesWiring, StubAttribution]:
    stub = StubAttribution(snapshot)
    resolved = kubernetes_settings(with_implied_settings(Config(kubernetes=True, **config)))  # type: ignore[arg-type]
    return KubernetesWiring(resolved, stub), stub  # type: ignore[arg-type]


def test_the_attribution_is_joined_once_per_render() -> None:
    wiring, stub = _stub_wiring()
    snapshot = _mig_snapshot()
    families = _render(wiring, snapshot)
    assert len(stub.snapshot_calls) == 1  # every payload family and the attribution's own share it
    devices, migs = stub.snapshot_calls[0]
    assert devices == DEVICES and migs == MIGS
    _render(wiring, snapshot)
    assert len(stub.snapshot_calls) == 2  # each render asks again: the attribution may have changed
    # A shared GPU: the device series names no pod, the info series names both.
    assert [labels.get("pod") for labels, _ in _samples(families, "DCGM_FI_DEV_GPU_TEMP")
            if labels["UUID"] == GPU0] == [None]
    assert sorted(labels["pod"] for labels, _ in _samples(families, "DCGM_EXP_GPU_ALLOCATION_INFO")) == ["a-0", "b-0"]


def test_virtual_gpus_repeat_the_device_series_per_pod() -> None:
    wiring, _ = _stub_wiring(kubernetes_virtual_gpus=True)
    families = _render(wiring, _mig_snapshot())
    assert [(labels["pod"], labels["vgpu"]) for labels, _ in _samples(families, "DCGM_FI_DEV_GPU_TEMP")
            if labels["UUID"] == GPU0] == [("a-0", "0"), ("b-0", "1")]


def test_virtual_gpus_read_the_process_lists_their_per_pod_values_come_from() -> None:
    wiring, _ = _stub_wiring(kubernetes_virtual_gpus=True)
    assert wiring.settings.processes.process_attribution is True
    families = _render(wiring, _mig_snapshot())
    # no process data yet: the device series alone, never the device total copied onto each pod
    assert [(labels.get("pod"), value) for labels, value in _samples(families, "DCGM_FI_DEV_FB_USED")
            if labels["UUID"] == GPU0] == [(None, 1000)]


def test_the_context_hook_publishes_the_value_for_other_builders() -> None:
    wiring, _ = _stub_wiring()
    ctx = RenderContext(snapshot=_mig_snapshot(), counters=load_counters(None), options=RenderOptions(hostname="n"))
    assert wiring.extend_context(ctx).attribution is SHARED
    assert wiring.families(ctx) == []  # a context that did not go through the hook has nothing to render


def test_process_lists_reach_the_attribution_off_the_sampling_thread() -> None:
    wiring, stub = _stub_wiring(process_attribution=True)
    wiring.start()
    try:
        first = (GpuProcess(4242, 1 << 30, gpu_instance_id=3),)
        wiring.on_snapshot(_mig_snapshot(processes=first))
        poll(lambda: stub.updates, what="the first process lists")
        assert stub.updates[0] == {GPU0: (), GPU2: first}  # the lost GPU has no list; GPU 0 has an empty one
        stub.updated.clear()
        wiring.on_snapshot(_mig_snapshot(processes=tuple(list(first))))  # equal, but re-read by the sampler
        poll(stub.updated.is_set, what="the re-read lists")
        assert len(stub.updates) == 2
        snapshot = _mig_snapshot(processes=(GpuProcess(3, 3),))
        wiring.on_snapshot(snapshot)
        poll(lambda: len(stub.updates) == 3, what="the third lists")
        wiring.on_snapshot(snapshot)  # the very same lists again (between reads): nothing to do
        wiring.on_snapshot(Snapshot(status=STATUS))  # no GPU lists at all (NVML down): nothing is known
        poll(lambda: len(stub.updates) == 4, what="the empty lists")
        stub.fail_next_update = True
        wiring.on_snapshot(_mig_snapshot(processes=(GpuProcess(1, 1),)))  # the worker survives a failure
        poll(lambda: not stub.fail_next_update, what="the failing update")
        wiring.on_snapshot(_mig_snapshot(processes=(GpuProcess(2, 2),)))
        poll(lambda: len(stub.updates) == 5, what="lists after a failed update")
        assert [update.get(GPU2) for update in stub.updates[2:]] == [(GpuProcess(3, 3),), None, (GpuProcess(2, 2),)]
    finally:
        wiring.stop()


def test_process_metrics_turn_on_process_lists(node: tuple[FakeApiServer, FakeKubelet, Path],
                                               short_tmp: Path) -> None:
    """--kubernetes-process-metrics alone serves per-process (and per-container) memory: the process
    lists are read although --kubernetes-process-attribution was left off."""
    api, kubelet, proc = node
    kubelet.set_pods([FakePod("lab", "nb", (FakeContainer("jupyter", (("nvidia.com/gpu", GPU0),)),))])
    kubelet.start()
    config = kubernetes_settings(
            with_implied_settings(Config(  # as resolved before wiring (exporter.cli.resolve)
        kubernetes=True, pod_resources_socket=str(kubelet.socket_path), kubeconfig=str(
            api.write_kubeconfig(short_tmp / "kubeconfig")), node_name="node-a", proc_root=str(proc),
        pod_resources_interval_ms=50, process_metrics=True)))  # --kubernetes-process-attribution left off
    hub = _hub()
    wiring = KubernetesWiring(config)
    wiring.install(hub)
    snapshot = Snapshot(devices=(DeviceReading(DEVICES[0], values={"DCGM_FI_DEV_GPU_TEMP": 40},
                                               processes=(GpuProcess(4242, 2 << 30),)),), status=STATUS)
    for start, _stop in hub.services(before_nvml=False):
        start()
    try:
        hub.publish_snapshot(snapshot)  # the sampler's hand-off, as the app has it

        def served() -> list[Metric] | None:
            families = _render(wiring, snapshot)
            processes = _samples(families, "DCGM_EXP_PROCESS_FB_USED")
            return families if [labels.get("pod") for labels, _ in processes] == ["nb"] else None

        families = poll(served, what="pid 4242's memory served with its pod")
    finally:
        for stop in hub.stops():
            stop()
    [(labels, value)] = _samples(families, "DCGM_EXP_PROCESS_FB_USED")
    assert (labels["pid"], labels["pod"], labels["container"], labels["namespace"], value) == (
        "4242", "nb", "jupyter", "lab", 2048.0)
    assert [(labels["pod"], value) for labels, value in _samples(families, "DCGM_EXP_CONTAINER_FB_USED")] == [
        ("nb", 2048.0)]


def _hub() -> Hub:
    return Hub(load_counters(None), SamplerSettings(1.0, None, 60.0), RenderOptions(hostname="node-a"))


def test_changes_invalidate_the_hub_it_is_installed_in() -> None:
    wiring, _ = _stub_wiring()
    wiring._changed()  # before install: nothing to invalidate, and no error
    hub = _hub()
    wiring.install(hub)
    assert not hub.cache._dirty.is_set()
    wiring._changed()
    assert hub.cache._dirty.is_set()  # the renderer re-renders at its next wake-up


def test_installing_adds_a_service_a_context_and_families() -> None:
    hub = _hub()
    wiring = KubernetesWiring(kubernetes_settings(Config(kubernetes=True)))
    wiring.install(hub)
    assert hub.families == (wiring.families,)
    assert hub.services(before_nvml=False) == [(wiring.start, wiring.stop)]
    assert hub.stops() == [wiring.stop]


def test_mig_devices_known_only_from_the_inventory_are_attributed_too() -> None:
    notebook = AttributionSnapshot(
        status=AttributionStatus(enabled=True, kubelet_up=True),
        allocation_known=True,
        allocations=MappingProxyType({GpuKey(GPU2, 5): DeviceAllocation(GPU2, 5, (
            AllocationHolder(Workload("lab", "nb", "jupyter")),), shared=False)}),
    )
    wiring, stub = _stub_wiring(notebook)
    # No per-instance readings yet (e.g. the first cycle after a MIG reconfiguration), but the sampler's
    # MIG inventory already names the instances: the kubelet's MIG-<uuid> IDs can be matched.
    snapshot = Snapshot(devices=(DeviceReading(DEVICES[2], values={"DCGM_FI_DEV_GPU_TEMP": 50}),), migs=MIGS,
                        status=STATUS)
    families = _render(wiring, snapshot)
    assert stub.snapshot_calls[0][1] == MIGS
    allocated = [(labels.get("GPU_I_ID"), labels.get("GPU_I_PROFILE"), value)
                 for labels, value in _samples(families, "DCGM_EXP_GPU_ALLOCATED")]
    assert allocated == [("3", "3g.40gb", 0.0), ("5", "1g.10gb", 1.0)]
