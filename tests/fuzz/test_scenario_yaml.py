"""Scenario files: any YAML yields a Scenario or one ScenarioError line naming file, line and key."""

from __future__ import annotations

from hypothesis import given

from simulator.scenario import Scenario, ScenarioError, parse_scenario
from tests.fuzz.inputs import HOSTILE_YAML, assert_user_error, within, yaml_texts

KEYS = ["description", "seed", "driver", "gpu_count", "gpu_defaults", "gpus", "latency_profile", "latency",
        "library", "faults", "kubernetes", "xid_events", "model", "load", "power", "temperature", "processes",
        "mig", "memory_used", "pattern", "low", "high", "period", "type", "symbol", "error", "at", "gpu"]


def parse(text: str) -> Scenario | ScenarioError:
    try:
        return within(20, lambda: parse_scenario(text, "s.yaml", "s"))
    except ScenarioError as exc:
        return exc


@given(yaml_texts(KEYS))
def test_any_scenario_gives_a_scenario_or_one_line(text: str) -> None:
    result = parse(text)
    if isinstance(result, ScenarioError):
        assert_user_error(str(result))
        assert str(result).startswith("s.yaml")


def test_hostile_scenarios_are_one_line_errors() -> None:
    for text in HOSTILE_YAML:
        result = parse(text)
        assert isinstance(result, ScenarioError), text[:40]
        assert_user_error(str(result))


def test_aliases_and_merge_keys_still_work_within_the_expansion_bound() -> None:
    scenario = parse("gpu_count: 2\ngpus:\n  0: &g {model: L4}\n  1: {<<: *g, temperature: 50}\n")
    assert isinstance(scenario, Scenario) and len(scenario.gpus) == 2
