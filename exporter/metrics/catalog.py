"""The DCGM field catalog: every field this exporter can produce, and how it gets each one from NVML.

dcgm-exporter's counters CSV names DCGM fields; DCGM reads them from the driver. We read the same
quantities through NVML, so for each DCGM field we record its DCGM unit, where the value comes from
in NVML, and the conversion between the two (e.g. NVML reports power in mW, DCGM in W). The README's
metric table is generated from this catalog, and the sampler only performs the NVML queries that the
enabled fields need — fewer calls, less time on the driver's lock.

Names are dcgm-exporter <= 4.8 ("legacy") names by default. DCGM 4.7 renamed many fields without
changing ID or unit (``DCGM_FI_DEV_GPU_TEMP`` -> ``DCGM_FI_DEV_GPU_TEMP_CELSIUS``): those are accepted
as aliases. Fields that changed unit in dcgm-exporter 4.9 get their own entries with the converted
value, so a 4.9-style CSV also works.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import pynvml

from exporter.metrics.legacy_names import ONE_X_FIELD_IDS

MIB = 1024 * 1024
ALL_LINKS_SCOPE = 0xFFFFFFFF  # NVML field scopeId meaning "sum over all NVLink links"


class Scope(Enum):
    """Which entities a field is reported for."""

    DEVICE = "device"  # the physical GPU only (temperatures, power, ECC: chip-wide)
    INSTANCE = "instance"  # the physical GPU, and each MIG instance where NVML reads it per instance


FieldKey = tuple[int, int]  # (NVML field id, scope id): one entry of the batched nvmlDeviceGetFieldValues call

# Named queries that are not NVML calls made per cycle: label rows read from the identity taken at
# start (``DeviceIdentity``) or from the system facts in the sampler's status.
IDENTITY_QUERIES = frozenset({"system", "identity"})


class CycleValues(Protocol):
    """What one sampling cycle read from one GPU (or one MIG instance), in NVML's units.

    The sampler and the MIG reader hand this to ``Read.value``: each variant takes from it what it
    needs and converts it, so the readers never switch on the variant.
    """

    @property
    def gpm_supported(self) -> bool | None: ...  # None: not probed yet

    def query_item(self, query: str, item: str) -> float | None: ...

    def field(self, key: FieldKey) -> float | None: ...

    def rate(self, read: FromFieldRate) -> float | None: ...  # per second, of the summed counters

    def gpm(self, metric_id: int) -> float | None: ...


class Unsupported(Protocol):
    """What one GPU has answered NotSupported to for good (the sampler's per-GPU bookkeeping)."""

    @property
    def gpm_supported(self) -> bool | None: ...

    def query_unsupported(self, query: str) -> bool: ...

    def field_unsupported(self, key: FieldKey) -> bool: ...

    def gpm_metric_unsupported(self, metric_id: int) -> bool: ...


class Read:
    """How a field gets its value. Every variant answers for itself what it needs from NVML, how its
    value is computed and when it is missing for good, so the sampler's plan, the sampler, the MIG
    reader, the doctor and the renderer ask the reading instead of switching on its type.

    The defaults describe a reading that needs nothing from the sampler and never has a value there.
    """

    @property
    def served(self) -> bool:
        """False only for a real DCGM field this exporter cannot serve (``NotServed``)."""
        return True

    @property
    def queries(self) -> tuple[str, ...]:
        """Named device queries (``exporter.nvml.queries.QUERIES``) to run every cycle."""
        return ()

    @property
    def field_keys(self) -> tuple[FieldKey, ...]:
        """Entries of the batched field-value call read every cycle."""
        return ()

    @property
    def fallback_keys(self) -> tuple[FieldKey, ...]:
        """Field-value entries read only on a GPU without GPM (the GPM rows' fallbacks)."""
        return ()

    @property
    def gpm_metric(self) -> int | None:
        """The ``NVML_GPM_METRIC_*`` id read from GPM samples, if any."""
        return None

    @property
    def per_instance(self) -> bool:
        """Whether a MIG GPU instance can have its own value (a named query on the MIG handle, or GPM)."""
        return False

    @property
    def produced_by(self) -> str | None:
        """The exporter component (other than the sampler) that produces and renders the row, if any."""
        return None

    def value(self, cycle: CycleValues) -> float | None:
        """This cycle's value in DCGM's unit and representation, or None (not read, not supported)."""
        return None

    def missing(self, unsupported: Unsupported) -> bool:
        """Whether the row is absent on this GPU for good (listed as an unsupported field)."""
        return False

    def label(self, identity: object, status: object | None) -> str:
        """The value of a CSV ``label`` row: an attribute of the GPU's identity or of the sampler status."""
        return ""


@dataclass(frozen=True)
class FromQuery(Read):
    """A value taken from one named NVML device query; several fields may share one query.

    ``query`` is a key of ``exporter.nvml.queries.QUERIES`` (e.g. ``"memory"`` -> nvmlDeviceGetMemoryInfo),
    ``item`` the item of its result, ``scale`` the factor to DCGM units. ``integer`` truncates like
    DCGM's INT64 fields (DCGM stores FB MiB as ``bytes / 1048576`` truncated). The queries ``system``
    and ``identity`` name facts read once at start (``IDENTITY_QUERIES``): label rows.
    """

    query: str
    item: str
    scale: float = 1.0
    integer: bool = True

    @property
    def queries(self) -> tuple[str, ...]:
        return () if self.query in IDENTITY_QUERIES else (self.query,)

    @property
    def per_instance(self) -> bool:
        return True

    def value(self, cycle: CycleValues) -> float | None:
        raw = cycle.query_item(self.query, self.item)
        return None if raw is None else dcgm_number(raw * self.scale, self.integer)

    def missing(self, unsupported: Unsupported) -> bool:
        return unsupported.query_unsupported(self.query)

    def label(self, identity: object, status: object | None) -> str:
        source = {"identity": identity, "system": status}.get(self.query)
        return "" if source is None else str(getattr(source, self.item, ""))


@dataclass(frozen=True)
class FromFieldValue(Read):
    """A value read through the batched ``nvmlDeviceGetFieldValues`` call (one call per GPU per cycle)."""

    field_id: int
    scope_id: int = 0
    scale: float = 1.0
    integer: bool = True

    @property
    def field_keys(self) -> tuple[FieldKey, ...]:
        return ((self.field_id, self.scope_id),)

    def value(self, cycle: CycleValues) -> float | None:
        raw = cycle.field((self.field_id, self.scope_id))
        return None if raw is None else dcgm_number(raw * self.scale, self.integer)

    def missing(self, unsupported: Unsupported) -> bool:
        return unsupported.field_unsupported((self.field_id, self.scope_id))


@dataclass(frozen=True)
class FromFieldRate(Read):
    """The per-second rate of cumulative NVML field counters (summed), from two consecutive cycles."""

    field_ids: tuple[int, ...]
    scope_id: int
    scale: float = 1.0
    integer: bool = True

    @property
    def field_keys(self) -> tuple[FieldKey, ...]:
        return tuple((field_id, self.scope_id) for field_id in self.field_ids)

    def value(self, cycle: CycleValues) -> float | None:
        raw = cycle.rate(self)
        return None if raw is None else dcgm_number(raw * self.scale, self.integer)

    def missing(self, unsupported: Unsupported) -> bool:
        return any(unsupported.field_unsupported(key) for key in self.field_keys)


@dataclass(frozen=True)
class FromExporter(Read):
    """Produced by an exporter component other than the sampler (event watcher, GPM, ...)."""

    component: str

    @property
    def produced_by(self) -> str | None:
        return self.component


@dataclass(frozen=True)
class FromGpm(Read):
    """A GPM profiling metric (Hopper and newer): ``nvmlGpmMetricsGet`` over two samples a cycle apart.

    ``metric_id`` is an ``NVML_GPM_METRIC_*`` id; ``scale`` converts NVML's unit (percent, MiB/s) to
    DCGM's (ratio, bytes/s). ``fallback`` serves the field on GPUs without GPM, or None (omitted there).
    """

    metric_id: int
    scale: float
    integer: bool = False
    fallback: FromFieldRate | None = None

    @property
    def fallback_keys(self) -> tuple[FieldKey, ...]:
        return () if self.fallback is None else self.fallback.field_keys

    @property
    def gpm_metric(self) -> int | None:
        return self.metric_id

    @property
    def per_instance(self) -> bool:
        return True

    def value(self, cycle: CycleValues) -> float | None:
        supported = cycle.gpm_supported
        if supported:
            raw = cycle.gpm(self.metric_id)
            return None if raw is None else dcgm_number(raw * self.scale, self.integer)
        if supported is False and self.fallback is not None:
            return self.fallback.value(cycle)
        return None  # support not probed yet, or no GPM and no fallback

    def missing(self, unsupported: Unsupported) -> bool:
        if unsupported.gpm_supported is False:
            return self.fallback is None or self.fallback.missing(unsupported)
        return unsupported.gpm_metric_unsupported(self.metric_id)


@dataclass(frozen=True)
class NotServed(Read):
    """A real DCGM field that this exporter cannot serve (yet): a CSV naming it loads with a warning."""

    @property
    def served(self) -> bool:
        return False


@dataclass(frozen=True)
class FieldSpec:
    """One DCGM field we can serve: its names, DCGM unit, NVML source and conversion."""

    name: str
    field_id: int
    unit: str
    help: str
    prom_type: str  # the type dcgm-exporter's CSV gives it; a user's CSV may override
    read: Read  # NotServed(): a real DCGM field that this exporter cannot serve (yet)
    nvml_source: str
    aliases: tuple[str, ...] = ()
    scope: Scope = Scope.DEVICE
    is_label: bool = False  # a string value used as a label (CSV 'label' rows)
    # Catalog names of readings the sampler must take every cycle for this row to be produced even when
    # the CSV does not export them (clock-event counts are computed from the reasons bitmask).
    needs: tuple[str, ...] = ()

    @property
    def served(self) -> bool:
        return self.read.served


def _q(query: str, item: str, scale: float = 1.0, integer: bool = True) -> FromQuery:
    return FromQuery(query, item, scale, integer)


def _fv(field_id: int, scale: float = 1.0, integer: bool = True, scope_id: int = 0) -> FromFieldValue:
    return FromFieldValue(field_id, scope_id, scale, integer)


_NVLINK_RATE = FromFieldRate((138, 139), ALL_LINKS_SCOPE, scale=1 / 1000)  # KiB/s -> DCGM "MB/s"
GPM_PERCENT = 1 / 100  # GPM utilisation metrics are 0-100 %, DCGM's PROF ratios 0-1
GPM_MIB_PER_S = float(MIB)  # GPM bandwidth metrics are MiB/s, DCGM's PROF bytes/s


def _gpm_ratio(metric_id: int) -> FromGpm:
    return FromGpm(metric_id, GPM_PERCENT)


def _gpm_bytes(metric_id: int, fallback_field: int | None = None) -> FromGpm:
    fallback = None if fallback_field is None else FromFieldRate((fallback_field,), 0)
    return FromGpm(metric_id, GPM_MIB_PER_S, integer=True, fallback=fallback)


_GPM_SOURCE = "GPM nvmlGpmMetricsGet({metric}) {conversion}, between consecutive samples (Hopper+{where})"

_NS = 1e-9  # NVML's violation counters are in ns; DCGM 4.7's *_THROTTLE_SECONDS_TOTAL fields are in s

# Memory errors, violation time and the exporter-owned Xid / clock-event rows.
#
# The violation counters are NVML's perf-policy counters (field ids 74-79), the quantities DCGM reads
# for its *_VIOLATION fields. THERMAL is field 75 (NVML_FI_DEV_PERF_POLICY_THERMAL), which nvml.h maps
# onto the SW thermal slowdown counter. It is deliberately not SW + HW thermal (ids 269 + 270): the sum
# counts time twice while both are active, and the ids of those newer per-cause counters differ between
# driver branches (251-253 in some 5xx headers, 269-271 in the CUDA 13 header pynvml follows), so
# asking for 269 on the wrong branch reads an unrelated field. HW thermal episodes are visible through
# DCGM_EXP_CLOCK_EVENTS_* (clock_event="hw_thermal") instead.
_HEALTH_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("DCGM_FI_DEV_ECC_CURRENT", 300, "0/1", "Current ECC mode for the device.", "gauge",
              _fv(1), "nvmlDeviceGetFieldValues(NVML_FI_DEV_ECC_CURRENT)"),
    FieldSpec("DCGM_FI_DEV_ECC_PENDING", 301, "0/1", "Pending ECC mode for the device (after the next reboot).",
              "gauge", _fv(2), "nvmlDeviceGetFieldValues(NVML_FI_DEV_ECC_PENDING)"),
    FieldSpec("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 310, "count", "Total number of single-bit volatile ECC errors.",
              "counter", _fv(3), "nvmlDeviceGetFieldValues(NVML_FI_DEV_ECC_SBE_VOL_TOTAL), since driver load"),
    FieldSpec("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 311, "count", "Total number of double-bit volatile ECC errors.",
              "counter", _fv(4), "nvmlDeviceGetFieldValues(NVML_FI_DEV_ECC_DBE_VOL_TOTAL), since driver load"),
    FieldSpec("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 312, "count", "Total number of single-bit persistent ECC errors.",
              "counter", _fv(5), "nvmlDeviceGetFieldValues(NVML_FI_DEV_ECC_SBE_AGG_TOTAL), lifetime of the GPU"),
    FieldSpec("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 313, "count", "Total number of double-bit persistent ECC errors.",
              "counter", _fv(6), "nvmlDeviceGetFieldValues(NVML_FI_DEV_ECC_DBE_AGG_TOTAL), lifetime of the GPU"),
    FieldSpec("DCGM_FI_DEV_RETIRED_SBE", 390, "pages",
              "Total number of retired pages due to single-bit errors.", "counter",
              _fv(29), "nvmlDeviceGetFieldValues(NVML_FI_DEV_RETIRED_SBE)",
              aliases=("DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL",)),
    FieldSpec("DCGM_FI_DEV_RETIRED_DBE", 391, "pages",
              "Total number of retired pages due to double-bit errors.", "counter",
              _fv(30), "nvmlDeviceGetFieldValues(NVML_FI_DEV_RETIRED_DBE)",
              aliases=("DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL",)),
    FieldSpec("DCGM_FI_DEV_RETIRED_PENDING", 392, "0/1", "Whether pages are pending retirement (needs a reset).",
              "gauge", _fv(31), "nvmlDeviceGetFieldValues(NVML_FI_DEV_RETIRED_PENDING)",
              aliases=("DCGM_FI_DEV_PAGE_RETIRED_PENDING",)),
    FieldSpec("DCGM_FI_DEV_POWER_VIOLATION", 240, "ns", "Throttling duration due to power constraints (in ns).",
              "counter", _fv(74), "nvmlDeviceGetFieldValues(NVML_FI_DEV_PERF_POLICY_POWER)"),
    FieldSpec("DCGM_FI_DEV_THERMAL_VIOLATION", 241, "ns",
              "Throttling duration due to thermal constraints (in ns).", "counter",
              _fv(75), "nvmlDeviceGetFieldValues(NVML_FI_DEV_PERF_POLICY_THERMAL): the thermal perf-policy "
              "counter (SW thermal slowdown), not SW + HW thermal"),
    FieldSpec("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", 242, "ns",
              "Throttling duration due to sync-boost constraints (in ns).", "counter",
              _fv(76), "nvmlDeviceGetFieldValues(NVML_FI_DEV_PERF_POLICY_SYNC_BOOST)"),
    FieldSpec("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", 243, "ns",
              "Throttling duration due to board limit constraints (in ns).", "counter",
              _fv(77), "nvmlDeviceGetFieldValues(NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT)"),
    FieldSpec("DCGM_FI_DEV_LOW_UTIL_VIOLATION", 244, "ns",
              "Throttling duration due to low utilization (in ns).", "counter",
              _fv(78), "nvmlDeviceGetFieldValues(NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION)"),
    FieldSpec("DCGM_FI_DEV_RELIABILITY_VIOLATION", 245, "ns",
              "Throttling duration due to reliability constraints (in ns).", "counter",
              _fv(79), "nvmlDeviceGetFieldValues(NVML_FI_DEV_PERF_POLICY_RELIABILITY)"),
    FieldSpec("DCGM_FI_DEV_GPU_POWER_THROTTLE_SECONDS_TOTAL", 1617, "s",
              "Throttling duration due to power constraints (in s).", "counter",
              _fv(74, _NS, integer=False), "nvmlDeviceGetFieldValues(NVML_FI_DEV_PERF_POLICY_POWER) / 10^9"),
    FieldSpec("DCGM_FI_DEV_GPU_THERMAL_THROTTLE_SECONDS_TOTAL", 1618, "s",
              "Throttling duration due to thermal constraints (in s).", "counter",
              _fv(75, _NS, integer=False), "nvmlDeviceGetFieldValues(NVML_FI_DEV_PERF_POLICY_THERMAL) / 10^9"),
    FieldSpec("DCGM_FI_DEV_GPU_SYNC_BOOST_THROTTLE_SECONDS_TOTAL", 1619, "s",
              "Throttling duration due to sync-boost constraints (in s).", "counter",
              _fv(76, _NS, integer=False), "nvmlDeviceGetFieldValues(NVML_FI_DEV_PERF_POLICY_SYNC_BOOST) / 10^9"),
    FieldSpec("DCGM_FI_DEV_GPU_LIMIT_THROTTLE_SECONDS_TOTAL", 1620, "s",
              "Throttling duration due to board limit constraints (in s).", "counter",
              _fv(77, _NS, integer=False), "nvmlDeviceGetFieldValues(NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT) / 10^9"),
    FieldSpec("DCGM_FI_DEV_GPU_LOW_UTIL_THROTTLE_SECONDS_TOTAL", 1621, "s",
              "Throttling duration due to low utilization (in s).", "counter",
              _fv(78, _NS, integer=False),
              "nvmlDeviceGetFieldValues(NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION) / 10^9"),
    FieldSpec("DCGM_FI_DEV_GPU_RELIABILITY_THROTTLE_SECONDS_TOTAL", 1622, "s",
              "Throttling duration due to reliability constraints (in s).", "counter",
              _fv(79, _NS, integer=False), "nvmlDeviceGetFieldValues(NVML_FI_DEV_PERF_POLICY_RELIABILITY) / 10^9"),
    # dcgm-exporter's own DCGM_EXP_* collectors, selected by the CSV as there. Not DCGM fields: id 0.
    FieldSpec("DCGM_EXP_XID_ERRORS_COUNT", 0, "events",
              "Count of XID errors within user-specified time window (see xid-count-window-size flag).", "gauge",
              FromExporter("xid"), "NVML event set (Xid events) counted over the last -x/--xid-count-window-size "
              "ms; labels window_size_in_ms, xid"),
    FieldSpec("DCGM_EXP_XID_ERRORS_TOTAL", 0, "events", "Total number of XID errors since the exporter started.",
              "counter", FromExporter("xid"), "NVML event set (Xid events), every event counted; label xid"),
    FieldSpec("DCGM_EXP_CLOCK_EVENTS_COUNT", 0, "episodes",
              "Count of clock events within the user-specified time window (see clock-events-count-window-size "
              "flag).", "gauge", FromExporter("clock_events"),
              "nvmlDeviceGetCurrentClocksEventReasons every cycle: episodes per reason bit within the last "
              "--clock-events-count-window-size ms; labels clock_event, window_size_in_ms",
              aliases=("DCGM_FI_EXP_CLOCK_THROTTLE_REASONS_COUNT",), needs=("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",)),
    FieldSpec("DCGM_EXP_CLOCK_EVENTS_TOTAL", 0, "episodes",
              "Total number of clock events (inactive to active transitions) since the exporter started.",
              "counter", FromExporter("clock_events"),
              "nvmlDeviceGetCurrentClocksEventReasons every cycle: inactive -> active transitions per reason bit; "
              "label clock_event", needs=("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",)),
)

