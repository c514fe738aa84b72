"""The node view (/gpus.json) from exposition samples: what the page and `top` on one node show."""

from __future__ import annotations

import json

from exporter.conditions import CounterHistory
from exporter.web.nodeview import SCHEMA, build, build_view, served, view_json

GPU0 = {"gpu": "0", "UUID": "GPU-aaa", "pci_bus_id": "00000000:18:00.0", "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-a"}
GPU1 = {**GPU0, "gpu": "1", "UUID": "GPU-bbb", "device": "nvidia1"}
MIG = {**GPU1, "UUID": "MIG-ccc", "GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": "1"}


def pod(base: dict[str, str], name: str, namespace: str = "ml", team: str = "vision") -> dict[str, str]:
    return {**base, "container": "main", "namespace": namespace, "pod": name, "team": team}


SAMPLES = [
    ("gpu_pod_exporter_last_sample_timestamp_seconds", {}, 1_700_000_000.5),
    ("gpu_pod_exporter_device_up", {"gpu": "0"}, 1.0),
    ("gpu_pod_exporter_device_up", {"gpu": "1"}, 0.0),
    ("DCGM_FI_DEV_GPU_UTIL", GPU0, 90.0),
    ("DCGM_FI_DEV_FB_USED", GPU0, 40_000.0),
    ("DCGM_FI_DEV_FB_FREE", GPU0, 40_000.0),
    ("DCGM_FI_DEV_FB_RESERVED", GPU0, 500.0),
    ("DCGM_FI_DEV_GPU_TEMP", GPU0, 61.0),
    ("DCGM_FI_DEV_POWER_USAGE", GPU0, 420.5),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", GPU0, 700.0),
    ("DCGM_EXP_GPU_ALLOCATED", GPU0, 1.0),
    ("DCGM_EXP_GPU_ALLOCATION_INFO", {**pod(GPU0, "a-0"), "vgpu": "0"}, 1.0),
    ("DCGM_EXP_GPU_ALLOCATION_INFO", {**pod(GPU0, "<b>x</b>", "research"), "vgpu": "1"}, 1.0),
    ("DCGM_EXP_CONTAINER_SM_UTIL", pod(GPU0, "a-0"), 70.0),
    ("DCGM_EXP_CONTAINER_SM_UTIL", pod(GPU0, "<b>x</b>", "research"), 20.0),
    ("DCGM_EXP_CONTAINER_FB_USED", pod(GPU0, "a-0"), 30_000.0),
    ("DCGM_EXP_GPU_HEALTHY", {**GPU0, "reason": "ok"}, 1.0),
    ("DCGM_EXP_GPU_HEALTHY", {**GPU1, "reason": "gpu_lost"}, 0.0),
    ("DCGM_FI_DEV_XID_ERRORS", {**GPU1, "err_code": "79", "err_msg": "GPU has fallen off the bus"}, 79.0),
    ("DCGM_EXP_XID_ERRORS_COUNT", {**GPU1, "window_size_in_ms": "300000"}, 2.0),
    ("DCGM_EXP_XID_ERRORS_TOTAL", {**GPU1, "xid": "79"}, 1.0),
    ("DCGM_EXP_XID_ERRORS_TOTAL", {**GPU1, "xid": "13"}, 1.0),
    ("DCGM_FI_DEV_FB_USED", MIG, 10_000.0),
    ("DCGM_FI_DEV_FB_FREE", MIG, 30_000.0),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", MIG, 0.5),
    ("DCGM_EXP_GPU_ALLOCATION_INFO", pod(MIG, "mig-0"), 1.0),
    ("DCGM_FI_DEV_GPU_TEMP", {**GPU0, "gpu": "2", "UUID": "GPU-ddd"}, float("nan")),
]


