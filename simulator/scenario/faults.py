"""What goes wrong in a scenario: NVML errors and hangs per symbol and GPU, lost GPUs, Xid events, and a
library that is missing, lacks symbols or fails to initialise."""

from __future__ import annotations

from collections.abc import Mapping

import pynvml

from exporter.safeyaml import YamlValue
from simulator.patterns import (
    INFINITY,
    Window,
)
from simulator.scenario.errors import parse_error_code
from simulator.scenario.latency import NVML_SYMBOLS
from simulator.scenario.model import ErrorFault, GpuLostFault, HangFault, InitFailure, LibrarySpec, XidEventSpec
from simulator.scenario.values import read_duration, read_optional


def _symbol(value: YamlValue, allow_any: bool = False) -> str:
    name = value.string()
    if allow_any and name == "*":
        return name
    if name not in NVML_SYMBOLS:
        known = ", ".join(sorted(NVML_SYMBOLS))
        raise value.error(f"unknown NVML symbol {name!r} (the fake implements: {known})")
    return name


def _code(value: YamlValue) -> int:
    code = int(value.convert(parse_error_code))
    if code == pynvml.NVML_SUCCESS:
        raise value.error("NVML_SUCCESS is not an error")
    return code


def _gpu_index(value: YamlValue, count: int) -> int:
    index = value.integer(0)
    if index >= count:
        raise value.error(f"GPU index {index} out of range (gpu_count is {count})")
    return index


def read_faults(value: YamlValue, count: int) -> tuple[tuple[ErrorFault, ...], tuple[HangFault, ...],
                                                    tuple[GpuLostFault, ...]]:
    errors: list[ErrorFault] = []
    hangs: list[HangFault] = []
    lost: list[GpuLostFault] = []
    kinds = ("error", "gpu_lost", "hang")
    for item in value.sequence():
        if not item.is_mapping():
            raise item.error(f"a fault is a mapping with 'type' ({', '.join(kinds)})")
        raw_type = item.mapping(("type", "symbol", "error", "gpu", "from", "until", "field", "at", "duration",
                                 "holds_driver_lock"))
        if "type" not in raw_type:
            raise item.error(f"a fault needs 'type' (known: {', '.join(kinds)})")
        kind = raw_type["type"].choice(kinds, "fault type")
        if kind == "error":
            keys = item.mapping(("type", "symbol", "error", "gpu", "from", "until", "field"))
            if "error" not in keys:
                raise item.error("an error fault needs 'error' (an NVML error name such as NotSupported)")
            field_id = keys["field"].integer(0, pynvml.NVML_FI_MAX) if "field" in keys else None
            if "symbol" in keys:
                symbol = _symbol(keys["symbol"], allow_any=True)
            elif field_id is not None:
                symbol = "nvmlDeviceGetFieldValues"
            else:
                raise item.error("an error fault needs 'symbol' (or 'field' for one field value)")
            if field_id is not None and symbol != "nvmlDeviceGetFieldValues":
                raise keys["field"].error("'field' only applies to nvmlDeviceGetFieldValues")
            window = _error_window(keys)
            gpu = read_optional(keys, "gpu", lambda v: _gpu_index(v, count), None)
            errors.append(ErrorFault(symbol, _code(keys["error"]), gpu, window, field_id))
        elif kind == "gpu_lost":
            keys = item.mapping(("type", "gpu", "at", "until"))
            if "gpu" not in keys:
                raise item.error("a gpu_lost fault needs 'gpu'")
            at = read_optional(keys, "at", read_duration, 0.0)
            until = read_optional(keys, "until", read_duration, INFINITY)
            if until <= at:
                raise keys["until"].error("'until' must be later than 'at'")
            lost.append(GpuLostFault(_gpu_index(keys["gpu"], count), at, until))
        else:
            keys = item.mapping(("type", "symbol", "gpu", "at", "duration", "holds_driver_lock", "error"))
            for needed in ("symbol", "duration"):
                if needed not in keys:
                    raise item.error(f"a hang fault needs '{needed}'")
            hangs.append(HangFault(
                symbol=_symbol(keys["symbol"], allow_any=True),
                at=read_duration(keys["at"]) if "at" in keys else 0.0,
                duration=read_duration(keys["duration"]),
                gpu=_gpu_index(keys["gpu"], count) if "gpu" in keys else None,
                holds_driver_lock=read_optional(keys, "holds_driver_lock", YamlValue.boolean, False),
                error=_code(keys["error"]) if "error" in keys else None,
            ))
    return tuple(errors), tuple(hangs), tuple(lost)


