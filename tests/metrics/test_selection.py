"""-d/--devices: dcgm-exporter's selector syntax, and which GPUs / GPU instances each value reports."""

from __future__ import annotations

import pytest

from exporter.metrics.counters import load_counters
from exporter.metrics.render import RenderContext, RenderOptions, render
from exporter.metrics.selection import DEFAULT, effective_selection, parse_devices, select, unknown_ids
from exporter.snapshot import DeviceIdentity, DeviceReading, MigIdentity, MigReading, SamplerStatus, Snapshot

PLAIN = DeviceIdentity(index=0, uuid="GPU-plain", pci_bus_id="00000000:18:00.0", minor=0, model="NVIDIA H100")
MIGGED = DeviceIdentity(index=1, uuid="GPU-mig", pci_bus_id="00000000:2A:00.0", minor=1, model="NVIDIA H100")
CHIP = {"DCGM_FI_DEV_GPU_TEMP": 60, "DCGM_FI_DEV_POWER_USAGE": 300.5}


def _mig(gpu_instance_id: int, profile: str, fb_used: int) -> MigReading:
    identity = MigIdentity(parent_uuid=MIGGED.uuid, uuid=f"MIG-{gpu_instance_id}", gpu_instance_id=gpu_instance_id,
                           compute_instance_id=0, profile=profile)
    return MigReading(identity=identity, values={"DCGM_FI_DEV_FB_USED": fb_used})


READINGS = (
    DeviceReading(identity=PLAIN, values={**CHIP, "DCGM_FI_DEV_FB_USED": 1000}),
    DeviceReading(identity=MIGGED, values=dict(CHIP), mig=(_mig(1, "3g.40gb", 10), _mig(5, "1g.10gb", 20))),
)


def _entities(text: str) -> list[tuple[int, int | None, dict[str, float]]]:
    return [(entity.reading.identity.index, entity.mig.identity.gpu_instance_id if entity.mig else None,
             dict(entity.values)) for entity in select(parse_devices(text), READINGS)]


@pytest.mark.parametrize(("text", "gpus", "gpu_ids", "instances", "instance_ids"), [
    ("g", True, None, False, None),
    ("g:0,1", True, {0, 1}, False, None),
    ("i:0,2-4", False, None, True, {0, 2, 3, 4}),
    ("g+i", True, None, True, None),
    ("g:1+i:0", True, {1}, True, {0}),
])
def test_dcgm_exporter_selector_syntax(text: str, gpus: bool, gpu_ids: set[int] | None, instances: bool,
                                       instance_ids: set[int] | None) -> None:
    selection = parse_devices(text)
    assert (selection.gpus, selection.gpu_ids, selection.instances, selection.instance_ids) == (
        gpus, gpu_ids, instances, instance_ids)
    assert str(selection) == text
    assert parse_devices("f").flex and parse_devices("") is DEFAULT and parse_devices(None) is DEFAULT


@pytest.mark.parametrize("text", ["x", "f:0", "f+g", "g:a", "g:3-1", "g+g", "i:", "g:-1"])
def test_a_malformed_selector_says_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match="invalid device selector"):
        parse_devices(text)


def test_default_reports_every_chip_once_and_each_instance_with_its_own_readings() -> None:
    assert _entities("") == [
        (0, None, {**CHIP, "DCGM_FI_DEV_FB_USED": 1000}),
        (1, None, CHIP),
        (1, 1, {"DCGM_FI_DEV_FB_USED": 10}),
        (1, 5, {"DCGM_FI_DEV_FB_USED": 20}),
    ]


def test_without_devices_mig_chip_series_chooses_per_instance_as_flex_or_once_as_per_chip() -> None:
    per_instance = effective_selection(parse_devices(""), "per-instance")
    assert [(e.reading.identity.index, e.mig.identity.gpu_instance_id if e.mig else None, dict(e.values))
            for e in select(per_instance, READINGS)] == _entities("f")
    assert effective_selection(parse_devices(""), "once") is DEFAULT
    assert effective_selection(parse_devices("g:1"), "per-instance") == parse_devices("g:1")  # -d decides
    assert effective_selection(parse_devices("i"), "once") == parse_devices("i")


def test_flex_reports_a_mig_gpu_per_instance_with_the_chip_readings_as_dcgm_exporter_does() -> None:
    assert _entities("f") == [
        (0, None, {**CHIP, "DCGM_FI_DEV_FB_USED": 1000}),
        (1, 1, {**CHIP, "DCGM_FI_DEV_FB_USED": 10}),
        (1, 5, {**CHIP, "DCGM_FI_DEV_FB_USED": 20}),
    ]


def test_gpus_instances_and_ranges() -> None:
    assert [(gpu, gi) for gpu, gi, _ in _entities("g")] == [(0, None), (1, None)]
    assert [(gpu, gi) for gpu, gi, _ in _entities("g:1")] == [(1, None)]
    assert [(gpu, gi) for gpu, gi, _ in _entities("i")] == [(1, 1), (1, 5)]
    assert [(gpu, gi) for gpu, gi, _ in _entities("i:1")] == [(1, 5)]  # node-wide numbering: 0 is GI 1, 1 is GI 5
    assert [(gpu, gi) for gpu, gi, _ in _entities("g:0+i")] == [(0, None), (1, 1), (1, 5)]


def test_ids_naming_nothing_are_listed_for_one_warning() -> None:
    assert unknown_ids(parse_devices("g:0,7+i:1-2"), READINGS) == ["GPU 7", "GPU instance 2"]
    assert unknown_ids(parse_devices("f"), READINGS) == []


def test_render_with_flex_puts_the_chip_temperature_on_each_instance_series() -> None:
    snapshot = Snapshot(devices=READINGS, status=SamplerStatus(nvml_up=True, driver_version="550.90.07"))
    ctx = RenderContext(snapshot=snapshot, counters=load_counters(None),
                        options=RenderOptions(hostname="node-1", devices=parse_devices("f")))
    temperatures = [dict(sample.labels) for family in render(ctx) for sample in family.samples
                    if sample.name == "DCGM_FI_DEV_GPU_TEMP"]
    assert [(labels["gpu"], labels.get("GPU_I_ID"), labels.get("GPU_I_PROFILE")) for labels in temperatures] == [
        ("0", None, None), ("1", "1", "3g.40gb"), ("1", "5", "1g.10gb")]
    assert list(temperatures[1])[:8] == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE",
                                         "GPU_I_ID", "Hostname"]
