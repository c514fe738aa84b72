"""A scenario's GPUs: the model preset, per-GPU settings and overrides, MIG layouts, processes, and the
identities (UUID, serial, PCI bus id) that must not repeat."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from types import MappingProxyType
from typing import Any

import pynvml

from exporter.safeyaml import YamlValue
from simulator import patterns
from simulator.models import DEFAULT_MODEL, MIG_PROFILES, PRESETS, Features, GpuModel, check_mig_layout
from simulator.scenario.model import (
    CLOCK_EVENT_REASONS,
    DEFAULT_PROFILING,
    DERIVED_FROM_PROCESSES,
    FABRIC_STATES,
    IDLE,
    NEVER,
    NO_COUNTS,
    PROCESS_ACTIVITY_CHANNELS,
    PROCESS_TYPES,
    PROFILING_CHANNELS,
    PROFILING_WORKLOADS,
    SHARING_MODES,
    ClockEvent,
    EccSpec,
    GpuSpec,
    MigInstanceSpec,
    ProcessActivity,
    ProcessSpec,
    ProfilingSpec,
    RemappedRowsSpec,
    RetiredPagesSpec,
)
from simulator.scenario.units import CHANNELS, Unit, channel_units, parse_power_mw, size_parser
from simulator.scenario.values import read_counter, read_flag, read_optional, read_pattern, read_window

_GPU_KEYS = ("model", "name", "uuid", "serial", "vbios", "pci_bus_id", "minor", "power_limit", "features", "mig",
             "profiling",
             "clock_events", "pcie_replays", "ecc_errors", "retired_pages", "remapped_rows", "processes",
             "sharing", "fabric", *CHANNELS)
_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_PCI = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<device>[0-9a-fA-F]{1,2})"
                  r"(?:\.(?P<function>[0-7]))?$")
MAX_GPUS = 1024


def parse_pci_bus_id(text: str) -> tuple[int, int, int]:
    """(domain, bus, device) from ``00000000:3B:00.0``, ``0000:3b:00.0`` or ``3b:00.0``."""
    match = _PCI.match(text.strip())
    if not match:
        raise ValueError(f"invalid PCI bus id {text!r}: expected domain:bus:device.function, "
                         "e.g. 00000000:18:00.0")
    return int(match.group("domain") or "0", 16), int(match.group("bus"), 16), int(match.group("device"), 16)


def _features(value: YamlValue, base: Features) -> Features:
    keys = value.mapping(Features.names())
    changes: dict[str, Any] = {}
    for name, item in keys.items():
        if name == "fans":
            changes[name] = item.integer(0, 8)
        elif name == "nvlink_links":
            changes[name] = item.integer(0, pynvml.NVML_NVLINK_MAX_LINKS)
        else:
            changes[name] = item.boolean()
    return Features(**{**base.__dict__, **changes})


def _processes(value: YamlValue, model: GpuModel) -> tuple[ProcessSpec, ...]:
    result: list[ProcessSpec] = []
    size = size_parser(model.memory_total)
    units = channel_units(model)
    seen: dict[int, YamlValue] = {}
    for item in value.sequence():
        window, keys = read_window(item, ("pid", "used_memory", "type", *PROCESS_ACTIVITY_CHANNELS))
        if "pid" not in keys:
            raise item.error("a process needs 'pid'")
        used: int | None = None
        if "used_memory" in keys:
            raw = keys["used_memory"].scalar()
            if raw != "unavailable":
                used = int(keys["used_memory"].convert(size))
                if not 0 <= used <= model.memory_total:
                    raise keys["used_memory"].error(f"must be between 0 and {model.memory_total} bytes")
        kind = read_optional(keys, "type", lambda v: v.choice(PROCESS_TYPES, "process type"), "compute")
        activity = ProcessActivity(**{name: read_pattern(keys[name], units[name])
                                      for name in PROCESS_ACTIVITY_CHANNELS if name in keys})
        pid = keys["pid"].integer(1, 2**31 - 1)
        if activity.given and pid in seen:
            raise keys["pid"].error(f"PID {pid} is listed twice on this GPU with its own activity; give its "
                                    "activity once (a process has one utilization per GPU)")
        if activity.given:
            seen[pid] = keys["pid"]
        result.append(ProcessSpec(pid, used, kind, window, activity))
    return tuple(result)


def _clock_events(value: YamlValue) -> tuple[ClockEvent, ...]:
    events: list[ClockEvent] = []
    for item in value.sequence():
        window, keys = read_window(item, ("reason",))
        if "reason" not in keys:
            known = ", ".join(sorted(CLOCK_EVENT_REASONS))
            raise item.error(f"a clock event needs 'reason' (known: {known})")
        reason = keys["reason"].choice(CLOCK_EVENT_REASONS, "clock event reason")
        events.append(ClockEvent(reason, CLOCK_EVENT_REASONS[reason], window))
    return tuple(events)


def _ecc(value: YamlValue) -> EccSpec:
    keys = value.mapping(("corrected", "uncorrected", "aggregate_corrected", "aggregate_uncorrected"))
    return EccSpec(
        corrected=read_counter(keys["corrected"]) if "corrected" in keys else NO_COUNTS,
        uncorrected=read_counter(keys["uncorrected"]) if "uncorrected" in keys else NO_COUNTS,
        aggregate_corrected=read_optional(keys, "aggregate_corrected", lambda v: v.integer(0), 0),
        aggregate_uncorrected=read_optional(keys, "aggregate_uncorrected", lambda v: v.integer(0), 0),
    )


def _retired_pages(value: YamlValue) -> RetiredPagesSpec:
    keys = value.mapping(("single_bit", "double_bit", "pending"))
    return RetiredPagesSpec(
        single_bit=read_counter(keys["single_bit"]) if "single_bit" in keys else NO_COUNTS,
        double_bit=read_counter(keys["double_bit"]) if "double_bit" in keys else NO_COUNTS,
        pending=read_flag(keys["pending"]) if "pending" in keys else NEVER,
    )


def _remapped_rows(value: YamlValue) -> RemappedRowsSpec:
    keys = value.mapping(("correctable", "uncorrectable", "pending", "failure"))
    return RemappedRowsSpec(
        correctable=read_counter(keys["correctable"]) if "correctable" in keys else NO_COUNTS,
        uncorrectable=read_counter(keys["uncorrectable"]) if "uncorrectable" in keys else NO_COUNTS,
        pending=read_flag(keys["pending"]) if "pending" in keys else NEVER,
        failure=read_flag(keys["failure"]) if "failure" in keys else NEVER,
    )


def _profiling(value: YamlValue) -> ProfilingSpec:
    keys = value.mapping(("workload", *PROFILING_CHANNELS))
    percent = channel_units(PRESETS[DEFAULT_MODEL])["load"]
    return ProfilingSpec(
        workload=read_optional(keys, "workload", lambda v: v.choice(PROFILING_WORKLOADS, "workload"), "training"),
        channels=MappingProxyType({name: read_pattern(item, percent) for name, item in keys.items()
                                   if name != "workload"}),
    )


def _mig_instance(item: YamlValue, model: GpuModel) -> MigInstanceSpec:
    profiles = MIG_PROFILES.get(model.key, {})
    if not item.is_mapping():
        return MigInstanceSpec(item.choice(profiles, f"MIG profile on {model.key}"))
    keys = item.mapping(("profile", "compute_instances", "load", "memory_used", "workload", "processes"))
    if "profile" not in keys:
        raise item.error("a MIG instance needs 'profile' (e.g. 1g.10gb)")
    profile = profiles[keys["profile"].choice(profiles, f"MIG profile on {model.key}")]
    compute_instances = keys["compute_instances"].integer(1, profile.compute_slices) \
        if "compute_instances" in keys else 1
    if profile.compute_slices % compute_instances:
        raise keys["compute_instances"].error(
            f"{profile.name} has {profile.compute_slices} compute slices; it splits into 1 or a divisor of that")
    size = Unit(size_parser(profile.memory_bytes), 0.0, float(profile.memory_bytes),
                 f"bytes (at most {profile.memory_bytes} in a {profile.name} instance)")
    instance_model = replace(model, memory_total=profile.memory_bytes)
    return MigInstanceSpec(
        profile=profile.name,
        compute_instances=compute_instances,
        load=read_pattern(keys["load"], channel_units(model)["load"]) if "load" in keys else IDLE,
        memory_used=read_pattern(keys["memory_used"], size) if "memory_used" in keys else None,
        profiling=ProfilingSpec(workload=keys["workload"].choice(PROFILING_WORKLOADS, "workload"))
        if "workload" in keys else DEFAULT_PROFILING,
        processes=_processes(keys["processes"], instance_model) if "processes" in keys else (),
    )


def _mig_layout(value: YamlValue, model: GpuModel) -> tuple[MigInstanceSpec, ...]:
    """``mig: [1g.10gb, {profile: 3g.40gb, load: 80}, ...]``: MIG enabled with these GPU instances."""
    if model.key not in MIG_PROFILES:
        raise value.error(f"{model.key} does not support MIG")
    instances = tuple(_mig_instance(item, model) for item in value.sequence())
    try:
        check_mig_layout(model.key, [instance.profile for instance in instances])
    except ValueError as exc:
        raise value.error(str(exc)) from None
    return instances


def _model(settings: Mapping[str, YamlValue]) -> GpuModel:
    if "model" not in settings:
        return PRESETS[DEFAULT_MODEL]
    return PRESETS[settings["model"].choice(PRESETS, "GPU model")]


def _uuid(item: YamlValue) -> str:
    """A GPU UUID as NVML prints it: the exporter's series and the kubelet's device IDs carry it verbatim,
    so a near miss would silently fail to match."""
    uuid = item.string()
    if not _UUID.match(uuid):
        raise item.error(f"invalid UUID {uuid!r}: expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx "
                         "(lower-case hex)")
    return uuid


def _serial(item: YamlValue) -> str:
    """A board serial that fits NVML's serial buffer (a real GPU cannot report a longer one)."""
    serial = item.string()
    limit = pynvml.NVML_DEVICE_SERIAL_BUFFER_SIZE - 1
    if len(serial) > limit:
        raise item.error(f"serial is longer than {limit} characters")
    return serial


