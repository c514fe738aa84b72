"""MIG through the sampler and the renderer: per-instance series, labels, and re-enumeration on change only."""

from __future__ import annotations

import pytest

from exporter.nvml.mig import MIG_CHECK_INTERVAL_S, profile_from_name
from simulator.models import MIB, MIG_PROFILES

from .fake_sampling import captured_logs, samples, sampling

MIXED = """
gpu_count: 2
gpu_defaults: {model: H100-SXM5-80GB}
gpus:
  0:
    mig:
      - {profile: 3g.40gb, load: 80, memory_used: 30GiB}
      - {profile: 2g.20gb, load: 40, memory_used: 12GiB}
      - {profile: 1g.10gb, memory_used: 2GiB}
  1: {load: 50, memory_used: 10GiB}
"""
FB_TOTAL = "DCGM_FI_DEV_FB_TOTAL, gauge, Framebuffer memory total (in MiB).\n"
H100 = MIG_PROFILES["H100-SXM5-80GB"]
H100_RESERVED_MIB = 517
H100_TOTAL_MIB = 81559  # what NVML reports as total on an H100 80GB (a little under the marketing size)
ENUMERATION = ("nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId", "nvmlDeviceGetName")


@pytest.mark.parametrize(("name", "profile"), [
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb"),
    ("NVIDIA A100-SXM4-80GB MIG 1g.10gb+me", "1g.10gb+me"),
    ("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", "3g.40gb"),  # a compute instance: its GPU instance's profile
    ("NVIDIA H200 MIG 7g.141gb ", "7g.141gb"),
])
def test_profile_from_the_mig_device_name(name: str, profile: str) -> None:
    assert profile_from_name(name) == profile


def test_a_mixed_layout_gives_one_series_per_gpu_instance_with_dcgm_labels() -> None:
    with sampling(MIXED, FB_TOTAL) as rig:
        rig.cycle(1.0)
        rig.cycle(2.0)
        families = rig.render()
        parent, whole = (device.identity for device in rig.sampler.snapshot.devices)
        used = samples(families, "DCGM_FI_DEV_FB_USED")
        mig_series = [labels for labels, _ in used if "GPU_I_ID" in labels]
        assert [list(labels) for labels in mig_series] == [
            ["gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID", "Hostname",
             "DCGM_FI_DRIVER_VERSION"]] * 3
        by_instance = {(labels["GPU_I_PROFILE"], labels["GPU_I_ID"]): value for labels, value in used
                       if "GPU_I_ID" in labels}
        assert by_instance == {("3g.40gb", "1"): 30 * 1024, ("2g.20gb", "3"): 12 * 1024, ("1g.10gb", "7"): 2048}
        first = mig_series[0]
        assert (first["gpu"], first["UUID"], first["pci_bus_id"], first["device"], first["modelName"],
                first["Hostname"]) == ("0", parent.uuid, parent.pci_bus_id, "nvidia0", "NVIDIA H100 80GB HBM3",
                                       "node-1")

        # Flex mode: the MIG GPU's framebuffer is reported per instance only (no double counting);
        # the whole GPU keeps its own series without MIG labels.
        assert [labels["UUID"] for labels, _ in used if "GPU_I_ID" not in labels] == [whole.uuid]
        totals = {labels.get("GPU_I_PROFILE"): value for labels, value in samples(families, "DCGM_FI_DEV_FB_TOTAL")}
        assert totals["3g.40gb"] == H100["3g.40gb"].memory_bytes // MIB
        reserved = {labels.get("GPU_I_PROFILE"): value
                    for labels, value in samples(families, "DCGM_FI_DEV_FB_RESERVED")}
        assert reserved["3g.40gb"] == H100_RESERVED_MIB * 4 // 8
        free = {labels.get("GPU_I_PROFILE"): value for labels, value in samples(families, "DCGM_FI_DEV_FB_FREE")}
        assert free["1g.10gb"] == H100["1g.10gb"].memory_bytes // MIB - 2048 - H100_RESERVED_MIB // 8
        # The card's own total, read once from the parent handle at start: one series per GPU, no MIG labels,
        # the whole 79.6 GiB even where the instances' totals add up to less.
        card = {labels["gpu"]: value for labels, value in samples(families, "DCGM_EXP_GPU_FB_TOTAL")}
        assert card == {"0": H100_TOTAL_MIB, "1": H100_TOTAL_MIB}
        assert sum(value for profile, value in totals.items() if profile is not None) < H100_TOTAL_MIB
        assert [labels for labels, _ in samples(families, "DCGM_EXP_GPU_FB_TOTAL") if "GPU_I_ID" in labels] == []

        # Device-wide readings stay on the parent, without MIG labels.
        temperature = samples(families, "DCGM_FI_DEV_GPU_TEMP")
        assert [(labels["gpu"], "GPU_I_ID" in labels) for labels, _ in temperature] == [("0", False), ("1", False)]
        # NVML has no utilization on a MIG-enabled GPU: omitted (not zero), and listed as unsupported.
        assert [labels["gpu"] for labels, _ in samples(families, "DCGM_FI_DEV_GPU_UTIL")] == ["1"]
        unsupported = {(labels["gpu"], labels["field"])
                       for labels, _ in samples(families, "gpu_pod_exporter_field_unsupported")}
        assert ("0", "DCGM_FI_DEV_GPU_UTIL") in unsupported and ("1", "DCGM_FI_DEV_GPU_UTIL") not in unsupported
        # Per-instance activity comes from GPM instead.
        activity = {labels["GPU_I_PROFILE"]: value
                    for labels, value in samples(families, "DCGM_FI_PROF_GR_ENGINE_ACTIVE") if "GPU_I_ID" in labels}
        assert activity == {"3g.40gb": pytest.approx(0.8), "2g.20gb": pytest.approx(0.4), "1g.10gb": 0.0}