MAX_XID_EVENTS = 1_000_000
MAX_XID = 0xFFFF


def read_xid_events(value: YamlValue, count: int) -> tuple[XidEventSpec, ...]:
    """``xid_events:`` entries, bursts expanded into single events, sorted by time."""
    events: list[XidEventSpec] = []
    for item in value.sequence():
        keys = item.mapping(("gpu", "xid", "at", "count", "over", "gpu_instance", "compute_instance"))
        for needed in ("gpu", "xid"):
            if needed not in keys:
                raise item.error(f"an Xid event needs '{needed}'")
        gpus = ([_gpu_index(entry, count) for entry in keys["gpu"].sequence()] if keys["gpu"].is_sequence()
                else [_gpu_index(keys["gpu"], count)])
        xid = keys["xid"].integer(1, MAX_XID)
        at = read_duration(keys["at"]) if "at" in keys else 0.0
        burst = keys["count"].integer(1, MAX_XID_EVENTS) if "count" in keys else 1
        over = read_duration(keys["over"]) if "over" in keys else 0.0
        gpu_instance = keys["gpu_instance"].integer(0, 0xFFFFFFFE) if "gpu_instance" in keys else None
        compute_instance = None
        if "compute_instance" in keys:
            if gpu_instance is None:
                raise keys["compute_instance"].error("'compute_instance' needs 'gpu_instance'")
            compute_instance = keys["compute_instance"].integer(0, 0xFFFFFFFE)
        if len(events) + burst * len(gpus) > MAX_XID_EVENTS:
            raise item.error(f"too many Xid events (at most {MAX_XID_EVENTS} in one scenario)")
        for gpu in gpus:
            events.extend(XidEventSpec(gpu, xid, at + over * slot / burst, gpu_instance, compute_instance)
                          for slot in range(burst))
    return tuple(sorted(events, key=lambda event: event.at))


def _error_window(keys: Mapping[str, YamlValue]) -> Window:
    start = read_duration(keys["from"]) if "from" in keys else 0.0
    end = read_duration(keys["until"]) if "until" in keys else INFINITY
    if end <= start:
        raise keys["until"].error("'until' must be after 'from'")
    return Window(start, end)


def read_library(value: YamlValue) -> LibrarySpec:
    keys = value.mapping(("missing", "missing_symbols", "init_fails"))
    missing_symbols = frozenset(_symbol(item) for item in keys["missing_symbols"].sequence()) \
        if "missing_symbols" in keys else frozenset()
    init_failure = None
    if "init_fails" in keys:
        fails = keys["init_fails"].mapping(("error", "until", "calls"))
        if "error" not in fails:
            raise keys["init_fails"].error("init_fails needs 'error' (e.g. DriverNotLoaded)")
        if "until" not in fails and "calls" not in fails:
            raise keys["init_fails"].error("init_fails needs 'until' (a time) or 'calls' (attempts)")
        init_failure = InitFailure(
            code=_code(fails["error"]),
            calls=fails["calls"].integer(1) if "calls" in fails else None,
            until=read_duration(fails["until"]) if "until" in fails else None,
        )
    return LibrarySpec(
        missing=keys["missing"].boolean() if "missing" in keys else False,
        missing_symbols=missing_symbols,
        init_failure=init_failure,
    )
