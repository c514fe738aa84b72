"""The C ABI side of the fake NVML library: return codes, the symbol registry, ctypes argument helpers.

pynvml calls C symbols with ctypes arguments; these helpers read and write them the way the real
library would, and the ``c_symbol``/``mig_variant`` decorators register which method answers which
symbol (``library.FakeNvmlLibrary`` turns the registry into attributes).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

from simulator.scenario import (
    NVML_SYMBOLS,
)

SUCCESS: int = pynvml.NVML_SUCCESS
UNINITIALIZED: int = pynvml.NVML_ERROR_UNINITIALIZED
INVALID_ARGUMENT: int = pynvml.NVML_ERROR_INVALID_ARGUMENT
NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
NOT_FOUND: int = pynvml.NVML_ERROR_NOT_FOUND
INSUFFICIENT_SIZE: int = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
GPU_IS_LOST: int = pynvml.NVML_ERROR_GPU_IS_LOST
LIBRARY_NOT_FOUND: int = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
VERSION_MISMATCH: int = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
TIMEOUT: int = pynvml.NVML_ERROR_TIMEOUT
DRIVER_NOT_LOADED: int = pynvml.NVML_ERROR_DRIVER_NOT_LOADED

PCIE_THROUGHPUT_WINDOW_S = 0.020  # nvml.h: measured by a byte counter over a 20 ms interval
FIXED_WALL_EPOCH = 1_700_000_000.0  # wall time of scenario t=0 when a test injects its clock
NOT_MIG = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId of a process on a non-MIG GPU
ALL_LINKS = 0xFFFFFFFF  # NVLink field scopeId meaning "sum over all links"
ENC_DEC_SAMPLING_PERIOD_US = 167_000
NOT_AVAILABLE: int = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value  # usedGpuMemory "N/A" (WDDM)
HANDLE_BASE = 0x4E564D4C0000  # "NVML" in ASCII: easy to spot, never NULL
HANDLE_STRIDE = 0x100  # room for MIG device handles under each parent (parent + 1 + slot)

# Real NVML strings for the codes a user is likely to print (nvmlErrorString).
ERROR_STRINGS = {
    SUCCESS: "Success",
    UNINITIALIZED: "Uninitialized",
    INVALID_ARGUMENT: "Invalid Argument",
    NOT_SUPPORTED: "Not Supported",
    pynvml.NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NOT_FOUND: "Not Found",
    INSUFFICIENT_SIZE: "Insufficient Size",
    DRIVER_NOT_LOADED: "Driver Not Loaded",
    pynvml.NVML_ERROR_TIMEOUT: "Timeout",
    LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    GPU_IS_LOST: "GPU is lost",
    pynvml.NVML_ERROR_RESET_REQUIRED: "GPU requires reset",
    VERSION_MISMATCH: "Argument version mismatch",
    pynvml.NVML_ERROR_UNKNOWN: "Unknown Error",
}


@dataclass(frozen=True)
class Symbol:
    name: str
    method: str
    takes_device: bool
    blocking: bool = False  # runs outside the driver lock (an event wait sleeps in the kernel, not in RM)


REGISTRY: list[Symbol] = []
# Symbol -> method answering it for a MIG device handle; symbols not listed answer NOT_SUPPORTED there.
MIG_VARIANTS: dict[str, str] = {}


_Method = TypeVar("_Method", bound=Callable[..., Any])


def c_symbol(name: str, *, device: bool = False, blocking: bool = False) -> Callable[[_Method], _Method]:
    """Register an implementation method as C symbol ``name``.

    ``device=True``: the first C argument is a device handle; the dispatcher resolves it and
    applies the per-GPU rules (lost GPU, injected errors, hangs) before the method runs as
    ``method(gpu, t, *other_args)``. Otherwise the method runs as ``method(t, *args)``.
    """

    def register(method: _Method) -> _Method:
        REGISTRY.append(Symbol(name, method.__name__, device, blocking))
        return method

    return register


def mig_variant(name: str) -> Callable[[_Method], _Method]:
    """Register the method that answers device symbol ``name`` when it is given a MIG device handle.

    It runs as ``method(mig_device, t, *other_args)`` after the parent GPU's rules (lost GPU,
    injected errors, hangs) have been applied, as on a real driver where a MIG device shares its
    parent's fate.
    """

    def register(method: _Method) -> _Method:
        MIG_VARIANTS[name] = method.__name__
        return method

    return register


def c_int_value(arg: Any) -> int:
    """A C integer argument: pynvml passes ctypes scalars (``c_uint(3)``) or plain ints."""
    value = getattr(arg, "value", arg)
    return int(value)


def pointee(ref: Any) -> Any:
    """The object an out-parameter points at: ``byref(x)`` -> x, ``pointer(x)`` -> x, else itself."""
    obj = getattr(ref, "_obj", None)
    if obj is not None:
        return obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    return ref


def write_string(buffer: Any, length: Any, text: str) -> int:
    data = text.encode()
    if len(data) + 1 > c_int_value(length):
        return INSUFFICIENT_SIZE
    buffer.value = data
    return SUCCESS


def write_handle(ref: Any, value: int) -> None:
    pointer = pointee(ref)
    ctypes.c_void_p.from_address(ctypes.addressof(pointer)).value = value


def handle_value(handle: Any) -> int | None:
    try:
        return ctypes.addressof(handle.contents)  # fastest read of a pointer's value (NULL raises)
    except (ValueError, AttributeError, TypeError):
        pass
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return None


def precise_wait(seconds: float) -> None:
    """Wait precisely: ``time.sleep`` (even ``sleep(0)``) overshoots by 50-80 us on Linux, more
    than most NVML calls take, so short waits spin on ``sched_yield``, which releases the GIL the
    way a real C call into the driver would."""
    if seconds >= 1e-3:
        time.sleep(seconds)
        return
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        os.sched_yield()



def check_symbol(symbol: str) -> None:
    if symbol not in NVML_SYMBOLS:
        raise ValueError(f"unknown NVML symbol {symbol!r}")

