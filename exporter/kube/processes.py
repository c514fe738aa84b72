"""Which pod and container a GPU process belongs to: PID -> /proc/<pid>/cgroup -> pod UID + container ID.

NVML lists the processes on each GPU with their host PIDs and framebuffer usage. With the host's
``/proc`` visible (``hostPID: true``, or ``--proc-root`` pointing at a host mount), each PID's
cgroup path names its pod and container, which is enough to give every pod its own memory on a
shared GPU, and to notice memory held by processes that belong to no pod any more.

Cgroup paths seen in practice (the pod UID uses ``_`` instead of ``-`` under systemd):

* cgroup v2, systemd driver:
  ``0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope``
  (``crio-<id>.scope`` for CRI-O, ``docker-<id>.scope`` for Docker/cri-dockerd; Guaranteed pods sit
  directly under ``kubepods.slice/kubepods-pod<uid_>.slice``);
* cgroup v1: one line per hierarchy, ``4:memory:/kubepods/burstable/pod<uid>/<id>`` with the
  cgroupfs driver (``crio-<id>`` for CRI-O), or the systemd slices as above;
* from inside a container with its own cgroup namespace the path may start with ``/../..``;
  kind nodes add a ``/kubelet.slice/kubelet-kubepods.slice`` prefix. Only the pod segment and the
  segment right after it matter, so prefixes do not.

Reading is cached per PID and keyed on the process start time (field 22 of ``/proc/<pid>/stat``)
so that a recycled PID is read again; entries for PIDs that left the GPU lists are evicted on
every update, so the cache never outgrows the GPU process table. Nothing is shelled out.

The same join attributes per-process utilization samples (``attribute_utilization``). A sample
can name a process that has exited since (it ran during the interval): while its PID is still
in the cache (it was on a GPU list at the previous update) its container is the cached one;
otherwise nobody can tell whose it was and it counts as unattributed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.kube.deviceids import GpuKey
from exporter.kube.metadata import MetadataView
from exporter.snapshot import GpuProcess, ProcessUtilization, ProcessUtilizationSample

_UUID_WITH_SEPARATORS = r"[0-9a-fA-F]{8}(?:[-_][0-9a-fA-F]{4}){3}[-_][0-9a-fA-F]{12}"
# Static (mirror) pods have a 32-hex-digit UID (an MD5 of the manifest) instead of a UUID.
_POD_SEGMENT = re.compile(
    # kubepods-burstable-pod<uid>.slice, kubelet-kubepods-pod<uid>.slice (kind), pod<uid> (cgroupfs)
    rf"^(?:[a-z0-9_]+-)*pod({_UUID_WITH_SEPARATORS}|[0-9a-fA-F]{{32}})(?:\.slice)?$")
_CONTAINER_SEGMENT = re.compile(
    r"^(?:(?:cri-containerd|crio|docker|containerd|cri-dockerd|libpod)-)?([0-9a-fA-F]{12,128})(?:\.scope)?$")


@dataclass(frozen=True)
class CgroupIdentity:
    """The pod UID and container ID a cgroup path names (container None: the pod's own cgroup)."""

    pod_uid: str
    container_id: str | None


def parse_cgroup_path(path: str) -> CgroupIdentity | None:
    """Find the pod and container in one cgroup path; None when it is not a pod's cgroup."""
    segments = [segment for segment in path.split("/") if segment and segment != ".."]
    for position, segment in enumerate(segments):
        pod = _POD_SEGMENT.match(segment)
        if pod is None:
            continue
        uid = pod.group(1).replace("_", "-").lower()
        container_id: str | None = None
        if position + 1 < len(segments):
            container = _CONTAINER_SEGMENT.match(segments[position + 1])
            if container is not None:
                container_id = container.group(1).lower()
        return CgroupIdentity(pod_uid=uid, container_id=container_id)
    return None


def parse_cgroup_file(text: str) -> CgroupIdentity | None:
    """Parse a whole ``/proc/<pid>/cgroup`` file (v1: several hierarchies; v2: ``0::<path>``).

    The first line that names a pod wins; hierarchies of one process agree on the pod, and a
    v1 line without a container (e.g. a controller not delegated per container) gives way to one
    that has it.
    """
    best: CgroupIdentity | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        identity = parse_cgroup_path(parts[2])
        if identity is None:
            continue
        if identity.container_id is not None:
            return identity
        best = best or identity
    return best


def read_start_time(proc_root: Path, pid: int) -> int | None:
    """Field 22 (starttime, clock ticks since boot) of ``/proc/<pid>/stat``; None if unreadable.

    The command name (field 2) may contain spaces and parentheses, so fields are counted from
    the last ``)``.
    """
    try:
        text = (proc_root / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    _, paren, rest = text.rpartition(")")
    fields = rest.split()
    if not paren or len(fields) < 20:
        return None
    try:
        return int(fields[19])  # fields[0] is field 3 (state), so field 22 is fields[19]
    except ValueError:
        return None


@dataclass(frozen=True)
class _Entry:
    start_time: int | None
    identity: CgroupIdentity | None


class ProcessCgroupResolver:
    """PID -> CgroupIdentity with a per-PID cache keyed on the process start time.

    Not thread-safe by itself: the attribution facade calls it from one thread at a time.
    """

    def __init__(self, proc_root: str | Path = "/proc") -> None:
        self.proc_root = Path(proc_root)
        self._cache: dict[int, _Entry] = {}
        self.reads = 0  # cgroup files read (for tests: the cache works)

    def resolve(self, pid: int) -> CgroupIdentity | None:
        start_time = read_start_time(self.proc_root, pid)
        cached = self._cache.get(pid)
        if cached is not None and (cached.start_time == start_time or start_time is None):
            # Unchanged, or gone since it was read: what it ran in then is still what its last
            # samples belong to. (A PID reused since has a different start time: read again.)
            return cached.identity
        identity: CgroupIdentity | None = None
        try:
            text = (self.proc_root / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
            self.reads += 1
            identity = parse_cgroup_file(text)
        except OSError:
            identity = None
        self._cache[pid] = _Entry(start_time, identity)
        return identity

    def retain(self, pids: Iterable[int]) -> None:
        """Forget every PID not in ``pids`` (the processes currently on some GPU)."""
        keep = set(pids)
        for pid in [pid for pid in self._cache if pid not in keep]:
            del self._cache[pid]

    def __len__(self) -> int:
        return len(self._cache)


@dataclass(frozen=True, order=True)
class ProcessOwner:
    """The container a process runs in, as the API names it."""

    namespace: str
    pod: str
    container: str
    pod_uid: str


@dataclass(frozen=True)
class ProcessRecord:
    """One GPU process: where it runs, its framebuffer bytes (None: NVML did not say), its owner."""

    gpu: GpuKey
    pid: int
    used_memory_bytes: int | None
    owner: ProcessOwner | None


def owner_of(identity: CgroupIdentity | None, view: MetadataView) -> ProcessOwner | None:
    """Join a cgroup identity with the API's pods. None: not a pod's process, or a pod the API
    does not know (deleted, or the API unreachable); such memory is reported as unattributed.

    When the container ID is not (yet) in the pod's status, a pod with a single container is
    still attributed: there is no other container it could be.
    """
    if identity is None:
        return None
    pod = view.pods_by_uid.get(identity.pod_uid)
    if pod is None:
        return None
    container_name: str | None = None
    if identity.container_id is not None:
        found = view.containers_by_id.get(identity.container_id)
        if found is not None and found[0].uid == pod.uid:
            container_name = found[1]
    if container_name is None:
        names = {name for _, name in pod.containers}
        if len(names) != 1:
            return None
        container_name = next(iter(names))
    return ProcessOwner(namespace=pod.namespace, pod=pod.name, container=container_name, pod_uid=pod.uid)


@dataclass(frozen=True)
class UtilizationRecord:
    """One process's utilization sample on a whole GPU, with its owner (None: no known pod)."""

    uuid: str
    sample: ProcessUtilizationSample
    owner: ProcessOwner | None


def attribute_utilization(utilization: Mapping[str, ProcessUtilization],
                          identities: Mapping[int, CgroupIdentity | None],
                          view: MetadataView) -> tuple[UtilizationRecord, ...]:
    """Every per-process utilization sample with its owner, by the same join as the memory
    (``owner_of``), sorted by GPU and PID. Pure."""
    return tuple(UtilizationRecord(uuid, sample, owner_of(identities.get(sample.pid), view))
                 for uuid, reading in sorted(utilization.items()) for sample in reading.samples)


def gpu_key_of(uuid: str, process: GpuProcess) -> GpuKey:
    """NVML reports MIG processes on the parent GPU with their GPU-instance id."""
    return GpuKey(uuid, process.gpu_instance_id)


def attribute_processes(processes: Mapping[str, Sequence[GpuProcess]],
                        identities: Mapping[int, CgroupIdentity | None],
                        view: MetadataView) -> tuple[ProcessRecord, ...]:
    """Every GPU process with its owner, sorted by GPU, instance and PID. Pure.

    A PID listed twice on one GPU or MIG instance (NVML's compute and graphics lists both
    report a process that does both) is one process: it is kept once, with the larger memory
    figure, so that per-container sums do not count the same allocation twice.
    """
    unique: dict[tuple[GpuKey, int], GpuProcess] = {}
    for uuid, listed in processes.items():
        for process in listed:
            key = (gpu_key_of(uuid, process), process.pid)
            known = unique.get(key)
            if known is None or (process.used_memory_bytes or -1) > (known.used_memory_bytes or -1):
                unique[key] = process
    records = [
        ProcessRecord(gpu, pid, process.used_memory_bytes, owner_of(identities.get(pid), view))
        for (gpu, pid), process in unique.items()
    ]
    records.sort(key=lambda record: (record.gpu.uuid, record.gpu.gpu_instance_id or -1, record.pid))
    return tuple(records)
