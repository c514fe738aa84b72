"""Workload label sets and attribution families, from hand-built attribution snapshots."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import pytest
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from exporter.composition import kubernetes_settings
from exporter.config import Config
from exporter.kube.attribution import (
    AllocationHolder,
    AttributionSnapshot,
    AttributionStatus,
    ContainerMemory,
    ContainerUtilization,
    DeviceAllocation,
    ProcessMemory,
    Utilization,
    Workload,
)
from exporter.kube.deviceids import GpuKey
from exporter.kube.series import LabeledDevice, attribution_families, virtual_gpu_samples, workload_label_sets
from exporter.kube.settings import SeriesSettings

from .helpers import GPU0, GPU1, GPU2

TRAINER = Workload(
    "ml",
    "trainer-0",
    "trainer",
    pod_uid="uid-trainer",
    team="vision",
    pod_labels=(("app", "trainer"), ("tier", "gpu")),
)
EVAL = Workload("ml", "eval-0", "eval", pod_uid="uid-eval")
NOTEBOOK = Workload("research", "nb", "jupyter", team="research")


def _base(index: int, uuid: str, mig: tuple[str, int] | None = None) -> dict[str, str]:
    labels = {
        "gpu": str(index),
        "UUID": uuid,
        "pci_bus_id": f"00000000:{index + 16:02X}:00.0",
        "device": f"nvidia{index}",
        "modelName": "NVIDIA H100 80GB HBM3",
    }
    if mig:
        labels |= {"GPU_I_PROFILE": mig[0], "GPU_I_ID": str(mig[1])}
    return labels | {"Hostname": "node-a"}


DEVICE0 = LabeledDevice(GPU0, None, _base(0, GPU0))
DEVICE1 = LabeledDevice(GPU1, None, _base(1, GPU1))
MIG3 = LabeledDevice(GPU2, 3, _base(2, GPU2, ("3g.40gb", 3)))
MIG5 = LabeledDevice(GPU2, 5, _base(2, GPU2, ("1g.10gb", 5)))


def _snapshot(**kwargs: object) -> AttributionSnapshot:
    allocations = {
        GpuKey(GPU0): DeviceAllocation(GPU0, None, (AllocationHolder(TRAINER),), shared=False),
        GpuKey(GPU1): DeviceAllocation(
            GPU1, None, (AllocationHolder(EVAL, ("0", "4")), AllocationHolder(NOTEBOOK, ("2",))), shared=True
        ),
        GpuKey(GPU2, 3): DeviceAllocation(GPU2, 3, (AllocationHolder(NOTEBOOK),), shared=False),
    }
    values: dict[str, object] = {
        "status": AttributionStatus(
            enabled=True,
            kubelet_up=True,
            kubelet_last_success=1700000000.5,
            api_up=False,
            api_error="down",
            api_last_success=1699999000.0,
            api_requests=((("namespaces", "list", "200"), 1), (("pods", "list", "200"), 3),
                          (("pods", "watch", "200"), 2), (("pods", "watch", "<error>"), 4)),
            api_relists=((("namespaces", "initial"), 1), (("pods", "expired"), 2), (("pods", "initial"), 1)),
            api_bookmarks=(("namespaces", 3), ("pods", 5)),
            pods_known=7,
            process_attribution=True,
        ),
        "allocation_known": True,
        "allocations": MappingProxyType(allocations),
    }
    values.update(kwargs)
    return AttributionSnapshot(**values)  # type: ignore[arg-type]


def _config(**kwargs: object) -> SeriesSettings:
    return kubernetes_settings(Config(kubernetes=True, **kwargs)).series  # type: ignore[arg-type]


def test_exclusive_gpu_gets_workload_labels_in_order() -> None:
    sets = workload_label_sets(_snapshot(), DEVICE0, _config())
    assert sets == [
        {
            "container": "trainer",
            "namespace": "ml",
            "pod": "trainer-0",
            "team": "vision",
            "app": "trainer",
            "tier": "gpu",
        }
    ]
    assert list(sets[0]) == ["container", "namespace", "pod", "team", "app", "tier"]
    with_uid = workload_label_sets(_snapshot(), DEVICE0, _config(kubernetes_enable_pod_uid=True))
    assert list(with_uid[0]) == ["container", "namespace", "pod", "pod_uid", "team", "app", "tier"]
    assert with_uid[0]["pod_uid"] == "uid-trainer"


def test_unallocated_and_unknown_get_no_workload_labels() -> None:
    unallocated = LabeledDevice("GPU-99999999-9999-9999-9999-999999999999", None, {"gpu": "9"})
    assert workload_label_sets(_snapshot(), unallocated, _config()) == [{}]
    assert workload_label_sets(AttributionSnapshot(), DEVICE0, _config()) == [{}]


def test_shared_gpu_default_mode_picks_no_pod() -> None:
    assert workload_label_sets(_snapshot(), DEVICE1, _config()) == [{}]


def test_shared_gpu_virtual_mode_repeats_per_container_with_vgpu() -> None:
    sets = workload_label_sets(_snapshot(), DEVICE1, _config(kubernetes_virtual_gpus=True))
    assert sets == [
        {"container": "eval", "namespace": "ml", "pod": "eval-0", "vgpu": "0"},
        {"container": "jupyter", "namespace": "research", "pod": "nb", "team": "research", "vgpu": "2"},
    ]


def test_mig_instances_are_attributed_separately() -> None:
    assert workload_label_sets(_snapshot(), MIG3, _config()) == [
        {"container": "jupyter", "namespace": "research", "pod": "nb", "team": "research"}
    ]
    assert workload_label_sets(_snapshot(), MIG5, _config()) == [{}]
    parent = LabeledDevice(GPU2, None, _base(2, GPU2))
    assert workload_label_sets(_snapshot(), parent, _config()) == [{}]


def test_a_base_label_is_never_overridden() -> None:
    clashing = LabeledDevice(GPU0, None, {"gpu": "0", "UUID": GPU0, "tier": "from-csv"})
    assert "tier" not in workload_label_sets(_snapshot(), clashing, _config())[0]


@pytest.mark.parametrize(
    "value",
    [
        'with "quotes"',
        "back\\slash",
        "new\nline",
        "ünïcødé ☃ 🚀",
        "x" * 10_240,
    ],
)
def test_label_values_pass_through_unmodified(value: str) -> None:
    workload = Workload(value, value, value, pod_uid=value, team=value)
    snapshot = _snapshot(
        allocations=MappingProxyType(
            {GpuKey(GPU0): DeviceAllocation(GPU0, None, (AllocationHolder(workload),), shared=False)}
        )
    )
    sets = workload_label_sets(snapshot, DEVICE0, _config(kubernetes_enable_pod_uid=True))
    assert sets == [{"container": value, "namespace": value, "pod": value, "pod_uid": value, "team": value}]
    # ...and survive a round trip through a Prometheus text encoder and parser.
    parsed = _round_trip(attribution_families(snapshot, [DEVICE0], _config()))
    info = parsed["DCGM_EXP_GPU_ALLOCATION_INFO"]
    assert [sample.labels["pod"] for sample in info] == [value]


def _samples(families: list[Metric]) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {family.name: [(dict(s.labels), s.value) for s in family.samples] for family in families}


def _round_trip(families: list[Metric]) -> Mapping[str, list]:  # type: ignore[type-arg]
    class Collector:
        def collect(self) -> list[Metric]:
            return families

    registry = CollectorRegistry()
    registry.register(Collector())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def test_allocation_families_list_every_sharing_pod() -> None:
    families = attribution_families(_snapshot(), [DEVICE0, DEVICE1, MIG3, MIG5], _config())
    assert {family.type for family in families if family.name.startswith("DCGM_")} == {"gauge"}
    samples = _samples(families)
    assert [
        (labels["UUID"], labels.get("GPU_I_ID"), value) for labels, value in samples["DCGM_EXP_GPU_ALLOCATED"]
    ] == [(GPU0, None, 1.0), (GPU1, None, 1.0), (GPU2, "3", 1.0), (GPU2, "5", 0.0)]
    info = samples["DCGM_EXP_GPU_ALLOCATION_INFO"]
    assert [(labels["UUID"], labels["pod"], labels.get("vgpu"), value) for labels, value in info] == [
        (GPU0, "trainer-0", None, 1.0),
        (GPU1, "eval-0", "0", 1.0),
        (GPU1, "nb", "2", 1.0),
        (GPU2, "nb", None, 1.0),
    ]
    assert list(info[0][0]) == [*DEVICE0.labels, "container", "namespace", "pod", "team", "app", "tier"]


def test_allocation_families_are_left_out_while_allocation_is_unknown() -> None:
    names = {
        family.name
        for family in attribution_families(_snapshot(allocation_known=False), [DEVICE0], _config())
    }
    assert "DCGM_EXP_GPU_ALLOCATED" not in names and "gpu_pod_exporter_kubelet_up" in names


def test_memory_families() -> None:
    snapshot = _snapshot(
        container_memory=(
            ContainerMemory(GPU1, None, EVAL, 3 * 1024 * 1024 * 1024),
            ContainerMemory(GPU1, None, NOTEBOOK, 512 * 1024 * 1024),
            ContainerMemory(GPU2, 3, NOTEBOOK, 0),
        ),
        processes=(
            ProcessMemory(GPU1, None, 4242, 3 * 1024 * 1024 * 1024, EVAL),
            ProcessMemory(GPU1, None, 4243, 512 * 1024 * 1024, NOTEBOOK),
            ProcessMemory(GPU1, None, 999, 256 * 1024 * 1024, None),
            ProcessMemory(GPU1, None, 1000, None, None),
        ),
        unattributed_bytes=MappingProxyType({GpuKey(GPU1): 256 * 1024 * 1024}),
        process_gpus=frozenset({GPU1, GPU2}),
    )
    without = _samples(attribution_families(snapshot, [DEVICE0, DEVICE1, MIG3], _config()))
    assert "DCGM_EXP_PROCESS_FB_USED" not in without  # per-process series are opt-in
    assert [
        (labels["UUID"], labels["pod"], value) for labels, value in without["DCGM_EXP_CONTAINER_FB_USED"]
    ] == [(GPU1, "eval-0", 3072.0), (GPU1, "nb", 512.0), (GPU2, "nb", 0.0)]
    assert [(labels["UUID"], value) for labels, value in without["DCGM_EXP_UNATTRIBUTED_FB_USED"]] == [
        (GPU1, 256.0),
        (GPU2, 0.0),
    ]  # GPU0's processes were not read: no memory series for it

    with_processes = _samples(attribution_families(snapshot, [DEVICE1], _config(process_metrics=True)))
    process = with_processes["DCGM_EXP_PROCESS_FB_USED"]
    assert [(labels["pid"], labels.get("pod"), value) for labels, value in process] == [
        ("4242", "eval-0", 3072.0),
        ("4243", "nb", 512.0),
        ("999", None, 256.0),
    ]  # pid 1000: memory unknown
    assert list(process[0][0]) == [*DEVICE1.labels, "pid", "container", "namespace", "pod"]


def test_self_metrics() -> None:
    samples = _samples(attribution_families(_snapshot(), [], _config()))
    assert samples["gpu_pod_exporter_kubelet_up"] == [({}, 1.0)]
    assert samples["gpu_pod_exporter_kube_api_up"] == [({}, 0.0)]
    assert samples["gpu_pod_exporter_kubelet_last_success_timestamp_seconds"] == [({}, 1700000000.5)]
    assert samples["gpu_pod_exporter_kube_api_last_success_timestamp_seconds"] == [({}, 1699999000.0)]
    assert samples["gpu_pod_exporter_kubernetes_pods"] == [({}, 7.0)]
    assert samples["gpu_pod_exporter_kube_api_requests"] == [  # a counter family: samples carry _total
        ({"resource": "namespaces", "verb": "list", "code": "200"}, 1.0),
        ({"resource": "pods", "verb": "list", "code": "200"}, 3.0),
        ({"resource": "pods", "verb": "watch", "code": "200"}, 2.0),
        ({"resource": "pods", "verb": "watch", "code": "<error>"}, 4.0),
    ]
    assert samples["gpu_pod_exporter_kube_api_relists"] == [
        ({"resource": "namespaces", "reason": "initial"}, 1.0),
        ({"resource": "pods", "reason": "expired"}, 2.0),
        ({"resource": "pods", "reason": "initial"}, 1.0),
    ]
    assert samples["gpu_pod_exporter_kube_api_bookmarks"] == [({"resource": "namespaces"}, 3.0),
                                                               ({"resource": "pods"}, 5.0)]
    parsed = _round_trip(attribution_families(_snapshot(), [], _config()))  # counters as a client reads them
    assert [s.value for s in parsed["gpu_pod_exporter_kube_api_relists"]] == [1.0, 2.0, 1.0]
    assert [(s.name, s.value) for s in parsed["gpu_pod_exporter_kube_api_bookmarks"]] == [
        ("gpu_pod_exporter_kube_api_bookmarks_total", 3.0), ("gpu_pod_exporter_kube_api_bookmarks_total", 5.0)]


def test_nothing_when_kubernetes_mode_is_off() -> None:
    assert attribution_families(AttributionSnapshot(), [DEVICE0], kubernetes_settings(Config()).series) == []


def test_families_encode_and_parse_with_standard_tooling() -> None:
    parsed = _round_trip(attribution_families(_snapshot(), [DEVICE0, DEVICE1, MIG3, MIG5], _config()))
    assert len(parsed["DCGM_EXP_GPU_ALLOCATION_INFO"]) == 4


# --- --kubernetes-virtual-gpus: each pod's own GPU_UTIL and FB_USED (dcgm-exporter pull request 594) -----

SHARER = Workload("ml", "batch-0", "batch")


def _three_pods_share_gpu1(**kwargs: object) -> AttributionSnapshot:
    allocation = DeviceAllocation(GPU1, None, (AllocationHolder(EVAL, ("0",)), AllocationHolder(NOTEBOOK, ("1",)),
                                               AllocationHolder(SHARER, ("2",))), shared=True)
    values: dict[str, object] = {
        "status": AttributionStatus(enabled=True, kubelet_up=True),
        "allocation_known": True,
        "allocations": MappingProxyType({GpuKey(GPU1): allocation}),
        "container_memory": (ContainerMemory(GPU1, None, EVAL, 10000 << 20), ContainerMemory(GPU1, None, NOTEBOOK,
                                                                                               30000 << 20),
                             ContainerMemory(GPU1, None, SHARER, 0)),
        "process_gpus": frozenset({GPU1}),
        "container_utilization": (ContainerUtilization(GPU1, EVAL, Utilization(sm=35.0)),
                                  ContainerUtilization(GPU1, NOTEBOOK, Utilization(sm=5.0))),
        "utilization_gpus": frozenset({GPU1}),
    }
    values.update(kwargs)
    return AttributionSnapshot(**values)  # type: ignore[arg-type]


def test_virtual_gpus_give_each_pod_its_own_memory_and_utilization() -> None:
    config = _config(kubernetes_virtual_gpus=True)
    fb = virtual_gpu_samples(_three_pods_share_gpu1(), DEVICE1, "DCGM_FI_DEV_FB_USED", config)
    util = virtual_gpu_samples(_three_pods_share_gpu1(), DEVICE1, "DCGM_FI_DEV_GPU_UTIL", config)
    assert fb is not None and util is not None
    assert [(labels["pod"], labels["vgpu"], value) for labels, value in fb] == [
        ("eval-0", "0", 10000.0), ("nb", "1", 30000.0), ("batch-0", "2", 0.0)]
    assert [(labels["pod"], value) for labels, value in util] == [("eval-0", 35.0), ("nb", 5.0), ("batch-0", 0.0)]
    # every other field keeps dcgm-exporter's per-pod copies; off, nothing changes
    assert virtual_gpu_samples(_three_pods_share_gpu1(), DEVICE1, "DCGM_FI_DEV_GPU_TEMP", config) is None
    assert virtual_gpu_samples(_three_pods_share_gpu1(), DEVICE1, "DCGM_FI_DEV_FB_USED", _config()) is None


def test_virtual_gpus_per_pod_series_always_carry_pod_uid() -> None:
    """dcgm-exporter sets pod_uid on each pod's own GPU_UTIL / FB_USED series (pull request 594) whether or not
    --kubernetes-enable-pod-uid is set; the per-pod copies of other fields follow the flag as before."""
    config = _config(kubernetes_virtual_gpus=True)
    for field in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL"):
        found = virtual_gpu_samples(_three_pods_share_gpu1(), DEVICE1, field, config)
        assert found is not None
        assert [(labels["pod"], labels.get("pod_uid")) for labels, _ in found] == [
            ("eval-0", "uid-eval"), ("nb", None), ("batch-0", None)]  # a pod without a known UID: left out
        assert list(found[0][0]) == ["container", "namespace", "pod", "pod_uid", "vgpu"]
    copies = workload_label_sets(_three_pods_share_gpu1(), DEVICE1, config)
    assert all("pod_uid" not in labels for labels in copies)


def test_virtual_gpus_never_copy_the_device_total_while_process_data_is_unknown() -> None:
    unknown = _three_pods_share_gpu1(process_gpus=frozenset(), utilization_gpus=frozenset())
    config = _config(kubernetes_virtual_gpus=True)
    assert virtual_gpu_samples(unknown, DEVICE1, "DCGM_FI_DEV_FB_USED", config) == []
    assert virtual_gpu_samples(unknown, DEVICE1, "DCGM_FI_DEV_GPU_UTIL", config) == []
