"""Peaks between scrapes per container: each container's highest memory and SM utilisation over the window.

First the windows themselves (injected times), then the families they become, then the whole path on
the fake NVML library, the fake kubelet, API server and /proc: a 5-second spike of one container between
two scrapes 30 s apart shows in the second scrape, for that container only.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.composition import kubernetes_settings
from exporter.config import Config
from exporter.kube.attribution import (
    AllocationHolder,
    AttributionSnapshot,
    AttributionStatus,
    ContainerMemory,
    ContainerUtilization,
    DeviceAllocation,
    KubernetesAttribution,
    Utilization,
    Workload,
)
from exporter.kube.container_peaks import ContainerPeaks, ContainerPeakValues, PeakKey, memory_samples
from exporter.kube.deviceids import GpuKey
from exporter.kube.processes import ProcessOwner, ProcessRecord
from exporter.kube.series import LabeledDevice, attribution_families, virtual_gpu_samples
from exporter.kube.wiring import KubernetesWiring
from exporter.metrics.counters import load_counters
from exporter.metrics.exposition import encode_text
from exporter.metrics.render import DEFAULT_BUILDERS, RenderContext, RenderOptions, render
from exporter.nvml.sampler import Sampler
from exporter.snapshot import GpuProcess
from simulator.fakenvml import FIXED_WALL_EPOCH, installed
from simulator.scenario import parse_scenario
from tests.nvml.test_sampler import Clock

from .helpers import DEVICES, GPU0, GPU1, MIGS, poll
from .test_attribution import FAST, Cluster, _ready, cluster

__all__ = ["cluster"]  # the fake kubelet, API server and /proc of test_attribution.py

GIB = 1 << 30
MIB = 1 << 20
TRAINER = Workload("ml", "trainer-0", "trainer")
EVAL = Workload("ml", "eval-0", "eval")
NB = Workload("lab", "nb", "jupyter")


def key(uuid: str, workload: Workload) -> PeakKey:
    return PeakKey(uuid, None, workload.namespace, workload.pod, workload.container)


def by_key(workload_of: dict[PeakKey, Workload]) -> object:
    return lambda peak_key: workload_of[peak_key]


class _EveryPod:
    """The pods that exist, for tests where none is deleted."""

    def __contains__(self, pod: object) -> bool:
        return True


EVERY_POD = _EveryPod()


def test_each_container_keeps_its_own_window_maximum() -> None:
    peaks = ContainerPeaks(30.0)
    workloads = by_key({key(GPU1, EVAL): EVAL, key(GPU1, NB): NB})
    published = []
    for now, nb_bytes in ((100.0, 2 * GIB), (112.0, 30 * GIB), (117.0, 2 * GIB), (130.0, 2 * GIB),
                          (142.0, 2 * GIB), (143.0, 2 * GIB)):
        values = peaks.observe(now, {key(GPU1, EVAL): 4.0 * GIB, key(GPU1, NB): float(nb_bytes)}, frozenset({GPU1}),
                               sm_util={}, sm_gpus=frozenset(), workload=workloads, pods=EVERY_POD)  # type: ignore[arg-type]
        published.append({k.pod: v for k, (_, v) in values.memory.items()})
    assert [item["nb"] for item in published] == [2 * GIB, 30 * GIB, 30 * GIB, 30 * GIB, 2 * GIB, 2 * GIB]
    assert {item["eval-0"] for item in published} == {4 * GIB}  # the other container's peak is its own


def test_a_container_that_left_keeps_its_peak_for_one_window_then_its_series_goes() -> None:
    peaks = ContainerPeaks(30.0)
    workloads = by_key({key(GPU0, TRAINER): TRAINER})
    observe = peaks.observe  # a spike, then the container is killed (no process any more)
    observe(100.0, {key(GPU0, TRAINER): 70.0 * GIB}, frozenset({GPU0}), sm_util={key(GPU0, TRAINER): 95.0},
            sm_gpus=frozenset({GPU0}), workload=workloads, pods=EVERY_POD)  # type: ignore[arg-type]
    after = observe(101.0, {}, frozenset({GPU0}), sm_util={}, sm_gpus=frozenset({GPU0}),
                    workload=workloads, pods=EVERY_POD)  # type: ignore[arg-type]
    assert after.memory == {key(GPU0, TRAINER): (TRAINER, 70.0 * GIB)}
    assert after.sm_util == {key(GPU0, TRAINER): (TRAINER, 95.0)}
    still = observe(129.0, {}, frozenset({GPU0}), sm_util={}, sm_gpus=frozenset({GPU0}),
                    workload=workloads, pods=EVERY_POD)  # type: ignore[arg-type]
    assert still.memory[key(GPU0, TRAINER)][1] == 70.0 * GIB
    gone = observe(130.0, {}, frozenset({GPU0}), sm_util={}, sm_gpus=frozenset({GPU0}),
                   workload=workloads, pods=EVERY_POD)  # type: ignore[arg-type]
    assert gone.memory == {} and gone.sm_util == {} and len(peaks) == 0  # bounded: nothing is kept


def test_a_gpu_whose_list_was_not_read_adds_no_sample_for_its_containers() -> None:
    peaks = ContainerPeaks(30.0)
    workloads = by_key({key(GPU0, TRAINER): TRAINER})
    peaks.observe(100.0, {key(GPU0, TRAINER): 1.0 * GIB}, frozenset({GPU0}), sm_util={}, sm_gpus=frozenset(),
                  workload=workloads, pods=EVERY_POD)  # type: ignore[arg-type]
    unread = peaks.observe(101.0, {}, frozenset({GPU1}), sm_util={}, sm_gpus=frozenset(),
                           workload=workloads, pods=EVERY_POD)  # type: ignore[arg-type]
    assert unread.memory == {}  # no claim for a GPU that was not read; its window is kept
    again = peaks.observe(102.0, {key(GPU0, TRAINER): 0.5 * GIB}, frozenset({GPU0}), sm_util={},
                          sm_gpus=frozenset(), workload=workloads, pods=EVERY_POD)  # type: ignore[arg-type]
    assert again.memory[key(GPU0, TRAINER)][1] == 1.0 * GIB


def test_a_deleted_pods_peak_goes_with_the_pod_not_one_window_later() -> None:
    """A container that exited keeps its peak for the window while its pod exists (an OOM kill); once
    the pod is deleted every series naming it goes, the peaks with the rest."""
    peaks = ContainerPeaks(60.0)
    workloads = by_key({key(GPU0, TRAINER): TRAINER, key(GPU0, EVAL): EVAL})
    both = {(TRAINER.namespace, TRAINER.pod), (EVAL.namespace, EVAL.pod)}
    peaks.observe(100.0, {key(GPU0, TRAINER): 8.0 * GIB, key(GPU0, EVAL): 1.0 * GIB}, frozenset({GPU0}), sm_util={},
                  sm_gpus=frozenset(), workload=workloads, pods=both)  # type: ignore[arg-type]
    exited = peaks.observe(105.0, {key(GPU0, EVAL): 1.0 * GIB}, frozenset({GPU0}), sm_util={}, sm_gpus=frozenset(),
                           workload=workloads, pods=both)  # type: ignore[arg-type]
    assert exited.memory[key(GPU0, TRAINER)][1] == 8.0 * GIB  # its pod remains: the spike stays visible
    only_eval = {(EVAL.namespace, EVAL.pod)}
    assert set(exited.of_pods(only_eval).memory) == {key(GPU0, EVAL)}  # deleted between reads: gone at once
    deleted = peaks.observe(110.0, {key(GPU0, EVAL): 1.0 * GIB}, frozenset({GPU0}), sm_util={}, sm_gpus=frozenset(),
                            workload=workloads, pods=only_eval)  # type: ignore[arg-type]
    assert set(deleted.memory) == {key(GPU0, EVAL)}
    assert len(peaks) == 1  # and no window is held for it


def test_memory_samples_sum_a_containers_processes_and_leave_out_processes_of_no_pod() -> None:
    owner = ProcessOwner("lab", "nb", "jupyter", "uid-nb")
    records = [ProcessRecord(GpuKey(GPU1), 300, 2 * GIB, owner), ProcessRecord(GpuKey(GPU1), 301, GIB, owner),
               ProcessRecord(GpuKey(GPU1), 302, None, owner), ProcessRecord(GpuKey(GPU1), 400, 5 * GIB, None)]
    assert memory_samples(records) == {key(GPU1, NB): 3.0 * GIB}


def _attribution(peaks: ContainerPeakValues) -> AttributionSnapshot:
    return AttributionSnapshot(
        status=AttributionStatus(enabled=True, process_attribution=True), allocation_known=False,
        container_memory=(ContainerMemory(GPU1, None, EVAL, 4 * GIB), ContainerMemory(GPU1, None, NB, 2 * GIB)),
        process_gpus=frozenset({GPU1}), container_peaks=peaks)


def test_the_peak_series_carry_the_container_series_labels_and_a_departed_container_has_one_too() -> None:
    gone = Workload("lab", "oom-0", "worker")
    peaks = ContainerPeakValues(memory=MappingProxyType({
        key(GPU1, NB): (NB, 30.0 * GIB), key(GPU1, gone): (gone, 70.0 * GIB),
        key(GPU1, EVAL): (EVAL, 3.0 * GIB)}))  # older than the current value (the join read later): the current
    device = LabeledDevice(GPU1, None, {"gpu": "1", "UUID": GPU1, "Hostname": "node-a"})
    settings = kubernetes_settings(Config()).series
    families = {family.name: family for family in attribution_families(_attribution(peaks), [device], settings)}
    current = {sample.labels["pod"]: sample for sample in families["DCGM_EXP_CONTAINER_FB_USED"].samples}
    peak = {sample.labels["pod"]: sample for sample in families["DCGM_EXP_CONTAINER_FB_USED_PEAK"].samples}
    assert {pod: sample.value for pod, sample in peak.items()} == {"eval-0": 4096, "nb": 30 * 1024,
                                                                  "oom-0": 70 * 1024}
    assert all(peak[pod].labels == current[pod].labels for pod in current)  # they divide one to one
    assert peak["oom-0"].labels == {"gpu": "1", "UUID": GPU1, "Hostname": "node-a", "container": "worker",
                                    "namespace": "lab", "pod": "oom-0"}


def test_with_virtual_gpus_each_pods_gpu_peak_is_its_own_not_its_neighbours() -> None:
    """--kubernetes-virtual-gpus gives each pod of a shared GPU its own FB_USED and GPU_UTIL series; their
    peaks are each pod's own too (the notebook spiked, eval-0 did not)."""
    holders = (AllocationHolder(EVAL, ("0",)), AllocationHolder(NB, ("3",)))
    peaks = ContainerPeakValues(memory=MappingProxyType({key(GPU1, NB): (NB, 30.0 * GIB)}),
                                sm_util=MappingProxyType({key(GPU1, NB): (NB, 80.0), key(GPU1, EVAL): (EVAL, 10.0)}))
    snapshot = dataclasses.replace(
        _attribution(peaks), allocation_known=True,
        allocations=MappingProxyType({GpuKey(GPU1): DeviceAllocation(GPU1, None, holders, shared=True)}),
        container_utilization=(ContainerUtilization(GPU1, EVAL, Utilization(sm=30.0)),
                               ContainerUtilization(GPU1, NB, Utilization(sm=5.0))),
        utilization_gpus=frozenset({GPU1}))
    device = LabeledDevice(GPU1, None, {"gpu": "1", "UUID": GPU1})
    config = kubernetes_settings(Config(kubernetes=True, kubernetes_virtual_gpus=True)).series

    def by_pod(field: str) -> dict[str, float]:
        found = virtual_gpu_samples(snapshot, device, field, config)
        assert found is not None
        return {labels["pod"]: value for labels, value in found}

    assert by_pod("DCGM_FI_DEV_FB_USED") == {"eval-0": 4096, "nb": 2048}
    assert by_pod("DCGM_EXP_FB_USED_PEAK") == {"eval-0": 4096, "nb": 30 * 1024}
    assert by_pod("DCGM_FI_DEV_GPU_UTIL") == {"eval-0": 30.0, "nb": 5.0}
    assert by_pod("DCGM_EXP_GPU_UTIL_PEAK") == {"eval-0": 30.0, "nb": 80.0}  # never below the current value
    assert virtual_gpu_samples(snapshot, device, "DCGM_EXP_POWER_USAGE_PEAK", config) is None  # the device's