_FIELDS: tuple[FieldSpec, ...] = (
    # --- clocks ---------------------------------------------------------------------------------
    FieldSpec("DCGM_FI_DEV_SM_CLOCK", 100, "MHz", "SM clock frequency (in MHz).", "gauge",
              _q("sm_clock", "mhz"), "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"),
    FieldSpec("DCGM_FI_DEV_MEM_CLOCK", 101, "MHz", "Memory clock frequency (in MHz).", "gauge",
              _q("mem_clock", "mhz"), "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)"),
    FieldSpec("DCGM_FI_DEV_SM_CLOCK_HERTZ", 1603, "Hz", "SM clock frequency (in Hz).", "gauge",
              _q("sm_clock", "mhz", 1e6), "nvmlDeviceGetClockInfo(NVML_CLOCK_SM) x 10^6"),
    FieldSpec("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", 1604, "Hz", "Memory clock frequency (in Hz).", "gauge",
              _q("mem_clock", "mhz", 1e6), "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM) x 10^6"),
    FieldSpec("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 112, "bitmask",
              "Current clock event (throttle) reasons bitmask.", "gauge",
              _q("clock_event_reasons", "mask"), "nvmlDeviceGetCurrentClocksEventReasons",
              aliases=("DCGM_FI_DEV_CLOCKS_EVENT_REASONS",)),
    # --- temperatures ---------------------------------------------------------------------------
    FieldSpec("DCGM_FI_DEV_MEMORY_TEMP", 140, "C", "Memory temperature (in C).", "gauge",
              _fv(82), "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)",
              aliases=("DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",)),
    FieldSpec("DCGM_FI_DEV_GPU_TEMP", 150, "C", "GPU temperature (in C).", "gauge",
              _q("gpu_temp", "celsius"), "nvmlDeviceGetTemperatureV(NVML_TEMPERATURE_GPU)",
              aliases=("DCGM_FI_DEV_GPU_TEMP_CELSIUS",)),
    FieldSpec("DCGM_FI_DEV_SLOWDOWN_TEMP", 158, "C", "Slowdown temperature threshold (in C).", "gauge",
              _q("slowdown_temp", "celsius"),
              "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SLOWDOWN), read once"),
    FieldSpec("DCGM_FI_DEV_SHUTDOWN_TEMP", 159, "C", "Shutdown temperature threshold (in C).", "gauge",
              _q("shutdown_temp", "celsius"),
              "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SHUTDOWN), read once"),
    # --- power and energy -----------------------------------------------------------------------
    FieldSpec("DCGM_FI_DEV_POWER_USAGE", 155, "W", "Power draw (in W).", "gauge",
              _q("power_usage", "milliwatts", 1 / 1000, integer=False), "nvmlDeviceGetPowerUsage (mW / 1000)",
              aliases=("DCGM_FI_DEV_BOARD_POWER_WATTS",)),
    FieldSpec("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 156, "mJ", "Total energy consumption since boot (in mJ).",
              "counter", _fv(83), "nvmlDeviceGetFieldValues(NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)"),
    FieldSpec("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", 1611, "J", "Total energy consumption since boot (in J).",
              "counter", _fv(83, 1 / 1000, integer=False),
              "nvmlDeviceGetFieldValues(NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION) / 1000"),
    FieldSpec("DCGM_FI_DEV_POWER_MGMT_LIMIT", 160, "W", "Power management limit (in W).", "gauge",
              _q("power_limit", "milliwatts", 1 / 1000, integer=False),
              "nvmlDeviceGetPowerManagementLimit (mW / 1000)"),
    FieldSpec("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", 164, "W", "Effective power limit (in W).", "gauge",
              _fv(190, 1 / 1000, integer=False), "nvmlDeviceGetFieldValues(NVML_FI_DEV_POWER_CURRENT_LIMIT) / 1000"),
    # --- PCIe -----------------------------------------------------------------------------------
    FieldSpec("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 202, "count", "Total number of PCIe retries.", "counter",
              _fv(94), "nvmlDeviceGetFieldValues(NVML_FI_DEV_PCIE_REPLAY_COUNTER)",
              aliases=("DCGM_FI_DEV_PCIE_REPLAY_TOTAL",)),
    # --- utilization ----------------------------------------------------------------------------
    FieldSpec("DCGM_FI_DEV_GPU_UTIL", 203, "%", "GPU utilization (in %).", "gauge",
              _q("utilization", "gpu"), "nvmlDeviceGetUtilizationRates().gpu"),
    FieldSpec("DCGM_FI_DEV_MEM_COPY_UTIL", 204, "%", "Memory utilization (in %).", "gauge",
              _q("utilization", "memory"), "nvmlDeviceGetUtilizationRates().memory"),
    FieldSpec("DCGM_FI_DEV_ENC_UTIL", 206, "%", "Encoder utilization (in %).", "gauge",
              _q("encoder", "util"), "nvmlDeviceGetEncoderUtilization()[0]"),
    FieldSpec("DCGM_FI_DEV_DEC_UTIL", 207, "%", "Decoder utilization (in %).", "gauge",
              _q("decoder", "util"), "nvmlDeviceGetDecoderUtilization()[0]"),
    FieldSpec("DCGM_FI_DEV_GPU_UTIL_RATIO", 1613, "ratio", "GPU utilization (0.0-1.0).", "gauge",
              _q("utilization", "gpu", 1 / 100, integer=False), "nvmlDeviceGetUtilizationRates().gpu / 100"),
    FieldSpec("DCGM_FI_DEV_MEMORY_UTIL_RATIO", 1614, "ratio", "Memory utilization (0.0-1.0).", "gauge",
              _q("utilization", "memory", 1 / 100, integer=False),
              "nvmlDeviceGetUtilizationRates().memory / 100"),
    FieldSpec("DCGM_FI_DEV_ENC_UTIL_RATIO", 1615, "ratio", "Encoder utilization (0.0-1.0).", "gauge",
              _q("encoder", "util", 1 / 100, integer=False), "nvmlDeviceGetEncoderUtilization()[0] / 100"),
    FieldSpec("DCGM_FI_DEV_DEC_UTIL_RATIO", 1616, "ratio", "Decoder utilization (0.0-1.0).", "gauge",
              _q("decoder", "util", 1 / 100, integer=False), "nvmlDeviceGetDecoderUtilization()[0] / 100"),
    # --- framebuffer ----------------------------------------------------------------------------
    FieldSpec("DCGM_FI_DEV_FB_TOTAL", 250, "MiB", "Framebuffer memory total (in MiB).", "gauge",
              _q("memory", "total", 1 / MIB), "nvmlDeviceGetMemoryInfo(version=2).total / 2^20",
              scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_DEV_FB_FREE", 251, "MiB", "Framebuffer memory free (in MiB).", "gauge",
              _q("memory", "free", 1 / MIB), "nvmlDeviceGetMemoryInfo(version=2).free / 2^20",
              scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_DEV_FB_USED", 252, "MiB", "Framebuffer memory used (in MiB).", "gauge",
              _q("memory", "used", 1 / MIB), "nvmlDeviceGetMemoryInfo(version=2).used / 2^20 (v1: used incl. reserved)",
              scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_DEV_FB_RESERVED", 253, "MiB", "Framebuffer memory reserved (in MiB).", "gauge",
              _q("memory", "reserved", 1 / MIB), "nvmlDeviceGetMemoryInfo(version=2).reserved / 2^20",
              scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_DEV_FB_USED_PERCENT", 254, "ratio", "Framebuffer memory used (0.0-1.0).", "gauge",
              _q("memory", "used_ratio", integer=False), "nvmlDeviceGetMemoryInfo(version=2): used / total",
              aliases=("DCGM_FI_DEV_FB_USED_RATIO",), scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_DEV_FB_CAPACITY_BYTES", 1625, "bytes", "Framebuffer memory total (in bytes).", "gauge",
              _q("memory", "total"), "nvmlDeviceGetMemoryInfo(version=2).total", scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_DEV_FB_FREE_BYTES", 1626, "bytes", "Framebuffer memory free (in bytes).", "gauge",
              _q("memory", "free"), "nvmlDeviceGetMemoryInfo(version=2).free", scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_DEV_FB_USED_BYTES", 1627, "bytes", "Framebuffer memory used (in bytes).", "gauge",
              _q("memory", "used"), "nvmlDeviceGetMemoryInfo(version=2).used", scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_DEV_FB_RESERVED_BYTES", 1628, "bytes", "Framebuffer memory reserved (in bytes).", "gauge",
              _q("memory", "reserved"), "nvmlDeviceGetMemoryInfo(version=2).reserved", scope=Scope.INSTANCE),
    # --- fan, performance state -----------------------------------------------------------------
    FieldSpec("DCGM_FI_DEV_FAN_SPEED", 191, "%", "Fan speed (in %).", "gauge",
              _q("fan_speed", "percent"), "nvmlDeviceGetFanSpeed"),
    FieldSpec("DCGM_FI_DEV_PSTATE", 190, "P-state", "Performance state (0 = maximum performance).", "gauge",
              _q("pstate", "pstate"), "nvmlDeviceGetPerformanceState (omitted when unknown)"),
    # --- NVLink ---------------------------------------------------------------------------------
    # A rate, so a gauge: dcgm-exporter's CSV said counter up to 4.8.2 and says gauge from 4.8.3 on (its PR 658,
    # "correct Prometheus type for NVLink bandwidth fields from counter to gauge"). The type served is always the
    # CSV row's (a 4.8.2 CSV keeps counter); this one is the README's and a default row's.
    FieldSpec("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 449, "MB/s",
              "Total number of NVLink bandwidth counters for all lanes.", "gauge", _NVLINK_RATE,
              "rate of nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX + _RX, all links): "
              "KiB/s / 1000, as DCGM computes it",
              aliases=("DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL",)),
    # --- NVLink fabric health (dcgm-exporter 4.8.4's opt-in rows) ---------------------------------
    # DCGM 4.6's fields 174/175 (dcgm_fields.h), which DCGM's cache manager fills from one
    # nvmlDeviceGetGpuFabricInfoV call: the mask is healthMask unchanged (sub-fields of 2 bits, 0 not
    # supported / 1 true / 2 false, read with DCGM_GPU_FABRIC_HEALTH_GET = NVML_GPU_FABRIC_HEALTH_GET:
    # degraded bandwidth bits 0-1, route recovery 2-3, route unhealthy 4-5, access timeout recovery 6-7,
    # incorrect configuration 8-11, partition assigned 12-13, global fabric manager state 14-15); the
    # summary is the v3 struct's healthSummary. GPUs on no NVLink fabric answer NotSupported: both omitted.
    FieldSpec("DCGM_FI_DEV_FABRIC_HEALTH_MASK", 174, "bitmask",
              "GPU fabric health status mask (NVML healthMask; 2-bit sub-fields, see NVML_GPU_FABRIC_HEALTH_GET).",
              "gauge", _q("fabric", "health_mask"),
              "nvmlDeviceGetGpuFabricInfoV(v3, or v2 on older drivers).healthMask, unchanged as DCGM stores it; "
              "omitted where NotSupported (no NVLink fabric)"),
    FieldSpec("DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY", 175, "enum",
              "GPU fabric health summary (1 healthy, 2 unhealthy, 3 limited capacity).", "gauge",
              _q("fabric", "health_summary"),
              "nvmlDeviceGetGpuFabricInfoV(v3).healthSummary; omitted where NotSupported, on v2-only drivers and "
              "when the summary is 0 (not supported)"),
    # --- profiling (DCP) through NVML GPM (docs/profiling.md) -------------------------------------
    FieldSpec("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1001, "ratio", "Ratio of time the graphics engine is active.", "gauge",
              _gpm_ratio(pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL),
              _GPM_SOURCE.format(metric="GRAPHICS_UTIL", conversion="% / 100", where="; per MIG instance"),
              aliases=("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",), scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_PROF_SM_ACTIVE", 1002, "ratio", "The ratio of cycles an SM has at least 1 warp assigned.",
              "gauge", _gpm_ratio(pynvml.NVML_GPM_METRIC_SM_UTIL),
              _GPM_SOURCE.format(metric="SM_UTIL", conversion="% / 100", where="; per MIG instance"),
              aliases=("DCGM_FI_PROF_SM_UTIL_RATIO",), scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_PROF_SM_OCCUPANCY", 1003, "ratio", "The ratio of number of warps resident on an SM.", "gauge",
              _gpm_ratio(pynvml.NVML_GPM_METRIC_SM_OCCUPANCY),
              _GPM_SOURCE.format(metric="SM_OCCUPANCY", conversion="% / 100", where="; per MIG instance"),
              aliases=("DCGM_FI_PROF_SM_OCCUPANCY_RATIO",), scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1004, "ratio", "Ratio of cycles the tensor (HMMA) pipe is active.",
              "gauge", _gpm_ratio(pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL),
              _GPM_SOURCE.format(metric="ANY_TENSOR_UTIL", conversion="% / 100", where="; per MIG instance"),
              aliases=("DCGM_FI_PROF_TENSOR_UTIL_RATIO",), scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_PROF_DRAM_ACTIVE", 1005, "ratio",
              "Ratio of cycles the device memory interface is active sending or receiving data.", "gauge",
              _gpm_ratio(pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL),
              _GPM_SOURCE.format(metric="DRAM_BW_UTIL", conversion="% / 100", where="; per MIG instance"),
              aliases=("DCGM_FI_PROF_DRAM_UTIL_RATIO",), scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_PROF_PIPE_FP64_ACTIVE", 1006, "ratio", "Ratio of cycles the fp64 pipes are active.", "gauge",
              _gpm_ratio(pynvml.NVML_GPM_METRIC_FP64_UTIL),
              _GPM_SOURCE.format(metric="FP64_UTIL", conversion="% / 100", where="; per MIG instance"),
              aliases=("DCGM_FI_PROF_FP64_UTIL_RATIO",), scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_PROF_PIPE_FP32_ACTIVE", 1007, "ratio", "Ratio of cycles the fp32 pipes are active.", "gauge",
              _gpm_ratio(pynvml.NVML_GPM_METRIC_FP32_UTIL),
              _GPM_SOURCE.format(metric="FP32_UTIL", conversion="% / 100", where="; per MIG instance"),
              aliases=("DCGM_FI_PROF_FP32_UTIL_RATIO",), scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_PROF_PIPE_FP16_ACTIVE", 1008, "ratio", "Ratio of cycles the fp16 pipes are active.", "gauge",
              _gpm_ratio(pynvml.NVML_GPM_METRIC_FP16_UTIL),
              _GPM_SOURCE.format(metric="FP16_UTIL", conversion="% / 100", where="; per MIG instance"),
              aliases=("DCGM_FI_PROF_FP16_UTIL_RATIO",), scope=Scope.INSTANCE),
    FieldSpec("DCGM_FI_PROF_PCIE_TX_BYTES", 1009, "bytes/s",
              "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads "
              "- in bytes per second.", "gauge",
              _gpm_bytes(pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES),
              _GPM_SOURCE.format(metric="PCIE_TX_PER_SEC", conversion="MiB/s x 2^20", where="")
              + "; without GPM: rate of nvmlDeviceGetFieldValues(NVML_FI_DEV_PCIE_COUNT_TX_BYTES)",
              aliases=("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",)),
    FieldSpec("DCGM_FI_PROF_PCIE_RX_BYTES", 1010, "bytes/s",
              "The rate of data received over the PCIe bus - including both protocol headers and data payloads "
              "- in bytes per second.", "gauge",
              _gpm_bytes(pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES),
              _GPM_SOURCE.format(metric="PCIE_RX_PER_SEC", conversion="MiB/s x 2^20", where="")
              + "; without GPM: rate of nvmlDeviceGetFieldValues(NVML_FI_DEV_PCIE_COUNT_RX_BYTES)",
              aliases=("DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND",)),
    FieldSpec("DCGM_FI_PROF_NVLINK_TX_BYTES", 1011, "bytes/s",
              "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second.",
              "gauge", _gpm_bytes(pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC),
              _GPM_SOURCE.format(metric="NVLINK_TOTAL_TX_PER_SEC", conversion="MiB/s x 2^20", where=""),
              aliases=("DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND",)),
    FieldSpec("DCGM_FI_PROF_NVLINK_RX_BYTES", 1012, "bytes/s",
              "The rate of data received over NVLink, not including protocol headers, in bytes per second.",
              "gauge", _gpm_bytes(pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC),
              _GPM_SOURCE.format(metric="NVLINK_TOTAL_RX_PER_SEC", conversion="MiB/s x 2^20", where=""),
              aliases=("DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND",)),
    # --- row remapping --------------------------------------------------------------------------
    FieldSpec("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 393, "rows",
              "Number of remapped rows for uncorrectable errors", "counter",
              _fv(143), "nvmlDeviceGetFieldValues(NVML_FI_DEV_REMAPPED_UNC)",
              aliases=("DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",)),
    FieldSpec("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 394, "rows",
              "Number of remapped rows for correctable errors", "counter",
              _fv(142), "nvmlDeviceGetFieldValues(NVML_FI_DEV_REMAPPED_COR)",
              aliases=("DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL",)),
    FieldSpec("DCGM_FI_DEV_ROW_REMAP_FAILURE", 395, "0/1", "Whether remapping of rows has failed", "gauge",
              _fv(145), "nvmlDeviceGetFieldValues(NVML_FI_DEV_REMAPPED_FAILURE)",
              aliases=("DCGM_FI_DEV_ROW_REMAP_FAILED",)),
    FieldSpec("DCGM_FI_DEV_ROW_REMAP_PENDING", 396, "0/1", "Whether row remapping is pending a GPU reset", "gauge",
              _fv(144), "nvmlDeviceGetFieldValues(NVML_FI_DEV_REMAPPED_PENDING)"),
    # --- memory errors, violation time, Xid and clock-event rows (see _HEALTH_FIELDS) ----------------
    *_HEALTH_FIELDS,
    # --- static label fields --------------------------------------------------------------------
    FieldSpec("DCGM_FI_DRIVER_VERSION", 1, "", "Driver Version", "label", _q("system", "driver_version"),
              "nvmlSystemGetDriverVersion, read once", aliases=("DCGM_FI_SYSTEM_DRIVER_VERSION",), is_label=True),
    FieldSpec("DCGM_FI_NVML_VERSION", 2, "", "NVML Version", "label", _q("system", "nvml_version"),
              "nvmlSystemGetNVMLVersion, read once", aliases=("DCGM_FI_SYSTEM_NVML_VERSION",), is_label=True),
    FieldSpec("DCGM_FI_DEV_SERIAL", 53, "", "Device Serial Number", "label", _q("identity", "serial"),
              "nvmlDeviceGetSerial, read once", aliases=("DCGM_FI_DEV_BOARD_SERIAL",), is_label=True),
    FieldSpec("DCGM_FI_DEV_VBIOS_VERSION", 85, "", "VBIOS version of the device", "label",
              _q("identity", "vbios_version"), "nvmlDeviceGetVbiosVersion, read once", is_label=True),
    # --- produced by other components -----------------------------------------------------------
    FieldSpec("DCGM_FI_DEV_XID_ERRORS", 230, "Xid", "Value of the last XID error encountered.", "gauge",
              FromExporter("xid"), "NVML event set: nvmlEventSetWait_v2, nvmlEventTypeXidCriticalError "
              "(eventData = Xid); 0 until the first Xid; labels err_code, err_msg",
              aliases=("DCGM_FI_DEV_XID_ERROR",)),
    FieldSpec("DCGM_FI_DEV_VGPU_LICENSE_STATUS", 526, "0/1", "vGPU License status", "gauge", NotServed(),
              "only meaningful inside a vGPU guest; not served"),
)

