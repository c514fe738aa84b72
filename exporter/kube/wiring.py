"""Wiring the Kubernetes attribution (``-k``) into the running exporter.

The attribution library (``attribution``, ``series``) knows nothing about the app; this module
connects the two through the hub (``KubernetesWiring.install(hub)``, the shape every optional source
has), so neither the sampler nor the renderer learns about Kubernetes:

* lifecycle: the kubelet client and the API watches start after NVML's first initialisation and stop
  after the HTTP server; every change they publish invalidates the exposition cache (``hub.invalidate``,
  which exists before any source), so the renderer thread re-renders. A scrape only copies bytes.
* once per render (``extend_context``, the hub's attribution hook): the attribution is joined for the GPUs
  and MIG instances of the snapshot being rendered (``KubernetesAttribution.snapshot`` does no
  I/O and is memoised), and the result goes into ``RenderContext.attribution`` and into a workload
  labeler bound to it. The payload series (``DCGM_FI_*``) and the attribution's own families
  (``families``) therefore see the same value, computed once.
* processes (``on_snapshot``): the sampler reads NVML's process lists and per-process
  utilization samples every ``--process-interval``; they are handed to a small worker thread that
  resolves PIDs through ``/proc/<pid>/cgroup``, so the sampling thread never waits on ``/proc`` (a
  host with hostPID and a busy ``/proc`` must not delay NVML readings). Only readings the sampler
  actually re-read are handed over; the worker coalesces them, keeping only the newest.

MIG: the MIG devices come from ``Snapshot.migs`` (every compute instance the sampler tracks, which
is what the kubelet's ``MIG-<uuid>`` IDs name) and the readings' ``DeviceReading.mig``. A
MIG-enabled GPU is attributed per GPU instance (one ``DCGM_EXP_GPU_ALLOCATED`` series per instance,
none for the parent, which no pod can hold while MIG is on); the parent's device-level series
carry no workload labels.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import Metric

from exporter.hub import Hub
from exporter.kube.attribution import AttributionSnapshot, KubernetesAttribution
from exporter.kube.series import (
    VIRTUAL_GPU_FIELDS,
    LabeledDevice,
    attribution_families,
    virtual_gpu_samples,
    workload_label_sets,
)
from exporter.kube.settings import KubernetesSettings
from exporter.logs import get_logger
from exporter.metrics.render import RenderContext
from exporter.snapshot import DeviceIdentity, GpuProcess, MigIdentity, ProcessUtilization, Snapshot
from exporter.supervisor import supervised

LOG = get_logger("kube.wiring")

ProcessLists = Mapping[str, tuple[GpuProcess, ...]]


@dataclass(frozen=True)
class ProcessReadings:
    """What one process read of the sampler gives attribution: lists and utilization, by GPU UUID."""

    lists: ProcessLists
    utilization: Mapping[str, ProcessUtilization]


def mig_identities(snapshot: Snapshot) -> tuple[MigIdentity, ...]:
    """Every MIG device the snapshot knows: ``Snapshot.migs`` plus any only its readings name."""
    found: dict[str, MigIdentity] = {}
    for mig in (*snapshot.migs, *(item.identity for reading in snapshot.devices for item in reading.mig)):
        found.setdefault(mig.uuid, mig)
    return tuple(found.values())


def mig_instances(snapshot: Snapshot) -> dict[tuple[str, int], MigIdentity]:
    """One MIG identity per (parent UUID, GPU instance id): the first compute instance's, whose
    profile is the GPU instance's (dcgm-exporter labels MIG series per GPU instance)."""
    found: dict[tuple[str, int], MigIdentity] = {}
    for mig in sorted(mig_identities(snapshot), key=lambda item: (item.gpu_instance_id, item.compute_instance_id)):
        found.setdefault((mig.parent_uuid, mig.gpu_instance_id), mig)
    return found


def labeled_devices(ctx: RenderContext) -> list[LabeledDevice]:
    """Every GPU of the snapshot, or every GPU instance of a MIG-enabled GPU, with its base labels.

    Lost GPUs are included: which pod holds a GPU is the kubelet's fact, and it is exactly what
    an operator needs when that GPU falls off the bus.
    """
    instances = mig_instances(ctx.snapshot)
    devices: list[LabeledDevice] = []
    for reading in ctx.snapshot.devices:
        identity = reading.identity
        own = sorted(((gi, mig) for (uuid, gi), mig in instances.items() if uuid == identity.uuid),
                     key=lambda item: item[0])
        if not own:
            devices.append(LabeledDevice(identity.uuid, None, ctx.base_labels(identity)))
        for gpu_instance_id, mig in own:
            devices.append(LabeledDevice(identity.uuid, gpu_instance_id, ctx.base_labels(identity, mig)))
    return devices


class _ProcessFeed:
    """Hands process readings from the sampling thread to one worker; only the newest is kept."""

    def __init__(self, consume: Callable[[ProcessReadings], None]) -> None:
        self._consume = consume
        self._lock = threading.Lock()
        self._pending: ProcessReadings | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def offer(self, processes: ProcessReadings) -> None:
        with self._lock:
            self._pending = processes
        self._wake.set()

    def start(self) -> None:
        self._stop.clear()
        self._thread = supervised(self._run, name="kube-processes", stop=self._stop)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            with self._lock:
                pending, self._pending = self._pending, None
            if pending is None:
                continue
            try:
                self._consume(pending)
            except Exception:  # a bug here must not end process attribution for good
                LOG.exception("attributing GPU processes failed; retrying with the next process lists")


