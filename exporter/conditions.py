"""Every GPU and node condition the shipped alert rules fire on, defined once.

The node page (``/gpus.json``), ``gpu-pod-exporter top`` and the report read their notion of "idle",
"memory nearly full", "fatal Xid", ... from here, and the alert rules' thresholds
(deploy/rules/gpu-pod-exporter-alerts.yaml) are checked against the numbers here by
tests/test_conditions.py, which fails when one drifts. Each ``Condition`` names its alert, the
alert's severity, its thresholds and a function that evaluates it from the samples of one GPU (or
of the node) and returns the reason a person reads, or ``None``.

What a single exposition cannot say, and how it is answered truthfully:

* Xid conditions (fatal, needs reset, burst) read the exporter's own windowed family
  ``DCGM_EXP_XID_ERRORS_COUNT{xid}`` (Xids per code within ``-x``, 5 minutes by default, the
  alert's window); the text names the window the exporter used.
* ECC and thermal-violation conditions are increases of counters over 10 minutes or an hour. They
  are answered from a ``CounterHistory``: the counter values this process has seen, with the time
  of the sample they came from. An increase is the sum of the steps seen inside the window; a
  window the history does not cover yet counts only what it saw (Prometheus' ``increase()`` on a
  young series does the same), and the text says over how long. Nothing is guessed. The exporter
  feeds it on every render (``exporter.web.nodeview.remember_counters``), ``top`` on every refresh.

No ``for:`` here: the page and ``top`` show a condition as soon as it holds; the alert's ``for:``
(documented in docs/alerts.md) then decides when Prometheus notifies someone.
"""

from __future__ import annotations

import math
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from exporter.xid_codes import FATAL_CLASS_XIDS, FATAL_XIDS, NEEDS_RESET_XIDS, xid_message

# ----------------------------------------------------------------------------------------- numbers
IDLE_BELOW_PERCENT = 5.0  # GpuAllocatedButIdle: GPU_UTIL (or a MIG instance's engine activity) below this
SHARE_IDLE_BELOW_PERCENT = 1.0  # GpuSharedShareIdle: a share's own SM use below this
MEMORY_NEARLY_FULL_RATIO = 0.95  # GpuMemoryNearlyFull: used (its peak) over total above this
MEMORY_HELD_MIB = 5120.0  # GpuMemoryUnattributed / GpuMemoryHeldWithoutAllocation: above 5 GiB
TEMPERATURE_HIGH_C = 85.0  # GpuTemperatureHigh: above this
SLOWDOWN_MARGIN_C = 2.0  # GpuTemperatureNearSlowdown: within this of the GPU's own slowdown temperature
THERMAL_REASON_BITS = 0x20 | 0x40  # clock-event reasons SW and HW thermal slowdown
POWER_BRAKE_BIT = 0x80  # clock-event reason HW power brake slowdown
THERMAL_VIOLATION_FRACTION = 0.5  # GpuThermalThrottling: more than half of the window in thermal violation
THERMAL_WINDOW_S = 300.0
XID_WINDOW_S = 300.0  # the alerts' window (gpu_xid:dcgm_exp_xid_errors:increase5m)
XID_BURST_ABOVE = 3.0  # GpuXidBurst: more than this many Xids of any code in the window
ECC_UNCORRECTABLE_WINDOW_S = 600.0  # GpuEccUncorrectableError: any new one in 10 minutes
ECC_CORRECTABLE_PER_WINDOW = 100.0  # GpuEccCorrectableErrorsRising: more than 100 ...
ECC_CORRECTABLE_WINDOW_S = 3600.0  # ... per hour
# The sampler counts as stalled, and the data as stale, after this many sampling intervals (the
# watchdog's bound, exporter.web.health, is the same number).
STALE_AFTER_INTERVALS = 3
# GpuPodExporterSamplesStale: Prometheus cannot know each exporter's interval, so the rule's age bound is
# one fixed number (the stale bound of a 40 s interval); the rule's other branch,
# gpu_pod_exporter_sampler_stalled, fires at the exporter's own bound, the one the views use.
SAMPLES_STALE_ALERT_S = 120.0