# The newest dcgm-exporter release whose fields this catalog and the lists below know (DCGM 4.6.1 - exporter 4.8.4):
# named in the warning for a DCGM-shaped name we do not know, so a user can tell "newer than this exporter" apart.
NEWEST_KNOWN_DCGM_EXPORTER = "4.6.1-4.8.4"

# Real DCGM field names (legacy and DCGM 4.7 canonical) that we know but cannot serve. A CSV naming one
# loads with a warning (skipped, reason not_readable_through_nvml); any other DCGM-shaped name is skipped as
# unknown (a newer release's field, or a typo: exporter/metrics/counters.py).
_KNOWN_UNSERVED_NAMES = frozenset({
    "DCGM_FI_CUDA_DRIVER_VERSION", "DCGM_FI_PROCESS_NAME", "DCGM_FI_DEV_COUNT", "DCGM_FI_DEV_NAME",
    "DCGM_FI_DEV_BRAND", "DCGM_FI_DEV_GPU_BRAND", "DCGM_FI_DEV_NVML_INDEX", "DCGM_FI_DEV_UUID",
    "DCGM_FI_DEV_MINOR_NUMBER", "DCGM_FI_DEV_OEM_INFOROM_VER", "DCGM_FI_DEV_INFOROM_OEM_VERSION",
    "DCGM_FI_DEV_PCI_BUSID", "DCGM_FI_DEV_PCI_COMBINED_ID", "DCGM_FI_DEV_PCI_SUBSYS_ID",
    "DCGM_FI_GPU_TOPOLOGY_PCI", "DCGM_FI_GPU_TOPOLOGY_NVLINK", "DCGM_FI_GPU_TOPOLOGY_AFFINITY",
    "DCGM_FI_DEV_CUDA_COMPUTE_CAPABILITY", "DCGM_FI_DEV_COMPUTE_MODE", "DCGM_FI_DEV_PERSISTENCE_MODE",
    "DCGM_FI_DEV_MIG_MODE", "DCGM_FI_DEV_CUDA_VISIBLE_DEVICES_STR", "DCGM_FI_DEV_MIG_MAX_SLICES",
    "DCGM_FI_DEV_CC_MODE", "DCGM_FI_DEV_ECC_INFOROM_VER", "DCGM_FI_DEV_INFOROM_ECC_VERSION",
    "DCGM_FI_DEV_POWER_INFOROM_VER", "DCGM_FI_DEV_INFOROM_POWER_VERSION", "DCGM_FI_DEV_INFOROM_IMAGE_VER",
    "DCGM_FI_DEV_INFOROM_IMAGE_VERSION", "DCGM_FI_DEV_INFOROM_CONFIG_CHECK", "DCGM_FI_DEV_INFOROM_CONFIG_VALID",
    "DCGM_FI_DEV_BAR1_TOTAL", "DCGM_FI_DEV_BAR1_USED", "DCGM_FI_DEV_BAR1_FREE", "DCGM_FI_DEV_BAR1_CAPACITY_BYTES",
    "DCGM_FI_DEV_BAR1_USED_BYTES", "DCGM_FI_DEV_BAR1_FREE_BYTES", "DCGM_FI_SYNC_BOOST",
    "DCGM_FI_DEV_VIDEO_CLOCK", "DCGM_FI_DEV_APP_SM_CLOCK", "DCGM_FI_DEV_APP_MEM_CLOCK", "DCGM_FI_DEV_MAX_SM_CLOCK",
    "DCGM_FI_DEV_MAX_MEM_CLOCK", "DCGM_FI_DEV_MAX_VIDEO_CLOCK", "DCGM_FI_DEV_AUTOBOOST",
    "DCGM_FI_DEV_SUPPORTED_CLOCKS", "DCGM_FI_DEV_VIDEO_CLOCK_HERTZ", "DCGM_FI_DEV_SM_APP_CLOCK_HERTZ",
    "DCGM_FI_DEV_MEMORY_APP_CLOCK_HERTZ", "DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ", "DCGM_FI_DEV_MEMORY_MAX_CLOCK_HERTZ",
    "DCGM_FI_DEV_VIDEO_MAX_CLOCK_HERTZ", "DCGM_FI_DEV_MEM_MAX_OP_TEMP", "DCGM_FI_DEV_GPU_MAX_OP_TEMP",
    "DCGM_FI_DEV_POWER_USAGE_INSTANT", "DCGM_FI_DEV_BOARD_POWER_RAW_WATTS", "DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", "DCGM_FI_DEV_FAN_SPEED_RATIO",
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "DCGM_FI_DEV_ACCOUNTING_DATA",
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "DCGM_FI_DEV_PCIE_LINK_GEN",
    "DCGM_FI_DEV_PCIE_LINK_WIDTH",
    "DCGM_FI_DEV_TOTAL_APP_CLOCKS_VIOLATION",
    "DCGM_FI_DEV_TOTAL_BASE_CLOCKS_VIOLATION",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL", "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND",
    "DCGM_FI_DEV_NVLINK_TX_BANDWIDTH_TOTAL", "DCGM_FI_DEV_NVLINK_RX_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VIRTUAL_MODE",
    "DCGM_FI_DEV_VGPU_MEMORY_USAGE", "DCGM_FI_DEV_VGPU_FB_USED_BYTES", "DCGM_FI_DEV_C2C_MAX_BANDWIDTH",
    "DCGM_FI_DEV_GPU_NVLINK_ERRORS", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "DCGM_FI_PROF_NVLINK_RX_BYTES", "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE", "DCGM_FI_PROF_PIPE_INT_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
    "DCGM_FI_PROF_SM_UTIL_RATIO", "DCGM_FI_PROF_SM_OCCUPANCY_RATIO", "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
    "DCGM_FI_PROF_DRAM_UTIL_RATIO", "DCGM_FI_PROF_FP64_UTIL_RATIO", "DCGM_FI_PROF_FP32_UTIL_RATIO",
    "DCGM_FI_PROF_FP16_UTIL_RATIO", "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",
    "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND",
    "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND",
    "DCGM_FI_DEV_FABRIC_MANAGER_STATUS", "DCGM_FI_DEV_FABRIC_MANAGER_ERROR", "DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE",
    "DCGM_FI_DEV_FABRIC_CLUSTER_UUID", "DCGM_FI_DEV_FABRIC_CLIQUE_ID",
    "DCGM_EXP_GPU_HEALTH_STATUS",
    "DCGM_EXP_P2P_STATUS",
})

