"""Like with like: which NVML calls serve metrics that both exporters serve.

Counting all NVML calls compares two different products: each exporter also reads things the other
does not serve at all. The fair count keeps, on *both* sides and by the *same* rule, only the calls
that serve at least one metric family both exporters serve in the measured configuration:

1. every call (an NVML symbol, or a symbol and the argument that selects what it reads, such as the
   clock of ``nvmlDeviceGetClockInfo``) maps to the metric families its answer feeds
   (``FAMILIES``); the map says what NVML returns, so it is the same for both exporters;
2. an exporter serves a family when it made a call that feeds it in the run;
3. the shared families are those both exporters serve; a call counts when it feeds at least one.

So a call with several products counts when one of them is shared: ours' GPM calls feed the
profiling family nvitop-exporter lacks *and* PCIe bytes, which it serves too (through
``nvmlDeviceGetPcieThroughput``), so they count, and so does nvitop's PCIe call. nvitop's fan
speed, process lists and graphics/video clocks, and ours' clock-event reasons, feed families only
one side serves: left out on both sides alike. A symbol missing from ``FAMILIES`` is its own
family, so it counts exactly when both exporters call it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# What each call's answer feeds. Argument-keyed names come from bench.nvmlprobe.keyed.
FAMILIES: Mapping[str, frozenset[str]] = {
    "nvmlDeviceGetUtilizationRates": frozenset({"gpu utilization", "memory utilization"}),
    "nvmlDeviceGetEncoderUtilization": frozenset({"encoder utilization"}),
    "nvmlDeviceGetDecoderUtilization": frozenset({"decoder utilization"}),
    "nvmlDeviceGetMemoryInfo": frozenset({"framebuffer memory"}),
    "nvmlDeviceGetMemoryInfo_v2": frozenset({"framebuffer memory"}),
    "nvmlDeviceGetClockInfo[0]": frozenset({"graphics clock"}),
    "nvmlDeviceGetClockInfo[1]": frozenset({"SM clock"}),
    "nvmlDeviceGetClockInfo[2]": frozenset({"memory clock"}),
    "nvmlDeviceGetClockInfo[3]": frozenset({"video clock"}),
    "nvmlDeviceGetPowerUsage": frozenset({"power"}),
    "nvmlDeviceGetPowerManagementLimit": frozenset({"power limit"}),
    "nvmlDeviceGetEnforcedPowerLimit": frozenset({"power limit"}),
    "nvmlDeviceGetTemperature": frozenset({"GPU temperature"}),
    "nvmlDeviceGetTemperatureV": frozenset({"GPU temperature"}),
    "nvmlDeviceGetFanSpeed": frozenset({"fan speed"}),
    "nvmlDeviceGetFanSpeed_v2": frozenset({"fan speed"}),
    "nvmlDeviceGetPcieThroughput": frozenset({"PCIe bytes"}),
    # Both exporters read NVLink traffic through field values. Ours' one call per GPU also carries
    # energy, ECC, replay, remapping and violation fields, nvitop-exporter's does not: which fields a
    # call asks for is not recorded, so only the family both read is listed.
    "nvmlDeviceGetFieldValues": frozenset({"NVLink bytes"}),
    "nvmlGpmSampleGet": frozenset({"profiling (engine, tensor, DRAM activity)", "PCIe bytes"}),
    "nvmlGpmMetricsGet": frozenset({"profiling (engine, tensor, DRAM activity)", "PCIe bytes"}),
    "nvmlDeviceGetCurrentClocksEventReasons": frozenset({"clock-event reasons"}),
    "nvmlDeviceGetCurrentClocksThrottleReasons": frozenset({"clock-event reasons"}),
    "nvmlDeviceGetComputeRunningProcesses_v3": frozenset({"per-process metrics"}),
    "nvmlDeviceGetGraphicsRunningProcesses_v3": frozenset({"per-process metrics"}),
    "nvmlDeviceGetProcessUtilization": frozenset({"per-process metrics"}),
    "nvmlDeviceGetProcessesUtilizationInfo": frozenset({"per-process metrics"}),
}


def families_of(call: str) -> frozenset[str]:
    """What a call feeds: its argument-keyed entry, else its symbol's, else a family of its own."""
    symbol = call.partition("[")[0]
    return FAMILIES.get(call) or FAMILIES.get(symbol) or frozenset({symbol})


def calls_per_gpu(run: Mapping[str, Any]) -> dict[str, float]:
    """A run's NVML calls per GPU per cycle by call, argument-keyed where the probe keyed them.

    Attempts at symbols the fake lacks are included: on a real driver they are real calls.
    """
    idle = run.get("idle", {})
    gpus = float(run.get("gpus") or 0)
    if not gpus:
        return {}
    by_symbol: dict[str, float] = dict(idle.get("calls_per_cycle_by_symbol") or {})
    for symbol, count in (idle.get("missing_calls_per_cycle_by_symbol") or {}).items():
        by_symbol[symbol] = by_symbol.get(symbol, 0.0) + float(count)
    by_argument: dict[str, float] = dict(idle.get("calls_per_cycle_by_argument") or {})
    calls: dict[str, float] = {}
    for symbol, count in by_symbol.items():
        keyed = {name: value for name, value in by_argument.items() if name.startswith(symbol + "[")}
        if keyed and abs(sum(keyed.values()) - float(count)) < 1e-6 * max(1.0, float(count)):
            calls.update({name: float(value) / gpus for name, value in keyed.items()})
        else:
            calls[symbol] = float(count) / gpus
    return calls


def served_families(calls: Mapping[str, float]) -> set[str]:
    return {family for call, count in calls.items() if count > 0 for family in families_of(call)}


def shared_families(ours: Mapping[str, float], theirs: Mapping[str, float]) -> set[str]:
    return served_families(ours) & served_families(theirs)


def shared_calls(calls: Mapping[str, float], shared: set[str]) -> float:
    """Calls per GPU per cycle that feed at least one of the ``shared`` families."""
    return sum(count for call, count in calls.items() if families_of(call) & shared)


def comparison(ours_run: Mapping[str, Any], theirs_run: Mapping[str, Any]) -> dict[str, Any]:
    """Both ways for one pair of runs: all calls, and calls for the families both serve."""
    ours, theirs = calls_per_gpu(ours_run), calls_per_gpu(theirs_run)
    shared = shared_families(ours, theirs)
    return {"shared_families": sorted(shared),
            "ours_all": sum(ours.values()), "theirs_all": sum(theirs.values()),
            "ours_shared": shared_calls(ours, shared), "theirs_shared": shared_calls(theirs, shared)}
