"""Rendering hand-built snapshots: dcgm-exporter's labels, omitted readings, lost GPUs, workloads, MIG."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from prometheus_client.core import Metric

from exporter.metrics.counters import load_counters, parse_counters
from exporter.metrics.render import RenderContext, RenderOptions, render
from exporter.snapshot import (
    DeviceIdentity,
    DeviceReading,
    InFlight,
    MigIdentity,
    MigReading,
    SamplerStatus,
    Snapshot,
)

GPU0 = DeviceIdentity(index=0, uuid="GPU-aaaa", pci_bus_id="00000000:8D:00.0", minor=0,
                      model="NVIDIA H100 80GB HBM3", serial="1650123456789")
GPU1 = DeviceIdentity(index=1, uuid="GPU-bbbb", pci_bus_id="00000000:9D:00.0", minor=1,
                      model="NVIDIA H100 80GB HBM3")
STATUS = SamplerStatus(nvml_up=True, driver_version="550.90.07", device_count=2, cycles=3,
                       last_cycle_duration_s=0.004, last_cycle_nvml_calls=26, nvml_calls_total=90,
                       last_sample_wall_time=1_700_000_000.0, last_sample_monotonic=10.0,
                       unsupported_fields=((1, "DCGM_FI_DEV_FAN_SPEED"),))


def samples(families: Sequence[Metric], name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(sample.labels), sample.value) for family in families for sample in family.samples
            if sample.name == name]


def context(snapshot: Snapshot, **kwargs: object) -> RenderContext:
    return RenderContext(snapshot=snapshot, counters=load_counters(None),
                         options=RenderOptions(hostname="node-1"), **kwargs)  # type: ignore[arg-type]


def test_labels_follow_dcgm_exporter_names_and_order() -> None:
    snapshot = Snapshot(devices=(DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_GPU_TEMP": 41}),), status=STATUS)
    [(labels, value)] = samples(render(context(snapshot)), "DCGM_FI_DEV_GPU_TEMP")
    assert list(labels.items()) == [
        ("gpu", "0"), ("UUID", "GPU-aaaa"), ("pci_bus_id", "00000000:8D:00.0"), ("device", "nvidia0"),
        ("modelName", "NVIDIA H100 80GB HBM3"), ("Hostname", "node-1"), ("DCGM_FI_DRIVER_VERSION", "550.90.07"),
    ]
    assert value == 41


def test_a_reading_a_gpu_lacks_is_omitted_not_zero() -> None:
    snapshot = Snapshot(devices=(DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_GPU_TEMP": 41}),
                                 DeviceReading(identity=GPU1, values={})), status=STATUS)
    families = render(context(snapshot))
    assert [labels["gpu"] for labels, _ in samples(families, "DCGM_FI_DEV_GPU_TEMP")] == ["0"]
    [(labels, value)] = samples(families, "gpu_pod_exporter_field_unsupported")
    assert labels == {"gpu": "1", "UUID": "GPU-bbbb", "field": "DCGM_FI_DEV_FAN_SPEED"} and value == 1


def test_a_lost_gpu_leaves_the_payload_and_reports_down() -> None:
    snapshot = Snapshot(devices=(DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_GPU_TEMP": 41}),
                                 DeviceReading(identity=GPU1, up=False, error="NVMLError_GpuIsLost")), status=STATUS)
    families = render(context(snapshot))
    assert [labels["gpu"] for labels, _ in samples(families, "DCGM_FI_DEV_GPU_TEMP")] == ["0"]
    up = {labels["gpu"]: value for labels, value in samples(families, "gpu_pod_exporter_device_up")}
    assert up == {"0": 1, "1": 0}


def test_no_hostname_and_blank_replacement_options() -> None:
    snapshot = Snapshot(devices=(DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_GPU_TEMP": 41}),), status=STATUS)
    ctx = RenderContext(snapshot=snapshot, counters=load_counters(None),
                        options=RenderOptions(hostname=None, replace_blanks_in_model_name=True))
    [(labels, _)] = samples(render(ctx), "DCGM_FI_DEV_GPU_TEMP")
    assert "Hostname" not in labels
    assert labels["modelName"] == "NVIDIA-H100-80GB-HBM3"


def test_label_rows_add_labels_in_csv_order_and_skip_blank_values() -> None:
    counters = parse_counters("DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_SERIAL, label, s\n"
                              "DCGM_FI_DRIVER_VERSION, label, d\n", "c.csv")
    snapshot = Snapshot(devices=(DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_GPU_TEMP": 41}),
                                 DeviceReading(identity=GPU1, values={"DCGM_FI_DEV_GPU_TEMP": 42})), status=STATUS)
    ctx = RenderContext(snapshot=snapshot, counters=counters, options=RenderOptions(hostname="n"))
    rendered = samples(render(ctx), "DCGM_FI_DEV_GPU_TEMP")
    assert list(rendered[0][0])[-2:] == ["DCGM_FI_DEV_SERIAL", "DCGM_FI_DRIVER_VERSION"]
    assert "DCGM_FI_DEV_SERIAL" not in rendered[1][0]  # GPU1 has no serial: no empty label


def test_workload_label_sets_follow_the_base_labels_and_multiply_series() -> None:
    def workloads(identity: DeviceIdentity, gpu_instance_id: int | None) -> Sequence[Mapping[str, str]]:
        if identity.index == 0:
            return ({"container": "trainer", "namespace": "ml", "pod": "train-0"},)
        return ({"container": "a", "namespace": "ml", "pod": "a-0", "vgpu": "0"},
                {"container": "b", "namespace": "ml", "pod": "b-0", "vgpu": "1"})

    snapshot = Snapshot(devices=(DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_GPU_TEMP": 41}),
                                 DeviceReading(identity=GPU1, values={"DCGM_FI_DEV_GPU_TEMP": 42})), status=STATUS)
    rendered = samples(render(context(snapshot, workloads=workloads)), "DCGM_FI_DEV_GPU_TEMP")
    assert list(rendered[0][0])[-3:] == ["container", "namespace", "pod"]
    assert [(labels["gpu"], labels.get("pod")) for labels, _ in rendered] == [
        ("0", "train-0"), ("1", "a-0"), ("1", "b-0")]


def test_mig_instances_carry_gpu_instance_labels_after_model_name() -> None:
    mig = MigIdentity(parent_uuid="GPU-aaaa", uuid="MIG-1111", gpu_instance_id=7, compute_instance_id=0,
                      profile="1g.10gb")
    reading = DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_GPU_TEMP": 41},
                            mig=(MigReading(identity=mig, values={"DCGM_FI_DEV_FB_USED": 1024}),))
    families = render(context(Snapshot(devices=(reading,), status=STATUS)))
    [(labels, value)] = samples(families, "DCGM_FI_DEV_FB_USED")
    assert list(labels) == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID",
                            "Hostname", "DCGM_FI_DRIVER_VERSION"]
    assert (labels["GPU_I_PROFILE"], labels["GPU_I_ID"], value) == ("1g.10gb", "7", 1024)
    [(temp_labels, _)] = samples(families, "DCGM_FI_DEV_GPU_TEMP")
    assert "GPU_I_ID" not in temp_labels  # device-wide readings stay on the parent


def test_the_card_framebuffer_total_is_one_gpu_series_also_on_a_mig_gpu_without_workload_labels() -> None:
    mig_parent = dataclasses.replace(GPU0, memory_total_bytes=81559 * 1024 * 1024)
    instance = MigIdentity(parent_uuid="GPU-aaaa", uuid="MIG-1111", gpu_instance_id=7, compute_instance_id=0,
                           profile="1g.10gb")
    devices = (DeviceReading(identity=mig_parent, mig=(MigReading(identity=instance,
                                                                  values={"DCGM_FI_DEV_FB_TOTAL": 9984}),)),
               DeviceReading(identity=GPU1))  # NVML refused GPU1's memory info at start: no total

    def workloads(_identity: DeviceIdentity, _gpu_instance_id: int | None) -> Sequence[Mapping[str, str]]:
        return ({"container": "trainer", "namespace": "ml", "pod": "train-0"},)

    families = render(context(Snapshot(devices=devices, status=STATUS), workloads=workloads))
    [(labels, value)] = samples(families, "DCGM_EXP_GPU_FB_TOTAL")
    assert labels == {"gpu": "0", "UUID": "GPU-aaaa", "pci_bus_id": "00000000:8D:00.0", "device": "nvidia0",
                      "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-1",
                      "DCGM_FI_DRIVER_VERSION": "550.90.07"}
    assert value == 81559  # the card's 79.6 GiB, not the instance's 9984 MiB


def test_self_metrics_describe_the_sampler() -> None:
    snapshot = Snapshot(devices=(DeviceReading(identity=GPU0),), status=STATUS)
    stall = InFlight(function="nvmlDeviceGetPowerUsage", gpu=0, started=1.0)
    families = render(context(snapshot, stall=stall))
    values = {name: samples(families, name)[0][1] for name in (
        "gpu_pod_exporter_nvml_up", "gpu_pod_exporter_devices", "gpu_pod_exporter_nvml_calls_per_cycle",
        "gpu_pod_exporter_nvml_calls_total", "gpu_pod_exporter_sampler_stalled",
        "gpu_pod_exporter_last_sample_timestamp_seconds")}
    assert values == {"gpu_pod_exporter_nvml_up": 1, "gpu_pod_exporter_devices": 2,
                      "gpu_pod_exporter_nvml_calls_per_cycle": 26, "gpu_pod_exporter_nvml_calls_total": 90,
                      "gpu_pod_exporter_sampler_stalled": 1,
                      "gpu_pod_exporter_last_sample_timestamp_seconds": 1_700_000_000.0}


def test_dcgm_exporter_4_8_3_spelling_names_the_node_label_hostname_in_the_same_place() -> None:
    snapshot = Snapshot(devices=(DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_GPU_TEMP": 41}),), status=STATUS)
    ctx = RenderContext(snapshot=snapshot, counters=load_counters(None),
                        options=RenderOptions(hostname="node-1", hostname_label="hostname"))
    [(labels, _)] = samples(render(ctx), "DCGM_FI_DEV_GPU_TEMP")
    assert "Hostname" not in labels
    assert list(labels)[list(labels).index("modelName") + 1] == "hostname"
    assert labels["hostname"] == "node-1"
    up = [labels for labels, _ in samples(render(ctx), "gpu_pod_exporter_device_up")]
    assert [labels.get("hostname") for labels in up] == ["node-1"]


def test_field_workload_samples_keep_the_device_series_and_add_each_workloads_own_value() -> None:
    snapshot = Snapshot(devices=(DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_GPU_TEMP": 41,
                                                                      "DCGM_FI_DEV_FB_USED": 49152}),), status=STATUS)
    pods = ({"pod": "a"}, {"pod": "b"}, {"pod": "c"})

    def own(_identity: object, _gi: object, field: str) -> list[tuple[dict[str, str], float]] | None:
        return [({"pod": "a"}, 1000.0), ({"pod": "b"}, 2000.0), ({"pod": "c"}, 0.0)] \
            if field == "DCGM_FI_DEV_FB_USED" else None

    ctx = RenderContext(snapshot=snapshot, counters=load_counters(None), options=RenderOptions(hostname="n"),
                        workloads=lambda _identity, _gi: pods, field_workloads=own)
    families = render(ctx)
    assert [(labels.get("pod"), value) for labels, value in samples(families, "DCGM_FI_DEV_FB_USED")] == [
        (None, 49152), ("a", 1000.0), ("b", 2000.0), ("c", 0.0)]
    assert [(labels.get("pod"), value) for labels, value in samples(families, "DCGM_FI_DEV_GPU_TEMP")] == [
        ("a", 41), ("b", 41), ("c", 41)]


def test_a_peak_of_a_field_with_workload_samples_is_per_workload_too() -> None:
    """--kubernetes-virtual-gpus: each pod's FB_USED is its own, so is its FB_USED peak (the builder gives
    it); the device keeps its own series, and a field without workload samples repeats the device's."""
    snapshot = Snapshot(devices=(DeviceReading(
        identity=GPU0, values={"DCGM_FI_DEV_FB_USED": 49152, "DCGM_FI_DEV_POWER_USAGE": 300.0},
        peaks={"DCGM_FI_DEV_FB_USED": 70000, "DCGM_FI_DEV_POWER_USAGE": 500.0}),), status=STATUS)
    pods = ({"pod": "a"}, {"pod": "b"})

    def own(_identity: object, _gi: object, field: str) -> list[tuple[dict[str, str], float]] | None:
        return {"DCGM_FI_DEV_FB_USED": [({"pod": "a"}, 1000.0), ({"pod": "b"}, 2000.0)],
                "DCGM_EXP_FB_USED_PEAK": [({"pod": "a"}, 1500.0), ({"pod": "b"}, 68000.0)]}.get(field)

    families = render(RenderContext(snapshot=snapshot, counters=load_counters(None),
                                    options=RenderOptions(hostname="n"), workloads=lambda _i, _g: pods,
                                    field_workloads=own))
    peaks = samples(families, "DCGM_EXP_FB_USED_PEAK")
    assert [(labels.get("pod"), value) for labels, value in peaks] == [(None, 70000), ("a", 1500.0), ("b", 68000.0)]
    assert [labels for labels, _ in peaks] == [labels for labels, _ in samples(families, "DCGM_FI_DEV_FB_USED")]
    assert [(labels.get("pod"), value) for labels, value in samples(families, "DCGM_EXP_POWER_USAGE_PEAK")] == [
        ("a", 500.0), ("b", 500.0)]


