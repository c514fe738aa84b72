"""DRA attribution, pure parts: the kubelet's dynamic_resources of every proto generation, the
ResourceSlice mirror, resolution to GPU / MIG keys, sharing, coexistence with device-plugin GPUs,
the dra_* labels and the unresolved counts. The live watch and the fakes: test_dra_watch.py."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from exporter.composition import kubernetes_settings
from exporter.config import Config
from exporter.kube import dra
from exporter.kube.allocation import AllocationIndex, build_allocation_index
from exporter.kube.attribution import (
    AttributionSnapshot,
    AttributionStatus,
    WorkloadFactory,
    every_reason,
    join_attribution,
)
from exporter.kube.deviceids import DeviceCatalog, GpuKey
from exporter.kube.dra import DraContext, resolve
from exporter.kube.metadata import MetadataView
from exporter.kube.podresources import api_pb2
from exporter.kube.podresources.listing import ClaimedDevice, gpu_resource_filter, listing_from_response
from exporter.kube.resourceslices import SliceCache, SliceView, slice_from_json
from exporter.kube.series import LabeledDevice, attribution_families, workload_label_sets
from exporter.kube.settings import KubernetesSettings
from simulator.dra_devices import DRIVER, gpu_device, mig_device
from simulator.fakeapiserver import resource_slice, served
from simulator.fakekubelet import FakeClaim, FakeClaimDevice, FakeContainer, FakeKubelet, FakePod

from .helpers import DEVICES, GPU0, GPU1, GPU2, MIG_A, MIG_B, MIGS

NODE = "node-a"
POOL = NODE
ACCEPT = gpu_resource_filter(())
CATALOG = DeviceCatalog(DEVICES, MIGS)
GPU1_DEVICE = gpu_device(1, GPU1)
MIG_A_DEVICE = mig_device(2, GPU2, MIG_A, "3g.40gb", 3)
MIG_B_DEVICE = mig_device(2, GPU2, MIG_B, "1g.10gb", 5)
ELSEWHERE = "GPU-99999999-9999-9999-9999-999999999999"  # a GPU of another node
DRA_CONFIG = kubernetes_settings(Config(kubernetes=True, node_name=NODE, kubernetes_enable_dra=True))


def _slices(*devices: tuple[str, dict[str, str | int]], version: str = "v1", generation: int = 1,
            driver: str = DRIVER) -> SliceView:
    cache = SliceCache()
    cache.replace([slice_from_json(served(resource_slice(f"{NODE}-{driver}", driver, POOL, devices,
                                                         node_name=NODE, generation=generation), version))])
    return cache.view()


ALL_SLICES = _slices(GPU1_DEVICE, MIG_A_DEVICE, MIG_B_DEVICE)
CONTEXT = DraContext(frozenset({DRIVER}), ALL_SLICES)


def _claimed(device: str, *, claim: str = "train-gpu", namespace: str = "ml", driver: str = DRIVER,
             share_id: str = "", cdi: tuple[str, ...] = ()) -> ClaimedDevice:
    return ClaimedDevice(namespace, claim, driver, POOL, device, share_id, cdi)


def _response(pods: Sequence[FakePod]) -> api_pb2.ListPodResourcesResponse:
    """What the fake kubelet answers (random order, duplicated NUMA entries and all)."""
    return FakeKubelet("/nonexistent.sock", pods, seed=7).list_response()


def _claim(name: str, *devices: FakeClaimDevice, namespace: str = "ml") -> FakeClaim:
    return FakeClaim(namespace, name, devices)


def _index(pods: Sequence[FakePod], context: DraContext | None = CONTEXT) -> AllocationIndex:
    listing = listing_from_response(_response(pods), ACCEPT, dra=True)
    return build_allocation_index(listing, CATALOG, context)


def _snapshot(index: AllocationIndex, config: KubernetesSettings = DRA_CONFIG) -> AttributionSnapshot:
    parts = join_attribution(index, True, None, MetadataView(), WorkloadFactory(config.workloads))
    return AttributionSnapshot(status=AttributionStatus(enabled=True, dra_enabled=True, resourceslices_up=True),
                               allocation_known=True, allocations=parts.allocations,
                               unresolved=every_reason(parts.unresolved))


GPU1_CLAIM = FakeClaimDevice(DRIVER, POOL, GPU1_DEVICE[0], cdi_devices=("k8s.gpu.nvidia.com/claim=abc-gpu-1",))
MIG_A_CLAIM = FakeClaimDevice(DRIVER, POOL, MIG_A_DEVICE[0])


# -- the kubelet's answer, by proto generation --------------------------------------------------------

def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2), written by hand: the 1.27 proto had a field
    (``DynamicResource.class_name = 1``) our stubs no longer know."""
    size, length = bytearray(), len(payload)
    while True:
        byte, length = length & 0x7F, length >> 7
        size.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes([number << 3 | 2]) + bytes(size) + payload


