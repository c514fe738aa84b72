"""exporter.conditions: each condition at and past its threshold, the counter history, and the check
that the shipped alert rules use exactly the module's numbers (it fails on a planted drift)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import conditions as c
from exporter.conditions import (
    BY_ID,
    CONDITIONS,
    Context,
    CounterHistory,
    GpuSamples,
    NodeSamples,
    gpu_conditions,
    node_conditions,
    record,
)
from exporter.xid_codes import FATAL_CLASS_XIDS, NEEDS_RESET_XIDS

RULES = Path(__file__).resolve().parents[1] / "deploy" / "rules" / "gpu-pod-exporter-alerts.yaml"
GPU = {"gpu": "0", "UUID": "GPU-0", "Hostname": "n"}
MIG3 = {**GPU, "GPU_I_PROFILE": "2g.20gb", "GPU_I_ID": "3"}


def samples(*items: tuple[str, Mapping[str, str], float]) -> GpuSamples:
    gpu = GpuSamples(0, "GPU-0")
    for name, labels, value in items:
        gpu.add(name, labels, value)
    return gpu


def fired(gpu: GpuSamples, now: float = 1000.0, history: CounterHistory | None = None) -> dict[str, str]:
    ctx = Context(now, history or CounterHistory(), {"3": "2g.20gb"})
    return {hit["id"]: hit["text"] for hit in gpu_conditions(gpu, ctx)}


# ------------------------------------------------------------------------------------- thresholds
@pytest.mark.parametrize(("util", "idle"), [(4.9, True), (5.0, False), (0.0, True)])
def test_an_allocated_gpu_is_idle_below_five_percent_exactly_as_the_alert(util: float, idle: bool) -> None:
    gpu = samples(("DCGM_FI_DEV_GPU_UTIL", GPU, util), ("DCGM_EXP_GPU_ALLOCATED", GPU, 1.0))
    assert ("idle" in fired(gpu)) is idle
    assert c.is_idle(util, True) is idle and not c.is_idle(util, False)


def test_a_free_gpu_is_never_idle_and_an_idle_mig_instance_is_named() -> None:
    assert "idle" not in fired(samples(("DCGM_FI_DEV_GPU_UTIL", GPU, 0.0), ("DCGM_EXP_GPU_ALLOCATED", GPU, 0.0)))
    text = fired(samples(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", MIG3, 0.049), ("DCGM_EXP_GPU_ALLOCATED", MIG3, 1.0)))["idle"]
    assert text.startswith("MIG 2g.20gb instance 3: allocated, engine activity 4.9 %")


@pytest.mark.parametrize(("used", "full"), [(95.0, False), (95.1, True)])
def test_memory_is_nearly_full_above_ninety_five_percent_of_its_peak(used: float, full: bool) -> None:
    gpu = samples(("DCGM_FI_DEV_FB_USED", GPU, 10.0), ("DCGM_FI_DEV_FB_FREE", GPU, 90.0),
                  ("DCGM_EXP_FB_USED_PEAK", GPU, used))
    assert ("memory_nearly_full" in fired(gpu)) is full


@pytest.mark.parametrize(("mib", "held"), [(5120.0, False), (5121.0, True)])
def test_memory_held_by_no_pod_or_without_allocation_above_five_gib(mib: float, held: bool) -> None:
    gpu = samples(("DCGM_EXP_UNATTRIBUTED_FB_USED", GPU, mib), ("DCGM_FI_DEV_FB_USED", GPU, mib),
                  ("DCGM_EXP_GPU_ALLOCATED", GPU, 0.0))
    shown = fired(gpu)
    assert ("memory_unattributed" in shown, "memory_held_without_allocation" in shown) == (held, held)


@pytest.mark.parametrize(("temp", "expected"), [(85.0, set()), (86.0, {"temperature_high"}),
                                                 (87.0, {"temperature_high", "temperature_near_slowdown"})])
def test_temperature_high_above_85_and_near_slowdown_within_two_degrees(temp: float, expected: set[str]) -> None:
    gpu = samples(("DCGM_FI_DEV_GPU_TEMP", GPU, temp), ("DCGM_FI_DEV_SLOWDOWN_TEMP", GPU, 89.0))
    assert set(fired(gpu)) == expected


@pytest.mark.parametrize(("bits", "expected"), [(0x20, {"thermal_throttling"}), (0x40, {"thermal_throttling"}),
                                                 (0x80, {"power_brake"}), (0x04 | 0x10 | 0x01, set())])
def test_clock_event_bits_thermal_and_power_brake(bits: int, expected: set[str]) -> None:
    assert set(fired(samples(("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", GPU, float(bits))))) == expected


def test_xid_conditions_name_each_code_from_the_exporters_window() -> None:
    window = {"window_size_in_ms": "300000"}
    gpu = samples(("DCGM_EXP_XID_ERRORS_COUNT", {**GPU, **window, "xid": "48"}, 2.0),
                  ("DCGM_EXP_XID_ERRORS_COUNT", {**GPU, **window, "xid": "63"}, 1.0),
                  ("DCGM_EXP_XID_ERRORS_COUNT", {**GPU, **window, "xid": "13"}, 1.0),
                  ("DCGM_EXP_GPU_HEALTHY", {**GPU, "reason": "fatal_xid"}, 0.0))
    shown = fired(gpu)
    assert shown["xid_fatal"] == "fatal Xid 48 (Double Bit ECC Error) x2 in the last 5 min"
    assert shown["xid_needs_reset"].startswith("needs a reset: Xid 63 ")
    assert shown["xid_burst"] == "4 Xids in the last 5 min (a burst above 3)"  # more than 3
    assert shown["unhealthy"] == "unhealthy: fatal_xid (Xid 48, 63)"  # the fatal Xid itself, not only the last
    three = samples(("DCGM_EXP_XID_ERRORS_COUNT", {**GPU, **window, "xid": "13"}, 3.0))
    assert set(fired(three)) == set()  # 13 is an application fault; 3 is not a burst


def test_lost_and_unhealthy_are_told_apart() -> None:
    lost = samples(("DCGM_EXP_GPU_HEALTHY", {**GPU, "reason": "gpu_lost"}, 0.0))
    assert set(fired(lost)) == {"fallen_off_bus"}
    assert set(fired(samples(("gpu_pod_exporter_device_up", GPU, 0.0)))) == {"fallen_off_bus"}
    failed = samples(("DCGM_EXP_GPU_HEALTHY", {**GPU, "reason": "row_remap_failure"}, 0.0),
                     ("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU, 1.0), ("DCGM_FI_DEV_ROW_REMAP_PENDING", GPU, 1.0),
                     ("DCGM_FI_DEV_RETIRED_PENDING", GPU, 0.0))
    hits = gpu_conditions(failed, Context(0.0, CounterHistory()))
    assert [hit["id"] for hit in hits] == ["unhealthy", "row_remap_failure", "row_remap_pending"]  # critical first
    assert [hit["severity"] for hit in hits] == ["critical", "critical", "warning"]


def test_a_shared_share_is_idle_below_one_percent_only_when_others_share_the_gpu() -> None:
    holders = [("DCGM_EXP_GPU_ALLOCATION_INFO", {**GPU, "namespace": "s", "pod": p, "container": "c"}, 1.0)
               for p in ("a", "b")]
    uses = [("DCGM_EXP_CONTAINER_SM_UTIL", {**GPU, "namespace": "s", "pod": "a", "container": "c"}, 0.9),
            ("DCGM_EXP_CONTAINER_SM_UTIL", {**GPU, "namespace": "s", "pod": "b", "container": "c"}, 1.0)]
    assert fired(samples(*holders, *uses))["shared_share_idle"] == "s/a (c) holds a share of 2 and uses 0.9 % " \
                                                                   "(idle below 1 %)"
    assert "shared_share_idle" not in fired(samples(holders[0], uses[0]))  # alone on it: the GPU idle alert's job


# ---------------------------------------------------------------------------------- counter history
def test_ecc_conditions_need_new_errors_inside_their_window() -> None:
    history = CounterHistory()
    for at, dbe, sbe in ((0.0, 0.0, 0.0), (1000.0, 0.0, 50.0), (2000.0, 1.0, 151.0)):
        gpu = samples(("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU, dbe), ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", GPU, sbe))
        record(gpu, at, history)
    shown = fired(gpu, 2000.0, history)
    assert shown["ecc_uncorrectable"] == "1 new uncorrectable ECC errors (volatile) in the last 10 min"
    assert shown["ecc_correctable_rising"].startswith("151 corrected ECC errors (volatile) in the last 33 min")
    later = fired(gpu, 2000.0 + 601, history)  # no new uncorrectable one for 10 minutes; seen long enough
    assert "ecc_uncorrectable" not in later
    assert "ecc_correctable_rising" in later  # 101 of them within the hour


def test_a_volatile_uncorrectable_count_first_seen_above_zero_fires_as_the_rules_first_seen_branch() -> None:
    history = CounterHistory()
    gpu = samples(("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU, 3.0))
    record(gpu, 100.0, history)
    assert fired(gpu, 100.0, history)["ecc_uncorrectable"] == "3 uncorrectable ECC errors since the driver loaded"
    record(gpu, 800.0, history)
    assert "ecc_uncorrectable" not in fired(gpu, 800.0, history)  # seen 10 minutes ago already: not new


def test_the_history_counts_a_reset_as_prometheus_does_and_forgets_past_its_horizon() -> None:
    history = CounterHistory(horizon_s=100.0)
    key = ("GPU-0", "", "X")
    for at, value in ((0.0, 5.0), (10.0, 8.0), (20.0, 2.0), (30.0, 4.0)):
        history.observe(key, value, at)
    assert history.increase(key, 100.0, 30.0) == (3.0 + 2.0 + 2.0, 30.0)  # 5->8, reset to 2, 2->4
    history.observe(key, 4.0, 500.0)
    assert history.increase(key, 100.0, 500.0) == (0.0, 100.0)
    assert history.increase(("GPU-1", "", "X"), 100.0, 500.0) is None


def test_thermal_violation_counts_against_the_whole_window_like_rate() -> None:
    history = CounterHistory()
    for at, ns in ((0.0, 0.0), (300.0, 151e9)):
        record(samples(("DCGM_FI_DEV_THERMAL_VIOLATION", GPU, ns)), at, history)
    assert "in thermal violation 50%" in fired(samples(("DCGM_FI_DEV_THERMAL_VIOLATION", GPU, 151e9)), 300.0,
                                               history)["thermal_throttling"]


# ------------------------------------------------------------------------------------------- node
def test_node_conditions_and_stale_data_after_three_intervals() -> None:
    def shown(values: Mapping[str, float], age: float) -> set[str]:
        return {hit["id"] for hit in node_conditions(NodeSamples(values, 100.0, 100.0 + age, 2.0))}

    assert shown({"gpu_pod_exporter_nvml_up": 0, "gpu_pod_exporter_kubelet_up": 0,
                  "gpu_pod_exporter_kube_api_up": 0}, 0) == {"nvml_down", "kubelet_down", "kube_api_down"}
    assert c.stale_after_s(2.0) == 6.0
    assert shown({}, 6.0) == set() and shown({}, 6.1) == {"samples_stale"}
    assert shown({"gpu_pod_exporter_sampler_stalled": 1}, 0) == {"samples_stale"}


def test_mig_slices_are_read_from_the_profile() -> None:
    assert [c.mig_slices(p) for p in ("3g.40gb", "1c.3g.40gb", "1g.10gb+me", "7g.80gb", "custom")] == [3, 3, 1, 7,
                                                                                                      None]


# -------------------------------------------------------------------------- the rules use these numbers
def _seconds(text: str) -> float:
    return float(text[:-1]) * {"s": 1, "m": 60, "h": 3600}[text[-1]]


def rule_numbers(alert: str, expr: str) -> dict[str, Any]:
    """The numbers an alert expression compares with, named as in the module's ``thresholds``."""
    found: dict[str, Any] = {}

    def grab(name: str, pattern: str, convert: Any = float) -> None:
        match = re.search(pattern, expr)
        found[name] = convert(match.group(1)) if match else None

    if alert == "GpuAllocatedButIdle":
        grab("below_percent", r"DCGM_FI_DEV_GPU_UTIL < ([\d.]+)")
        grab("instance_below_percent", r"\* 100 < ([\d.]+)")
    elif alert == "GpuSharedShareIdle":
        grab("below_percent", r"DCGM_EXP_CONTAINER_SM_UTIL < ([\d.]+)")
    elif alert == "GpuMemoryNearlyFull":
        grab("above_ratio", r"\)\s*>\s*([\d.]+)\s*$")
    elif alert in ("GpuMemoryUnattributed", "GpuMemoryHeldWithoutAllocation"):
        grab("above_mib", r"FB_USED > ([\d.]+)")
    elif alert == "GpuTemperatureHigh":
        grab("above_c", r"DCGM_FI_DEV_GPU_TEMP > ([\d.]+)")
    elif alert == "GpuTemperatureNearSlowdown":
        grab("margin_c", r"SLOWDOWN_TEMP\) - ([\d.]+)\)")
    elif alert == "GpuThermalThrottling":
        match = re.search(r"REASONS / (\d+)\) % (\d+) > 0", expr)
        # floor(x / 32) % 4 > 0: any of the bits 32 and 64 (32 * (4 - 1) = 0x60)
        found["reason_bits"] = int(match.group(1)) * (int(match.group(2)) - 1) if match else None
        grab("violation_fraction", r"/ 1e9 > ([\d.]+)")
        grab("window_s", r"THERMAL_VIOLATION\[(\w+)\]", _seconds)
    elif alert == "GpuPowerBrakeThrottling":
        grab("reason_bit", r"REASONS / (\d+)\) % 2 == 1", int)
    elif alert in ("GpuXidFatal", "GpuXidNeedsReset"):
        grab("xids", r'xid=~"([\d|]+)"', lambda text: tuple(sorted(int(x) for x in text.split("|"))))
    elif alert == "GpuXidBurst":
        grab("above", r"\) > ([\d.]+)")
    elif alert == "GpuEccUncorrectableError":
        windows = {_seconds(w) for w in re.findall(r"\[(\w+)\]|offset (\w+)", expr) for w in w if w}
        found["window_s"] = windows.pop() if len(windows) == 1 else windows
    elif alert == "GpuEccCorrectableErrorsRising":
        above = {float(value) for value in re.findall(r"\]\) > ([\d.]+)", expr)}  # each branch
        found["above"] = above.pop() if len(above) == 1 else sorted(above)
        grab("window_s", r"\[(\w+)\]", _seconds)
    elif alert == "GpuPodExporterSamplesStale":
        grab("alert_after_s", r"timestamp_seconds > ([\d.]+)")
    return found


