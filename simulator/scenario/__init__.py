"""Simulation scenarios: a strictly validated YAML file loaded into frozen dataclasses.

A scenario describes a node's GPUs (model presets, counts, per-GPU overrides), how their
readings move over time (value patterns, counters, throttle windows, processes) and what goes
wrong (latency, errors, lost GPUs, hangs, missing symbols, a driver that is not loaded yet).
``FakeNvmlLibrary`` turns it into NVML answers; the kubelet/API-server fakes read the reserved
``kubernetes:`` section themselves.

Every user mistake raises ``ScenarioError`` (a ``ConfigError``, so the command line reports it
as one line and exits 2) whose text names the file, the line and the key path, for example
``scenarios/x.yaml:14: gpus[2].load: unknown pattern 'sinus' (known: constant, noise, ...)``.
The schema is documented in ``SCHEMA`` (``schema.py``) and in the shipped scenarios.

One module per concern: ``schema`` (the text users read), ``latency`` (the realistic profile),
``errors`` (ScenarioError, NVML error codes), ``units`` (reading units and ranges), ``model`` (the
frozen dataclasses), ``values`` (patterns, windows, flags, counters), ``gpus``, ``faults`` and
``parser`` (a file or text to a Scenario). This module is the package's public face: what the
simulator, the exporter's simulation door, the benchmarks and the tests import.
"""

from __future__ import annotations

from simulator.scenario.errors import (
    NVML_ERROR_CODES,
    ScenarioError,
    parse_error_code,
)
from simulator.scenario.faults import (
    MAX_XID,
    MAX_XID_EVENTS,
)
from simulator.scenario.gpus import (
    MAX_GPUS,
    parse_pci_bus_id,
)
from simulator.scenario.latency import (
    FIELD_VALUE_LATENCY_KEY,
    LATENCY_PROFILES,
    NVML_SYMBOLS,
    REALISTIC_FIELD_VALUE_LATENCY_S,
    REALISTIC_LATENCY_S,
)
from simulator.scenario.model import (
    CLOCK_EVENT_REASONS,
    DEFAULT_PROFILING,
    DERIVED_FROM_PROCESSES,
    FABRIC_NONE,
    FABRIC_STATES,
    IDLE,
    NEVER,
    NO_ACTIVITY,
    NO_COUNTS,
    PATTERN_KINDS,
    PROCESS_ACTIVITY_CHANNELS,
    PROCESS_TYPES,
    PROFILING_CHANNELS,
    PROFILING_WORKLOADS,
    SHARING_MODES,
    ClockEvent,
    EccSpec,
    ErrorFault,
    GpuLostFault,
    GpuSpec,
    HangFault,
    InitFailure,
    LibrarySpec,
    MigInstanceSpec,
    ProcessActivity,
    ProcessSpec,
    ProfilingSpec,
    RawSection,
    RemappedRowsSpec,
    RetiredPagesSpec,
    Scenario,
    XidEventSpec,
)
from simulator.scenario.parser import (
    MAX_SCENARIO_BYTES,
    SCENARIO_DIR,
    builtin_scenarios,
    load_scenario,
    parse_scenario,
)
from simulator.scenario.schema import (
    SCHEMA,
)
from simulator.scenario.units import (
    CHANNELS,
)

__all__ = [
    "CHANNELS",
    "CLOCK_EVENT_REASONS",
    "DEFAULT_PROFILING",
    "DERIVED_FROM_PROCESSES",
    "FABRIC_NONE",
    "FABRIC_STATES",
    "FIELD_VALUE_LATENCY_KEY",
    "IDLE",
    "LATENCY_PROFILES",
    "MAX_GPUS",
    "MAX_SCENARIO_BYTES",
    "MAX_XID",
    "MAX_XID_EVENTS",
    "NEVER",
    "NO_ACTIVITY",
    "NO_COUNTS",
    "NVML_ERROR_CODES",
    "NVML_SYMBOLS",
    "PATTERN_KINDS",
    "PROCESS_ACTIVITY_CHANNELS",
    "PROCESS_TYPES",
    "PROFILING_CHANNELS",
    "PROFILING_WORKLOADS",
    "REALISTIC_FIELD_VALUE_LATENCY_S",
    "REALISTIC_LATENCY_S",
    "SCENARIO_DIR",
    "SCHEMA",
    "SHARING_MODES",
    "ClockEvent",
    "EccSpec",
    "ErrorFault",
    "GpuLostFault",
    "GpuSpec",
    "HangFault",
    "InitFailure",
    "LibrarySpec",
    "MigInstanceSpec",
    "ProcessActivity",
    "ProcessSpec",
    "ProfilingSpec",
    "RawSection",
    "RemappedRowsSpec",
    "RetiredPagesSpec",
    "Scenario",
    "ScenarioError",
    "XidEventSpec",
    "builtin_scenarios",
    "load_scenario",
    "parse_error_code",
    "parse_pci_bus_id",
    "parse_scenario",
]