def test_each_gpu_has_its_readings_health_xids_pods_and_mig_layout() -> None:
    view = build_view(SAMPLES, exporter_version="9.9", generation=7)
    assert (view["schema"], view["node"], view["generation"], view["sampled_at"]) == (SCHEMA, "node-a", 7,
                                                                                      1_700_000_000.5)
    gpu0, gpu1 = view["gpus"]  # the NaN-only GPU 2 is left out: nothing finite was reported for it
    assert gpu0["uuid"] == "GPU-aaa" and gpu0["model"] == "NVIDIA H100 80GB HBM3"
    assert (gpu0["up"], gpu0["healthy"], gpu0["health_reason"]) == (True, True, "ok")
    assert (gpu0["utilization_percent"], gpu0["memory_used_mib"], gpu0["memory_total_mib"]) == (90, 40_000, 80_500)
    assert (gpu0["temperature_c"], gpu0["power_w"], gpu0["power_limit_w"], gpu0["allocated"]) == (61, 420.5, 700, True)
    assert [(c["namespace"], c["pod"], c["sm_util_percent"], c["memory_used_mib"]) for c in gpu0["containers"]] == [
        ("ml", "a-0", 70.0, 30_000.0), ("research", "<b>x</b>", 20.0, None)]
    assert gpu0["xid"] == {"last": None, "recent_count": None, "window_s": None, "totals": {}}
    assert (gpu1["up"], gpu1["healthy"], gpu1["health_reason"]) == (False, False, "gpu_lost")
    assert gpu1["temperature_c"] is None and gpu1["power_w"] is None  # not reported: null, never 0
    assert gpu1["xid"] == {"last": {"code": 79, "message": "GPU has fallen off the bus"}, "recent_count": 2.0,
                           "window_s": 300.0, "totals": {"13": 1.0, "79": 1.0}}
    assert gpu1["uuid"] == "GPU-bbb"  # the parent's, not the MIG device's
    assert gpu1["mig"] == [{"gpu_instance_id": 1, "profile": "3g.40gb", "memory_used_mib": 10_000.0,
                            "memory_total_mib": 40_000.0, "engine_active_percent": 50.0}]
    assert [(c["pod"], c["gpu_instance_id"]) for c in gpu1["containers"]] == [("mig-0", 1)]
    # The MIG parent has no readings of its own: its instances' memory used and their activity; its total
    # is the card's (DCGM_EXP_GPU_FB_TOTAL), which this exposition does not carry: unknown, never the sum of
    # the instances' totals.
    assert (gpu1["utilization_percent"], gpu1["memory_used_mib"], gpu1["memory_total_mib"]) == (50.0, 10_000, None)


def test_chip_readings_repeated_on_each_mig_instance_are_the_gpus_own() -> None:
    """--mig-chip-series per-instance (and dcgm-exporter's -d f): temperature and power come only on the
    GPU instances' series, with their pods; the page shows them once, on the GPU."""
    small = {**MIG, "GPU_I_PROFILE": "1g.10gb", "GPU_I_ID": "7"}
    samples = [("gpu_pod_exporter_device_up", {"gpu": "1", "UUID": "GPU-bbb"}, 1.0)]
    for labels, name in ((pod(MIG, "big-0"), "DCGM_FI_DEV_GPU_TEMP"), (small, "DCGM_FI_DEV_GPU_TEMP"),
                         (pod(MIG, "big-0"), "DCGM_FI_DEV_POWER_USAGE"), (small, "DCGM_FI_DEV_POWER_USAGE")):
        samples.append((name, labels, 55.0 if name == "DCGM_FI_DEV_GPU_TEMP" else 310.0))
    samples.append(("DCGM_FI_DEV_FB_USED", small, 2_000.0))
    gpu = build_view(samples)["gpus"][0]
    assert (gpu["temperature_c"], gpu["power_w"], gpu["memory_used_mib"]) == (55.0, 310.0, 2_000.0)
    assert [(m["gpu_instance_id"], m["memory_used_mib"]) for m in gpu["mig"]] == [(1, None), (7, 2_000.0)]
    assert [(c["pod"], c["gpu_instance_id"]) for c in gpu["containers"]] == [("big-0", 1)]


