"""The Kubernetes side of the exporter, as one published value and one facade.

Three sources run on their own clocks and never on the scrape path:

* the kubelet PodResources client (``podresources.client``): which container holds which device;
* the API watches (``metadata``): pod UIDs, labels, container IDs, namespace labels;
* process lists and per-process utilization samples pushed in by the sampler
  (``update_processes``), resolved through cgroups (``processes``): whose processes use how much
  framebuffer memory, and how much of each GPU's SM, memory bandwidth and video engines.

``KubernetesAttribution.snapshot(devices, migs)`` joins them into an immutable
``AttributionSnapshot``. It does no I/O: the join is memoised on the identities of the three
inputs and of the GPU inventory, so calling it per render costs a few comparisons; the health
fields (up, last success) are read fresh each time. ``on_change`` fires from the sources'
threads whenever the joined value changes (new allocation, new pod metadata, new process
memory, a source going up or down); it does not fire when a poll brings nothing new, and the
last-success timestamps alone do not fire it (they are picked up by the next render, which the
sampler triggers every collection interval anyway).

DRA (``--kubernetes-enable-dra``): a fourth source, the watch of this node's ResourceSlices
(``resourceslices``), says which GPU or MIG device each DRA claim device the kubelet lists is
(``dra``); resolved devices join the allocation index like device-plugin ones, each holder keeping
the claim it holds the device through (dcgm-exporter's ``dra_*`` labels). An unresolvable one
leaves its GPU unattributed, is counted per reason (``gpu_pod_exporter_unresolved_devices``) and
logged once per device and reason.

Degradation: when the kubelet or the API is unreachable, the last known allocation and metadata
keep labelling the series for at most ``stale_after_s`` (default 300 s: long enough to ride out a
kubelet or API-server restart, short enough that labels of pods long gone do not linger); after
that they are dropped, and the GPU series continue without workload labels.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from exporter.kube.allocation import (
    EMPTY_INDEX,
    AllocationIndex,
    ContainerRef,
    HeldClaim,
    UnresolvedClaim,
    build_allocation_index,
)
from exporter.kube.container_peaks import (
    NO_PEAKS,
    ContainerPeaks,
    ContainerPeakValues,
    PeakKey,
    memory_samples,
    sm_samples,
)
from exporter.kube.deviceids import DeviceCatalog, GpuKey
from exporter.kube.dra import EXPLAINED, REASONS, SLICES_UNAVAILABLE, DraContext
from exporter.kube.labels import PodLabelPolicy, TeamResolver
from exporter.kube.metadata import KubernetesMetadata, MetadataView, WatchTimeouts
from exporter.kube.podresources.client import DEFAULT_STALE_AFTER_S, PodResourcesClient
from exporter.kube.podresources.listing import PodResourcesListing, gpu_resource_filter
from exporter.kube.processes import (
    CgroupIdentity,
    ProcessCgroupResolver,
    attribute_processes,
    attribute_utilization,
)
from exporter.kube.resourceslices import ResourceSliceWatch, SliceView
from exporter.kube.settings import KubernetesSettings, WorkloadSettings
from exporter.logs import StateLog, get_logger
from exporter.snapshot import DeviceIdentity, GpuProcess, MigIdentity, ProcessUtilization

LOG = get_logger("kube.attribution")  # under the exporter's handler and format


@dataclass(frozen=True)
class Workload:
    """A container that holds or uses a GPU, with everything that becomes a label.

    ``pod_uid``, ``team`` and ``pod_labels`` are None / empty when the API does not know them;
    ``pod_labels`` are already selected, renamed and bounded (``labels.PodLabelPolicy``).
    """

    namespace: str
    pod: str
    container: str
    pod_uid: str | None = None
    team: str | None = None
    pod_labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class AllocationHolder:
    """One container holding a device; ``replica_ids`` when it holds time-slicing/MPS replicas,
    ``claims`` the DRA claims it holds it through (empty for a device-plugin device)."""

    workload: Workload
    replica_ids: tuple[str, ...] = ()
    claims: tuple[HeldClaim, ...] = ()


@dataclass(frozen=True)
class DeviceAllocation:
    """Every container holding one GPU (``gpu_instance_id`` None) or MIG instance."""

    uuid: str
    gpu_instance_id: int | None
    holders: tuple[AllocationHolder, ...]
    shared: bool


@dataclass(frozen=True)
class ContainerMemory:
    """Framebuffer bytes used by one container's processes on one GPU or MIG instance.

    A holder without a process on the device has 0 bytes; a container that uses a device it
    was not allocated (e.g. ``NVIDIA_VISIBLE_DEVICES=all``) appears too.
    """

    uuid: str
    gpu_instance_id: int | None
    workload: Workload
    used_bytes: int


@dataclass(frozen=True)
class Utilization:
    """Percent of one GPU's SM time, memory bandwidth time, encoder and decoder time."""

    sm: float = 0.0
    memory: float = 0.0
    encoder: float = 0.0
    decoder: float = 0.0

    def __add__(self, other: Utilization) -> Utilization:
        return Utilization(self.sm + other.sm, self.memory + other.memory, self.encoder + other.encoder,
                           self.decoder + other.decoder)


