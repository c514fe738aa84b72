"""The NVML call wrapper: how failures are classified and described, and how calls are counted."""

from __future__ import annotations

import functools

import pynvml

from exporter.nvml.client import ErrorClass, NvmlClient, classify, describe, mig_instance_id


def test_errors_are_classified_by_what_the_exporter_does_next() -> None:
    assert classify(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)) is ErrorClass.UNSUPPORTED
    assert classify(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) is ErrorClass.DEVICE_LOST
    assert classify(pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)) is ErrorClass.NVML_DOWN
    assert classify(pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)) is ErrorClass.TRANSIENT
    # pynvml's unversioned process-list wrappers on a driver without the symbol: never asked again
    assert classify(pynvml.NVMLLibraryMismatchError("no _v3 symbol")) is ErrorClass.UNSUPPORTED
    assert classify(ValueError("anything else")) is ErrorClass.TRANSIENT


class _Unprintable(pynvml.NVMLError):
    def __str__(self) -> str:
        raise RuntimeError("nvmlErrorString needs the library")


def test_descriptions_name_the_error_and_survive_an_unprintable_one() -> None:
    assert describe(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) == "NVMLError_GpuIsLost: GPU is lost"
    assert describe(_Unprintable(999)) == "_Unprintable: NVML error code 999"
    assert describe(ValueError("bad value")) == "ValueError: bad value"


def test_mig_instance_ids_are_none_outside_mig() -> None:
    assert mig_instance_id(None) is None
    assert mig_instance_id(0xFFFFFFFF) is None
    assert mig_instance_id(0) == 0
    assert mig_instance_id(7) == 7


def test_calls_are_counted_by_function_even_without_a_name() -> None:
    def nvmlDeviceGetCount() -> int:  # named like the NVML call it stands for
        return 2

    client = NvmlClient()
    assert client.call(nvmlDeviceGetCount) == 2
    assert client.call(functools.partial(max, 1, 3)) == 3
    assert client.total_calls == 2
    assert client.calls_by_function() == {"nvmlDeviceGetCount": 1, "nvml": 1}
    assert client.in_flight() is None
