"""The single doorway to NVML: every call is counted and the call in flight is visible.

NVML calls serialize on the driver's lock, so the number of calls per cycle is the cost that
matters on a real node; it is exported as a self-metric. Recording which call is in flight lets a
watchdog name a hung call ("nvmlDeviceGetPowerUsage on GPU 2 has not returned for 41 s") while
scrapes keep being served from the last snapshot.

This module also classifies NVML errors once, so every caller treats "not supported", "GPU lost"
and "NVML itself is gone" the same way.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar

import pynvml

from exporter.snapshot import InFlight

T = TypeVar("T")


class ErrorClass(Enum):
    UNSUPPORTED = "unsupported"  # this reading does not exist on this GPU/driver: stop asking
    DEVICE_LOST = "device_lost"  # the GPU is gone (fallen off the bus, needs reset)
    NVML_DOWN = "nvml_down"  # NVML is unusable (driver unloaded, library mismatch): re-initialise
    TRANSIENT = "transient"  # try again next cycle


_UNSUPPORTED_CODES = {
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_NO_PERMISSION,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_INVALID_ARGUMENT,  # e.g. an NVLink index beyond the links this GPU has
}
_LOST_CODES = {
    pynvml.NVML_ERROR_GPU_IS_LOST,
    pynvml.NVML_ERROR_UNKNOWN,
    pynvml.NVML_ERROR_RESET_REQUIRED,
    getattr(pynvml, "NVML_ERROR_GPU_NOT_FOUND", 28),
}
_NVML_DOWN_CODES = {
    pynvml.NVML_ERROR_UNINITIALIZED,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
}


def classify(error: BaseException) -> ErrorClass:
    if isinstance(error, pynvml.NVMLError):
        code = error.value
        if code in _UNSUPPORTED_CODES:
            return ErrorClass.UNSUPPORTED
        if code in _LOST_CODES:
            return ErrorClass.DEVICE_LOST
        if code in _NVML_DOWN_CODES:
            return ErrorClass.NVML_DOWN
        return ErrorClass.TRANSIENT
    # pynvml's unversioned process-list wrappers raise this plain Exception for a missing symbol.
    if type(error).__name__ == "NVMLLibraryMismatchError":
        return ErrorClass.UNSUPPORTED
    return ErrorClass.TRANSIENT


def describe(error: BaseException) -> str:
    """A short, stable text for logs and /health (``NVMLError_GpuIsLost: GPU is lost``)."""
    if isinstance(error, pynvml.NVMLError):
        try:
            text = str(error)
        except Exception:  # noqa: BLE001 - str() of an NVMLError may itself call into NVML
            text = f"NVML error code {error.value}"
        return f"{type(error).__name__}: {text}"
    return f"{type(error).__name__}: {error}"


class NvmlClient:
    """Counts NVML calls and remembers the one in flight. One instance per calling thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._by_function: Counter[str] = Counter()
        self._total = 0
        self._in_flight: InFlight | None = None
        self.gpu: int | None = None  # set by the caller while it works on one GPU, for stall reports

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        name = getattr(function, "__name__", "nvml")
        with self._lock:
            self._total += 1
            self._by_function[name] += 1
        self._in_flight = InFlight(name, self.gpu, self._clock())
        try:
            return function(*args, **kwargs)
        finally:
            self._in_flight = None

    @property
    def total_calls(self) -> int:
        return self._total

    def calls_by_function(self) -> dict[str, int]:
        with self._lock:
            return dict(self._by_function)

    def in_flight(self) -> InFlight | None:
        return self._in_flight


NOT_MIG_INSTANCE = 0xFFFFFFFF  # what NVML reports for a GPU/compute instance id outside MIG


def mig_instance_id(raw: object) -> int | None:
    """A GPU or compute instance id from NVML, None for 'not a MIG instance' (0xFFFFFFFF) or absent."""
    if raw is None:
        return None
    value = int(raw)  # type: ignore[call-overload]
    return None if value == NOT_MIG_INSTANCE else value