NO_UTILIZATION = Utilization()


@dataclass(frozen=True)
class ContainerUtilization:
    """How much of one whole GPU one container's processes used over the last process interval.

    Holders of the GPU without a sample used 0; a container that is not a holder appears when it
    has a process listed on the GPU or a sample. MIG-enabled GPUs have none (NVML does not sample
    processes there).
    """

    uuid: str
    workload: Workload
    utilization: Utilization


@dataclass(frozen=True)
class ProcessMemory:
    """One GPU process; ``workload`` None when it belongs to no pod the API knows."""

    uuid: str
    gpu_instance_id: int | None
    pid: int
    used_bytes: int | None
    workload: Workload | None


@dataclass(frozen=True)
class AttributionStatus:
    """Health of the Kubernetes sources (self-metrics, /health)."""

    enabled: bool = False
    kubelet_up: bool = False
    kubelet_error: str = ""
    kubelet_last_success: float = 0.0  # time.time(); 0.0: never
    api_up: bool = False
    api_error: str = ""
    api_last_success: float = 0.0
    api_requests: tuple[tuple[tuple[str, str, str], int], ...] = ()  # ((resource, verb, code), count)
    api_relists: tuple[tuple[tuple[str, str], int], ...] = ()  # ((resource, reason), count)
    api_bookmarks: tuple[tuple[str, int], ...] = ()  # (resource, watch bookmarks received)
    pods_known: int = 0  # pods on this node known from the API watch
    process_attribution: bool = False
    dra_enabled: bool = False  # --kubernetes-enable-dra: the ResourceSlice watch runs
    resourceslices_up: bool = False
    resourceslices_error: str = ""


@dataclass(frozen=True)
class AttributionSnapshot:
    """The published value. ``allocation_known`` is False until the kubelet answered (and after
    its answer aged out): then nothing is claimed about allocation, not even "unallocated".
    ``process_gpus`` are the GPU UUIDs whose process lists were attributed."""

    status: AttributionStatus = field(default_factory=AttributionStatus)
    allocation_known: bool = False
    allocations: Mapping[GpuKey, DeviceAllocation] = field(default_factory=lambda: MappingProxyType({}))
    container_memory: tuple[ContainerMemory, ...] = ()
    processes: tuple[ProcessMemory, ...] = ()
    unattributed_bytes: Mapping[GpuKey, int] = field(default_factory=lambda: MappingProxyType({}))
    process_gpus: frozenset[str] = frozenset()
    # Per-process utilization joined the same way: per container, and what no known pod used, for
    # the GPUs (UUIDs) whose samples were read.
    container_utilization: tuple[ContainerUtilization, ...] = ()
    unattributed_utilization: Mapping[str, Utilization] = field(default_factory=lambda: MappingProxyType({}))
    utilization_gpus: frozenset[str] = frozenset()
    # DRA devices of GPUs that could not be attributed, per reason (exporter.kube.dra.REASONS).
    unresolved: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # Each container's highest memory and SM utilisation over the peak window (exporter.kube.container_peaks).
    container_peaks: ContainerPeakValues = NO_PEAKS

    def allocation(self, uuid: str, gpu_instance_id: int | None = None) -> DeviceAllocation | None:
        return self.allocations.get(GpuKey(uuid, gpu_instance_id))

    def memory(self, uuid: str, gpu_instance_id: int | None = None) -> tuple[ContainerMemory, ...]:
        return tuple(item for item in self.container_memory
                     if item.uuid == uuid and item.gpu_instance_id == gpu_instance_id)

    def utilization(self, uuid: str) -> tuple[ContainerUtilization, ...]:
        return tuple(item for item in self.container_utilization if item.uuid == uuid)