def test_peaks_carry_the_labels_of_their_reading_including_workloads_and_skip_mig_instances() -> None:
    def workloads(identity: DeviceIdentity, gpu_instance_id: int | None) -> Sequence[Mapping[str, str]]:
        return ({"container": "trainer", "namespace": "ml", "pod": "train-0"},) if identity.index == 0 else ({},)

    mig = MigIdentity(parent_uuid="GPU-bbbb", uuid="MIG-1111", gpu_instance_id=7, compute_instance_id=0,
                      profile="1g.10gb")
    snapshot = Snapshot(devices=(
        DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_FB_USED": 20480, "DCGM_FI_DEV_POWER_USAGE": 300.5},
                      peaks={"DCGM_FI_DEV_FB_USED": 77824, "DCGM_FI_DEV_POWER_USAGE": 690.25}),
        DeviceReading(identity=GPU1, values={"DCGM_FI_DEV_FB_USED": 5000}, peaks={"DCGM_FI_DEV_FB_USED": 6000},
                      mig=(MigReading(identity=mig, values={"DCGM_FI_DEV_FB_USED": 1024}),)),
    ), status=STATUS)
    families = render(context(snapshot, workloads=workloads))
    used = samples(families, "DCGM_FI_DEV_FB_USED")
    peaks = samples(families, "DCGM_EXP_FB_USED_PEAK")
    assert [labels for labels, _ in peaks] == [labels for labels, _ in used if "GPU_I_ID" not in labels]
    assert [value for _, value in peaks] == [77824, 6000]
    assert list(peaks[0][0])[-3:] == ["container", "namespace", "pod"]
    assert samples(families, "DCGM_EXP_POWER_USAGE_PEAK") == [(used[0][0], 690.25)]
    assert samples(families, "DCGM_EXP_GPU_TEMP_PEAK") == []  # no reading, no peak


def test_a_csv_without_a_reading_has_no_peak_family_for_it() -> None:
    snapshot = Snapshot(devices=(DeviceReading(identity=GPU0, values={"DCGM_FI_DEV_GPU_TEMP": 41},
                                               peaks={"DCGM_FI_DEV_GPU_TEMP": 44}),),
                        status=dataclasses.replace(STATUS, peak_window_s=60.0))
    counters = parse_counters("DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n", "temp-only.csv")
    families = render(RenderContext(snapshot=snapshot, counters=counters, options=RenderOptions(hostname="n")))
    names = {family.name for family in families}
    assert "DCGM_EXP_GPU_TEMP_PEAK" in names and "DCGM_EXP_FB_USED_PEAK" not in names
    assert samples(families, "gpu_pod_exporter_peak_window_seconds") == [({}, 60.0)]