def module_numbers(alert: str) -> dict[str, Any]:
    [condition] = [cond for cond in CONDITIONS if cond.alert == alert]
    numbers: dict[str, Any] = {k: v for k, v in condition.thresholds.items() if k != "after_intervals"}
    if alert == "GpuAllocatedButIdle":
        numbers["instance_below_percent"] = c.IDLE_BELOW_PERCENT
    if alert in ("GpuXidFatal", "GpuXidNeedsReset"):
        numbers = {"xids": tuple(sorted(FATAL_CLASS_XIDS if alert == "GpuXidFatal" else NEEDS_RESET_XIDS))}
    if alert == "GpuXidBurst":
        numbers = {"above": c.XID_BURST_ABOVE}
    return numbers


def drift(document: Mapping[str, Any]) -> list[str]:
    """Every difference between the rules and the module: severity, thresholds, the Xid window."""
    rules = {rule.get("alert") or rule.get("record"): rule for group in document["groups"] for rule in group["rules"]}
    found = []
    for condition in CONDITIONS:
        rule = rules.get(condition.alert)
        if rule is None:
            found.append(f"{condition.alert}: no such alert")
            continue
        if rule["labels"]["severity"] != condition.severity:
            found.append(f"{condition.alert}: severity {rule['labels']['severity']} != {condition.severity}")
        numbers, expected = rule_numbers(condition.alert, str(rule["expr"])), module_numbers(condition.alert)
        for name, value in expected.items():
            if numbers.get(name) != value:
                found.append(f"{condition.alert}: {name} {numbers.get(name)!r} in the rule, {value!r} here")
    xid_window = re.search(r"\[(\w+)\]", str(rules["gpu_xid:dcgm_exp_xid_errors:increase5m"]["expr"]))
    if xid_window is None or _seconds(xid_window.group(1)) != c.XID_WINDOW_S:
        found.append(f"gpu_xid:dcgm_exp_xid_errors:increase5m: window is not {c.XID_WINDOW_S} s")
    return found