EMPTY_SNAPSHOT = AttributionSnapshot()


EMPTY_COUNTS: Mapping[str, int] = MappingProxyType({})


def every_reason(counts: Mapping[str, int]) -> Mapping[str, int]:
    """Every unresolved-device reason with its count, 0 included, so a rule can watch each one."""
    return MappingProxyType({reason: counts.get(reason, 0) for reason in REASONS})


@dataclass(frozen=True)
class _Parts:
    """The memoised, I/O-free join (everything of the snapshot except its status)."""

    allocation_known: bool
    allocations: Mapping[GpuKey, DeviceAllocation]
    container_memory: tuple[ContainerMemory, ...]
    processes: tuple[ProcessMemory, ...]
    unattributed_bytes: Mapping[GpuKey, int]
    process_gpus: frozenset[str]
    container_utilization: tuple[ContainerUtilization, ...] = ()
    unattributed_utilization: Mapping[str, Utilization] = field(default_factory=lambda: MappingProxyType({}))
    utilization_gpus: frozenset[str] = frozenset()
    unresolved: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class _ProcessInput:
    processes: Mapping[str, tuple[GpuProcess, ...]]
    identities: Mapping[int, CgroupIdentity | None]
    utilization: Mapping[str, ProcessUtilization] = field(default_factory=lambda: MappingProxyType({}))


class WorkloadFactory:
    """Turns kubelet container references and process owners into ``Workload`` values."""

    def __init__(self, settings: WorkloadSettings) -> None:
        self._teams = TeamResolver(settings.team_label_sources)
        self._pod_labels = PodLabelPolicy(settings.kubernetes_enable_pod_labels,
                                          settings.kubernetes_pod_label_allowlist_regex)

    def build(self, namespace: str, pod: str, container: str, view: MetadataView) -> Workload:
        metadata = view.pods_by_name.get((namespace, pod))
        pod_labels = metadata.label_map if metadata is not None else {}
        return Workload(
            namespace=namespace, pod=pod, container=container,
            pod_uid=(metadata.uid or None) if metadata is not None else None,
            team=self._teams.team(pod_labels, view.namespace_labels(namespace)),
            pod_labels=self._pod_labels.select(pod_labels),
        )


def _ref_parts(ref: ContainerRef) -> tuple[str, str, str]:
    return ref.namespace, ref.pod, ref.container