class KubernetesWiring:
    """The attribution as seen by the app: hooks for start/stop, snapshots, renders and builders."""

    def __init__(self, settings: KubernetesSettings, attribution: KubernetesAttribution | None = None) -> None:
        self.settings = settings  # built at the composition root from the resolved configuration
        self._invalidate: Callable[[], None] = lambda: None  # the hub's, once installed
        self.attribution = attribution or KubernetesAttribution(settings, on_change=self._changed)
        self._feed = _ProcessFeed(self._update_processes) if settings.processes.process_attribution else None
        self._offered: ProcessReadings | None = None

    def _update_processes(self, readings: ProcessReadings) -> None:
        self.attribution.update_processes(readings.lists, readings.utilization)

    def _changed(self) -> None:
        self._invalidate()

    def install(self, hub: Hub) -> None:
        """Plug into the hub: re-render whenever the attribution changes (from the sources' threads)."""
        self._invalidate = hub.invalidate
        hub.add_service(self.start, self.stop)
        hub.set_attribution(self.extend_context)
        hub.add_families(self.families)
        if self._feed is not None:
            hub.on_snapshot(self.on_snapshot)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        settings = self.settings
        LOG.info("Kubernetes attribution on", extra={"fields": {
            "pod_resources_socket": settings.kubelet.pod_resources_socket,
            "node": settings.api.node_name or "(hostname)", "kubeconfig": settings.api.kubeconfig or "(in-cluster)",
            "gpu_id_type": settings.kubernetes_gpu_id_type, "virtual_gpus": settings.series.kubernetes_virtual_gpus,
            "process_attribution": settings.processes.process_attribution,
            "proc_root": settings.processes.proc_root}})
        if self._feed is not None:
            self._feed.start()
        self.attribution.start()

    def stop(self) -> None:
        self.attribution.stop()
        if self._feed is not None:
            self._feed.stop()

    # -- sampler -----------------------------------------------------------------------------------

    def on_snapshot(self, snapshot: Snapshot) -> None:
        """Sampling thread: pass on process readings the sampler re-read (it keeps the same objects
        between reads)."""
        if self._feed is None:
            return
        readings = ProcessReadings(
            lists={reading.identity.uuid: reading.processes for reading in snapshot.devices
                   if reading.processes is not None},
            utilization={reading.identity.uuid: reading.process_utilization for reading in snapshot.devices
                         if reading.process_utilization is not None})
        previous = self._offered  # held, so unchanged readings can be recognised by identity
        if previous is not None and _same_objects(previous.lists, readings.lists) and _same_objects(
                previous.utilization, readings.utilization):
            return
        self._offered = readings
        self._feed.offer(readings)

    # -- rendering ---------------------------------------------------------------------------------

    def extend_context(self, ctx: RenderContext) -> RenderContext:
        """Join the attribution once for this render; bind the workload labeler to that value."""
        devices: tuple[DeviceIdentity, ...] = tuple(reading.identity for reading in ctx.snapshot.devices)
        attribution = self.attribution.snapshot(devices, mig_identities(ctx.snapshot))
        instances = mig_instances(ctx.snapshot)
        settings = self.settings.series

        def workloads(identity: DeviceIdentity, gpu_instance_id: int | None) -> Sequence[Mapping[str, str]]:
            mig = instances.get((identity.uuid, gpu_instance_id)) if gpu_instance_id is not None else None
            device = LabeledDevice(identity.uuid, gpu_instance_id, ctx.base_labels(identity, mig))
            return workload_label_sets(attribution, device, settings)

        def field_workloads(identity: DeviceIdentity, gpu_instance_id: int | None,
                            field: str) -> Sequence[tuple[Mapping[str, str], float]] | None:
            if not settings.kubernetes_virtual_gpus or field not in VIRTUAL_GPU_FIELDS:
                return None
            mig = instances.get((identity.uuid, gpu_instance_id)) if gpu_instance_id is not None else None
            device = LabeledDevice(identity.uuid, gpu_instance_id, ctx.base_labels(identity, mig))
            return virtual_gpu_samples(attribution, device, field, settings)

        return dataclasses.replace(ctx, workloads=workloads, field_workloads=field_workloads,
                                   attribution=attribution)

    def families(self, ctx: RenderContext) -> list[Metric]:
        """DCGM_EXP_GPU_ALLOCATED/_ALLOCATION_INFO, memory per container, and the Kubernetes self-metrics."""
        if not isinstance(ctx.attribution, AttributionSnapshot):  # a context that did not go through extend_context
            return []
        return attribution_families(ctx.attribution, labeled_devices(ctx), self.settings.series)


def _same_objects(old: Mapping[str, object], new: Mapping[str, object]) -> bool:
    return old.keys() == new.keys() and all(new[key] is old[key] for key in new)