WARNING, CRITICAL, INFO = "warning", "critical", "info"


def stale_after_s(sampling_interval_s: float) -> float:
    """How old data may be before every view calls it stale: ``STALE_AFTER_INTERVALS`` sampling intervals."""
    return STALE_AFTER_INTERVALS * sampling_interval_s


def is_idle(utilization_percent: float | None, allocated: bool, below_percent: float = IDLE_BELOW_PERCENT) -> bool:
    """Allocated and used less than ``IDLE_BELOW_PERCENT`` (GpuAllocatedButIdle's condition, without its
    ``for:``); ``below_percent`` is a user's own threshold (``top --idle-below``, ``report --idle-threshold``)."""
    return allocated and utilization_percent is not None and utilization_percent < below_percent


# ------------------------------------------------------------------------------------------ history
class CounterHistory:
    """The counter values a process has seen, per series, for the windowed conditions.

    Keyed by (GPU UUID, GPU instance, family) so that one history serves any number of nodes (a
    ``top`` over a cluster). Only changes are kept (plus the first value and the time it was first
    seen), and nothing older than ``horizon_s``: a counter that never moves costs one entry.
    Thread-safe: the exporter builds views in a page thread, ``top`` in its refresh thread.
    """

    def __init__(self, horizon_s: float = ECC_CORRECTABLE_WINDOW_S + 900.0, max_points: int = 4096) -> None:
        self.horizon_s = horizon_s
        self.max_points = max_points
        self._points: dict[tuple[str, str, str], deque[tuple[float, float]]] = {}
        self._first_seen: dict[tuple[str, str, str], float] = {}
        self._lock = threading.Lock()

    def observe(self, key: tuple[str, str, str], value: float, at: float) -> None:
        with self._lock:
            points = self._points.get(key)
            if points is None:
                points = self._points[key] = deque(maxlen=self.max_points)
                self._first_seen[key] = at
            if points and at < points[-1][0]:
                return  # an older exposition than one already seen (two readers): ignore it
            if not points or points[-1][1] != value:
                points.append((at, value))
            while len(points) > 1 and points[1][0] <= at - self.horizon_s:
                points.popleft()

    def increase(self, key: tuple[str, str, str], window_s: float, now: float) -> tuple[float, float] | None:
        """(increase, seconds of the window the history covers) of a counter over the last ``window_s``;
        a drop is a counter reset (the new value counts as the increase, as Prometheus' ``increase()``).
        ``None`` when the series was never seen."""
        with self._lock:
            points = list(self._points.get(key, ()))
            first_seen = self._first_seen.get(key)
        if not points or first_seen is None:
            return None
        start = now - window_s
        before = [value for at, value in points if at <= start]
        inside = [value for at, value in points if start < at <= now]
        previous = before[-1] if before else None
        total = 0.0
        for value in inside:
            if previous is not None:
                total += value - previous if value >= previous else value
            previous = value
        covered = min(window_s, now - max(first_seen, start))
        return total, covered

    def seen_before(self, key: tuple[str, str, str], at: float) -> bool:
        """Whether the series was seen at or before ``at`` (the "did not exist one window ago" test)."""
        with self._lock:
            first = self._first_seen.get(key)
        return first is not None and first <= at


PROCESS_HISTORY = CounterHistory()  # what this process has seen: the exporter's page, or one `top`


# ------------------------------------------------------------------------------------------ samples
@dataclass
class GpuSamples:
    """The samples of one GPU (all its MIG instances) the conditions read, by family."""

    index: int
    uuid: str = ""
    by_family: dict[str, list[tuple[Mapping[str, str], float]]] = field(default_factory=dict)

    def add(self, name: str, labels: Mapping[str, str], value: float) -> None:
        self.by_family.setdefault(name, []).append((labels, value))

    def series(self, name: str) -> list[tuple[Mapping[str, str], float]]:
        return self.by_family.get(name, [])

    def by_instance(self, name: str) -> dict[str, float]:
        """GPU_I_ID ("" for the whole GPU) -> value; workload-labelled copies carry the same value."""
        found: dict[str, float] = {}
        for labels, value in self.series(name):
            found.setdefault(labels.get("GPU_I_ID", ""), value)
        return found