def join_attribution(index: AllocationIndex, allocation_known: bool, process_input: _ProcessInput | None,
                     view: MetadataView, workloads: WorkloadFactory) -> _Parts:
    """Pure join of allocation, metadata and process ownership (see the module docstring)."""
    cache: dict[tuple[str, str, str], Workload] = {}

    def workload(namespace: str, pod: str, container: str) -> Workload:
        key = (namespace, pod, container)
        if key not in cache:
            cache[key] = workloads.build(namespace, pod, container, view)
        return cache[key]

    allocations = {
        key: DeviceAllocation(
            uuid=key.uuid, gpu_instance_id=key.gpu_instance_id, shared=allocation.shared,
            holders=tuple(AllocationHolder(workload(*_ref_parts(holder.container)), holder.replica_ids,
                                           holder.claims)
                          for holder in allocation.holders))
        for key, allocation in index.by_key.items()
    }
    container_memory: tuple[ContainerMemory, ...] = ()
    processes: tuple[ProcessMemory, ...] = ()
    unattributed: dict[GpuKey, int] = {}
    process_gpus: frozenset[str] = frozenset()
    if process_input is not None:
        process_gpus = frozenset(process_input.processes)
        memory: dict[tuple[GpuKey, ContainerRef], int] = {}
        for key, allocation in index.by_key.items():
            if key.uuid in process_gpus:
                for holder in allocation.holders:
                    memory.setdefault((key, holder.container), 0)
        process_list: list[ProcessMemory] = []
        for record in attribute_processes(process_input.processes, process_input.identities, view):
            used = record.used_memory_bytes or 0
            owner = record.owner
            if owner is None:
                unattributed[record.gpu] = unattributed.get(record.gpu, 0) + used
            else:
                ref = ContainerRef(owner.namespace, owner.pod, owner.container)
                memory[(record.gpu, ref)] = memory.get((record.gpu, ref), 0) + used
            process_list.append(ProcessMemory(
                uuid=record.gpu.uuid, gpu_instance_id=record.gpu.gpu_instance_id, pid=record.pid,
                used_bytes=record.used_memory_bytes,
                workload=workload(owner.namespace, owner.pod, owner.container) if owner else None))
        processes = tuple(process_list)
        ordered = sorted(memory.items(), key=lambda item: (
            item[0][0].uuid, item[0][0].gpu_instance_id or -1, item[0][1]))
        container_memory = tuple(
            ContainerMemory(key.uuid, key.gpu_instance_id, workload(*_ref_parts(ref)), used)
            for (key, ref), used in ordered)
        used_by, used_by_nobody = _join_utilization(index, process_input, memory, view)
        return _Parts(allocation_known=allocation_known, allocations=MappingProxyType(allocations),
                      container_memory=container_memory, processes=processes,
                      unattributed_bytes=MappingProxyType(unattributed), process_gpus=process_gpus,
                      unresolved=MappingProxyType(index.unresolved_by_reason()),
                      container_utilization=tuple(
                          ContainerUtilization(uuid, workload(*_ref_parts(ref)), used)
                          for (uuid, ref), used in sorted(used_by.items())),
                      unattributed_utilization=MappingProxyType(used_by_nobody),
                      utilization_gpus=frozenset(process_input.utilization))
    return _Parts(allocation_known=allocation_known, allocations=MappingProxyType(allocations),
                  container_memory=container_memory, processes=processes,
                  unattributed_bytes=MappingProxyType(unattributed), process_gpus=process_gpus,
                  unresolved=MappingProxyType(index.unresolved_by_reason()))


def _join_utilization(index: AllocationIndex, process_input: _ProcessInput,
                      memory: Mapping[tuple[GpuKey, ContainerRef], int], view: MetadataView,
                      ) -> tuple[dict[tuple[str, ContainerRef], Utilization], dict[str, Utilization]]:
    """Per (GPU UUID, container) and per GPU for no known pod: the sum of their processes' samples.

    Every holder of a sampled GPU, and every container with a process listed on it, gets a value
    (0 without a sample: NVML lists only processes that used the GPU), so an idle holder shows as
    idle rather than missing. Owners come from ``attribute_utilization``: the memory's join.
    """
    sampled = process_input.utilization
    per_container: dict[tuple[str, ContainerRef], Utilization] = {}
    for key, allocation in index.by_key.items():
        if key.gpu_instance_id is None and key.uuid in sampled:
            for holder in allocation.holders:
                per_container.setdefault((key.uuid, holder.container), NO_UTILIZATION)
    for key, ref in memory:
        if key.gpu_instance_id is None and key.uuid in sampled:
            per_container.setdefault((key.uuid, ref), NO_UTILIZATION)
    unattributed = dict.fromkeys(sampled, NO_UTILIZATION)
    for record in attribute_utilization(sampled, process_input.identities, view):
        sample = record.sample
        used = Utilization(sample.sm, sample.memory, sample.encoder, sample.decoder)
        if record.owner is None:
            unattributed[record.uuid] += used
        else:
            ref = ContainerRef(record.owner.namespace, record.owner.pod, record.owner.container)
            per_container[(record.uuid, ref)] = per_container.get((record.uuid, ref), NO_UTILIZATION) + used
    return per_container, unattributed


