"""MIG: find each GPU's MIG devices, keep the list current cheaply, and read per-instance memory.

A MIG-enabled GPU is one parent handle plus up to ``nvmlDeviceGetMaxMigDeviceCount`` MIG device
slots; each MIG device is a compute instance (CI) inside a GPU instance (GI) with its own
``MIG-<uuid>``. The kubelet hands pods those UUIDs, so the attribution code needs every MIG
device's identity; dcgm-exporter labels per-instance series with ``GPU_I_PROFILE`` (the GPU
instance's profile, ``1g.10gb``) and ``GPU_I_ID`` (the GI id).

Walking the slots is not free: NVIDIA's DRA driver notes that a full walk under load "can easily be
O(10 s)" (dra-driver-nvidia-gpu, ``cmd/gpu-kubelet-plugin/nvlib.go``), and the layout only changes
when an administrator reconfigures MIG. So the tracker does not walk every cycle. Every
``check_interval_s`` (60 s) it probes: the MIG mode (one call) and, when enabled, each slot's handle
and UUID. Only MIG devices whose UUID it has not seen before are identified (GI id, CI id, name); an
unchanged layout costs no identification calls at all. A MIG handle that stops answering (NOT_FOUND
/ INVALID_ARGUMENT when the instance was destroyed) marks the layout stale so it is probed again at
the next cycle. A new layout is therefore seen within 60 s, at once when an old instance disappears
(``nvmlEventMigConfigChange`` is not subscribed to: the periodic probe already bounds the delay).

Empty slots answer NOT_FOUND (or INVALID_ARGUMENT) and are skipped, as NVIDIA's own Go code does,
rather than ending the walk (nvitop stops at the first error and misses later instances).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from exporter.metrics.catalog import FieldSpec, FromFieldRate, Scope
from exporter.nvml.client import ErrorClass, NvmlClient, classify
from exporter.nvml.queries import QUERIES, QueryState
from exporter.snapshot import MigIdentity

MIG_CHECK_INTERVAL_S = 60.0
# Answers of a MIG slot or MIG handle that mean "no MIG device here (any more)".
GONE_CODES = frozenset({pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT})
_COMPUTE_PREFIX = re.compile(r"^\d+c\.")


def profile_from_name(name: str) -> str:
    """The GPU-instance profile from a MIG device name.

    ``NVIDIA H100 80GB HBM3 MIG 1g.10gb`` -> ``1g.10gb``. A compute instance using part of a GPU
    instance is named ``... MIG 1c.3g.40gb``; dcgm-exporter's ``GPU_I_PROFILE`` is the GPU
    instance's profile, so the ``1c.`` prefix is dropped.
    """
    token = name.strip().rsplit(" ", 1)[-1]
    return _COMPUTE_PREFIX.sub("", token)


@dataclass(frozen=True)
class MigDevice:
    identity: MigIdentity
    handle: Any


def is_gone(error: BaseException) -> bool:
    return isinstance(error, pynvml.NVMLError) and error.value in GONE_CODES


class MigTracker:
    """One GPU's MIG layout, refreshed on change only. Owned by the sampling thread."""

    def __init__(self, check_interval_s: float = MIG_CHECK_INTERVAL_S) -> None:
        self.check_interval_s = check_interval_s
        self.capable: bool | None = None  # None: not probed yet; False: NotSupported, never asked again
        self.enabled = False
        self.devices: tuple[MigDevice, ...] = ()
        self._signature: tuple[object, ...] | None = None
        self._checked_at = -math.inf
        self._stale = True
        self._known: dict[str, MigIdentity] = {}

    def mark_stale(self) -> None:
        """Probe again at the next cycle (a MIG handle vanished)."""
        self._stale = True

    def refresh(self, nvml: NvmlClient, parent_handle: Any, parent_uuid: str, now: float) -> bool:
        """Probe when due; adopt a changed layout. True when the layout (or MIG mode) changed.

        Raises NVMLError for failures the caller classifies (GPU lost, NVML down); a GPU without
        MIG (NotSupported, FunctionNotFound) is remembered and never probed again.
        """
        if self.capable is False or (not self._stale and now - self._checked_at < self.check_interval_s):
            return False
        self._checked_at = now
        self._stale = False
        try:
            mode = int(nvml.call(pynvml.nvmlDeviceGetMigMode, parent_handle)[0])
        except pynvml.NVMLError as exc:
            if classify(exc) is not ErrorClass.UNSUPPORTED:
                raise
            self.capable = False
            return self._adopt((), enabled=False, signature=("not capable",))
        self.capable = True
        if mode != pynvml.NVML_DEVICE_MIG_ENABLE:
            return self._adopt((), enabled=False, signature=("disabled",))
        slots = self._walk(nvml, parent_handle)
        signature = ("enabled", *((slot, uuid) for slot, uuid, _ in slots))
        if signature == self._signature:
            return False
        devices = []
        for _slot, uuid, handle in slots:
            identity = self._known.get(uuid)
            if identity is None:
                identity = self._identify(nvml, handle, uuid, parent_uuid)
                if identity is None:
                    self._stale = True
                    continue
            devices.append(MigDevice(identity, handle))
        return self._adopt(tuple(devices), enabled=True, signature=signature)

    def _adopt(self, devices: tuple[MigDevice, ...], *, enabled: bool, signature: tuple[object, ...]) -> bool:
        if signature == self._signature:
            return False
        self._signature = signature
        self.enabled = enabled
        self.devices = devices
        self._known = {device.identity.uuid: device.identity for device in devices}
        return True

    @staticmethod
    def _walk(nvml: NvmlClient, parent_handle: Any) -> list[tuple[int, str, Any]]:
        """(slot, UUID, handle) of every occupied slot; empty slots are skipped, not the end."""
        found: list[tuple[int, str, Any]] = []
        for slot in range(int(nvml.call(pynvml.nvmlDeviceGetMaxMigDeviceCount, parent_handle))):
            try:
                handle = nvml.call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, parent_handle, slot)
                uuid = str(nvml.call(pynvml.nvmlDeviceGetUUID, handle))
            except pynvml.NVMLError as exc:
                if is_gone(exc):
                    continue
                raise
            found.append((slot, uuid, handle))
        return found

    @staticmethod
    def _identify(nvml: NvmlClient, handle: Any, uuid: str, parent_uuid: str) -> MigIdentity | None:
        try:
            return MigIdentity(
                parent_uuid=parent_uuid,
                uuid=uuid,
                gpu_instance_id=int(nvml.call(pynvml.nvmlDeviceGetGpuInstanceId, handle)),
                compute_instance_id=int(nvml.call(pynvml.nvmlDeviceGetComputeInstanceId, handle)),
                profile=profile_from_name(str(nvml.call(pynvml.nvmlDeviceGetName, handle))),
            )
        except pynvml.NVMLError as exc:
            if is_gone(exc):  # destroyed between the walk and now: the next probe sees the new layout
                return None
            raise

    def identities(self) -> tuple[MigIdentity, ...]:
        """Every MIG device (all compute instances), for mapping the kubelet's ``MIG-<uuid>`` IDs."""
        return tuple(device.identity for device in self.devices)

    def instances(self) -> tuple[MigDevice, ...]:
        """One MIG device per GPU instance (its first compute instance), ordered by GI id.

        Memory and GPM belong to the GPU instance, and dcgm-exporter reports one series per GPU
        instance (``GPU_I_ID``); two compute instances of one GI would otherwise give duplicates.
        """
        first: dict[int, MigDevice] = {}
        for device in sorted(self.devices, key=lambda item: (item.identity.gpu_instance_id,
                                                             item.identity.compute_instance_id)):
            first.setdefault(device.identity.gpu_instance_id, device)
        return tuple(first[key] for key in sorted(first))


