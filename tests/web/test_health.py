"""What /health says in each situation an operator meets."""

from __future__ import annotations

from exporter.snapshot import DeviceIdentity, DeviceReading, InFlight, SamplerStatus, Snapshot
from exporter.web.health import evaluate

IDENTITY = DeviceIdentity(index=0, uuid="GPU-0", pci_bus_id="00000000:01:00.0", minor=0, model="NVIDIA H100")


def snapshot(**status: object) -> Snapshot:
    fields = {"nvml_up": True, "device_count": 1, "last_sample_monotonic": 100.0}
    fields.update(status)
    return Snapshot(devices=(DeviceReading(identity=IDENTITY),), status=SamplerStatus(**fields))  # type: ignore[arg-type]


def test_fresh_sample_with_a_gpu_is_healthy() -> None:
    report = evaluate(snapshot(), now=101.0, interval_s=1.0, in_flight=None)
    assert report.healthy
    assert report.reason.startswith("OK: 1 GPUs")


def test_nvml_missing_is_unhealthy_with_the_reason() -> None:
    report = evaluate(snapshot(nvml_up=False, nvml_error="NVMLError_LibraryNotFound: NVML Shared Library Not Found"),
                      now=101.0, interval_s=1.0, in_flight=None)
    assert not report.healthy
    assert report.reason == "NVML not available: NVMLError_LibraryNotFound: NVML Shared Library Not Found"


def test_no_gpu_is_unhealthy() -> None:
    report = evaluate(snapshot(device_count=0), now=101.0, interval_s=1.0, in_flight=None)
    assert not report.healthy and "no GPU" in report.reason


def test_stale_sample_is_unhealthy_and_names_the_call_in_flight() -> None:
    call = InFlight(function="nvmlDeviceGetPowerUsage", gpu=2, started=100.5)
    report = evaluate(snapshot(), now=104.0, interval_s=1.0, in_flight=call)
    assert not report.healthy
    assert report.reason == ("last complete sample is 4.0 s old (limit 3.0 s); "
                             "NVML call nvmlDeviceGetPowerUsage on GPU 2 has not returned for 3.5 s")


def test_a_short_call_in_flight_does_not_count_as_a_stall() -> None:
    call = InFlight(function="nvmlDeviceGetPowerUsage", gpu=2, started=102.9)
    assert evaluate(snapshot(), now=102.95, interval_s=1.0, in_flight=call).healthy


def test_lost_gpus_are_reported_but_the_exporter_itself_is_healthy() -> None:
    lost = Snapshot(devices=(DeviceReading(identity=IDENTITY, up=False, error="GPU is lost"),),
                    status=SamplerStatus(nvml_up=True, device_count=1, last_sample_monotonic=100.0))
    report = evaluate(lost, now=100.5, interval_s=1.0, in_flight=None)
    assert report.healthy and "1 of 1 GPUs lost" in report.reason