def _kubelet_127_response() -> api_pb2.ListPodResourcesResponse:
    """A 1.27-1.30 kubelet's List answer: a claim with class_name (field 1, tombstoned since 1.31) and
    CDI device names only; one CDI name carries a GPU UUID, the NVIDIA driver's form carries none."""
    resolvable = _field(1, _field(1, f"nvidia.com/gpu={GPU1}".encode()))
    opaque = _field(1, _field(1, b"k8s.gpu.nvidia.com/claim=0f4c-gpu-0"))
    claim = (_field(1, b"gpu.nvidia.com") + _field(2, b"train-gpu") + _field(3, b"ml")
             + _field(4, resolvable) + _field(4, opaque))
    container = _field(1, b"trainer") + _field(5, claim)
    pod = _field(1, b"trainer-0") + _field(2, b"ml") + _field(3, container)
    return api_pb2.ListPodResourcesResponse.FromString(_field(1, pod))


def test_a_127_kubelet_answer_resolves_through_a_cdi_uuid_or_counts_as_cdi_only() -> None:
    listing = listing_from_response(_kubelet_127_response(), ACCEPT, dra=True)
    (claims,) = [container.claims for pod in listing.pods for container in pod.containers]
    assert {(claim.claim_name, claim.driver, claim.device, claim.cdi_devices) for claim in claims} == {
        ("train-gpu", "", "", (f"nvidia.com/gpu={GPU1}",)),
        ("train-gpu", "", "", ("k8s.gpu.nvidia.com/claim=0f4c-gpu-0",)),
    }
    index = build_allocation_index(listing, CATALOG, CONTEXT)
    held = index.get(GpuKey(GPU1))
    assert held is not None and [h.container.pod for h in held.holders] == ["trainer-0"]
    assert index.unresolved_by_reason() == {dra.CDI_ONLY: 1}
    assert index.get(GpuKey(GPU0)) is None


def test_a_135_kubelet_answer_keeps_share_id_and_two_claims_sharing_a_device_share_the_gpu() -> None:
    pods = [
        FakePod("ml", "a", (FakeContainer("main", claims=(_claim(
            "share-a", FakeClaimDevice(DRIVER, POOL, GPU1_DEVICE[0], share_id="7f0c")),)),)),
        FakePod("ml", "b", (FakeContainer("main", claims=(_claim(
            "share-b", FakeClaimDevice(DRIVER, POOL, GPU1_DEVICE[0], share_id="81aa")),)),)),
    ]
    listing = listing_from_response(_response(pods), ACCEPT, dra=True)
    assert sorted(claim.share_id for pod in listing.pods for c in pod.containers for claim in c.claims) == [
        "7f0c", "81aa"]
    snapshot = _snapshot(build_allocation_index(listing, CATALOG, CONTEXT))
    allocation = snapshot.allocation(GPU1)
    assert allocation is not None and allocation.shared
    assert [(h.workload.pod, h.claims[0].name, h.claims[0].share_id) for h in allocation.holders] == [
        ("a", "share-a", "7f0c"), ("b", "share-b", "81aa")]


