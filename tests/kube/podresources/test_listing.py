"""The kubelet's List answer reduced to a canonical GPU allocation."""

from __future__ import annotations

import random

from exporter.kube.podresources import api_pb2
from exporter.kube.podresources.listing import (
    AssignedDevice,
    ContainerAssignment,
    PodAssignment,
    gpu_resource_filter,
    listing_from_response,
)

from ..helpers import GPU0, GPU1, MIG_A


def _entry(resource: str, device: str, numa: int | None = 0) -> api_pb2.ContainerDevices:
    topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=numa)]) if numa is not None else None
    return api_pb2.ContainerDevices(resource_name=resource, device_ids=[device], topology=topology)


def _response(seed: int) -> api_pb2.ListPodResourcesResponse:
    """One allocation, written the way a kubelet writes it: per-ID entries, NUMA duplicates,
    random order, sidecar first, non-GPU resources and GPU-less pods mixed in."""
    rng = random.Random(seed)
    trainer = [
        _entry("nvidia.com/gpu", GPU0, 0),
        _entry("nvidia.com/gpu", GPU0, 1),
        _entry("nvidia.com/gpu", GPU1, None),
        _entry("example.com/nic", "nic-3"),
    ]
    rng.shuffle(trainer)
    pods = [
        api_pb2.PodResources(
            name="trainer-0",
            namespace="ml",
            containers=[
                api_pb2.ContainerResources(name="log-shipper"),  # sidecar, no devices
                api_pb2.ContainerResources(name="trainer", devices=trainer),
            ],
        ),
        api_pb2.PodResources(
            name="web", namespace="default", containers=[api_pb2.ContainerResources(name="nginx")]
        ),
        api_pb2.PodResources(
            name="slice",
            namespace="ml",
            containers=[
                api_pb2.ContainerResources(name="proxy", devices=[_entry("nvidia.com/mig-3g.40gb", MIG_A)]),
                api_pb2.ContainerResources(
                    name="worker", devices=[_entry("nvidia.com/gpu.shared", f"{GPU1}::2")]
                ),
            ],
        ),
    ]
    rng.shuffle(pods)
    return api_pb2.ListPodResourcesResponse(pod_resources=pods)


def test_grouping_deduplicates_and_orders_canonically() -> None:
    listing = listing_from_response(_response(1), gpu_resource_filter())
    assert listing.pods == (
        PodAssignment(
            "ml",
            "slice",
            (
                ContainerAssignment("proxy", (AssignedDevice("nvidia.com/mig-3g.40gb", MIG_A),)),
                ContainerAssignment("worker", (AssignedDevice("nvidia.com/gpu.shared", f"{GPU1}::2"),)),
            ),
        ),
        PodAssignment(
            "ml",
            "trainer-0",
            (
                ContainerAssignment(
                    "trainer",
                    (AssignedDevice("nvidia.com/gpu", GPU0), AssignedDevice("nvidia.com/gpu", GPU1)),
                ),
            ),
        ),
    )
    assert listing.pods_listed == 3


def test_shuffled_answers_of_one_allocation_are_equal() -> None:
    listings = {listing_from_response(_response(seed), gpu_resource_filter()) for seed in range(20)}
    assert len(listings) == 1


def test_a_pod_without_gpus_is_no_change() -> None:
    before = listing_from_response(_response(3), gpu_resource_filter())
    response = _response(3)
    response.pod_resources.append(api_pb2.PodResources(name="batch", namespace="default"))
    after = listing_from_response(response, gpu_resource_filter())
    assert after == before
    assert after.pods_listed == before.pods_listed + 1


def test_resource_filter_accepts_nvidia_names_and_configured_extras() -> None:
    accept = gpu_resource_filter(["nvidia.com/a100", "example.com/vgpu"])
    assert all(
        accept(name)
        for name in (
            "nvidia.com/gpu",
            "nvidia.com/gpu.shared",
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/mig-1g.10gb.me",
            "nvidia.com/a100",
            "example.com/vgpu",
        )
    )
    assert not any(accept(name) for name in ("nvidia.com/gpux", "amd.com/gpu", "example.com/nic", "cpu"))


def test_renamed_resource_is_ignored_unless_configured() -> None:
    response = api_pb2.ListPodResourcesResponse(
        pod_resources=[
            api_pb2.PodResources(
                name="p",
                namespace="n",
                containers=[api_pb2.ContainerResources(name="c", devices=[_entry("nvidia.com/a100", GPU0)])],
            )
        ]
    )
    assert listing_from_response(response, gpu_resource_filter()).pods == ()
    configured = listing_from_response(response, gpu_resource_filter(["nvidia.com/a100"]))
    assert configured.pods[0].containers[0].devices == (AssignedDevice("nvidia.com/a100", GPU0),)


def test_duplicated_pod_entries_are_merged() -> None:
    pod = api_pb2.PodResources(
        name="p",
        namespace="n",
        containers=[api_pb2.ContainerResources(name="c", devices=[_entry("nvidia.com/gpu", GPU0)])],
    )
    twin = api_pb2.PodResources(
        name="p",
        namespace="n",
        containers=[api_pb2.ContainerResources(name="c", devices=[_entry("nvidia.com/gpu", GPU1)])],
    )
    listing = listing_from_response(
        api_pb2.ListPodResourcesResponse(pod_resources=[pod, twin]), gpu_resource_filter()
    )
    assert listing.pods == (
        PodAssignment(
            "n",
            "p",
            (
                ContainerAssignment(
                    "c", (AssignedDevice("nvidia.com/gpu", GPU0), AssignedDevice("nvidia.com/gpu", GPU1))
                ),
            ),
        ),
    )