@dataclass(frozen=True)
class Context:
    """What a condition may need besides one GPU's samples."""

    now: float  # the time of the data (its sample time), for windows over the history
    history: CounterHistory
    profiles: Mapping[str, str] = field(default_factory=dict)  # GPU_I_ID -> MIG profile


@dataclass(frozen=True)
class NodeSamples:
    """The node-wide self-metrics the node conditions read, and the data's age."""

    values: Mapping[str, float]  # family -> value
    sampled_at: float | None
    served_at: float
    sampling_interval_s: float | None


@dataclass(frozen=True)
class Condition:
    """One alert's condition: GPU conditions evaluate ``(GpuSamples, Context)``, node ones ``NodeSamples``."""

    id: str
    alert: str
    severity: str  # the alert's severity label
    thresholds: Mapping[str, float]
    families: tuple[str, ...]  # what it reads (top's Prometheus query asks for these)
    evaluate: Callable[..., str | None]
    scope: str = "gpu"  # or "node"

    def hit(self, text: str) -> dict[str, str]:
        """The ``/gpus.json`` entry; the page shows two levels, so an "info" alert shows as a warning."""
        return {"id": self.id, "alert": self.alert, "severity": CRITICAL if self.severity == CRITICAL else WARNING,
                "text": text}


def _where(instance: str, ctx: Context) -> str:
    if not instance:
        return ""
    profile = ctx.profiles.get(instance, "")
    return f"MIG {profile} instance {instance}: " if profile else f"MIG instance {instance}: "


def _number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def _join(parts: Iterable[str]) -> str | None:
    text = "; ".join(parts)
    return text or None