class KubernetesAttribution:
    """Facade over the kubelet client, the API watches and process attribution.

    ``on_change`` is called from the sources' threads (and from ``update_processes``' caller)
    when the published value changed, so the server re-renders. Exceptions it raises are
    logged, never allowed to kill a source thread.
    """

    def __init__(
        self,
        settings: KubernetesSettings,
        on_change: Callable[[], None] = lambda: None,
        *,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
        kubelet_call_timeout_s: float = 10.0,
        watch_timeouts: WatchTimeouts | None = None,
        api_factory: Callable[[], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._clock = clock  # the per-container peak windows' time (the sampler's clock in production)
        self._peaks = ContainerPeaks(settings.peak_window_ms / 1000.0)
        self._published_peaks = NO_PEAKS
        self._on_change = on_change
        self._workloads = WorkloadFactory(settings.workloads)
        kubelet, api = settings.kubelet, settings.api
        self.kubelet = PodResourcesClient(
            kubelet.pod_resources_socket, kubelet.pod_resources_interval_ms / 1000.0,
            gpu_resource_filter(kubelet.nvidia_resource_names), on_change=lambda _state: self._notify(),
            call_timeout_s=kubelet_call_timeout_s, stale_after_s=stale_after_s, dra=settings.kubernetes_enable_dra)
        timeouts = watch_timeouts or WatchTimeouts(stale_after_s=stale_after_s)
        node = api.node_name or socket.gethostname()
        self.metadata = KubernetesMetadata(
            node, on_change=self._notify, kubeconfig=api.kubeconfig,
            allow_exec=api.kubeconfig_allow_exec, timeouts=timeouts, api_factory=api_factory)
        # DRA: this node's ResourceSlices, watched over the pod watch's API connection.
        self.slices = ResourceSliceWatch(node, on_change=self._notify, timeouts=timeouts) \
            if settings.kubernetes_enable_dra else None
        self._dra_drivers = frozenset(settings.kubernetes_dra_driver_names)
        self._unresolved_log = StateLog(LOG)
        self._logged_unresolved: dict[tuple[tuple[str, str, str], tuple[str, ...]], str] = {}
        self._resolver = ProcessCgroupResolver(settings.processes.proc_root)
        self._process_input: _ProcessInput | None = None
        self._process_lock = threading.Lock()
        self._memo_lock = threading.Lock()
        self._memo_key: tuple[object, ...] | None = None
        self._memo: _Parts | None = None
        self._catalog_key: tuple[tuple[DeviceIdentity, ...], tuple[MigIdentity, ...]] | None = None
        self._catalog = DeviceCatalog((), ())
        self._index_key: tuple[object, ...] | None = None
        self._index = EMPTY_INDEX
        self._logged_unmatched: tuple[str, ...] = ()
        self._logged_id_types: frozenset[str] = frozenset()
        self._started = False

    @property
    def process_attribution(self) -> bool:
        return self.settings.processes.enabled

    def start(self) -> None:
        if not self.settings.kubernetes or self._started:
            return
        self._started = True
        if not self.settings.api.node_name:
            LOG.warning("NODE_NAME is not set; watching pods with spec.nodeName=%s (this machine's "
                        "hostname). Set NODE_NAME from the downward API (spec.nodeName).",
                        socket.gethostname())
        self.kubelet.start()
        self.metadata.start()
        if self.slices is not None:
            self.slices.start(self.metadata.api, self.metadata.state.error)

    def stop(self) -> None:
        self.kubelet.stop()
        self.metadata.stop()
        if self.slices is not None:
            self.slices.stop()
        self._started = False

    def _notify(self) -> None:
        try:
            self._on_change()
        except Exception:  # a broken callback must not kill a source thread
            LOG.exception("attribution on_change callback failed")

    # -- process lists ------------------------------------------------------------------------

    def update_processes(self, processes: Mapping[str, Sequence[GpuProcess]],
                         utilization: Mapping[str, ProcessUtilization] | None = None) -> None:
        """New NVML process lists, keyed by GPU UUID (MIG processes carry their GPU-instance id),
        and the per-process utilization samples of the GPUs that have them.

        Reads ``/proc/<pid>/stat`` (and ``cgroup`` for PIDs not seen before) in the caller's
        thread, so call it from the sampler, never from a scrape. Fires ``on_change`` when the
        attribution it leads to differs from the previous one.
        """
        if not self.settings.kubernetes or not self.process_attribution:
            return
        with self._process_lock:
            frozen = {uuid: tuple(listed) for uuid, listed in processes.items()}
            sampled = dict(utilization or {})
            pids = {process.pid for listed in frozen.values() for process in listed}
            pids |= {sample.pid for reading in sampled.values() for sample in reading.samples}
            identities = {pid: self._resolver.resolve(pid) for pid in pids}
            self._resolver.retain(pids)
            changed = self._observe_peaks(frozen, sampled, identities)  # e.g. a spike left the window
            previous = self._process_input
            if (previous is None or previous.processes != frozen or previous.identities != identities
                    or previous.utilization != sampled):
                self._process_input = _ProcessInput(MappingProxyType(frozen), MappingProxyType(identities),
                                                    MappingProxyType(sampled))
                changed = True
        if changed:
            self._notify()

    def _observe_peaks(self, processes: Mapping[str, tuple[GpuProcess, ...]],
                       utilization: Mapping[str, ProcessUtilization],
                       identities: Mapping[int, CgroupIdentity | None]) -> bool:
        """One process read's per-container values into the peak windows; True when the peaks changed.

        Joined with the metadata of this moment (a process read is a sample; the memoised join of the
        published value may run later, with newer metadata, and that changes no past sample).
        """
        view = self.metadata.view()

        def workload(key: PeakKey) -> Workload:
            return self._workloads.build(key.namespace, key.pod, key.container, view)

        peaks = self._peaks.observe(
            self._clock(), memory_samples(attribute_processes(processes, identities, view)), frozenset(processes),
            sm_util=sm_samples(attribute_utilization(utilization, identities, view)), sm_gpus=frozenset(utilization),
            workload=workload, pods=view.pods_by_name)
        changed = peaks != self._published_peaks
        self._published_peaks = peaks
        return changed

    # -- the published value --------------------------------------------------------------------

    def snapshot(self, devices: Sequence[DeviceIdentity], migs: Sequence[MigIdentity]) -> AttributionSnapshot:
        """The current attribution for this GPU inventory. Cheap; no I/O."""
        if not self.settings.kubernetes:
            return EMPTY_SNAPSHOT
        kubelet = self.kubelet.state
        api = self.metadata.state
        view = self.metadata.view()
        counters = self.metadata.counters
        requests, relists, bookmarks = counters.requests(), counters.relists(), counters.bookmarks()
        slices = self.slices
        slices_state = slices.state if slices is not None else None
        if slices is not None:
            requests = tuple(sorted((*requests, *slices.counters.requests())))
            relists = tuple(sorted((*relists, *slices.counters.relists())))
            bookmarks = tuple(sorted((*bookmarks, *slices.counters.bookmarks())))
        status = AttributionStatus(
            enabled=True, kubelet_up=kubelet.up, kubelet_error=kubelet.error,
            kubelet_last_success=kubelet.last_success_wall, api_up=api.up, api_error=api.error,
            api_last_success=api.last_success_wall, api_requests=requests,
            api_relists=relists, api_bookmarks=bookmarks, pods_known=len(view.pods_by_name),
            process_attribution=self.process_attribution, dra_enabled=slices is not None,
            resourceslices_up=slices_state is not None and slices_state.up,
            resourceslices_error=slices_state.error if slices_state is not None else "")
        slice_view = slices.view() if slices is not None else None
        parts = self._parts(kubelet.listing, view, tuple(devices), tuple(migs), slice_view)
        return AttributionSnapshot(status=status, allocation_known=parts.allocation_known,
                                   allocations=parts.allocations, container_memory=parts.container_memory,
                                   processes=parts.processes, unattributed_bytes=parts.unattributed_bytes,
                                   process_gpus=parts.process_gpus,
                                   container_utilization=parts.container_utilization,
                                   unattributed_utilization=parts.unattributed_utilization,
                                   utilization_gpus=parts.utilization_gpus,
                                   container_peaks=self._published_peaks.of_pods(view.pods_by_name),
                                   unresolved=self._unresolved_counts(parts, bool(devices)))

    def _unresolved_counts(self, parts: _Parts, inventory_known: bool) -> Mapping[str, int]:
        """The unresolved DRA devices by reason, all 0 until NVML's inventory is known: before the
        first device list every published UUID would look like no GPU of this node (``not-on-node``)
        for the moments of start-up, and a rule watching that reason would see a false finding."""
        if self.slices is None:
            return EMPTY_COUNTS
        return every_reason(parts.unresolved if inventory_known else {})

    def _parts(self, listing: PodResourcesListing | None, view: MetadataView,
               devices: tuple[DeviceIdentity, ...], migs: tuple[MigIdentity, ...],
               slice_view: SliceView | None = None) -> _Parts:
        process_input = self._process_input
        with self._memo_lock:
            if self._catalog_key != (devices, migs):
                self._catalog_key = (devices, migs)
                self._catalog = DeviceCatalog(devices, migs)
                self._index_key = None
            # Keys hold the inputs themselves: comparing a tuple element with itself is an identity
            # check, so an unchanged input costs nothing, and a held object's id cannot be reused.
            index_key: tuple[object, ...] = (listing, self._catalog, slice_view)
            if self._index_key != index_key:
                self._index_key = index_key
                dra = DraContext(self._dra_drivers, slice_view) if slice_view is not None else None
                self._index = build_allocation_index(listing, self._catalog, dra) if listing else EMPTY_INDEX
                if devices:  # before NVML's inventory is known every ID would look unmatched
                    self._log_unmatched(self._index)
                    if dra is not None:
                        self._log_unresolved(self._index)
            key = (index_key, view.version, process_input)
            if self._memo is None or self._memo_key != key:
                self._memo = join_attribution(self._index, listing is not None, process_input, view,
                                              self._workloads)
                self._memo_key = key
            return self._memo

    def _log_unresolved(self, index: AllocationIndex) -> None:
        """One line per DRA device when it becomes unresolvable (or its reason changes), one when it
        resolves again; nothing while its state stays the same."""
        current: dict[tuple[tuple[str, str, str], tuple[str, ...]], UnresolvedClaim] = {}
        for item in index.unresolved:
            current.setdefault((item.device.triple, item.device.cdi_devices), item)
        for key, item in sorted(current.items(), key=lambda pair: pair[0]):
            claimed = item.device
            if item.reason == SLICES_UNAVAILABLE and self.slices is not None \
                    and self.slices.state.error_kind == "connecting":
                continue  # the first list is still under way: not a finding yet
            self._unresolved_log.change(
                key, item.reason, logging.WARNING,
                f"DRA device {claimed.described} of claim {claimed.claim_namespace}/{claimed.claim_name} "
                f"(pod {item.container.namespace}/{item.container.pod}) is not attributed to a GPU: "
                f"{EXPLAINED[item.reason]}", reason=item.reason, driver=claimed.driver, pool=claimed.pool,
                device=claimed.device, claim=f"{claimed.claim_namespace}/{claimed.claim_name}")
            self._logged_unresolved[key] = claimed.described
        for key in [key for key in self._logged_unresolved if key not in current]:
            described = self._logged_unresolved.pop(key)
            self._unresolved_log.forget(key)
            LOG.info("DRA device %s is attributed now, or no longer claimed", described,
                     extra={"fields": {"driver": key[0][0], "pool": key[0][1], "device": key[0][2]}})

    def _log_unmatched(self, index: AllocationIndex) -> None:
        configured = self.settings.kubernetes_gpu_id_type
        if index.id_types and configured not in index.id_types and index.id_types != self._logged_id_types:
            LOG.info("the device plugin names GPUs as %s, not %s as --kubernetes-gpu-id-type says; both "
                     "forms are understood, so attribution works either way",
                     "/".join(sorted(index.id_types)), configured)
            self._logged_id_types = index.id_types
        if index.unmatched_device_ids and index.unmatched_device_ids != self._logged_unmatched:
            LOG.warning("kubelet lists GPU device IDs that match no GPU on this node: %s (forms understood: "
                        "GPU-<uuid>, MIG-<uuid>, MIG-GPU-<uuid>/<gi>/<ci>, nvidia<minor>[/gi<id>][/vgpu<n>], "
                        "each optionally with ::<replica>)", ", ".join(index.unmatched_device_ids[:10]))
        self._logged_unmatched = index.unmatched_device_ids