SPIKE = f"""
description: GPU 1 time-sliced by eval-0 and a notebook whose worker allocates 28 GiB for 5 s
gpu_count: 2
gpu_defaults: {{model: H100-SXM5-80GB}}
gpus:
  0:
    uuid: {GPU0}
    processes: [{{pid: 100, used_memory: 10GiB, load: 40}}]
  1:
    uuid: {GPU1}
    processes:
      - {{pid: 200, used_memory: 4GiB, load: 30}}
      - {{pid: 300, used_memory: 2GiB, load: 10}}
      - {{pid: 301, used_memory: 28GiB, load: 60, from: 112s, for: 5s}}
"""


@pytest.mark.parametrize("process_attribution", [True], ids=["process-attribution"])
def test_a_five_second_spike_of_one_container_between_two_scrapes_shows_in_the_second(cluster: Cluster) -> None:
    """The sampler reads the process lists every second on the fake NVML library; the attribution joins
    them through the fake /proc to the pods the fake kubelet and API server name; scrapes at t=100 and
    t=130 (30 s window) parse the exposition as Prometheus would."""
    (cluster.proc / "301").mkdir()  # the notebook's worker process: the notebook container's cgroup
    (cluster.proc / "301" / "cgroup").write_text((cluster.proc / "300" / "cgroup").read_text())
    (cluster.proc / "301" / "stat").write_text("301 (python3) S 1 301 301 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 2107 0 0\n")
    config = dataclasses.replace(cluster.config, peak_window_ms=30_000)
    clock = Clock(start=100.0)
    attribution = KubernetesAttribution(config, watch_timeouts=FAST, clock=clock)
    wiring = KubernetesWiring(config, attribution)
    attribution.start()
    scrapes: dict[float, dict[tuple[str, str], float]] = {}
    try:
        poll(lambda: _ready(attribution), what="kubelet and API data joined")
        with installed(parse_scenario(SPIKE, "container-spike.yaml", "container-spike"), clock):
            sampler = Sampler(load_counters(None).field_specs(), 1.0, clock=clock, process_interval_s=1.0,
                              peak_window_s=30.0, wall_clock=lambda: FIXED_WALL_EPOCH + clock.now)
            assert sampler.initialise()
            while clock.now <= 130.0:
                snapshot = sampler.run_cycle()
                attribution.update_processes(
                    {reading.identity.uuid: reading.processes for reading in snapshot.devices if reading.processes},
                    {reading.identity.uuid: reading.process_utilization for reading in snapshot.devices
                     if reading.process_utilization is not None})
                if clock.now in (100.0, 115.0, 130.0):
                    scrapes[clock.now] = _scrape(wiring, snapshot)
                clock.now += 1.0
    finally:
        attribution.stop()
    first, during, second = scrapes[100.0], scrapes[115.0], scrapes[130.0]
    nb, evaluation, trainer = ("gpu1", "nb"), ("gpu1", "eval-0"), ("gpu0", "trainer-0")
    assert first[("DCGM_EXP_CONTAINER_FB_USED", *nb)] == first[("DCGM_EXP_CONTAINER_FB_USED_PEAK", *nb)] == 2048
    assert during[("DCGM_EXP_CONTAINER_FB_USED", *nb)] == 30 * 1024  # what a scrape inside the spike sees
    # The plain series show the calm after the spike; the notebook's peak shows its spike ...
    assert second[("DCGM_EXP_CONTAINER_FB_USED", *nb)] == 2048
    assert second[("DCGM_EXP_CONTAINER_FB_USED_PEAK", *nb)] == 30 * 1024
    assert second[("DCGM_EXP_CONTAINER_SM_UTIL", *nb)] < second[("DCGM_EXP_CONTAINER_SM_UTIL_PEAK", *nb)]
    # ... and only the notebook's: its neighbour on the same GPU and the other GPU's pod peak at their level.
    for name in ("DCGM_EXP_CONTAINER_FB_USED", "DCGM_EXP_CONTAINER_SM_UTIL"):
        for pod in (evaluation, trainer):
            assert second[(f"{name}_PEAK", *pod)] == second[(name, *pod)] > 0, (name, pod)
    # The GPU-level peak shows that GPU 1 spiked, not whose spike it was.
    assert second[("DCGM_EXP_FB_USED_PEAK", "gpu1", "")] > second[("DCGM_FI_DEV_FB_USED", "gpu1", "")]