# ------------------------------------------------------------------------------------- GPU conditions
def _idle(gpu: GpuSamples, ctx: Context) -> str | None:
    """Every utilisation series counts, as in the rule: per-pod copies (``--kubernetes-virtual-gpus``)
    carry each pod's own share."""
    allocated = gpu.by_instance("DCGM_EXP_GPU_ALLOCATED")
    lowest: dict[str, tuple[str, float]] = {}
    for labels, util in gpu.series("DCGM_FI_DEV_GPU_UTIL"):
        instance = labels.get("GPU_I_ID", "")
        if is_idle(util, allocated.get(instance) == 1) and util <= lowest.get(instance, ("", math.inf))[1]:
            lowest[instance] = ("utilisation", util)
    for labels, active in gpu.series("DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
        instance = labels.get("GPU_I_ID", "")
        if instance and is_idle(active * 100, allocated.get(instance) == 1):
            lowest[instance] = ("engine activity", round(active * 100, 1))
    return _join(f"{_where(instance, ctx)}allocated, {what} {_number(value)} % "
                 f"(idle below {_number(IDLE_BELOW_PERCENT)} %)" for instance, (what, value) in sorted(lowest.items()))


def _share_idle(gpu: GpuSamples, ctx: Context) -> str | None:
    shares = {(labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
              for labels, _ in gpu.series("DCGM_EXP_GPU_ALLOCATION_INFO") if not labels.get("GPU_I_ID")}
    if len(shares) <= 1:
        return None
    parts = []
    for labels, util in gpu.series("DCGM_EXP_CONTAINER_SM_UTIL"):
        holder = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
        if util < SHARE_IDLE_BELOW_PERCENT and holder in shares:
            parts.append(f"{holder[0]}/{holder[1]} ({holder[2]}) holds a share of {len(shares)} and uses "
                         f"{_number(util)} % (idle below {_number(SHARE_IDLE_BELOW_PERCENT)} %)")
    return _join(sorted(set(parts)))


def _memory_nearly_full(gpu: GpuSamples, ctx: Context) -> str | None:
    used, free = gpu.by_instance("DCGM_FI_DEV_FB_USED"), gpu.by_instance("DCGM_FI_DEV_FB_FREE")
    reserved, peak = gpu.by_instance("DCGM_FI_DEV_FB_RESERVED"), gpu.by_instance("DCGM_EXP_FB_USED_PEAK")
    parts = []
    for instance in sorted(set(used) & set(free)):
        total = used[instance] + free[instance] + reserved.get(instance, 0.0)
        top = peak.get(instance, used[instance])
        if total > 0 and top / total > MEMORY_NEARLY_FULL_RATIO:
            parts.append(f"{_where(instance, ctx)}memory {top / 1024:.1f} of {total / 1024:.1f} GiB "
                         f"({top / total:.0%}, nearly full above {MEMORY_NEARLY_FULL_RATIO:.0%})")
    return _join(parts)


def _unattributed(gpu: GpuSamples, ctx: Context) -> str | None:
    return _join(f"{_where(instance, ctx)}{value / 1024:.1f} GiB used by processes of no pod "
                 f"(above {MEMORY_HELD_MIB / 1024:.0f} GiB)"
                 for instance, value in sorted(gpu.by_instance("DCGM_EXP_UNATTRIBUTED_FB_USED").items())
                 if value > MEMORY_HELD_MIB)


def _held_without_allocation(gpu: GpuSamples, ctx: Context) -> str | None:
    allocated = gpu.by_instance("DCGM_EXP_GPU_ALLOCATED")
    return _join(f"{_where(instance, ctx)}allocated to no pod, yet {value / 1024:.1f} GiB in use "
                 f"(above {MEMORY_HELD_MIB / 1024:.0f} GiB)"
                 for instance, value in sorted(gpu.by_instance("DCGM_FI_DEV_FB_USED").items())
                 if value > MEMORY_HELD_MIB and allocated.get(instance) == 0)


def _temperatures(gpu: GpuSamples) -> list[float]:
    return sorted({value for _, value in gpu.series("DCGM_FI_DEV_GPU_TEMP")})


def _temperature_high(gpu: GpuSamples, ctx: Context) -> str | None:
    hot = [value for value in _temperatures(gpu) if value > TEMPERATURE_HIGH_C]
    return f"{_number(max(hot))} °C (high above {_number(TEMPERATURE_HIGH_C)} °C)" if hot else None


def _near_slowdown(gpu: GpuSamples, ctx: Context) -> str | None:
    slowdown = [value for _, value in gpu.series("DCGM_FI_DEV_SLOWDOWN_TEMP")]
    if not slowdown:
        return None
    limit = max(slowdown)
    hot = [value for value in _temperatures(gpu) if value >= limit - SLOWDOWN_MARGIN_C]
    return (f"{_number(max(hot))} °C, within {_number(SLOWDOWN_MARGIN_C)} °C of its slowdown temperature "
            f"{_number(limit)} °C") if hot else None


def _reasons(gpu: GpuSamples) -> int:
    bits = 0
    for _, value in gpu.series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"):
        bits |= int(value)
    return bits


def _key(gpu: GpuSamples, instance: str, family: str) -> tuple[str, str, str]:
    return gpu.uuid or str(gpu.index), instance, family


def _over(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _thermal(gpu: GpuSamples, ctx: Context) -> str | None:
    bits = _reasons(gpu)
    parts = []
    if bits & 0x20:
        parts.append("SW thermal slowdown")
    if bits & 0x40:
        parts.append("HW thermal slowdown")
    for instance in sorted(gpu.by_instance("DCGM_FI_DEV_THERMAL_VIOLATION")):
        seen = ctx.history.increase(_key(gpu, instance, "DCGM_FI_DEV_THERMAL_VIOLATION"), THERMAL_WINDOW_S, ctx.now)
        if seen is not None:
            fraction = seen[0] / 1e9 / THERMAL_WINDOW_S  # ns of violation per second of the window
            if fraction > THERMAL_VIOLATION_FRACTION:
                parts.append(f"in thermal violation {fraction:.0%} of the last {_over(THERMAL_WINDOW_S)} "
                             f"(above {THERMAL_VIOLATION_FRACTION:.0%})")
    return ("clocks cut: " + ", ".join(parts)) if parts else None


def _power_brake(gpu: GpuSamples, ctx: Context) -> str | None:
    return "clocks cut by the external power brake" if _reasons(gpu) & POWER_BRAKE_BIT else None


def _xids_in_window(gpu: GpuSamples) -> tuple[dict[int, float], float | None]:
    """Xid code -> how many in the exporter's window (summed over MIG instances), and the window in seconds."""
    counts: dict[int, float] = {}
    window: float | None = None
    seen: set[tuple[str, str]] = set()
    for labels, value in gpu.series("DCGM_EXP_XID_ERRORS_COUNT"):
        code = labels.get("xid", "")
        if not code.isdigit() or (labels.get("GPU_I_ID", ""), code) in seen:
            continue
        seen.add((labels.get("GPU_I_ID", ""), code))
        counts[int(code)] = counts.get(int(code), 0.0) + value
        window_ms = labels.get("window_size_in_ms", "")
        if window_ms.isdigit():
            window = int(window_ms) / 1000
    return counts, window


def _xid_text(codes: dict[int, float], window: float | None, kind: str) -> str | None:
    if not codes:
        return None
    within = f" in the last {_over(window)}" if window else ""
    named = ", ".join(f"Xid {code} ({xid_message(code)}) x{_number(count)}" for code, count in sorted(codes.items()))
    return f"{kind} {named}{within}"


def _xid_fatal(gpu: GpuSamples, ctx: Context) -> str | None:
    counts, window = _xids_in_window(gpu)
    return _xid_text({c: n for c, n in counts.items() if c in FATAL_CLASS_XIDS and n > 0}, window, "fatal")


def _xid_reset(gpu: GpuSamples, ctx: Context) -> str | None:
    counts, window = _xids_in_window(gpu)
    return _xid_text({c: n for c, n in counts.items() if c in NEEDS_RESET_XIDS and n > 0}, window, "needs a reset:")


def _xid_burst(gpu: GpuSamples, ctx: Context) -> str | None:
    per_instance: dict[str, float] = {}
    seen: set[tuple[str, str]] = set()
    window: float | None = None
    for labels, value in gpu.series("DCGM_EXP_XID_ERRORS_COUNT"):
        instance, code = labels.get("GPU_I_ID", ""), labels.get("xid", "")
        if code and (instance, code) not in seen:
            seen.add((instance, code))
            per_instance[instance] = per_instance.get(instance, 0.0) + value
            window_ms = labels.get("window_size_in_ms", "")
            window = int(window_ms) / 1000 if window_ms.isdigit() else window
    within = f" in the last {_over(window)}" if window else ""
    return _join(f"{_where(instance, ctx)}{_number(total)} Xids{within} (a burst above {_number(XID_BURST_ABOVE)})"
                 for instance, total in sorted(per_instance.items()) if total > XID_BURST_ABOVE)


def _increases(gpu: GpuSamples, ctx: Context, families: Sequence[str], window_s: float,
               above: float) -> list[tuple[str, str, float, float]]:
    found = []
    for family in families:
        for instance in sorted(gpu.by_instance(family)):
            seen = ctx.history.increase(_key(gpu, instance, family), window_s, ctx.now)
            if seen is not None and seen[0] > above:
                found.append((instance, family, seen[0], seen[1]))
    return found


_ECC_WORDS = {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "uncorrectable ECC errors (volatile)",
              "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "uncorrectable ECC errors (aggregate)",
              "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "rows remapped for uncorrectable errors",
              "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "corrected ECC errors (volatile)",
              "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": "corrected ECC errors (aggregate)"}


def _ecc_uncorrectable(gpu: GpuSamples, ctx: Context) -> str | None:
    increases = _increases(gpu, ctx, ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
                                      "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"), ECC_UNCORRECTABLE_WINDOW_S, 0.0)
    parts = [f"{_where(instance, ctx)}{_number(amount)} new {_ECC_WORDS[family]} in the last {_over(covered)}"
             for instance, family, amount, covered in increases]
    rising = {instance for instance, family, _, _ in increases if family == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}
    # A volatile count first seen above zero: an uncorrectable error since the driver loaded that no reset cleared.
    for instance, value in sorted(gpu.by_instance("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL").items()):
        key = _key(gpu, instance, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
        if instance in rising:
            continue  # told above, with how many are new
        if value > 0 and not ctx.history.seen_before(key, ctx.now - ECC_UNCORRECTABLE_WINDOW_S):
            parts.append(f"{_where(instance, ctx)}{_number(value)} uncorrectable ECC errors since the driver loaded")
    return _join(dict.fromkeys(parts))


def _ecc_correctable(gpu: GpuSamples, ctx: Context) -> str | None:
    return _join(f"{_where(instance, ctx)}{_number(amount)} {_ECC_WORDS[family]} in the last {_over(covered)} "
                 f"(rising above {_number(ECC_CORRECTABLE_PER_WINDOW)} per {_over(ECC_CORRECTABLE_WINDOW_S)})"
                 for instance, family, amount, covered in _increases(
                     gpu, ctx, ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"),
                     ECC_CORRECTABLE_WINDOW_S, ECC_CORRECTABLE_PER_WINDOW))


def _flag(family: str, text: str) -> Callable[[GpuSamples, Context], str | None]:
    def evaluate(gpu: GpuSamples, ctx: Context) -> str | None:
        return _join(f"{_where(instance, ctx)}{text}"
                     for instance, value in sorted(gpu.by_instance(family).items()) if value == 1)
    return evaluate


def _fallen_off_bus(gpu: GpuSamples, ctx: Context) -> str | None:
    lost = any(labels.get("reason") == "gpu_lost" and value == 0
               for labels, value in gpu.series("DCGM_EXP_GPU_HEALTHY"))
    down = any(value == 0 for _, value in gpu.series("gpu_pod_exporter_device_up"))
    return "lost: no longer answers NVML (fallen off the bus)" if lost or down else None


def _unhealthy(gpu: GpuSamples, ctx: Context) -> str | None:
    reasons = sorted({labels.get("reason", "") for labels, value in gpu.series("DCGM_EXP_GPU_HEALTHY")
                      if value == 0 and labels.get("reason") not in ("ok", "gpu_lost")})
    if not reasons:
        return None
    counts, _ = _xids_in_window(gpu)
    fatal = sorted(code for code, count in counts.items() if count > 0 and code in FATAL_XIDS)
    words = [f"{reason} (Xid {', '.join(map(str, fatal))})" if reason == "fatal_xid" and fatal else reason
             for reason in reasons]
    return "unhealthy: " + ", ".join(words)


# ------------------------------------------------------------------------------------ node conditions
def _self_metric(family: str, text: str) -> Callable[[NodeSamples], str | None]:
    def evaluate(node: NodeSamples) -> str | None:
        return text if node.values.get(family) == 0 else None
    return evaluate


def _samples_stale(node: NodeSamples) -> str | None:
    if node.values.get("gpu_pod_exporter_sampler_stalled") == 1:
        return "the sampler is stalled inside NVML: readings are not refreshed"
    if node.sampled_at is None or node.sampling_interval_s is None:
        return None
    age = node.served_at - node.sampled_at
    bound = stale_after_s(node.sampling_interval_s)
    if age > bound:
        return f"data is {age:.0f} s old (stale after {_number(bound)} s: {STALE_AFTER_INTERVALS} sampling intervals)"
    return None


CONDITIONS: tuple[Condition, ...] = (
    Condition("fallen_off_bus", "GpuFallenOffBus", CRITICAL, {},
              ("DCGM_EXP_GPU_HEALTHY", "gpu_pod_exporter_device_up"), _fallen_off_bus),
    Condition("unhealthy", "GpuUnhealthy", CRITICAL, {}, ("DCGM_EXP_GPU_HEALTHY", "DCGM_EXP_XID_ERRORS_COUNT"),
              _unhealthy),
    Condition("xid_fatal", "GpuXidFatal", CRITICAL, {"window_s": XID_WINDOW_S}, ("DCGM_EXP_XID_ERRORS_COUNT",),
              _xid_fatal),
    Condition("xid_needs_reset", "GpuXidNeedsReset", WARNING, {"window_s": XID_WINDOW_S},
              ("DCGM_EXP_XID_ERRORS_COUNT",), _xid_reset),
    Condition("xid_burst", "GpuXidBurst", WARNING, {"above": XID_BURST_ABOVE, "window_s": XID_WINDOW_S},
              ("DCGM_EXP_XID_ERRORS_COUNT",), _xid_burst),
    Condition("ecc_uncorrectable", "GpuEccUncorrectableError", CRITICAL, {"window_s": ECC_UNCORRECTABLE_WINDOW_S},
              ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
               "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"), _ecc_uncorrectable),
    Condition("ecc_correctable_rising", "GpuEccCorrectableErrorsRising", WARNING,
              {"above": ECC_CORRECTABLE_PER_WINDOW, "window_s": ECC_CORRECTABLE_WINDOW_S},
              ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"), _ecc_correctable),
    Condition("retired_pages_pending", "GpuRetiredPagesPending", WARNING, {}, ("DCGM_FI_DEV_RETIRED_PENDING",),
              _flag("DCGM_FI_DEV_RETIRED_PENDING", "memory pages wait for a reset to be retired")),
    Condition("row_remap_pending", "GpuRowRemapPending", WARNING, {}, ("DCGM_FI_DEV_ROW_REMAP_PENDING",),
              _flag("DCGM_FI_DEV_ROW_REMAP_PENDING", "memory rows wait for a reset to be remapped")),
    Condition("row_remap_failure", "GpuRowRemapFailure", CRITICAL, {}, ("DCGM_FI_DEV_ROW_REMAP_FAILURE",),
              _flag("DCGM_FI_DEV_ROW_REMAP_FAILURE", "a memory row could not be remapped (no spare rows left)")),
    Condition("temperature_high", "GpuTemperatureHigh", WARNING, {"above_c": TEMPERATURE_HIGH_C},
              ("DCGM_FI_DEV_GPU_TEMP",), _temperature_high),
    Condition("temperature_near_slowdown", "GpuTemperatureNearSlowdown", CRITICAL, {"margin_c": SLOWDOWN_MARGIN_C},
              ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SLOWDOWN_TEMP"), _near_slowdown),
    Condition("thermal_throttling", "GpuThermalThrottling", WARNING,
              {"reason_bits": THERMAL_REASON_BITS, "violation_fraction": THERMAL_VIOLATION_FRACTION,
               "window_s": THERMAL_WINDOW_S},
              ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_THERMAL_VIOLATION"), _thermal),
    Condition("power_brake", "GpuPowerBrakeThrottling", WARNING, {"reason_bit": POWER_BRAKE_BIT},
              ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",), _power_brake),
    Condition("idle", "GpuAllocatedButIdle", INFO, {"below_percent": IDLE_BELOW_PERCENT},
              ("DCGM_EXP_GPU_ALLOCATED", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"), _idle),
    Condition("shared_share_idle", "GpuSharedShareIdle", INFO, {"below_percent": SHARE_IDLE_BELOW_PERCENT},
              ("DCGM_EXP_CONTAINER_SM_UTIL", "DCGM_EXP_GPU_ALLOCATION_INFO"), _share_idle),
    Condition("memory_nearly_full", "GpuMemoryNearlyFull", INFO, {"above_ratio": MEMORY_NEARLY_FULL_RATIO},
              ("DCGM_EXP_FB_USED_PEAK", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"),
              _memory_nearly_full),
    Condition("memory_unattributed", "GpuMemoryUnattributed", WARNING, {"above_mib": MEMORY_HELD_MIB},
              ("DCGM_EXP_UNATTRIBUTED_FB_USED",), _unattributed),
    Condition("memory_held_without_allocation", "GpuMemoryHeldWithoutAllocation", WARNING,
              {"above_mib": MEMORY_HELD_MIB}, ("DCGM_FI_DEV_FB_USED", "DCGM_EXP_GPU_ALLOCATED"),
              _held_without_allocation),
    # The node (the exporter's own view of its sources).
    Condition("nvml_down", "GpuPodExporterNvmlDown", CRITICAL, {}, ("gpu_pod_exporter_nvml_up",),
              _self_metric("gpu_pod_exporter_nvml_up", "NVML is unavailable: no GPU of this node is read"),
              scope="node"),
    Condition("kubelet_down", "GpuPodExporterKubeletDown", WARNING, {}, ("gpu_pod_exporter_kubelet_up",),
              _self_metric("gpu_pod_exporter_kubelet_up",
                           "the kubelet's pod resources cannot be read: pod labels are missing or outdated"),
              scope="node"),
    Condition("kube_api_down", "GpuPodExporterKubeApiDown", WARNING, {}, ("gpu_pod_exporter_kube_api_up",),
              _self_metric("gpu_pod_exporter_kube_api_up",
                           "the Kubernetes API cannot be watched: team and pod labels are missing or outdated"),
              scope="node"),
    Condition("samples_stale", "GpuPodExporterSamplesStale", WARNING,
              {"after_intervals": STALE_AFTER_INTERVALS, "alert_after_s": SAMPLES_STALE_ALERT_S},
              ("gpu_pod_exporter_sampler_stalled", "gpu_pod_exporter_last_sample_timestamp_seconds"), _samples_stale,
              scope="node"),
)
BY_ID: Mapping[str, Condition] = MappingProxyType({condition.id: condition for condition in CONDITIONS})
GPU_CONDITIONS = tuple(condition for condition in CONDITIONS if condition.scope == "gpu")
NODE_CONDITIONS = tuple(condition for condition in CONDITIONS if condition.scope == "node")
GPU_FAMILIES = frozenset(name for condition in GPU_CONDITIONS for name in condition.families)
NODE_FAMILIES = frozenset(name for condition in NODE_CONDITIONS for name in condition.families)
FAMILIES: tuple[str, ...] = tuple(sorted(GPU_FAMILIES | NODE_FAMILIES))
# Counters whose increase a condition reads: recorded in the history on every view.
HISTORY_FAMILIES = frozenset({"DCGM_FI_DEV_THERMAL_VIOLATION", *(_ECC_WORDS)})


def record(gpu: GpuSamples, at: float, history: CounterHistory) -> None:
    """Add this GPU's counters (the windowed conditions' inputs) to the history, at the data's time."""
    for family in HISTORY_FAMILIES:
        for instance, value in gpu.by_instance(family).items():
            if math.isfinite(value):
                history.observe(_key(gpu, instance, family), value, at)


def gpu_conditions(gpu: GpuSamples, ctx: Context) -> list[dict[str, str]]:
    """The conditions that hold on one GPU, worst first (critical before warning), each with its reason."""
    hits = []
    for condition in GPU_CONDITIONS:
        text = condition.evaluate(gpu, ctx)
        if text:
            hits.append(condition.hit(text))
    return sorted(hits, key=lambda hit: hit["severity"] != CRITICAL)


def node_conditions(node: NodeSamples) -> list[dict[str, str]]:
    hits = []
    for condition in NODE_CONDITIONS:
        text = condition.evaluate(node)
        if text:
            hits.append(condition.hit(text))
    return hits


def mig_slices(profile: str) -> int | None:
    """Compute slices of a MIG profile: 3 for "3g.40gb" (or "1c.3g.40gb"); None when it names none."""
    match = re.search(r"(?:^|\.)(\d+)g\.", profile)
    return int(match.group(1)) if match else None
