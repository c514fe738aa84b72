"""A scenario file or text to a ``Scenario``: the top-level keys, the latency profile, the built-in scenarios."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from exporter import safeyaml
from exporter.inputfile import InputFileError, read_text
from exporter.safeyaml import YamlValue
from simulator.latency_file import load_latency_file
from simulator.scenario.errors import ScenarioError, scenario_file
from simulator.scenario.faults import read_faults, read_library, read_xid_events
from simulator.scenario.gpus import read_gpus
from simulator.scenario.latency import (
    FIELD_VALUE_LATENCY_KEY,
    LATENCY_PROFILES,
    NVML_SYMBOLS,
    REALISTIC_FIELD_VALUE_LATENCY_S,
    REALISTIC_LATENCY_S,
)
from simulator.scenario.model import LibrarySpec, RawSection, Scenario
from simulator.scenario.values import read_duration

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"
MAX_SCENARIO_BYTES = 4 * 1024 * 1024


_TOP_KEYS = ("description", "seed", "driver", "gpu_count", "gpu_defaults", "gpus", "latency_profile",
             "latency", "library", "faults", "kubernetes", "xid_events")


def _latency(top: Mapping[str, YamlValue]) -> tuple[str, dict[str, float], float]:
    profile = _latency_profile(top["latency_profile"]) if "latency_profile" in top else "none"
    latency: dict[str, float] = dict(REALISTIC_LATENCY_S) if profile != "none" else {}
    per_field = REALISTIC_FIELD_VALUE_LATENCY_S if profile != "none" else 0.0
    if profile.endswith(".json"):  # measured on a GPU node (scripts/test-gpu): replaces the estimates it covers
        measured = load_latency_file(profile, NVML_SYMBOLS)
        latency.update(measured.per_call)
        per_field = per_field if measured.field_value is None else measured.field_value
    if "latency" in top:
        for name, item in top["latency"].mapping((*NVML_SYMBOLS, FIELD_VALUE_LATENCY_KEY)).items():
            if name == FIELD_VALUE_LATENCY_KEY:
                per_field = read_duration(item)
            else:
                latency[name] = read_duration(item)
    return profile, {name: seconds for name, seconds in latency.items() if seconds > 0}, per_field


def _latency_profile(value: YamlValue) -> str:
    """``none``, ``realistic``, or a measured-latency JSON file (relative to the scenario file)."""
    text = value.string()
    if not text.endswith(".json"):
        return value.choice(LATENCY_PROFILES, "latency profile")
    path = Path(text)
    return str(path if path.is_absolute() else Path(value.source).parent / path)


def _cuda_version(value: YamlValue) -> int:
    raw = value.scalar()
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    match = re.match(r"^(\d+)\.(\d+)$", str(raw))
    if not match:
        raise value.error(f"expected a CUDA version like 12.4 or 12040, got {raw!r}")
    return int(match.group(1)) * 1000 + int(match.group(2)) * 10


def parse_scenario(text: str, source: str, name: str) -> Scenario:
    """Build a Scenario from YAML text; ``source`` is the file name used in error messages."""
    try:
        # Aliases and merge keys are part of the format (the shipped scenarios use them); their
        # expansion is bounded, as are nesting and numbers.
        root = safeyaml.compose(text, allow_aliases=True)
    except safeyaml.YamlInputError as exc:
        raise ScenarioError(source, exc.line, "yaml", exc.message) from None
    if root is None:
        raise ScenarioError(source, 1, "scenario", "the file is empty")
    top = scenario_file(source).root(root)
    if not top.is_mapping():
        raise ScenarioError(source, top.line, "scenario", "expected a mapping of scenario keys")
    keys = top.mapping(_TOP_KEYS)
    seed = keys["seed"].integer() if "seed" in keys else 0
    gpus = read_gpus(top, keys, seed)
    profile, latency, per_field = _latency(keys)
    errors, hangs, lost = read_faults(keys["faults"], len(gpus)) if "faults" in keys else ((), (), ())
    driver = keys["driver"].mapping(("version", "nvml_version", "cuda_version")) if "driver" in keys else {}
    driver_version = driver["version"].string() if "version" in driver else Scenario.driver_version
    kubernetes = None
    if "kubernetes" in keys:
        section = keys["kubernetes"]
        kubernetes = RawSection(source, section.line or 1, section.value(), section.node)
    return Scenario(
        name=name,
        source=source,
        description=keys["description"].string() if "description" in keys else "",
        seed=seed,
        driver_version=driver_version,
        nvml_version=driver["nvml_version"].string() if "nvml_version" in driver else f"12.{driver_version}",
        cuda_driver_version=_cuda_version(driver["cuda_version"]) if "cuda_version" in driver
        else Scenario.cuda_driver_version,
        gpus=gpus,
        latency_profile=profile,
        latency=MappingProxyType(latency),
        field_value_latency=per_field,
        library=read_library(keys["library"]) if "library" in keys else LibrarySpec(),
        errors=errors,
        hangs=hangs,
        lost=lost,
        kubernetes=kubernetes,
        xid_events=read_xid_events(keys["xid_events"], len(gpus)) if "xid_events" in keys else (),
    )


def builtin_scenarios() -> list[str]:
    """Names of the scenarios shipped under simulator/scenarios/ (file stems)."""
    return sorted(path.stem for path in SCENARIO_DIR.glob("*.yaml"))


def load_scenario(name_or_path: str) -> Scenario:
    """Load a built-in scenario by name (``default``) or a scenario file by path."""
    candidate = Path(name_or_path)
    builtin = SCENARIO_DIR / f"{name_or_path}.yaml"
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
        path = candidate
    elif builtin.is_file():
        path = builtin
    elif candidate.is_file():
        path = candidate
    else:
        raise ScenarioError("scenario", None, name_or_path,
                            f"unknown built-in scenario (known: {', '.join(builtin_scenarios())}); "
                            "give a path to load a file")
    try:
        text = read_text(path, MAX_SCENARIO_BYTES)
    except InputFileError as exc:
        raise ScenarioError(str(path), None, "scenario", str(exc)) from None
    return parse_scenario(text, str(path), path.stem)