def test_share_id_is_empty_when_the_kubelet_does_not_send_it_even_as_an_empty_string() -> None:
    pods = [FakePod("ml", "a", (FakeContainer("main", claims=(_claim(
        "c", FakeClaimDevice(DRIVER, POOL, "gpu-1", share_id="")),)),))]
    response = _response(pods)
    (resource,) = response.pod_resources[0].containers[0].dynamic_resources[0].claim_resources
    assert resource.HasField("share_id")  # present, though empty: still no share
    (claim,) = listing_from_response(response, ACCEPT, dra=True).pods[0].containers[0].claims
    assert claim.share_id == ""


def test_without_dra_the_claims_are_not_read_and_a_dra_only_pod_is_not_listed() -> None:
    pods = [FakePod("ml", "trainer-0", (FakeContainer("trainer", claims=(_claim("train-gpu", GPU1_CLAIM),)),))]
    assert listing_from_response(_response(pods), ACCEPT, dra=False).pods == ()
    assert listing_from_response(_response(pods), ACCEPT, dra=True).pods[0].containers[0].claims


# -- resolution -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("claimed", "context", "expected"), [
    (_claimed("gpu-1"), CONTEXT, dra.DraResolution(GpuKey(GPU1))),
    (_claimed(MIG_A_DEVICE[0]), CONTEXT, dra.DraResolution(GpuKey(GPU2, 3), mig_profile="3g.40gb",
                                                            mig_device_uuid=MIG_A)),
    (_claimed("gpu-7"), CONTEXT, dra.DraResolution(reason=dra.SLICE_MISSING)),
    (_claimed("gpu-1"), DraContext(frozenset({DRIVER}), SliceView()),
     dra.DraResolution(reason=dra.SLICES_UNAVAILABLE)),
    (_claimed("gpu-9"), DraContext(frozenset({DRIVER}), _slices(("gpu-9", {"type": "gpu"}))),
     dra.DraResolution(reason=dra.NO_UUID)),
    (_claimed("gpu-9"), DraContext(frozenset({DRIVER}), _slices(gpu_device(9, ELSEWHERE))),
     dra.DraResolution(reason=dra.NOT_ON_NODE)),
    # A GPU of this node published by a driver that is not configured: the user should add it.
    (_claimed("gpu-1", driver="gpu.example.com"),
     DraContext(frozenset({DRIVER}), _slices(GPU1_DEVICE, driver="gpu.example.com")),
     dra.DraResolution(reason=dra.DRIVER_UNKNOWN)),
    # A network card's claim: not a GPU, neither attributed nor counted.
    (_claimed("eth-0", driver="sriov.example.com"), CONTEXT, None),
    (ClaimedDevice("ml", "c", "", "", "", "", ("k8s.gpu.nvidia.com/claim=1-gpu-0",)), CONTEXT,
     dra.DraResolution(reason=dra.CDI_ONLY)),
    (ClaimedDevice("ml", "c", "", "", "", "", (f"nvidia.com/gpu={MIG_B}",)), CONTEXT,
     dra.DraResolution(GpuKey(GPU2, 5), mig_device_uuid=MIG_B)),
    (ClaimedDevice("ml", "c", "", "", "", "", ("example.com/nic=eth0",)), CONTEXT, None),
    (ClaimedDevice("ml", "c", "", "", "", "", ("example.com/migration=a",)), CONTEXT, None),
    (ClaimedDevice("ml", "c", "", "", "", "", ("nvidia.com/gpu=0",)), CONTEXT, dra.DraResolution(reason=dra.CDI_ONLY)),
], ids=["whole-gpu", "mig", "slice-missing", "slices-unavailable", "no-uuid", "not-on-node", "driver-unknown",
        "other-driver", "cdi-only", "cdi-uuid", "cdi-other", "cdi-not-a-gpu", "cdi-gpu-index"])
