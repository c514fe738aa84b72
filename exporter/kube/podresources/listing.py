"""The kubelet's List answer, reduced to what GPU attribution needs, in a canonical form.

The kubelet emits one ``ContainerDevices`` entry per device ID and per NUMA node, walks Go maps
so the order changes on every call, and lists every active pod, most of them without GPUs
(reference/podresources.md §1.4). Comparing raw answers would report a "change" on every poll.
So the answer is reduced here to a canonical value: only GPU resources, each (resource, device
ID) once, sorted; containers and pods without GPUs dropped; pods sorted by namespace and name.
Two Lists of the same allocation give equal values, and a pod starting without a GPU does not
wake anybody up.

Container order inside a pod is kept as the kubelet sends it (restartable init containers, i.e.
sidecars, first, then regular containers): it is stable, and it is the order people read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from exporter.kube.podresources import api_pb2

GPU_RESOURCE = "nvidia.com/gpu"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def gpu_resource_filter(extra_names: Iterable[str] = ()) -> Callable[[str], bool]:
    """Which extended-resource names carry NVIDIA GPUs.

    ``nvidia.com/gpu``, the ``.shared`` name that time-slicing's ``renameByDefault`` advertises,
    every ``nvidia.com/mig-<profile>`` of the mixed MIG strategy, plus the names configured with
    ``--nvidia-resource-names`` (renamed resources, e.g. ``nvidia.com/a100``).
    """
    extras = frozenset(extra_names)

    def accept(resource_name: str) -> bool:
        return (resource_name in (GPU_RESOURCE, SHARED_GPU_RESOURCE)
                or resource_name.startswith(MIG_RESOURCE_PREFIX)
                or resource_name in extras)

    return accept


@dataclass(frozen=True, order=True)
class AssignedDevice:
    """One device ID the kubelet assigned to a container, under its resource name."""

    resource_name: str
    device_id: str


@dataclass(frozen=True)
class ContainerAssignment:
    """A container's GPU devices: deduplicated and sorted."""

    name: str
    devices: tuple[AssignedDevice, ...]


@dataclass(frozen=True)
class PodAssignment:
    """A pod that holds at least one GPU device, with its GPU-holding containers."""

    namespace: str
    name: str
    containers: tuple[ContainerAssignment, ...]


@dataclass(frozen=True)
class PodResourcesListing:
    """Canonical content of one successful List: equal allocations give equal values."""

    pods: tuple[PodAssignment, ...] = ()
    # Every pod the kubelet listed, with or without GPUs (for logs). Not compared: a pod without
    # GPUs coming or going is no change to the attribution.
    pods_listed: int = field(default=0, compare=False)


def listing_from_response(response: api_pb2.ListPodResourcesResponse,
                          accept_resource: Callable[[str], bool]) -> PodResourcesListing:
    """Reduce a List answer to its canonical GPU allocation (see the module docstring).

    A pod or container listed twice (never seen from a healthy kubelet, but cheap to survive)
    is merged rather than duplicated.
    """
    pods: dict[tuple[str, str], dict[str, set[AssignedDevice]]] = {}
    for pod in response.pod_resources:
        containers = pods.setdefault((pod.namespace, pod.name), {})
        for container in pod.containers:
            devices = {
                AssignedDevice(entry.resource_name, device_id)
                for entry in container.devices
                if accept_resource(entry.resource_name)
                for device_id in entry.device_ids
            }
            if devices:
                containers.setdefault(container.name, set()).update(devices)
    assignments = tuple(
        PodAssignment(namespace, name, tuple(ContainerAssignment(container, tuple(sorted(devices)))
                                             for container, devices in containers.items()))
        for (namespace, name), containers in sorted(pods.items())
        if containers
    )
    return PodResourcesListing(pods=assignments, pods_listed=len(response.pod_resources))