def test_mig_identities_are_published_for_attribution() -> None:
    with sampling("gpu_defaults:\n  mig: [{profile: 3g.40gb, compute_instances: 3}, 1g.10gb]\n") as rig:
        snapshot = rig.cycle(1.0)
        parent = snapshot.devices[0].identity
        # Every MIG device (each compute instance has its own MIG-<uuid> the kubelet hands out)...
        assert [(m.gpu_instance_id, m.compute_instance_id, m.profile) for m in snapshot.migs] == [
            (1, 0, "3g.40gb"), (1, 1, "3g.40gb"), (1, 2, "3g.40gb"), (7, 0, "1g.10gb")]
        assert all(m.parent_uuid == parent.uuid and m.uuid.startswith("MIG-") for m in snapshot.migs)
        assert rig.sampler.mig_identities() == snapshot.migs
        # ...but one reading per GPU instance, as dcgm-exporter reports GPU instances (GPU_I_ID).
        assert [m.identity.gpu_instance_id for m in snapshot.devices[0].mig] == [1, 7]


def test_the_layout_is_enumerated_on_change_only() -> None:
    with sampling(MIXED, mig_check_interval_s=60.0) as rig:
        rig.cycle(1.0)
        calls = rig.fake.calls
        walked = calls["nvmlDeviceGetMigDeviceHandleByIndex"]
        identified = {name: calls[name] for name in ENUMERATION}
        assert identified == dict.fromkeys(ENUMERATION, 3) | {"nvmlDeviceGetName": 3 + 2}  # + 2 parents at start
        for second in range(2, 60):  # a minute of cycles: no walk, no identification
            rig.cycle(float(second))
        assert calls["nvmlDeviceGetMigDeviceHandleByIndex"] == walked
        assert {name: calls[name] for name in ENUMERATION} == identified
        rig.cycle(62.0)  # the periodic check walks the slots once; nothing changed, nothing identified
        assert calls["nvmlDeviceGetMigDeviceHandleByIndex"] == 2 * walked
        assert {name: calls[name] for name in ENUMERATION} == identified

        rig.fake.set_mig_layout(0, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])  # an admin adds an instance
        rig.cycle(63.0)
        assert len(rig.sampler.snapshot.devices[0].mig) == 3  # not seen before the next check
        rig.cycle(123.0)
        assert [m.identity.gpu_instance_id for m in rig.sampler.snapshot.devices[0].mig] == [1, 3, 7, 8]
        # Only the new MIG device was identified.
        assert {name: calls[name] - identified[name] for name in ENUMERATION} == dict.fromkeys(ENUMERATION, 1)