def _scrape(wiring: KubernetesWiring, snapshot: object) -> dict[tuple[str, str, str], float]:
    """What Prometheus stores from one scrape: the exposition text the app renders, parsed."""
    context = wiring.extend_context(RenderContext(snapshot=snapshot, counters=load_counters(None),  # type: ignore[arg-type]
                                                  options=RenderOptions(hostname="node-a")))
    text = encode_text(render(context, (*DEFAULT_BUILDERS, wiring.families))).decode()
    return {(sample.name, f"gpu{sample.labels.get('gpu')}", sample.labels.get("pod", "")): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.labels.get("gpu") is not None}


def test_tracked_peaks_do_not_outgrow_the_containers() -> None:
    """A churn of short-lived containers: at most the ones of the last window are held."""
    peaks = ContainerPeaks(10.0)
    workloads: dict[PeakKey, Workload] = {}
    for second in range(200):
        workload = Workload("batch", f"job-{second}", "main")
        workloads[key(GPU0, workload)] = workload
        peaks.observe(float(second), {key(GPU0, workload): float(MIB)}, frozenset({GPU0}), sm_util={},
                      sm_gpus=frozenset(), workload=by_key(workloads), pods=EVERY_POD)  # type: ignore[arg-type]
    assert len(peaks) <= 11


@pytest.mark.parametrize("process_attribution", [True], ids=["process-attribution"])
def test_a_spike_leaving_the_window_re_renders_although_the_process_lists_stay_the_same(cluster: Cluster) -> None:
    clock = Clock(start=100.0)
    changes: list[float] = []
    config = dataclasses.replace(cluster.config, peak_window_ms=30_000)
    attribution = KubernetesAttribution(config, lambda: changes.append(clock.now), watch_timeouts=FAST, clock=clock)
    attribution.start()
    try:
        poll(lambda: _ready(attribution), what="kubelet and API data joined")
        steady = {GPU0: [GpuProcess(100, 10 * GIB)]}
        attribution.update_processes({GPU0: [GpuProcess(100, 70 * GIB)]})  # the spike
        clock.now = 101.0
        attribution.update_processes(steady)
        changes.clear()
        for now in (110.0, 120.0, 130.0, 131.0):  # the same list each read
            clock.now = now
            attribution.update_processes(steady)
        peak = attribution.snapshot(DEVICES, MIGS).container_peaks.memory[key(GPU0, TRAINER)][1]
    finally:
        attribution.stop()
    assert changes == [130.0]  # the one read at which the spike left the window, no other
    assert peak == 10 * GIB
