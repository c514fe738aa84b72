"""Peaks between scrapes per container: the highest framebuffer use and SM utilisation of each container's
processes over the trailing peak window (``DCGM_EXP_CONTAINER_FB_USED_PEAK``, ``..._SM_UTIL_PEAK``).

Why: ``DCGM_EXP_FB_USED_PEAK`` (exporter/nvml/peaks.py) shows that a GPU spiked between two scrapes, but
on a shared GPU it cannot say whose spike it was; and the container whose allocation spiked into an
out-of-memory kill is usually gone by the next scrape, its ``DCGM_EXP_CONTAINER_FB_USED`` series with it.
The attribution already joins every process-list read (each ``--process-interval``) to containers, so
each container's value at each read is known; this module keeps their trailing maximum.

The same design as the GPU peaks: a trailing-window maximum of samples (``WindowMax``), which depends
only on the process reads and the clock, never on who scraped when (two Prometheus replicas see the
same value; nothing is reset by a scrape), costs no NVML call, and is published as an immutable value
that the renderer reads once per render.

Which samples: at each read of a GPU's process list (or its per-process utilization samples), every
container with a process there has a sample (the sum over its processes). A tracked container absent
from a read of that GPU used nothing then (0): its processes ended. It keeps its series until its
last real sample leaves the window, so a container killed right after a spike still shows the spike
in the next scrape; then it is dropped (bounded: one series per container and GPU, plus the ones that
left within the last window). A GPU whose list was not read this time adds no sample for its
containers (as a failed GPU reading adds none to the GPU peaks).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from exporter.kube.deviceids import GpuKey
from exporter.kube.processes import ProcessOwner, ProcessRecord, UtilizationRecord
from exporter.nvml.peaks import WindowMax

if TYPE_CHECKING:
    from exporter.kube.attribution import Workload


@dataclass(frozen=True, order=True)
class PeakKey:
    """One container on one GPU (``gpu_instance_id`` None) or MIG instance."""

    uuid: str
    gpu_instance_id: int | None
    namespace: str
    pod: str
    container: str

    @property
    def gpu(self) -> GpuKey:
        return GpuKey(self.uuid, self.gpu_instance_id)


def _key(gpu: GpuKey, owner: ProcessOwner) -> PeakKey:
    return PeakKey(gpu.uuid, gpu.gpu_instance_id, owner.namespace, owner.pod, owner.container)


def memory_samples(records: Iterable[ProcessRecord]) -> dict[PeakKey, float]:
    """Framebuffer bytes per container and GPU at one read (the sum over its processes; processes of no
    known pod are not anyone's). Pure."""
    used: dict[PeakKey, float] = {}
    for record in records:
        if record.owner is not None:
            key = _key(record.gpu, record.owner)
            used[key] = used.get(key, 0.0) + float(record.used_memory_bytes or 0)
    return used


def sm_samples(records: Iterable[UtilizationRecord]) -> dict[PeakKey, float]:
    """SM utilisation (% of the whole GPU) per container and GPU over one process interval. Pure."""
    used: dict[PeakKey, float] = {}
    for record in records:
        if record.owner is not None:
            key = _key(GpuKey(record.uuid), record.owner)
            used[key] = used.get(key, 0.0) + float(record.sample.sm)
    return used


@dataclass(frozen=True)
class ContainerPeakValues:
    """The published peaks: per container and GPU, its workload (for the labels) and its highest value.

    ``memory`` in bytes, ``sm_util`` in percent. Containers that left within the last window are still
    here, with the workload they had.
    """

    memory: Mapping[PeakKey, tuple[Workload, float]] = field(default_factory=lambda: MappingProxyType({}))
    sm_util: Mapping[PeakKey, tuple[Workload, float]] = field(default_factory=lambda: MappingProxyType({}))

    def by_gpu(self) -> tuple[dict[GpuKey, dict[PeakKey, tuple[Workload, float]]],
                              dict[GpuKey, dict[PeakKey, tuple[Workload, float]]]]:
        """Both mappings grouped by GPU or MIG instance (the renderer walks devices)."""
        return _group(self.memory), _group(self.sm_util)

    def of_pods(self, pods: Container[tuple[str, str]]) -> ContainerPeakValues:
        """Only the containers whose pod still exists, by (namespace, name): a deleted pod's peaks go
        with its other series at once, not one window later (a container that exited in a pod that
        remains, an out-of-memory kill, keeps its peak for the window)."""
        def alive(values: Mapping[PeakKey, tuple[Workload, float]]) -> Mapping[PeakKey, tuple[Workload, float]]:
            if all((key.namespace, key.pod) in pods for key in values):
                return values
            return MappingProxyType({key: value for key, value in values.items() if (key.namespace, key.pod) in pods})

        memory, sm_util = alive(self.memory), alive(self.sm_util)
        if memory is self.memory and sm_util is self.sm_util:
            return self
        return ContainerPeakValues(memory=memory, sm_util=sm_util)


NO_PEAKS = ContainerPeakValues()


def _group(values: Mapping[PeakKey, tuple[Workload, float]]) -> dict[GpuKey, dict[PeakKey, tuple[Workload, float]]]:
    grouped: dict[GpuKey, dict[PeakKey, tuple[Workload, float]]] = {}
    for key, value in values.items():
        grouped.setdefault(key.gpu, {})[key] = value
    return grouped


class _Tracked:
    __slots__ = ("last_seen", "window", "workload")

    def __init__(self, window_s: float, workload: Workload, now: float) -> None:
        self.window = WindowMax(window_s)
        self.workload = workload
        self.last_seen = now


class _Reading:
    """The windows of one reading (memory or SM utilisation), by container and GPU."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._tracked: dict[PeakKey, _Tracked] = {}

    def observe(self, now: float, samples: Mapping[PeakKey, float], read_gpus: frozenset[str],
                workload: Callable[[PeakKey], Workload],
                pods: Container[tuple[str, str]]) -> dict[PeakKey, tuple[Workload, float]]:
        tracked = self._tracked
        published: dict[PeakKey, tuple[Workload, float]] = {}
        for key, value in samples.items():
            entry = tracked.get(key)
            if entry is None:
                entry = tracked[key] = _Tracked(self.window_s, workload(key), now)
            else:
                entry.last_seen = now
                entry.workload = workload(key)
            published[key] = (entry.workload, entry.window.add(now, value))
        for key in [key for key in tracked if key not in samples]:
            entry = tracked[key]
            if now - entry.last_seen >= self.window_s or (key.namespace, key.pod) not in pods:
                del tracked[key]  # its last real sample left the window, or its pod was deleted: the series goes
            elif key.uuid in read_gpus:
                published[key] = (entry.workload, entry.window.add(now, 0.0))  # it has no process there now
        return published

    def __len__(self) -> int:
        return len(self._tracked)


class ContainerPeaks:
    """The per-container windows; fed by the attribution once per process read (one thread at a time)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._memory = _Reading(window_s)
        self._sm = _Reading(window_s)

    def observe(self, now: float, memory: Mapping[PeakKey, float], memory_gpus: frozenset[str], *,
                sm_util: Mapping[PeakKey, float], sm_gpus: frozenset[str],
                workload: Callable[[PeakKey], Workload],
                pods: Container[tuple[str, str]]) -> ContainerPeakValues:
        """Take one read's per-container values (``*_gpus``: the GPU UUIDs that read covered; ``pods``: the
        (namespace, name) of the pods that exist now) and return the peaks to publish."""
        return ContainerPeakValues(
            memory=MappingProxyType(self._memory.observe(now, memory, memory_gpus, workload, pods)),
            sm_util=MappingProxyType(self._sm.observe(now, sm_util, sm_gpus, workload, pods)))

    def __len__(self) -> int:
        """Windows held (for tests: containers that left are dropped)."""
        return len(self._memory) + len(self._sm)