def test_resolution(claimed: ClaimedDevice, context: DraContext, expected: dra.DraResolution | None) -> None:
    assert resolve(claimed, context, CATALOG) == expected


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_slices_of_every_served_version_are_read_alike(version: str) -> None:
    view = _slices(GPU1_DEVICE, MIG_A_DEVICE, version=version)
    mig = view.get(DRIVER, POOL, MIG_A_DEVICE[0])
    assert mig is not None and (mig.type, mig.uuid, mig.parent_uuid, mig.profile) == ("mig", MIG_A, GPU2, "3g.40gb")
    gpu = view.get(DRIVER, POOL, "gpu-1")
    assert gpu is not None and (gpu.type, gpu.uuid) == ("gpu", GPU1)


def test_only_the_newest_generation_of_a_pool_names_devices() -> None:
    cache = SliceCache()
    old = resource_slice("old", DRIVER, POOL, [gpu_device(1, GPU0)], node_name=NODE, generation=1)
    new = resource_slice("new", DRIVER, POOL, [GPU1_DEVICE], node_name=NODE, generation=2)
    cache.replace([slice_from_json(old), slice_from_json(new)])
    published = cache.view().get(DRIVER, POOL, "gpu-1")
    assert published is not None and published.uuid == GPU1
    assert cache.delete("new")
    published = cache.view().get(DRIVER, POOL, "gpu-1")
    assert published is not None and published.uuid == GPU0


def test_a_malformed_slice_is_rejected_with_its_name() -> None:
    broken = resource_slice("broken", DRIVER, POOL, [GPU1_DEVICE], node_name=NODE)
    broken["spec"]["pool"]["generation"] = "two"
    with pytest.raises(ValueError, match=r"ResourceSlice broken: spec\.pool\.generation"):
        slice_from_json(broken)


# -- the node as attribution sees it ----------------------------------------------------------------------

MIXED = [
    FakePod("ml", "plugin-0", (FakeContainer("main", (("nvidia.com/gpu", GPU0),)),)),
    FakePod("ml", "trainer-0", (FakeContainer("trainer", claims=(_claim("train-gpu", GPU1_CLAIM),)),)),
    FakePod("lab", "nb", (FakeContainer("jupyter", claims=(_claim("nb-mig", MIG_A_CLAIM, namespace="lab"),)),)),
]
GPU0_LABELS = LabeledDevice(GPU0, None, {"gpu": "0", "UUID": GPU0})
GPU1_LABELS = LabeledDevice(GPU1, None, {"gpu": "1", "UUID": GPU1})
MIG_A_LABELS = LabeledDevice(GPU2, 3, {"gpu": "2", "UUID": GPU2, "GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": "3"})
MIG_B_LABELS = LabeledDevice(GPU2, 5, {"gpu": "2", "UUID": GPU2, "GPU_I_PROFILE": "1g.10gb", "GPU_I_ID": "5"})


def test_device_plugin_and_dra_gpus_on_one_node_carry_their_pods_and_the_dra_labels() -> None:
    snapshot = _snapshot(_index(MIXED))
    assert workload_label_sets(snapshot, GPU0_LABELS, DRA_CONFIG.series) == [
        {"container": "main", "namespace": "ml", "pod": "plugin-0"}]
    assert workload_label_sets(snapshot, GPU1_LABELS, DRA_CONFIG.series) == [
        {"container": "trainer", "namespace": "ml", "pod": "trainer-0", "dra_claim_name": "train-gpu",
         "dra_claim_namespace": "ml", "dra_driver_name": DRIVER, "dra_pool_name": POOL, "dra_device_name": "gpu-1"}]
    assert workload_label_sets(snapshot, MIG_A_LABELS, DRA_CONFIG.series) == [
        {"container": "jupyter", "namespace": "lab", "pod": "nb", "dra_claim_name": "nb-mig",
         "dra_claim_namespace": "lab", "dra_driver_name": DRIVER, "dra_pool_name": POOL,
         "dra_device_name": MIG_A_DEVICE[0], "dra_mig_profile": "3g.40gb", "dra_mig_device_uuid": MIG_A}]
    assert workload_label_sets(snapshot, MIG_B_LABELS, DRA_CONFIG.series) == [{}]
    allocated = {tuple(sorted(sample.labels.items())): sample.value
                 for family in attribution_families(snapshot, [GPU0_LABELS, GPU1_LABELS, MIG_A_LABELS, MIG_B_LABELS],
                                                    DRA_CONFIG.series)
                 if family.name == "DCGM_EXP_GPU_ALLOCATED" for sample in family.samples}
    assert sorted(allocated.values()) == [0.0, 1.0, 1.0, 1.0]  # every DRA device counts as allocated


