"""The kubelet's List answer, reduced to what GPU attribution needs, in a canonical form.

The kubelet emits one ``ContainerDevices`` entry per device ID and per NUMA node, walks Go maps
so the order changes on every call, and lists every active pod, most of them without GPUs
(the kubelet's ``pkg/kubelet/apis/podresources/server_v1.go``). Comparing raw answers would
report a "change" on every poll.
So the answer is reduced here to a canonical value: only GPU resources, each (resource, device
ID) once, sorted; containers and pods without GPUs dropped; pods sorted by namespace and name.
Two Lists of the same allocation give equal values, and a pod starting without a GPU does not
wake anybody up.

Container order inside a pod is kept as the kubelet sends it (restartable init containers, i.e.
sidecars, first, then regular containers): it is stable, and it is the order people read.

With Dynamic Resource Allocation on (``dra=True``), each container's ``dynamic_resources`` are kept
too, one ``ClaimedDevice`` per device of every claim, whatever its driver (which drivers are GPUs is
decided when the devices are resolved, ``exporter.kube.dra``). The proto carries its history
(kubernetes/kubelet's ``pkg/apis/podresources/v1/api.proto`` across releases): kubelets 1.27-1.30
send only CDI device names (field 1 of ``DynamicResource``, ``class_name``, is tombstoned and
ignored), 1.31 adds the driver, pool and device names, 1.35 an optional ``share_id`` for a device
shared between claims.
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


@dataclass(frozen=True, order=True)
class ClaimedDevice:
    """One device a DRA ResourceClaim gave a container (``dynamic_resources[].claim_resources[]``).

    ``driver``, ``pool`` and ``device`` name the device uniquely (1.31+); a 1.27-1.30 kubelet leaves
    them empty and sends only ``cdi_devices`` (fully qualified CDI names, ``vendor.com/class=name``).
    ``share_id`` is empty unless the kubelet (1.35+) says the device is one share of a shared device.
    """

    claim_namespace: str
    claim_name: str
    driver: str
    pool: str
    device: str
    share_id: str = ""
    cdi_devices: tuple[str, ...] = ()

    @property
    def triple(self) -> tuple[str, str, str]:
        """``(driver, pool, device)``: how ResourceSlices name it (empty parts on 1.27-1.30 kubelets)."""
        return self.driver, self.pool, self.device

    @property
    def described(self) -> str:
        """``driver/pool/device`` or the CDI names, for log lines."""
        if self.device:
            return f"{self.driver}/{self.pool}/{self.device}"
        return ",".join(self.cdi_devices) or "(no device named)"


@dataclass(frozen=True)
class ContainerAssignment:
    """A container's GPU devices and DRA claim devices: deduplicated and sorted."""

    name: str
    devices: tuple[AssignedDevice, ...]
    claims: tuple[ClaimedDevice, ...] = ()


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


def claimed_devices(container: api_pb2.ContainerResources) -> set[ClaimedDevice]:
    """Every device of every DRA claim of one container, as the kubelet of any version sends them."""
    found: set[ClaimedDevice] = set()
    for claim in container.dynamic_resources:
        for resource in claim.claim_resources:
            cdi = tuple(sorted({device.name for device in resource.cdi_devices if device.name}))
            if not (resource.device_name or cdi):
                continue  # names no device at all: nothing to resolve
            found.add(ClaimedDevice(
                claim_namespace=claim.claim_namespace, claim_name=claim.claim_name,
                driver=resource.driver_name, pool=resource.pool_name, device=resource.device_name,
                share_id=resource.share_id if resource.HasField("share_id") else "", cdi_devices=cdi))
    return found


def listing_from_response(response: api_pb2.ListPodResourcesResponse,
                          accept_resource: Callable[[str], bool], *, dra: bool = False) -> PodResourcesListing:
    """Reduce a List answer to its canonical GPU allocation (see the module docstring).

    A pod or container listed twice (never seen from a healthy kubelet, but cheap to survive)
    is merged rather than duplicated. ``dra``: keep the containers' DRA claim devices too.
    """
    pods: dict[tuple[str, str], dict[str, tuple[set[AssignedDevice], set[ClaimedDevice]]]] = {}
    for pod in response.pod_resources:
        containers = pods.setdefault((pod.namespace, pod.name), {})
        for container in pod.containers:
            devices = {
                AssignedDevice(entry.resource_name, device_id)
                for entry in container.devices
                if accept_resource(entry.resource_name)
                for device_id in entry.device_ids
            }
            claims = claimed_devices(container) if dra else set()
            if devices or claims:
                held, claimed = containers.setdefault(container.name, (set(), set()))
                held.update(devices)
                claimed.update(claims)
    assignments = tuple(
        PodAssignment(namespace, name, tuple(
            ContainerAssignment(container, tuple(sorted(devices)), tuple(sorted(claims)))
            for container, (devices, claims) in containers.items()))
        for (namespace, name), containers in sorted(pods.items())
        if containers
    )
    return PodResourcesListing(pods=assignments, pods_listed=len(response.pod_resources))