def test_the_shipped_alert_rules_use_exactly_the_modules_thresholds_and_severities() -> None:
    assert drift(yaml.safe_load(RULES.read_text(encoding="utf-8"))) == []


def test_a_planted_drift_is_caught() -> None:
    text = RULES.read_text(encoding="utf-8")
    planted = (text.replace("DCGM_FI_DEV_GPU_UTIL < 5", "DCGM_FI_DEV_GPU_UTIL < 6")
               .replace("DCGM_FI_DEV_GPU_TEMP > 85", "DCGM_FI_DEV_GPU_TEMP > 80")
               .replace('xid=~"63|92|94"', 'xid=~"63|92"')
               .replace("SBE_VOL_TOTAL[1h]) > 100", "SBE_VOL_TOTAL[1h]) > 10"))
    assert planted.count("\n") == text.count("\n") and planted != text
    assert drift(yaml.safe_load(planted)) == [
        "GpuXidNeedsReset: xids (63, 92) in the rule, (63, 92, 94) here",
        "GpuEccCorrectableErrorsRising: above [10.0, 100.0] in the rule, 100.0 here",  # one of its two branches
        "GpuTemperatureHigh: above_c 80.0 in the rule, 85.0 here",
        "GpuAllocatedButIdle: below_percent 6.0 in the rule, 5.0 here",
    ]