# Numbered families (per link, per engine, per location) that are real DCGM fields we do not serve.
_KNOWN_UNSERVED_PATTERNS = (
    re.compile(r"^DCGM_FI_DEV_NVLINK_(BANDWIDTH|THROUGHPUT)_L\d{1,2}(_BYTES_PER_SECOND)?$"),
    re.compile(r"^DCGM_FI_DEV_NVLINK_(CRC_FLIT|CRC_DATA|REPLAY|RECOVERY)_ERROR(_COUNT)?_L\d{1,2}(_TOTAL)?$"),
    re.compile(r"^DCGM_FI_DEV_ECC_(SBE|DBE)_(VOL|AGG)_(L1|L2|DEV|REG|TEX|SHM|CBU|SRM)$"),
    re.compile(r"^DCGM_FI_DEV_(CPU|MEM)_AFFINITY_\d$"),
    re.compile(r"^DCGM_FI_PROF_(NVDEC|NVJPG|NVOFA)\d_ACTIVE$"),
    re.compile(r"^DCGM_FI_PROF_NVLINK_L\d{1,2}_(TX|RX)_BYTES$"),
    re.compile(r"^DCGM_FI_DEV_VGPU_[A-Z0-9_]+$"),
)


def dcgm_number(value: float, integer: bool) -> float:
    """A value in DCGM's representation: INT64 fields truncated, doubles rounded to six decimals.

    DCGM prints doubles with six decimals; rounding also hides binary artefacts of unit scaling
    (632584 mW -> 632.584 W, not 632.5840000000001).
    """
    return int(value) if integer else round(float(value), 6)