@dataclass(frozen=True)
class InstancePlan:
    """What to read per MIG GPU instance: the instance-scoped rows the counters CSV enables."""

    specs: tuple[FieldSpec, ...]
    queries: tuple[str, ...]  # named queries run on the MIG handle (memory info)
    gpm_metrics: tuple[int, ...]  # GPM metric ids read from the GPU-instance sample

    @classmethod
    def for_specs(cls, specs: Sequence[FieldSpec]) -> InstancePlan:
        chosen = tuple(spec for spec in specs if spec.scope is Scope.INSTANCE and not spec.is_label
                       and spec.read.per_instance)
        queries = tuple(dict.fromkeys(name for spec in chosen for name in spec.read.queries))
        metrics = tuple(dict.fromkeys(metric for spec in chosen if (metric := spec.read.gpm_metric) is not None))
        return cls(specs=chosen, queries=queries, gpm_metrics=metrics)


def instance_values(nvml: NvmlClient, device: MigDevice, plan: InstancePlan, query_state: QueryState, *,
                    gpm_values: dict[int, float], on_unsupported: Callable[[str], None],
                    skip: Collection[str] = ()) -> dict[str, float]:
    """DCGM-unit values of one GPU instance: named queries on its MIG handle plus its GPM metrics.

    Raises NVMLError when the MIG handle is gone (``is_gone``) or for errors the caller classifies;
    a query the MIG device does not support is reported through ``on_unsupported`` and skipped;
    queries in ``skip`` (found unsupported before) are not asked at all.
    """
    results: dict[str, dict[str, float]] = {}
    for name in plan.queries:
        if name in skip:
            continue
        try:
            results[name] = QUERIES[name].run(nvml, device.handle, query_state)
        except pynvml.NVMLError as exc:
            if is_gone(exc) or classify(exc) is not ErrorClass.UNSUPPORTED:
                raise
            on_unsupported(name)
    cycle = _InstanceCycle(results, gpm_values)
    values: dict[str, float] = {}
    for spec in plan.specs:
        value = spec.read.value(cycle)
        if value is not None:
            values[spec.name] = value
    return values


@dataclass(frozen=True)
class _InstanceCycle:
    """One GPU instance's readings as the catalog's ``Read`` variants take them (``CycleValues``).

    Only named queries on the MIG handle and GPM metrics of the GPU instance's sample exist here:
    field values are chip-wide (``Scope.DEVICE`` rows). GPM values are handed over only by a GPU
    with GPM, hence ``gpm_supported``.
    """

    results: dict[str, dict[str, float]]
    gpm_values: dict[int, float]
    gpm_supported: bool | None = True

    def query_item(self, query: str, item: str) -> float | None:
        return self.results.get(query, {}).get(item)

    def field(self, key: tuple[int, int]) -> float | None:
        return None

    def rate(self, read: FromFieldRate) -> float | None:
        return None

    def gpm(self, metric_id: int) -> float | None:
        return self.gpm_values.get(metric_id)