def test_every_condition_has_a_unique_id_and_alert_and_reads_families_top_asks_prometheus_for() -> None:
    from exporter.top.sources import QUERY_FAMILIES  # noqa: PLC0415

    assert len(BY_ID) == len(CONDITIONS) == len({cond.alert for cond in CONDITIONS})
    assert set(c.FAMILIES) <= set(QUERY_FAMILIES)


def test_a_pods_own_share_on_a_virtual_gpu_copy_counts_for_idle_as_in_the_rule() -> None:
    """--kubernetes-virtual-gpus: per-pod copies of GPU_UTIL carry each pod's share; the rule fires on any."""
    gpu = samples(("DCGM_FI_DEV_GPU_UTIL", GPU, 60.0), ("DCGM_FI_DEV_GPU_UTIL", {**GPU, "pod": "a", "vgpu": "0"}, 2.0),
                  ("DCGM_EXP_GPU_ALLOCATED", GPU, 1.0))
    assert fired(gpu)["idle"] == "allocated, utilisation 2 % (idle below 5 %)"


RECORDING_RULES = RULES.parent / "gpu-pod-exporter-recording.yaml"
OVERVIEW_DASHBOARD = RULES.parents[1] / "dashboards" / "gpu-pod-exporter-overview.json"
UTILISATION_BELOW = re.compile(r"(?:DCGM_FI_DEV_GPU_UTIL(?:\{.*?\})?|\* 100|gpu_utilization:percent) < ([0-9.]+)")