def _power_limit_mw(item: YamlValue, model: GpuModel) -> int:
    """A power limit within what ``model`` accepts, as NVML refuses any other."""
    limit = item.convert(parse_power_mw)
    if not model.power_min_limit_mw <= limit <= model.power_max_limit_mw:
        raise item.error(f"power limit must be between {model.power_min_limit_mw / 1000:g} W and "
                         f"{model.power_max_limit_mw / 1000:g} W on {model.key}")
    return int(limit)


_SettingReader = Callable[[YamlValue], Any]


def _setting_readers(model: GpuModel) -> dict[str, tuple[str, _SettingReader]]:
    """Each GPU key with the ``GpuSpec`` field it fills and its reader; the readers of the MIG layout,
    processes, power limit and value patterns depend on ``model``, so the table is built per model.
    A telemetry channel's pattern wins over a setting of the same name."""
    readers: dict[str, tuple[str, _SettingReader]] = {
        "name": ("name", lambda item: item.string()),
        "uuid": ("uuid", _uuid),
        "serial": ("serial", _serial),
        "vbios": ("vbios_version", lambda item: item.string()),
        "pci_bus_id": ("pci", lambda item: item.convert(lambda raw: parse_pci_bus_id(str(raw)))),
        "minor": ("minor", lambda item: item.integer(0, 255)),
        "power_limit": ("power_limit_mw", lambda item: _power_limit_mw(item, model)),
        "clock_events": ("clock_events", _clock_events),
        "pcie_replays": ("pcie_replays", read_counter),
        "ecc_errors": ("ecc_errors", _ecc),
        "retired_pages": ("retired_pages", _retired_pages),
        "remapped_rows": ("remapped_rows", _remapped_rows),
        "processes": ("processes", lambda item: _processes(item, model)),
        "mig": ("mig", lambda item: _mig_layout(item, model)),
        "profiling": ("profiling", _profiling),
        "sharing": ("sharing", lambda item: item.choice(SHARING_MODES, "sharing mode")),
        "fabric": ("fabric", lambda item: item.choice(FABRIC_STATES, "fabric health")),
    }
    for channel, unit in channel_units(model).items():
        readers[channel] = (channel, partial(read_pattern, unit=unit))
    return readers


