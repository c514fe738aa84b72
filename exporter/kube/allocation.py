"""Which containers hold which GPU or MIG instance, from the kubelet's (canonical) List answer.

dcgm-exporter keeps one pod per device key, last writer wins, so with time-slicing only one of
the sharing pods is ever attributed and which one changes with the kubelet's random order
(its issues #307, #201, #342). Here every holder is kept: a GPU maps to the full, sorted list
of containers that hold it, with the replica IDs each one holds, and a ``shared`` flag that the
renderer uses to decide whether the device's own series may carry one pod's labels.

Devices handed out through Dynamic Resource Allocation (``ClaimedDevice``, with
``--kubernetes-enable-dra``) join the same index once ``exporter.kube.dra`` has resolved them to a GPU
or MIG instance, and follow the same sharing rules: a claim used by several pods, or a device shared
between claims (``share_id``), has several holders. Each DRA holder keeps the claim it holds the
device through (``HeldClaim``: dcgm-exporter's ``dra_*`` labels). A device that cannot be resolved is
listed in ``AllocationIndex.unresolved`` with its reason; its GPU is simply not attributed.

Pure: no I/O, no clock; the inputs are immutable values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from exporter.kube.deviceids import DeviceCatalog, GpuKey, parse_device_id
from exporter.kube.dra import DraContext, resolve
from exporter.kube.podresources.listing import ClaimedDevice, PodResourcesListing


@dataclass(frozen=True, order=True)
class ContainerRef:
    """A container as the kubelet names it (PodResources has no pod UID)."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, order=True)
class HeldClaim:
    """The DRA claim through which a container holds a device, and what its slice says about it."""

    namespace: str
    name: str
    driver: str
    pool: str
    device: str
    share_id: str = ""
    mig_profile: str = ""
    mig_device_uuid: str = ""


@dataclass(frozen=True)
class DeviceHolder:
    """One container holding (part of) one GPU or MIG instance.

    ``replica_ids`` are the time-slicing / MPS replica numbers (``GPU-<uuid>::<n>``, GKE
    ``/vgpu<n>``) it holds on this device, sorted numerically; empty for an exclusive device.
    Without ``failRequestsGreaterThanOne`` one container may hold several replicas of the same
    GPU; it is still one holder. ``claims``: the DRA claims it holds the device through, sorted.
    """

    container: ContainerRef
    replica_ids: tuple[str, ...] = ()
    claims: tuple[HeldClaim, ...] = ()


@dataclass(frozen=True)
class UnresolvedClaim:
    """A DRA device a container holds that names no GPU this exporter can attribute, and why."""

    device: ClaimedDevice
    reason: str  # one of exporter.kube.dra.REASONS
    container: ContainerRef


@dataclass(frozen=True)
class GpuAllocation:
    """Every holder of one GPU (``key.gpu_instance_id`` None) or MIG instance."""

    key: GpuKey
    holders: tuple[DeviceHolder, ...]

    @property
    def shared(self) -> bool:
        """Shared: held by more than one container (whole, or through time-slicing/MPS replicas).

        A shared device's own readings belong to no single pod, so its series must not carry one
        pod's labels (see exporter.kube.series). One container holding a device through one or
        any number of replica IDs is its only user: the device is not shared, and its series carry
        that container's labels, as the README promises ("when exactly one container holds the GPU").
        On a time-slicing node with one pod per GPU that is every GPU.
        """
        return len(self.holders) > 1

    @property
    def replicated(self) -> bool:
        """Handed out as time-slicing/MPS replicas (``::<n>``, GKE ``/vgpu<n>``), by however many holders."""
        return any(holder.replica_ids for holder in self.holders)


@dataclass(frozen=True)
class AllocationIndex:
    """The result of matching one List answer against this node's GPUs."""

    by_key: Mapping[GpuKey, GpuAllocation]
    unmatched_device_ids: tuple[str, ...] = ()  # GPU-resource IDs that name no GPU here
    id_types: frozenset[str] = frozenset()  # "uid" / "device-name": the ID families that matched
    unresolved: tuple[UnresolvedClaim, ...] = ()  # DRA devices of GPUs that cannot be attributed

    def get(self, key: GpuKey) -> GpuAllocation | None:
        return self.by_key.get(key)

    def unresolved_by_reason(self) -> dict[str, int]:
        """Distinct unresolved DRA devices per reason (a claim shared by two pods is one device)."""
        distinct = {(item.device.triple, item.device.cdi_devices, item.reason) for item in self.unresolved}
        counts: dict[str, int] = {}
        for *_, reason in distinct:
            counts[reason] = counts.get(reason, 0) + 1
        return counts


EMPTY_INDEX = AllocationIndex(by_key=MappingProxyType({}))


def build_allocation_index(listing: PodResourcesListing, catalog: DeviceCatalog,
                           dra: DraContext | None = None) -> AllocationIndex:
    """Group the listing's device IDs, and with ``dra`` its DRA claim devices, by the GPU or MIG
    instance they name."""
    replicas: dict[GpuKey, dict[ContainerRef, set[str]]] = {}
    claims: dict[GpuKey, dict[ContainerRef, set[HeldClaim]]] = {}
    unmatched: set[str] = set()
    unresolved: list[UnresolvedClaim] = []
    id_types: set[str] = set()
    for pod in listing.pods:
        for container in pod.containers:
            ref = ContainerRef(pod.namespace, pod.name, container.name)
            for device in container.devices:
                parsed = parse_device_id(device.device_id)
                key = catalog.resolve(parsed)
                if key is None:
                    unmatched.add(device.device_id)
                    continue
                if parsed.kind.id_type is not None:
                    id_types.add(parsed.kind.id_type)
                held = replicas.setdefault(key, {}).setdefault(ref, set())
                if parsed.replica is not None:
                    held.add(parsed.replica)
            if dra is None:
                continue
            for claimed in container.claims:
                resolution = resolve(claimed, dra, catalog)
                if resolution is None:
                    continue  # not a GPU
                if resolution.key is None:
                    unresolved.append(UnresolvedClaim(claimed, resolution.reason, ref))
                    continue
                replicas.setdefault(resolution.key, {}).setdefault(ref, set())
                claims.setdefault(resolution.key, {}).setdefault(ref, set()).add(HeldClaim(
                    claimed.claim_namespace, claimed.claim_name, claimed.driver, claimed.pool, claimed.device,
                    claimed.share_id, resolution.mig_profile, resolution.mig_device_uuid))
    # Replica IDs are decimal numbers (parse_device_id accepts nothing else), ordered as numbers: 2 before 10.
    by_key = {
        key: GpuAllocation(key, tuple(
            DeviceHolder(ref, tuple(sorted(held, key=int)), tuple(sorted(claims.get(key, {}).get(ref, ()))))
            for ref, held in sorted(holders.items())
        ))
        for key, holders in replicas.items()
    }
    return AllocationIndex(by_key=MappingProxyType(by_key), unmatched_device_ids=tuple(sorted(unmatched)),
                           id_types=frozenset(id_types), unresolved=tuple(unresolved))
