"""The physical model of one simulated GPU: load, power, heat, clocks, counters, as functions of time.

Everything here is pure arithmetic on the scenario's patterns; the C-ABI answers in the other modules
read it. Units are NVML's (mW, mJ, MHz, degrees C, bytes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

import pynvml

from simulator import profiling
from simulator.miglayout import MigLayout
from simulator.models import MIB
from simulator.patterns import (
    CounterSpec,
    Integral,
    Pattern,
    channel_key,
    hash_unit,
)
from simulator.profiling import GpmCounters
from simulator.scenario import (
    GpuSpec,
    ProcessSpec,
)

_HW_SLOWDOWN: int = pynvml.nvmlClocksEventReasonHwSlowdown
SW_THERMAL: int = pynvml.nvmlClocksEventReasonSwThermalSlowdown
HW_THERMAL: int = pynvml.nvmlClocksEventReasonHwThermalSlowdown
HW_POWER_BRAKE: int = pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
SW_POWER_CAP: int = pynvml.nvmlClocksEventReasonSwPowerCap
SYNC_BOOST: int = pynvml.nvmlClocksEventReasonSyncBoost
GPU_IDLE: int = pynvml.nvmlClocksEventReasonGpuIdle
SUPPORTED_REASONS: int = (
    GPU_IDLE | pynvml.nvmlClocksEventReasonApplicationsClocksSetting | SW_POWER_CAP | _HW_SLOWDOWN
    | SYNC_BOOST | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE
    | pynvml.nvmlClocksEventReasonDisplayClockSetting
)
_VIOLATION_BITS = (SW_POWER_CAP, SYNC_BOOST, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE, GPU_IDLE)
_POWER_CAP_FRACTION = 0.97
ACTIVITY_MEMO_TIMES = 8  # sample times whose per-process activity is kept (see process_activity)


def _clamp(value: float, low: float, high: float) -> float:
    return low if value < low else high if value > high else value


@dataclass(frozen=True)
class ProcessLoad:
    """What one process does on the GPU at one moment, percent of the whole GPU per engine: the
    figures NVML's per-process utilization samples carry (SM, frame-buffer bandwidth, video
    encoder, video decoder)."""

    sm: float
    memory: float
    encoder: float
    decoder: float


def combine(values: Iterable[float], sharing: str) -> float:
    """The GPU's utilization from its processes' (percent).

    Time-slicing: contexts take turns, so the GPU is busy for the sum of their busy times (at most
    100 %). MPS: kernels of different clients run at the same time; with independent activity the
    GPU is busy whenever any of them is, ``1 - prod(1 - each)``, which is less than the sum.
    """
    if sharing == "mps":
        idle = 1.0
        for value in values:
            idle *= 1.0 - _clamp(value, 0.0, 100.0) / 100.0
        return 100.0 * (1.0 - idle)
    return _clamp(sum(values), 0.0, 100.0)


class SimulatedGpu:
    """Coherent readings of one GPU as functions of scenario time, in NVML units.

    Derived values follow the load: power rises with utilisation and stays below the enforced
    limit (setting the SW power cap reason when it presses against it), temperature follows power
    with a lag, clocks drop during slowdowns, energy is the integral of power, byte counters the
    integral of traffic rates. Any channel the scenario gives a pattern for overrides the
    derivation. Support checks live in the library layer; these methods assume the reading exists.
    """

    def __init__(self, spec: GpuSpec, seed: int) -> None:
        self.spec = spec
        self.model = spec.model
        self.features = spec.features
        self.index = spec.index

        def key(channel: str) -> int:
            return channel_key(seed, spec.index, channel)

        self._key = key
        self._k_load = key("load")
        self._power_memo: dict[float, float] = {}
        self._activity_memo: dict[float, dict[int, ProcessLoad]] = {}
        self._from_processes = spec.activity_from_processes
        self._energy = Integral(self.power_mw)
        self._pcie = (Integral(partial(self.pcie_rate, tx=True)), Integral(partial(self.pcie_rate, tx=False)))
        self._nvlink = (Integral(partial(self.nvlink_rate, tx=True)),
                        Integral(partial(self.nvlink_rate, tx=False)))
        self._violations = {bit: Integral(partial(self._violation_rate, bit))
                            for bit in _VIOLATION_BITS}
        self._counters: dict[str, tuple[CounterSpec, Integral | None]] = {}
        for name, counter in (
            ("pcie_replays", spec.pcie_replays),
            ("ecc_corrected", spec.ecc_errors.corrected),
            ("ecc_uncorrected", spec.ecc_errors.uncorrected),
            ("retired_single_bit", spec.retired_pages.single_bit),
            ("retired_double_bit", spec.retired_pages.double_bit),
            ("remapped_correctable", spec.remapped_rows.correctable),
            ("remapped_uncorrectable", spec.remapped_rows.uncorrectable),
        ):
            rate = counter.rate
            integral = None
            if rate is not None:
                rate_key = key(f"counter:{name}")
                integral = Integral(partial(rate.at, key=rate_key))
            self._counters[name] = (counter, integral)
        # MIG layout (None: MIG disabled) and GPM counters (None: no GPM); the library sets both.
        self.mig: MigLayout | None = None
        self.gpm: GpmCounters | None = None
        if spec.mig is not None:
            self.mig = MigLayout.create(spec.index, spec.model, spec.name, seed, key, specs=spec.mig)
        if spec.features.gpm:
            byte_rates: dict[int, Callable[[float], float]] = {
                profiling.PCIE_TX: partial(self.pcie_rate, tx=True),
                profiling.PCIE_RX: partial(self.pcie_rate, tx=False),
            }
            if spec.features.nvlink_links:
                byte_rates[profiling.NVLINK_TX] = partial(self.nvlink_rate, tx=True)
                byte_rates[profiling.NVLINK_RX] = partial(self.nvlink_rate, tx=False)
            self.gpm = GpmCounters(profiling.ActivityModel(spec.profiling, key, self.load, self.memory_util,
                                                           byte_rates))

    def _level(self, pattern: Pattern | None, channel: str, t: float, default: float) -> float:
        return default if pattern is None else pattern.at(t, self._key(channel))

    # --- activity -------------------------------------------------------------------------

    def load(self, t: float) -> float:
        if self.mig is not None:
            return _clamp(self.mig.load(t), 0.0, 100.0)  # a MIG GPU is as busy as its instances
        if self._from_processes:
            return self._combined(t, "sm")
        return _clamp(self.spec.load.at(t, self._k_load), 0.0, 100.0)

    def busy(self, t: float) -> bool:
        return self.load(t) >= 0.5

    def memory_util(self, t: float) -> float:
        if self._from_processes:
            return self._combined(t, "memory")
        return _clamp(self._level(self.spec.memory_util, "memory_util", t, self.load(t) * 0.42), 0.0, 100.0)

    def encoder_util(self, t: float) -> float:
        if self._from_processes:
            return self._combined(t, "encoder")
        return _clamp(self._level(self.spec.encoder_util, "encoder_util", t, 0.0), 0.0, 100.0)

    def decoder_util(self, t: float) -> float:
        if self._from_processes:
            return self._combined(t, "decoder")
        return _clamp(self._level(self.spec.decoder_util, "decoder_util", t, 0.0), 0.0, 100.0)

    def processes(self, t: float) -> list[ProcessSpec]:
        return [process for process in self.spec.processes if process.window.active(t)]

    def _combined(self, t: float, engine: str) -> float:
        activity = self.process_activity(t).values()
        return combine((getattr(load, engine) for load in activity), self.spec.sharing)

    def process_activity(self, t: float) -> dict[int, ProcessLoad]:
        """Each running process's own activity by PID (MIG GPUs: none; NVML has no per-process
        utilization there).

        Processes with their own ``load``/``memory_util``/... patterns do what those say (a channel
        not given: memory bandwidth 0.42 x its SM load, like a GPU's default, video engines 0), and
        the GPU's readings follow them (``combine``). Without any such pattern on the GPU, its
        running processes share what the GPU does equally, so every scenario has per-process figures.
        Memoised per ``t``: one sample time needs all processes, and the GPU readings ask again.
        Only the last few times are kept: nearly every call asks at a new time, so a larger memo is
        memory in the exporter's process (the simulator runs inside it) and nothing else; 1,024
        times per GPU were 4 MiB of a 64-GPU simulated node's RSS.
        """
        cached = self._activity_memo.get(t)
        if cached is not None:
            return cached
        if len(self._activity_memo) >= ACTIVITY_MEMO_TIMES:
            self._activity_memo.clear()
        result: dict[int, ProcessLoad] = {}
        if self.mig is None:
            running = {process.pid: process for process in self.processes(t)}  # a PID listed twice is one
            if self._from_processes:
                for pid, process in running.items():
                    own = process.activity
                    sm = _clamp(self._level(own.load, f"process:{pid}:load", t, 0.0), 0.0, 100.0)
                    result[pid] = ProcessLoad(
                        sm=sm,
                        memory=_clamp(self._level(own.memory_util, f"process:{pid}:memory_util", t, sm * 0.42),
                                      0.0, 100.0),
                        encoder=_clamp(self._level(own.encoder_util, f"process:{pid}:encoder_util", t, 0.0),
                                       0.0, 100.0),
                        decoder=_clamp(self._level(own.decoder_util, f"process:{pid}:decoder_util", t, 0.0),
                                       0.0, 100.0))
            elif running:
                share = 1.0 / len(running)
                equal = ProcessLoad(self.load(t) * share, self.memory_util(t) * share,
                                    self.encoder_util(t) * share, self.decoder_util(t) * share)
                result = dict.fromkeys(running, equal)
        self._activity_memo[t] = result
        return result

    def memory_used(self, t: float) -> int:
        """Allocated framebuffer bytes (v2 ``used``): the pattern, else the processes' sum."""
        usable = self.model.memory_total - self.model.memory_reserved
        if self.mig is not None:
            return int(_clamp(self.mig.memory_used(t), 0.0, usable))
        if self.spec.memory_used is not None:
            used = self.spec.memory_used.at(t, self._key("memory_used"))
        else:
            used = sum(p.used_memory or 0 for p in self.processes(t)) + MIB // 2
        return int(_clamp(used, 0.0, usable))

    # --- clock events, power, temperature -------------------------------------------------

    def scheduled_bits(self, t: float) -> int:
        bits = 0
        for event in self.spec.clock_events:
            if event.window.active(t):
                bits |= event.bits
        return bits

    def _raw_power_mw(self, t: float, scheduled: int) -> float:
        """Uncapped draw. Memoised per t: temperature, clocks, reasons and fields all need it."""
        cached = self._power_memo.get(t)
        if cached is not None:
            return cached
        if len(self._power_memo) > 64:
            self._power_memo.clear()
        power = self._compute_raw_power_mw(t, scheduled)
        self._power_memo[t] = power
        return power

    def _compute_raw_power_mw(self, t: float, scheduled: int) -> float:
        if self.spec.power is not None:
            return self.spec.power.at(t, self._key("power"))
        model = self.model
        utilisation = self.load(t) / 100.0
        media = (self.encoder_util(t) + self.decoder_util(t)) / 200.0
        span = model.power_busy_mw - model.power_idle_mw
        power = model.power_idle_mw + span * math.pow(utilisation, 1.15) + 0.04 * span * media
        if scheduled & (_HW_SLOWDOWN | HW_POWER_BRAKE):
            power *= 0.6
        return power

    def _power_capped(self, t: float, scheduled: int) -> bool:
        cap = self.spec.power_limit_mw * _POWER_CAP_FRACTION
        return bool(scheduled & SW_POWER_CAP) or self._raw_power_mw(t, scheduled) > cap

    def power_mw(self, t: float) -> float:
        scheduled = self.scheduled_bits(t)
        limit = self.spec.power_limit_mw
        power = self._raw_power_mw(t, scheduled)
        if self._power_capped(t, scheduled):
            power = min(power, limit * _POWER_CAP_FRACTION)
        return _clamp(power, 0.0, float(limit))

    def event_bits(self, t: float) -> int:
        """Current clock event reasons (NVML bitmask)."""
        scheduled = self.scheduled_bits(t)
        bits = scheduled
        if self._power_capped(t, scheduled):
            bits |= SW_POWER_CAP
        if not bits and not self.busy(t):
            bits |= GPU_IDLE
        return bits

    def _violation_rate(self, bit: int, t: float) -> float:
        return 1e9 if self.event_bits(t) & bit else 0.0

    def violation_ns(self, bit: int, t: float) -> int:
        """Cumulative nanoseconds spent with ``bit`` set (NVML's perf-policy violation counters)."""
        return int(self._violations[bit].value(t))

    def _heat(self, t: float) -> float:
        """Load-driven heating, 0..1, lagging power by tens of seconds."""
        model = self.model
        span = max(1.0, model.power_busy_mw - model.power_idle_mw)
        weighted = 0.0
        for lag, weight in ((0.0, 0.5), (10.0, 0.3), (30.0, 0.2)):
            weighted += weight * (self.power_mw(max(0.0, t - lag)) - model.power_idle_mw) / span
        return _clamp(weighted, 0.0, 1.2)

    def temperature(self, t: float) -> int:
        model = self.model
        if self.spec.temperature is not None:
            return round(self.spec.temperature.at(t, self._key("temperature")))
        value = model.temp_idle + (model.temp_busy - model.temp_idle) * self._heat(t)
        scheduled = self.scheduled_bits(t)
        if scheduled & SW_THERMAL:
            value = max(value, model.temp_gpu_max + 1)
        if scheduled & HW_THERMAL:
            value = max(value, model.temp_slowdown + 1)
        return round(value)

    def memory_temperature(self, t: float) -> int:
        if self.spec.memory_temperature is not None:
            return round(self.spec.memory_temperature.at(t, self._key("memory_temperature")))
        return self.temperature(t) + self.model.memory_temp_offset

    def fan_percent(self, t: float) -> int:
        if self.spec.fan is not None:
            return round(self.spec.fan.at(t, self._key("fan")))
        return round(_clamp(30.0 + (self.temperature(t) - self.model.temp_idle) * 1.6, 30.0, 100.0))

    # --- clocks and performance state -----------------------------------------------------

    def sm_clock(self, t: float) -> int:
        model = self.model
        if self.spec.sm_clock is not None:
            return round(self.spec.sm_clock.at(t, self._key("sm_clock")))
        if not self.busy(t):
            return model.idle_sm_clock
        clock = float(model.max_sm_clock)
        bits = self.event_bits(t)
        if bits & SW_POWER_CAP:
            clock *= 0.9
        if bits & SW_THERMAL:
            clock *= 0.85
        if bits & _HW_SLOWDOWN:
            clock *= 0.5
        return max(model.idle_sm_clock, int(clock // 15) * 15)

    def memory_clock(self, t: float) -> int:
        model = self.model
        if self.spec.memory_clock is not None:
            return round(self.spec.memory_clock.at(t, self._key("memory_clock")))
        return model.max_memory_clock if self.busy(t) else model.idle_memory_clock

    def video_clock(self, t: float) -> int:
        media = self.encoder_util(t) + self.decoder_util(t)
        return self.model.max_video_clock if media > 0 or self.busy(t) else self.model.idle_video_clock

    def pstate(self, t: float) -> int:
        if self.spec.pstate is not None:
            return round(_clamp(self.spec.pstate.at(t, self._key("pstate")), 0.0, 15.0))
        return self.model.busy_pstate if self.busy(t) else self.model.idle_pstate

    # --- cumulative counters ----------------------------------------------------------------

    def energy_mj(self, t: float) -> int:
        return int(self._energy.value(t))  # integral of mW over seconds = mJ

    def pcie_rate(self, t: float, *, tx: bool) -> float:
        pattern = self.spec.pcie_tx if tx else self.spec.pcie_rx
        if pattern is not None:
            return max(0.0, pattern.at(t, self._key("pcie_tx" if tx else "pcie_rx")))
        utilisation = self.load(t) / 100.0
        return 1.0e6 + utilisation * 25.0e6 if tx else 2.0e6 + utilisation * 60.0e6

    def pcie_bytes(self, t: float, *, tx: bool) -> int:
        return int(self._pcie[0 if tx else 1].value(t))

    def nvlink_rate(self, t: float, *, tx: bool) -> float:
        pattern = self.spec.nvlink_tx if tx else self.spec.nvlink_rx
        if pattern is None:
            return 0.0
        return max(0.0, pattern.at(t, self._key("nvlink_tx" if tx else "nvlink_rx")))

    def nvlink_link_kib(self, t: float, *, tx: bool, raw: bool) -> int:
        """Cumulative KiB through one link (traffic spreads evenly); RAW adds protocol overhead."""
        total = self._nvlink[0 if tx else 1].value(t) * (1.08 if raw else 1.0)
        return int(total / self.features.nvlink_links / 1024.0)

    def counter(self, name: str, t: float) -> int:
        spec, integral = self._counters[name]
        value = spec.stepped(t)
        if integral is not None:
            value += math.floor(integral.value(t))
        return value

    def retired_pages(self, cause: int, t: float, epoch: float) -> list[tuple[int, int]]:
        """(hardware page address, retirement time in seconds since the epoch) per retired page."""
        name = "retired_single_bit" if cause == 0 else "retired_double_bit"
        spec = self.spec.retired_pages.single_bit if cause == 0 else self.spec.retired_pages.double_bit
        when = [epoch - 86400.0] * spec.start
        for at, add in spec.steps:
            if at <= t:
                when.extend([epoch + at] * add)
        while len(when) < self.counter(name, t):
            when.append(epoch + t)
        key = self._key(f"retired:{cause}")
        return [(0x1000 * (1 + int(hash_unit(key, slot) * 0x3FFFFF)), int(moment))
                for slot, moment in enumerate(when)]


FieldReader = Callable[[SimulatedGpu, float, int], tuple[int, float]]


