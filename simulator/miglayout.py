"""Simulated MIG state of one GPU: its GPU instances, compute instances and MIG device slots.

NVML shows a MIG-enabled GPU as a parent handle plus up to ``nvmlDeviceGetMaxMigDeviceCount``
MIG device slots; each MIG device is one compute instance inside one GPU instance and has its own
``MIG-<uuid>``, a name ending in its profile (``NVIDIA H100 80GB HBM3 MIG 1g.10gb``, or
``... MIG 1c.3g.40gb`` for a compute instance that takes part of a GPU instance) and its own
memory figures. This module keeps that state for the fake library, including what happens when an
administrator changes the layout while the exporter runs: instances that stay keep their slot, GPU
instance id and UUID; destroyed ones leave an empty slot (NVML answers NOT_FOUND there); new ones
take the lowest free slots and get new UUIDs.

GPU-instance ids follow the pattern seen on A100/H100 (7g -> 0, 4g -> 1, 3g -> 1-2, 2g -> 3-6,
1g -> 7-13); they are an estimate of NVML's placement-based numbering, unique per GPU like the real ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simulator.models import MIB, MIG_MAX_DEVICES, MIG_MEMORY_SLICES, MIG_PROFILES, GpuModel, MigProfile
from simulator.patterns import channel_key
from simulator.profiling import ActivityModel, GpmCounters
from simulator.scenario import MigInstanceSpec, ProcessSpec

_GPU_INSTANCE_IDS = {7: (0,), 4: (1,), 3: (1, 2), 2: (3, 4, 5, 6), 1: (7, 8, 9, 10, 11, 12, 13)}
_ANY_ID = tuple(range(1, 15))


def _clamp(value: float, low: float, high: float) -> float:
    return low if value < low else high if value > high else value


def mig_uuid(seed: int, gpu: int, serial: int, compute_instance: int) -> str:
    """A stable ``MIG-<uuid>`` for the ``serial``-th instance created on ``gpu`` (current drivers' format)."""
    high = channel_key(seed, gpu, f"mig-uuid-high:{serial}:{compute_instance}")
    low = channel_key(seed, gpu, f"mig-uuid-low:{serial}:{compute_instance}")
    text = f"{high:016x}{low:016x}"
    return f"MIG-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"


class SimulatedGpuInstance:
    """One GPU instance: its profile, load, memory and GPM counters (shared by its compute instances)."""

    def __init__(self, spec: MigInstanceSpec, profile: MigProfile, *, gpu_instance_id: int, serial: int,
                 model: GpuModel, key: Callable[[str], int]) -> None:
        self.spec = spec
        self.profile = profile
        self.gpu_instance_id = gpu_instance_id
        self.serial = serial
        self.memory_total = profile.memory_bytes
        # The driver reserves a share of the instance's memory like it does on a whole GPU (estimate).
        self.memory_reserved = model.memory_reserved * profile.memory_slices // MIG_MEMORY_SLICES // MIB * MIB
        self._key = key
        prefix = f"gi{serial}"
        self._load_key = key(f"{prefix}:load")
        self._memory_key = key(f"{prefix}:memory_used")
        self.activity = ActivityModel(spec.profiling, lambda name: key(f"{prefix}:{name}"), self.load,
                                      lambda t: self.load(t) * 0.42)
        self.counters = GpmCounters(self.activity)

    def load(self, t: float) -> float:
        return _clamp(self.spec.load.at(t, self._load_key), 0.0, 100.0)

    def processes(self, t: float) -> list[ProcessSpec]:
        return [process for process in self.spec.processes if process.window.active(t)]

    def memory_used(self, t: float) -> int:
        usable = self.memory_total - self.memory_reserved
        if self.spec.memory_used is not None:
            used = self.spec.memory_used.at(t, self._memory_key)
        else:
            used = sum(p.used_memory or 0 for p in self.processes(t)) + MIB // 2
        return int(_clamp(used, 0.0, usable))


@dataclass(frozen=True)
class SimulatedMigDevice:
    """One MIG device (a compute instance in a GPU instance) in NVML slot ``slot`` of its parent."""

    parent: int
    slot: int
    instance: SimulatedGpuInstance
    compute_instance_id: int
    uuid: str
    name: str

    @property
    def gpu_instance_id(self) -> int:
        return self.instance.gpu_instance_id


class MigLayout:
    """The MIG devices of one GPU; ``changed`` builds the next layout when an administrator reconfigures."""

    def __init__(self, gpu: int, model: GpuModel, parent_name: str, seed: int, key: Callable[[str], int]) -> None:
        self.gpu = gpu
        self.model = model
        self.parent_name = parent_name
        self.seed = seed
        self._key = key
        self.profiles = MIG_PROFILES[model.key]
        self.slots: dict[int, SimulatedMigDevice] = {}
        self.instances: dict[int, SimulatedGpuInstance] = {}
        self._created = 0

    @classmethod
    def create(cls, gpu: int, model: GpuModel, parent_name: str, seed: int, key: Callable[[str], int], *,
               specs: Sequence[MigInstanceSpec]) -> MigLayout:
        layout = cls(gpu, model, parent_name, seed, key)
        layout._add(specs)
        return layout

    def changed(self, specs: Sequence[MigInstanceSpec]) -> MigLayout:
        """The layout after destroying the instances not in ``specs`` and creating the missing ones.

        Existing instances are matched by profile, oldest first: they keep slot, ids, UUID and settings.
        """
        wanted = list(specs)
        kept: list[SimulatedGpuInstance] = []
        for instance in sorted(self.instances.values(), key=lambda item: item.serial):
            match = next((spec for spec in wanted if spec.profile == instance.spec.profile), None)
            if match is not None:
                wanted.remove(match)
                kept.append(instance)
        layout = MigLayout(self.gpu, self.model, self.parent_name, self.seed, self._key)
        layout._created = self._created
        for instance in kept:
            layout.instances[instance.gpu_instance_id] = instance
        for slot, device in self.slots.items():
            if device.instance in kept:
                layout.slots[slot] = device
        layout._add(wanted)
        return layout

    def _add(self, specs: Sequence[MigInstanceSpec]) -> None:
        # Bigger instances first, as an administrator places them, so their usual ids are free.
        order = sorted(range(len(specs)), key=lambda i: -self.profiles[specs[i].profile].compute_slices)
        ids: dict[int, int] = {}
        for position in order:
            profile = self.profiles[specs[position].profile]
            used = set(self.instances) | set(ids.values())
            pool = _GPU_INSTANCE_IDS.get(profile.compute_slices, ()) + _ANY_ID
            ids[position] = next(candidate for candidate in pool if candidate not in used)
        for position, spec in enumerate(specs):
            profile = self.profiles[spec.profile]
            serial = self._created
            self._created += 1
            instance = SimulatedGpuInstance(spec, profile, gpu_instance_id=ids[position], serial=serial,
                                            model=self.model, key=self._key)
            self.instances[instance.gpu_instance_id] = instance
            slices = profile.compute_slices // spec.compute_instances
            for compute_instance in range(spec.compute_instances):
                label = profile.name if spec.compute_instances == 1 else f"{slices}c.{profile.name}"
                slot = next(s for s in range(MIG_MAX_DEVICES) if s not in self.slots)
                self.slots[slot] = SimulatedMigDevice(
                    parent=self.gpu, slot=slot, instance=instance, compute_instance_id=compute_instance,
                    uuid=mig_uuid(self.seed, self.gpu, serial, compute_instance),
                    name=f"{self.parent_name} MIG {label}")

    def load(self, t: float) -> float:
        """The whole GPU's activity: each instance's load weighted by its share of the compute slices."""
        return sum(instance.load(t) * instance.profile.compute_slices for instance in self.instances.values()) / 7.0

    def memory_used(self, t: float) -> int:
        return sum(instance.memory_used(t) for instance in self.instances.values())

    def processes(self, t: float) -> list[tuple[ProcessSpec, int, int]]:
        """(process, GPU instance id, compute instance id) of every process in an instance."""
        found: list[tuple[ProcessSpec, int, int]] = []
        for instance in self.instances.values():
            for process in instance.processes(t):
                found.append((process, instance.gpu_instance_id, 0))
        return found