def _gpu_settings(settings: Mapping[str, YamlValue], model: GpuModel) -> dict[str, Any]:
    """Parse the GPU keys present in ``settings`` (everything but model/features/identity defaults), in
    the order they were written, so the first mistake in the file is the one reported."""
    readers = _setting_readers(model)
    parsed: dict[str, Any] = {}
    for name, item in settings.items():
        if name in readers:
            field, read = readers[name]
            parsed[field] = read(item)
    return parsed


def _default_uuid(seed: int, index: int) -> str:
    high = patterns.channel_key(seed, index, "uuid-high")
    low = patterns.channel_key(seed, index, "uuid-low")
    text = f"{high:016x}{low:016x}"
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"


def _default_serial(seed: int, index: int) -> str:
    return "1654" + f"{patterns.channel_key(seed, index, 'serial') % 10**9:09d}"


def _build_gpu(index: int, settings: Mapping[str, YamlValue], features: Features, seed: int,
               own: Mapping[str, YamlValue] | None = None) -> GpuSpec:
    """``settings``: gpu_defaults merged with the GPU's own keys; ``own``: only the latter."""
    own = settings if own is None else own
    model = _model(settings)
    parsed = _gpu_settings({k: v for k, v in settings.items() if k not in ("model", "features")}, model)
    # Beyond the usual slots of one board, further GPUs go to further PCI domains (segments).
    slots = model.default_pci_buses
    domain, bus, device = parsed.pop("pci", (index // len(slots), slots[index % len(slots)], 0))
    if parsed.get("mig") is not None and not features.mig:
        raise settings["mig"].error(f"MIG is not supported on this GPU ({model.key} with features.mig false)")
    if any(process.activity.given for process in parsed.get("processes", ())) and parsed.get("mig") is None:
        # The GPU's utilization is derived from its processes: a GPU-level pattern for a derived
        # channel would contradict them (a default from gpu_defaults simply gives way).
        for channel in DERIVED_FROM_PROCESSES:
            if channel in own:
                raise own[channel].error(f"'{channel}' of this GPU follows its processes' own activity "
                                         f"(their load, memory_util, encoder_util, decoder_util); remove "
                                         f"one of the two")
            parsed.pop(channel, None)
    return GpuSpec(
        index=index,
        model=model,
        features=features,
        name=parsed.pop("name", model.name),
        uuid=parsed.pop("uuid", _default_uuid(seed, index)),
        serial=parsed.pop("serial", _default_serial(seed, index)),
        vbios_version=parsed.pop("vbios_version", model.vbios_version),
        pci_domain=domain,
        pci_bus=bus,
        pci_device=device,
        minor=parsed.pop("minor", index),
        power_limit_mw=parsed.pop("power_limit_mw", model.power_default_limit_mw),
        **parsed,
    )


def read_gpus(root: YamlValue, top: Mapping[str, YamlValue], seed: int) -> tuple[GpuSpec, ...]:
    count = top["gpu_count"].integer(1, MAX_GPUS) if "gpu_count" in top else 1
    defaults = top["gpu_defaults"].mapping(_GPU_KEYS) if "gpu_defaults" in top else {}
    overrides = top["gpus"].index_mapping(count, "GPU") if "gpus" in top else {}
    # Validate the defaults once on their own, so a mistake in a key that every GPU overrides is
    # still reported (with the gpu_defaults path).
    default_model = _model(defaults)
    _gpu_settings({k: v for k, v in defaults.items() if k not in ("model", "features")}, default_model)
    if "features" in defaults:
        _features(defaults["features"], default_model.features)

    gpus: list[GpuSpec] = []
    first_seen: dict[tuple[str, object], int] = {}
    for index in range(count):
        own = overrides[index].mapping(_GPU_KEYS) if index in overrides else {}
        merged = {**defaults, **own}
        model = _model(merged)
        features = model.features
        for settings in (defaults, own):
            if "features" in settings:
                features = _features(settings["features"], features)
        gpu = _build_gpu(index, merged, features, seed, own)
        for what, key in (("uuid", gpu.uuid), ("pci_bus_id", gpu.pci_bus_id), ("minor", gpu.minor)):
            if (what, key) in first_seen:
                where = merged.get(what) or overrides.get(index) or root
                raise where.error(f"GPU {index} has the same {what} as GPU {first_seen[what, key]} ({key})")
            first_seen[what, key] = index
        gpus.append(gpu)
    return tuple(gpus)
