"""MIG: mode, layout changes at run time, MIG device handles and the symbols that answer for them."""

from __future__ import annotations

from functools import partial
from typing import Any

import pynvml

from simulator.fakenvml.abi import (
    HANDLE_BASE,
    HANDLE_STRIDE,
    INVALID_ARGUMENT,
    MIG_VARIANTS,
    NOT_FOUND,
    NOT_SUPPORTED,
    SUCCESS,
    UNINITIALIZED,
    VERSION_MISMATCH,
    c_int_value,
    c_symbol,
    handle_value,
    mig_variant,
    pointee,
    write_handle,
    write_string,
)
from simulator.fakenvml.device import SimulatedGpu
from simulator.fakenvml.state import LibraryState
from simulator.miglayout import MigLayout, SimulatedMigDevice
from simulator.models import MIB, MIG_MAX_DEVICES, check_mig_layout
from simulator.patterns import (
    channel_key,
)
from simulator.scenario import (
    MigInstanceSpec,
)


class MigMixin(LibraryState):
    """MIG probing and MIG device handles (parent handle + 1 + slot)."""

    @c_symbol("nvmlDeviceGetMaxMigDeviceCount", device=True)
    def _impl_max_mig_devices(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        # nvml.h: zero when MIG is unsupported or disabled
        pointee(out).value = MIG_MAX_DEVICES if gpu.mig is not None else 0
        return SUCCESS

    @c_symbol("nvmlDeviceGetMigMode", device=True)
    def _impl_mig_mode(self, gpu: SimulatedGpu, t: float, current: Any, pending: Any) -> int:
        if not gpu.features.mig:
            return NOT_SUPPORTED
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig is not None else pynvml.NVML_DEVICE_MIG_DISABLE
        pointee(current).value = mode
        pointee(pending).value = mode
        return SUCCESS

    def set_mig_layout(self, gpu: int, instances: list[str | MigInstanceSpec] | None) -> None:
        """Reconfigure MIG on ``gpu`` now, as an administrator would with ``nvidia-smi mig``.

        ``instances`` lists GPU instances (profile names or full specs); instances already there
        and still wanted (same profile, oldest first) keep their slot, ids and UUID, the others are
        destroyed and the new ones created in the lowest free slots. ``None`` disables MIG (the
        mode change itself needs a GPU reset on real hardware; here it takes effect at once).
        """
        self._check_gpu(gpu)
        target = self._gpus[gpu]
        if not target.features.mig:
            raise ValueError(f"GPU {gpu} ({target.model.key}) does not support MIG")
        specs = None if instances is None else [
            item if isinstance(item, MigInstanceSpec) else MigInstanceSpec(item) for item in instances]
        if specs is not None:
            check_mig_layout(target.model.key, [spec.profile for spec in specs])
        with self._driver_lock:
            if specs is None:
                target.mig = None
            elif target.mig is None:
                target.mig = MigLayout.create(gpu, target.model, target.spec.name, self.scenario.seed,
                                              partial(channel_key, self.scenario.seed, gpu), specs=specs)
            else:
                target.mig = target.mig.changed(specs)

    def _mig_device(self, handle: Any) -> SimulatedMigDevice | None:
        value = (handle_value(handle) or 0) - HANDLE_BASE
        parent, offset = divmod(value, HANDLE_STRIDE)
        gpu: SimulatedGpu | None = self._gpu_for_index(parent) if value >= 0 and offset else None
        if gpu is None or gpu.mig is None:
            return None
        return gpu.mig.slots.get(offset - 1)

    def _call_mig_device(self, name: str, t: float, args: tuple[Any, ...]) -> int:
        device = self._mig_device(args[0]) if args else None
        if device is None:
            return INVALID_ARGUMENT
        method = MIG_VARIANTS.get(name)
        implementation = getattr(self, method) if method else _not_on_mig_device
        return self._dispatch(name, device.parent, t, implementation, (device, t, *args[1:]))

    def _give_mig_handle(self, uuid: str, t: float, out: Any) -> int:
        if not self._refcount:
            return UNINITIALIZED
        for gpu in self._gpus:
            for slot, device in (gpu.mig.slots.items() if gpu.mig is not None else ()):
                if device.uuid == uuid:
                    code = self._device_gate("nvmlDeviceGetHandleByUUID", gpu.index, t)
                    if not code:
                        write_handle(out, HANDLE_BASE + gpu.index * HANDLE_STRIDE + 1 + slot)
                    return code
        return NOT_FOUND

    @c_symbol("nvmlDeviceGetMigDeviceHandleByIndex", device=True)
    def _impl_mig_handle_by_index(self, gpu: SimulatedGpu, t: float, index: Any, out: Any) -> int:
        if not gpu.features.mig:
            return NOT_SUPPORTED
        slot = c_int_value(index)
        if gpu.mig is None or not 0 <= slot < MIG_MAX_DEVICES:
            return INVALID_ARGUMENT
        if slot not in gpu.mig.slots:
            return NOT_FOUND  # nvml.h: an empty slot; callers continue with the next index
        write_handle(out, HANDLE_BASE + gpu.index * HANDLE_STRIDE + 1 + slot)
        return SUCCESS

    @c_symbol("nvmlDeviceIsMigDeviceHandle", device=True)
    def _impl_is_mig_handle(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        pointee(out).value = 0
        return SUCCESS

    @mig_variant("nvmlDeviceIsMigDeviceHandle")
    def _mig_is_mig_handle(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        pointee(out).value = 1
        return SUCCESS

    @c_symbol("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", device=True)
    def _impl_parent_handle(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return NOT_SUPPORTED  # a full-GPU handle is not a MIG device (estimate of the code)

    @mig_variant("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
    def _mig_parent_handle(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        write_handle(out, HANDLE_BASE + device.parent * HANDLE_STRIDE)
        return SUCCESS

    @c_symbol("nvmlDeviceGetGpuInstanceId", device=True)
    def _impl_gpu_instance_id(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return NOT_SUPPORTED

    @mig_variant("nvmlDeviceGetGpuInstanceId")
    def _mig_gpu_instance_id(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        pointee(out).value = device.gpu_instance_id
        return SUCCESS

    @c_symbol("nvmlDeviceGetComputeInstanceId", device=True)
    def _impl_compute_instance_id(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return NOT_SUPPORTED

    @mig_variant("nvmlDeviceGetComputeInstanceId")
    def _mig_compute_instance_id(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        pointee(out).value = device.compute_instance_id
        return SUCCESS

    @c_symbol("nvmlDeviceGetAttributes_v2", device=True)
    def _impl_attributes(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        return NOT_SUPPORTED  # nvml.h: only supports MIG device handles

    @mig_variant("nvmlDeviceGetAttributes_v2")
    def _mig_attributes(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        attributes = pointee(out)
        profile = device.instance.profile
        share = device.instance.spec.compute_instances
        attributes.multiprocessorCount = profile.multiprocessors // share
        attributes.sharedCopyEngineCount = profile.compute_slices
        attributes.sharedDecoderCount = profile.compute_slices // 2
        attributes.sharedEncoderCount = 0
        attributes.sharedJpegCount = profile.compute_slices // 7
        attributes.sharedOfaCount = profile.compute_slices // 7
        attributes.gpuInstanceSliceCount = profile.compute_slices
        attributes.computeInstanceSliceCount = profile.compute_slices // share
        attributes.memorySizeMB = profile.memory_bytes // MIB
        return SUCCESS

    @mig_variant("nvmlDeviceGetUUID")
    def _mig_uuid(self, device: SimulatedMigDevice, t: float, buffer: Any, length: Any) -> int:
        return write_string(buffer, length, device.uuid)

    @mig_variant("nvmlDeviceGetName")
    def _mig_name(self, device: SimulatedMigDevice, t: float, buffer: Any, length: Any) -> int:
        return write_string(buffer, length, device.name)

    @mig_variant("nvmlDeviceGetMemoryInfo")
    def _mig_memory_v1(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        instance = device.instance
        memory = pointee(out)
        used = instance.memory_used(t) + instance.memory_reserved
        memory.total = instance.memory_total
        memory.used = used
        memory.free = instance.memory_total - used
        return SUCCESS

    @mig_variant("nvmlDeviceGetMemoryInfo_v2")
    def _mig_memory_v2(self, device: SimulatedMigDevice, t: float, out: Any) -> int:
        memory = pointee(out)
        if memory.version != pynvml.nvmlMemory_v2:
            return VERSION_MISMATCH
        instance = device.instance
        used = instance.memory_used(t)
        memory.total = instance.memory_total
        memory.reserved = instance.memory_reserved
        memory.used = used
        memory.free = instance.memory_total - instance.memory_reserved - used
        return SUCCESS

    def _mig_processes(self, device: SimulatedMigDevice, t: float, compute: bool, count: Any, infos: Any) -> int:
        instance = device.instance
        entries = [(p, instance.gpu_instance_id, device.compute_instance_id) for p in instance.processes(t)
                   if (p.compute if compute else p.graphics)]
        if device.compute_instance_id:  # processes are listed once, on the first compute instance
            entries = []
        return self._process_list(entries, count, infos)

    @mig_variant("nvmlDeviceGetComputeRunningProcesses_v3")
    def _mig_compute_processes(self, device: SimulatedMigDevice, t: float, count: Any, infos: Any) -> int:
        return self._mig_processes(device, t, True, count, infos)

    @mig_variant("nvmlDeviceGetGraphicsRunningProcesses_v3")
    def _mig_graphics_processes(self, device: SimulatedMigDevice, t: float, count: Any, infos: Any) -> int:
        return self._mig_processes(device, t, False, count, infos)


def _not_on_mig_device(device: SimulatedMigDevice, t: float, *args: Any) -> int:
    """What a device symbol without a MIG variant answers for a MIG device handle."""
    return NOT_SUPPORTED
