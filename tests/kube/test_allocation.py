"""Grouping the canonical listing by GPU / MIG instance: every holder kept, sharing detected."""

from __future__ import annotations

from exporter.kube.allocation import ContainerRef, DeviceHolder, build_allocation_index
from exporter.kube.deviceids import DeviceCatalog, GpuKey
from exporter.kube.podresources.listing import (
    AssignedDevice,
    ContainerAssignment,
    PodAssignment,
    PodResourcesListing,
)

from .helpers import DEVICES, GPU0, GPU1, GPU2, MIG_A, MIG_B, MIGS

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"


def _listing(*pods: tuple[str, str, list[tuple[str, list[str]]]], resource: str = GPU) -> PodResourcesListing:
    return PodResourcesListing(
        pods=tuple(
            PodAssignment(
                namespace,
                name,
                tuple(
                    ContainerAssignment(
                        container, tuple(sorted(AssignedDevice(resource, device) for device in ids))
                    )
                    for container, ids in containers
                ),
            )
            for namespace, name, containers in pods
        )
    )


def test_exclusive_gpus() -> None:
    index = build_allocation_index(
        _listing(("ml", "trainer", [("main", [GPU0, GPU1])])), DeviceCatalog(DEVICES, MIGS)
    )
    for uuid in (GPU0, GPU1):
        allocation = index.get(GpuKey(uuid))
        assert allocation is not None
        assert allocation.holders == (DeviceHolder(ContainerRef("ml", "trainer", "main"), ()),)
        assert not allocation.shared
    assert index.get(GpuKey(GPU2)) is None


def test_time_sliced_gpu_keeps_every_sharing_container() -> None:
    index = build_allocation_index(
        _listing(
            ("b", "pod-b", [("worker", [f"{GPU0}::3"])]),
            ("a", "pod-a", [("worker", [f"{GPU0}::0", f"{GPU0}::10"])]),
            resource=SHARED,
        ),
        DeviceCatalog(DEVICES, MIGS),
    )
    allocation = index.get(GpuKey(GPU0))
    assert allocation is not None
    assert allocation.shared
    assert [(h.container.pod, h.replica_ids) for h in allocation.holders] == [
        ("pod-a", ("0", "10")),  # numeric order, one holder despite two replicas
        ("pod-b", ("3",)),
    ]


def test_one_container_holding_replicas_is_the_only_holder_not_a_share() -> None:
    index = build_allocation_index(
        _listing(("a", "p", [("c", [f"{GPU1}::1", f"{GPU1}::4"])])), DeviceCatalog(DEVICES, MIGS)
    )
    allocation = index.get(GpuKey(GPU1))
    assert allocation is not None and not allocation.shared and allocation.replicated
    assert allocation.holders[0].replica_ids == ("1", "4")


def test_two_containers_with_the_same_plain_id_are_shared() -> None:
    index = build_allocation_index(
        _listing(("a", "p", [("c1", [GPU1]), ("c2", [GPU1])])), DeviceCatalog(DEVICES, MIGS)
    )
    allocation = index.get(GpuKey(GPU1))
    assert allocation is not None and allocation.shared and len(allocation.holders) == 2


def test_mig_instances_in_all_id_forms() -> None:
    index = build_allocation_index(
        _listing(
            ("ml", "modern", [("c", [MIG_A])]),
            ("ml", "legacy", [("c", [f"MIG-{GPU2}/5/0"])]),
            resource="nvidia.com/mig-3g.40gb",
        ),
        DeviceCatalog(DEVICES, MIGS),
    )
    a, b = index.get(GpuKey(GPU2, 3)), index.get(GpuKey(GPU2, 5))
    assert a is not None and [h.container.pod for h in a.holders] == ["modern"]
    assert b is not None and [h.container.pod for h in b.holders] == ["legacy"]
    assert index.get(GpuKey(GPU2)) is None  # the parent GPU itself is not held


def test_replicated_mig_device() -> None:
    index = build_allocation_index(
        _listing(("a", "p", [("c", [f"{MIG_B}::7"])])), DeviceCatalog(DEVICES, MIGS)
    )
    allocation = index.get(GpuKey(GPU2, 5))
    assert allocation is not None and allocation.replicated and not allocation.shared
    assert allocation.holders[0].replica_ids == ("7",)


def test_gke_device_names() -> None:
    index = build_allocation_index(
        _listing(
            ("a", "full", [("c", ["nvidia0"])]),
            ("a", "shared-1", [("c", ["nvidia2/vgpu0"])]),
            ("a", "shared-2", [("c", ["nvidia2/vgpu1"])]),
            ("a", "mig", [("c", ["nvidia1/gi3"])]),
        ),
        DeviceCatalog(DEVICES, MIGS),
    )
    full = index.get(GpuKey(GPU1))  # minor 0
    shared = index.get(GpuKey(GPU0))  # minor 2
    mig = index.get(GpuKey(GPU2, 3))  # minor 1, GPU instance 3
    assert full is not None and not full.shared
    assert (
        shared is not None and shared.shared and [h.replica_ids for h in shared.holders] == [("0",), ("1",)]
    )
    assert mig is not None and mig.holders[0].container.pod == "mig"


def test_unmatched_ids_are_reported_not_guessed() -> None:
    foreign = "GPU-00000000-0000-0000-0000-000000000000"
    index = build_allocation_index(
        _listing(("a", "p", [("c", [foreign, "tegra", GPU0])])), DeviceCatalog(DEVICES, MIGS)
    )
    assert index.unmatched_device_ids == (foreign, "tegra")
    assert set(index.by_key) == {GpuKey(GPU0)}


def test_the_id_families_that_matched_are_reported() -> None:
    index = build_allocation_index(
        _listing(("a", "p", [("c", [GPU0, "nvidia1/gi3"])])), DeviceCatalog(DEVICES, MIGS)
    )
    assert index.id_types == frozenset({"uid", "device-name"})


def test_replica_ids_are_ordered_as_numbers() -> None:
    """The lowest replica names a container's ``vgpu`` label: replica 2 comes before replica 10."""
    index = build_allocation_index(
        _listing(("ml", "trainer", [("main", [f"{GPU0}::10", f"{GPU0}::2", f"{GPU0}::9"])]), resource=SHARED),
        DeviceCatalog(DEVICES, MIGS))
    allocation = index.get(GpuKey(GPU0))
    assert allocation is not None and allocation.holders[0].replica_ids == ("2", "9", "10")