def idle_thresholds(recording: str, dashboard: str) -> dict[str, set[float]]:
    """Every "utilisation below N" that means idle outside the alerts: the recording rule the quota panel and
    ``report quota`` read (namespace:gpu_in_use:sum) and the overview dashboard's idle panels."""
    found: dict[str, set[float]] = {}
    for group in yaml.safe_load(recording)["groups"]:
        for rule in group["rules"]:
            if rule.get("record") == "namespace:gpu_in_use:sum":
                found["namespace:gpu_in_use:sum"] = {float(n) for n in UTILISATION_BELOW.findall(rule["expr"])}

    def panels(node: Mapping[str, Any]) -> Any:
        for panel in node.get("panels", []):
            yield panel
            yield from panels(panel)

    for panel in panels(json.loads(dashboard)):
        for target in panel.get("targets", []):
            numbers = {float(n) for n in UTILISATION_BELOW.findall(target.get("expr", ""))}
            if numbers and "idle" in (panel.get("title", "") + target.get("legendFormat", "")).lower():
                found.setdefault(f"dashboard: {panel['title']}", set()).update(numbers)
    return found


def test_the_recording_rules_and_dashboards_call_idle_what_the_module_does() -> None:
    recording = RECORDING_RULES.read_text(encoding="utf-8")
    dashboard = OVERVIEW_DASHBOARD.read_text(encoding="utf-8")
    found = idle_thresholds(recording, dashboard)
    assert "namespace:gpu_in_use:sum" in found and len(found) >= 3, found
    assert all(numbers == {c.IDLE_BELOW_PERCENT} for numbers in found.values()), found
    planted = idle_thresholds(recording.replace("gpu_utilization:percent < 5", "gpu_utilization:percent < 10"),
                              dashboard.replace('GPU_I_ID!=\\"\\"} * 100 < 5)', 'GPU_I_ID!=\\"\\"} * 100 < 3)'))
    assert planted["namespace:gpu_in_use:sum"] == {10.0}
    assert {3.0, 5.0} in list(planted.values())