def test_virtual_gpu_copies_of_the_gpu_series_are_the_pods_share_not_the_gpus() -> None:
    samples = [("DCGM_FI_DEV_GPU_UTIL", GPU0, 80.0),
               ("DCGM_FI_DEV_GPU_UTIL", {**pod(GPU0, "a-0"), "vgpu": "0"}, 30.0),
               ("DCGM_FI_DEV_FB_USED", {**pod(GPU0, "a-0"), "vgpu": "0"}, 1_000.0),
               ("DCGM_FI_DEV_FB_USED", GPU0, 5_000.0)]
    gpu = build_view(samples)["gpus"][0]
    assert (gpu["utilization_percent"], gpu["memory_used_mib"]) == (80.0, 5_000.0)
    assert [(c["sm_util_percent"], c["memory_used_mib"]) for c in gpu["containers"]] == [(30.0, 1_000.0)]


def test_a_gpu_with_one_pod_repeats_the_gpu_value_on_workload_labelled_series() -> None:
    samples = [("DCGM_FI_DEV_GPU_UTIL", pod(GPU0, "solo-0"), 55.0), ("DCGM_EXP_GPU_ALLOCATED", GPU0, 0.0)]
    gpu = build_view(samples)["gpus"][0]
    assert gpu["utilization_percent"] == 55.0
    assert [(c["pod"], c["sm_util_percent"]) for c in gpu["containers"]] == [("solo-0", None)]
    assert gpu["allocated"] is True  # a pod holds it, whatever the allocation gauge said


def test_the_json_cannot_close_a_tag_or_script_whatever_a_pod_is_called() -> None:
    body = view_json(build_view(SAMPLES))
    assert b"<" not in body and b">" not in body and b"&" not in body
    assert json.loads(body)["gpus"][0]["containers"][1]["pod"] == "<b>x</b>"


def test_each_gpu_lists_its_conditions_and_the_node_its_own() -> None:
    """The conditions come from exporter.conditions (the alerts' definitions); an empty list when none."""
    view = build_view([*SAMPLES, ("gpu_pod_exporter_kubelet_up", {}, 0.0), ("gpu_pod_exporter_nvml_up", {}, 1.0)],
                      history=CounterHistory(), served_at=1_700_000_001.0, sampling_interval_s=1.0)
    gpu0, gpu1 = view["gpus"]
    assert gpu0["conditions"] == []
    assert [(c["id"], c["alert"], c["severity"]) for c in gpu1["conditions"]] == [
        ("fallen_off_bus", "GpuFallenOffBus", "critical")]
    assert view["conditions"] == [{"id": "kubelet_down", "alert": "GpuPodExporterKubeletDown", "severity": "warning",
                                   "text": "the kubelet's pod resources cannot be read: pod labels are missing or "
                                           "outdated"}]


def test_the_served_document_says_when_it_was_served_and_when_its_data_turns_stale() -> None:
    """served_at is the server's clock: a client computes the data's age (served_at - sampled_at); past
    stale_after_s (three sampling intervals) the node carries the samples_stale condition."""
    built = build(SAMPLES, history=CounterHistory())
    fresh = served(built, served_at=1_700_000_003.5, sampling_interval_s=1.0)
    assert (fresh["served_at"], fresh["sampling_interval_s"], fresh["stale_after_s"]) == (1_700_000_003.5, 1.0, 3.0)
    assert fresh["conditions"] == []
    old = served(built, served_at=1_700_000_003.6, sampling_interval_s=1.0)
    assert [(c["id"], c["alert"], c["text"]) for c in old["conditions"]] == [
        ("samples_stale", "GpuPodExporterSamplesStale", "data is 3 s old (stale after 3 s: 3 sampling intervals)")]
    unknown = build_view(SAMPLES, history=CounterHistory())  # `top` on /metrics: no interval, no age bound
    assert unknown["sampling_interval_s"] is None and unknown["stale_after_s"] is None
    assert unknown["conditions"] == [] and unknown["served_at"] > 0