def test_a_destroyed_instance_is_noticed_at_the_next_cycle() -> None:
    with sampling(MIXED) as rig:
        rig.cycle(1.0)
        rig.fake.set_mig_layout(0, ["3g.40gb", "1g.10gb"])  # the 2g.20gb instance is destroyed
        rig.cycle(2.0)  # its MIG handle answers InvalidArgument: the layout is stale
        assert [m.identity.profile for m in rig.sampler.snapshot.devices[0].mig] == ["3g.40gb", "1g.10gb"]
        rig.cycle(3.0)  # probed again (one slot is now a hole: the walk continues past it)
        snapshot = rig.sampler.snapshot
        assert [m.profile for m in snapshot.migs] == ["3g.40gb", "1g.10gb"]
        assert [m.identity.gpu_instance_id for m in snapshot.devices[0].mig] == [1, 7]


def test_mig_mode_changes_bring_utilization_back() -> None:
    with sampling(MIXED) as rig, captured_logs("gpu_pod_exporter.sampler") as logs:
        rig.cycle(1.0)
        assert "DCGM_FI_DEV_GPU_UTIL" not in rig.sampler.snapshot.devices[0].values
        rig.fake.set_mig_layout(0, None)
        reading = rig.cycle(1.0 + MIG_CHECK_INTERVAL_S).devices[0]  # the periodic layout check sees it
        assert reading.mig == () and rig.sampler.snapshot.migs == ()
        assert reading.values["DCGM_FI_DEV_GPU_UTIL"] == 0
        assert "DCGM_FI_DEV_FB_USED" in reading.values  # a whole GPU again: parent framebuffer rows
        assert logs.messages().count("MIG layout") == 2  # the first layout and the change, not every cycle


def test_a_gpu_without_mig_is_asked_once() -> None:
    with sampling("gpu_defaults: {model: RTX-4090}\n") as rig:
        for second in range(1, 200, 10):
            rig.cycle(float(second))
        assert rig.fake.calls["nvmlDeviceGetMigMode"] == 1
        assert rig.fake.calls["nvmlDeviceGetMaxMigDeviceCount"] == 0
        assert rig.sampler.snapshot.migs == ()


def test_a_query_mig_devices_do_not_support_is_asked_once_per_layout() -> None:
    only_mig = "gpu_count: 1\ngpu_defaults: {model: H100-SXM5-80GB, mig: [3g.40gb, 2g.20gb, 1g.10gb]}\n"
    with sampling(only_mig) as rig:
        calls = rig.fake.calls
        for symbol in ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2"):
            rig.fake.inject_error(symbol, "NotSupported", gpu=0)  # the parent's rules bind its MIG devices too
        rig.cycle(1.0)
        asked = calls["nvmlDeviceGetMemoryInfo"] + calls["nvmlDeviceGetMemoryInfo_v2"]
        for second in range(2, 10):
            rig.cycle(float(second))
        assert calls["nvmlDeviceGetMemoryInfo"] + calls["nvmlDeviceGetMemoryInfo_v2"] == asked  # not asked again
        assert all("DCGM_FI_DEV_FB_USED" not in mig.values for mig in rig.sampler.snapshot.devices[0].mig)

        rig.fake.clear_errors()
        rig.fake.set_mig_layout(0, ["3g.40gb", "1g.10gb"])  # the 2g.20gb instance is destroyed
        rig.cycle(10.0)  # its MIG handle is gone: the layout is probed at the next cycle
        rig.cycle(11.0)
        rig.cycle(12.0)
        instances = rig.sampler.snapshot.devices[0].mig
        assert [mig.identity.profile for mig in instances] == ["3g.40gb", "1g.10gb"]
        # A new layout means new MIG devices: what the old ones could not answer is asked again.
        assert all(mig.values.get("DCGM_FI_DEV_FB_USED") is not None for mig in instances)
