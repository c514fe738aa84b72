"""How old a node's data is and when it counts as stale; the memory of a source that went down."""

from __future__ import annotations

from exporter.conditions import SAMPLES_STALE_ALERT_S
from exporter.top.lastseen import LastSeen, freshness
from exporter.top.model import Filters, NodeView
from exporter.top.sources import Reading, SourceError

NOW = 1_700_000_000.0


def view(name: str, **fields: object) -> NodeView:
    return NodeView("", name, {"gpus": [], **fields})


def test_stale_past_the_views_bound_or_else_past_the_alerts() -> None:
    fresh = freshness(view("a", sampled_at=NOW - 1.0, stale_after_s=1.5), NOW)
    assert fresh.age_s == 1.0 and not fresh.stale
    assert freshness(view("a", sampled_at=NOW - 2.0, stale_after_s=1.5), NOW).stale
    # A view built from /metrics text or Prometheus does not know the sampling interval.
    unknown = freshness(view("a", sampled_at=NOW - 60.0, stale_after_s=None), NOW)
    assert unknown.stale_after_s == SAMPLES_STALE_ALERT_S and not unknown.stale
    assert freshness(view("a", sampled_at=NOW - SAMPLES_STALE_ALERT_S - 1), NOW).stale
    assert freshness(view("a"), NOW).age_s is None and not freshness(view("a"), NOW).stale
    assert freshness(view("a", sampled_at=NOW), NOW, last_seen=NOW - 5).stale  # its source is down


def test_a_node_missing_while_a_source_is_down_is_kept_and_forgotten_once_all_answer() -> None:
    clock = [NOW]
    answers = [Reading(nodes=[view("a"), view("b")]),
               Reading(nodes=[view("a")], errors=[SourceError("b", "down")]),
               Reading(nodes=[view("a")], errors=[SourceError("b", "down")]),
               Reading(nodes=[view("a")])]
    memory = LastSeen(lambda _filters: answers.pop(0), clock=lambda: clock[0])
    assert [n.node for n in memory(Filters()).nodes] == ["a", "b"] and memory.missing() == {}
    clock[0] = NOW + 10
    assert [n.node for n in memory(Filters()).nodes] == ["a", "b"]
    clock[0] = NOW + 20
    assert [n.node for n in memory(Filters()).nodes] == ["a", "b"]
    assert memory.missing() == {("", "b"): NOW}  # last seen at the first read, not refreshed by memory
    ages = memory.freshness([view("a"), view("b")])
    assert not ages[("", "a")].stale and ages[("", "b")].stale and ages[("", "b")].last_seen == NOW
    assert [n.node for n in memory(Filters()).nodes] == ["a"] and memory.missing() == {}


def test_a_node_whose_exporter_says_its_sampler_is_stalled_is_stale_at_once() -> None:
    """The ``hang`` scenario read from /metrics: the view cannot know the sampling interval, but the exporter's
    own ``samples_stale`` condition (gpu_pod_exporter_sampler_stalled) says its readings are not refreshed:
    16 s old data of a hung sampler is STALE, not shown as current until the alert's 120 s."""
    stalled = [{"id": "samples_stale", "alert": "GpuPodExporterSamplesStale", "severity": "warning",
                "text": "the sampler is stalled inside NVML: readings are not refreshed"}]
    assert freshness(view("a", sampled_at=NOW - 16.0, conditions=stalled), NOW).stale
    assert not freshness(view("a", sampled_at=NOW - 16.0, conditions=[]), NOW).stale