def test_a_mig_gpus_utilisation_is_weighted_by_slices_and_its_total_is_the_gpus_own() -> None:
    big, small = {**MIG, "GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": "1"}, {**MIG, "GPU_I_PROFILE": "1g.10gb",
                                                                         "GPU_I_ID": "9"}
    samples = [("DCGM_FI_PROF_GR_ENGINE_ACTIVE", big, 0.9), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", small, 0.1),
               ("DCGM_FI_DEV_FB_USED", big, 30_000.0), ("DCGM_FI_DEV_FB_FREE", big, 10_000.0),
               ("DCGM_FI_DEV_FB_USED", small, 1_000.0), ("DCGM_FI_DEV_FB_FREE", small, 9_000.0)]
    gpu = build_view(samples, history=CounterHistory())["gpus"][0]
    assert gpu["utilization_percent"] == 70.0  # (3 x 90 + 1 x 10) / 4, not the mean 50
    assert (gpu["memory_used_mib"], gpu["memory_total_mib"]) == (31_000.0, None)  # not 50 000: the GPU's is unknown
    with_total = build_view([*samples, ("DCGM_FI_DEV_FB_TOTAL", GPU1, 81_559.0)], history=CounterHistory())
    assert with_total["gpus"][0]["memory_total_mib"] == 81_559.0
    assert [m["memory_total_mib"] for m in with_total["gpus"][0]["mig"]] == [40_000.0, 10_000.0]


def test_a_mig_gpus_memory_total_is_the_cards_from_the_exporters_own_series() -> None:
    """This exporter's exposition: DCGM_EXP_GPU_FB_TOTAL (the card, read from NVML) beside per-instance FB
    series. The GPU shows the card's 79.6 GiB with its instances' used memory, not the instances' sum."""
    big, small = {**MIG, "GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": "1"}, {**MIG, "GPU_I_PROFILE": "1g.10gb",
                                                                         "GPU_I_ID": "9"}
    samples = [("DCGM_FI_DEV_FB_USED", big, 30_000.0), ("DCGM_FI_DEV_FB_TOTAL", big, 40_448.0),
               ("DCGM_FI_DEV_FB_USED", small, 1_000.0), ("DCGM_FI_DEV_FB_TOTAL", small, 9_984.0),
               ("DCGM_EXP_GPU_FB_TOTAL", GPU1, 81_559.0),
               # a whole GPU: the card's total wins over used + free + reserved (which NVML reports a little apart)
               ("DCGM_FI_DEV_FB_USED", GPU0, 1_000.0), ("DCGM_FI_DEV_FB_FREE", GPU0, 80_000.0),
               ("DCGM_EXP_GPU_FB_TOTAL", GPU0, 81_559.0)]
    whole, mig = build_view(samples, history=CounterHistory())["gpus"]
    assert (mig["memory_used_mib"], mig["memory_total_mib"]) == (31_000.0, 81_559.0)  # not 50 432
    assert [m["memory_total_mib"] for m in mig["mig"]] == [40_448.0, 9_984.0]  # each instance keeps its own
    assert (whole["memory_used_mib"], whole["memory_total_mib"]) == (1_000.0, 81_559.0)


def test_counter_conditions_read_the_history_of_earlier_views() -> None:
    """An uncorrectable ECC error is "new" against the values an earlier view saw (one exposition alone
    has no history); the time is the data's own, so rebuilding one exposition adds nothing."""
    history = CounterHistory()

    def at(when: float, dbe: float) -> list[dict[str, str]]:
        samples = [("gpu_pod_exporter_last_sample_timestamp_seconds", {}, when),
                   ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU0, dbe)]
        return build_view(samples, history=history)["gpus"][0]["conditions"]

    assert at(1_000.0, 0.0) == [] and at(1_001.0, 0.0) == []
    [hit] = at(1_002.0, 2.0)
    assert (hit["alert"], hit["text"]) == ("GpuEccUncorrectableError",
                                           "2 new uncorrectable ECC errors (volatile) in the last 2 s")
    assert at(1_700.0, 2.0) == []  # none new in the last 10 minutes