def test_a_claim_shared_by_two_pods_follows_the_time_slicing_rules() -> None:
    shared = _claim("shared-gpu", GPU1_CLAIM)
    pods = [FakePod("ml", "a", (FakeContainer("main", claims=(shared,)),)),
            FakePod("ml", "b", (FakeContainer("main", claims=(shared,)),))]
    index = _index(pods)
    snapshot = _snapshot(index)
    allocation = snapshot.allocation(GPU1)
    assert allocation is not None and allocation.shared and [h.workload.pod for h in allocation.holders] == ["a", "b"]
    # Default mode: the device's own readings belong to no single pod.
    assert workload_label_sets(snapshot, GPU1_LABELS, DRA_CONFIG.series) == [{}]
    info = [sample.labels for family in attribution_families(snapshot, [GPU1_LABELS], DRA_CONFIG.series)
            if family.name == "DCGM_EXP_GPU_ALLOCATION_INFO" for sample in family.samples]
    assert [(labels["pod"], labels["dra_claim_name"]) for labels in info] == [("a", "shared-gpu"), ("b", "shared-gpu")]
    # Virtual-GPU mode: one set per sharing pod, as for time-slicing replicas.
    virtual = kubernetes_settings(
            Config(kubernetes=True, kubernetes_enable_dra=True, kubernetes_virtual_gpus=True))
    assert [labels["pod"] for labels in workload_label_sets(snapshot, GPU1_LABELS, virtual.series)] == ["a", "b"]


def test_an_unresolvable_device_leaves_its_gpu_unattributed_and_is_counted_once_per_device() -> None:
    missing = FakeClaimDevice(DRIVER, POOL, "gpu-7")
    shared = _claim("lost", missing)
    pods = [FakePod("ml", "a", (FakeContainer("main", claims=(shared,)),)),
            FakePod("ml", "b", (FakeContainer("main", claims=(shared,)),)),
            *MIXED]
    snapshot = _snapshot(_index(pods))
    assert snapshot.unresolved[dra.SLICE_MISSING] == 1  # one device, though two pods hold it
    unresolved = {sample.labels["reason"]: sample.value
                  for family in attribution_families(snapshot, [GPU1_LABELS], DRA_CONFIG.series)
                  if family.name == "gpu_pod_exporter_unresolved_devices" for sample in family.samples}
    assert unresolved == {reason: (1.0 if reason == dra.SLICE_MISSING else 0.0) for reason in dra.REASONS}
    assert snapshot.allocation(GPU1) is not None  # the others are attributed regardless


def test_dra_labels_and_counts_stay_off_without_the_flag() -> None:
    snapshot = _snapshot(_index(MIXED))
    plain = kubernetes_settings(Config(kubernetes=True))
    assert "dra_claim_name" not in workload_label_sets(snapshot, GPU1_LABELS, plain.series)[0]
    no_dra = AttributionSnapshot(status=AttributionStatus(enabled=True), allocation_known=True,
                                 allocations=snapshot.allocations)
    names = {family.name for family in attribution_families(no_dra, [GPU1_LABELS], plain.series)}
    assert "gpu_pod_exporter_unresolved_devices" not in names
    assert "gpu_pod_exporter_dra_resourceslices_up" not in names
