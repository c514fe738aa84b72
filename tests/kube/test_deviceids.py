"""Every device-ID form the kubelet may report, and what it resolves to on this node."""

from __future__ import annotations

import pytest

from exporter.kube.deviceids import DeviceCatalog, DeviceIdKind, GpuKey, parse_device_id

from .helpers import DEVICES, GPU0, GPU1, GPU2, MIG_A, MIG_B, MIGS


@pytest.mark.parametrize(
    ("raw", "kind", "replica", "gpu_instance_id"),
    [
        (GPU0, DeviceIdKind.GPU_UUID, None, None),
        (f"{GPU0}::3", DeviceIdKind.GPU_UUID, "3", None),
        (MIG_A, DeviceIdKind.MIG_UUID, None, None),
        (f"{MIG_A}::7", DeviceIdKind.MIG_UUID, "7", None),
        (f"MIG-{GPU2}/5/0", DeviceIdKind.MIG_LEGACY, None, 5),
        (f"MIG-{GPU2}/3/1::2", DeviceIdKind.MIG_LEGACY, "2", 3),
        ("nvidia0", DeviceIdKind.DEVICE_NAME, None, None),
        ("nvidia12/vgpu4", DeviceIdKind.DEVICE_NAME, "4", None),
        ("nvidia1/gi3", DeviceIdKind.DEVICE_NAME_MIG, None, 3),
        ("nvidia1/gi3/vgpu1", DeviceIdKind.DEVICE_NAME_MIG, "1", 3),
        ("nvidia0::3", DeviceIdKind.DEVICE_NAME, "3", None),
        ("nvidia1/gi3::2", DeviceIdKind.DEVICE_NAME_MIG, "2", 3),
        ("nvidia0::", DeviceIdKind.OPAQUE, None, None),
        ("tegra", DeviceIdKind.OPAQUE, None, None),
        ("all", DeviceIdKind.OPAQUE, None, None),
        (f"{GPU0}::x", DeviceIdKind.OPAQUE, None, None),
        ("GPU-not-a-uuid", DeviceIdKind.OPAQUE, None, None),
        ("nvidia0/gi", DeviceIdKind.OPAQUE, None, None),
        ("", DeviceIdKind.OPAQUE, None, None),
    ],
)
def test_parse_every_form(
    raw: str, kind: DeviceIdKind, replica: str | None, gpu_instance_id: int | None
) -> None:
    parsed = parse_device_id(raw)
    assert parsed.kind is kind
    assert parsed.replica == replica
    assert parsed.gpu_instance_id == gpu_instance_id
    assert parsed.raw == raw


def test_legacy_mig_id_carries_its_parent_and_compute_instance() -> None:
    parsed = parse_device_id(f"MIG-{GPU2}/5/1")
    assert (parsed.uuid, parsed.gpu_instance_id, parsed.compute_instance_id) == (GPU2, 5, 1)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (GPU0, GpuKey(GPU0)),
        (f"{GPU1}::0", GpuKey(GPU1)),
        ("GPU-" + GPU2[4:].upper(), GpuKey(GPU2)),  # the case of the hex digits does not matter
        (MIG_A, GpuKey(GPU2, 3)),
        (f"{MIG_B}::7", GpuKey(GPU2, 5)),
        (f"MIG-{GPU2}/5/0", GpuKey(GPU2, 5)),
        # GKE numbers GPUs by /dev minor: minor 0 is NVML index 1 (GPU1), minor 2 is GPU0.
        ("nvidia0", GpuKey(GPU1)),
        ("nvidia2/vgpu1", GpuKey(GPU0)),
        ("nvidia1/gi3", GpuKey(GPU2, 3)),
        ("nvidia1/gi5/vgpu0", GpuKey(GPU2, 5)),
        ("nvidia0::1", GpuKey(GPU1)),
        ("nvidia1/gi3::0", GpuKey(GPU2, 3)),
    ],
)
def test_resolve_to_gpu_or_mig_instance(raw: str, expected: GpuKey) -> None:
    assert DeviceCatalog(DEVICES, MIGS).resolve(parse_device_id(raw)) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "GPU-00000000-0000-0000-0000-000000000000",  # a GPU of another node
        "MIG-00000000-0000-0000-0000-000000000000",  # an unknown MIG device
        "nvidia7",  # no such minor
        "tegra",
        "all",
    ],
)
def test_ids_naming_nothing_here_resolve_to_none(raw: str) -> None:
    assert DeviceCatalog(DEVICES, MIGS).resolve(parse_device_id(raw)) is None


def test_modern_mig_id_needs_the_mig_inventory() -> None:
    assert DeviceCatalog(DEVICES, ()).resolve(parse_device_id(MIG_A)) is None


def test_kind_names_the_gpu_id_type_it_belongs_to() -> None:
    assert parse_device_id(GPU0).kind.id_type == "uid"
    assert parse_device_id("nvidia0/gi1").kind.id_type == "device-name"
    assert parse_device_id("tegra").kind.id_type is None