class Catalog:
    """Lookup of field specs by any of their names (legacy name or alias)."""

    def __init__(self, fields: tuple[FieldSpec, ...]) -> None:
        self._fields = fields
        self._by_name: dict[str, FieldSpec] = {}
        for spec in fields:
            for name in (spec.name, *spec.aliases):
                if name in self._by_name:  # pragma: no cover - guarded by tests
                    raise ValueError(f"duplicate catalog name {name}")
                self._by_name[name] = spec
        # dcgm-exporter 1.x names are aliases of the field with their id (the first non-label spec).
        by_id: dict[int, FieldSpec] = {}
        for spec in fields:
            if not spec.is_label:
                by_id.setdefault(spec.field_id, spec)
        self._one_x = frozenset(ONE_X_FIELD_IDS)
        for name, field_id in ONE_X_FIELD_IDS.items():
            if field_id in by_id:
                self._by_name.setdefault(name, by_id[field_id])

    @property
    def fields(self) -> tuple[FieldSpec, ...]:
        return self._fields

    def lookup(self, name: str) -> FieldSpec | None:
        return self._by_name.get(name)

    def is_known_dcgm_name(self, name: str) -> bool:
        """A real DCGM field or dcgm-exporter metric name, served by us or not."""
        return (name in self._by_name or name in _KNOWN_UNSERVED_NAMES or name in self._one_x
                or any(pattern.match(name) for pattern in _KNOWN_UNSERVED_PATTERNS))

    def all_names(self) -> list[str]:
        return sorted(self._by_name)



CATALOG = Catalog(_FIELDS)
