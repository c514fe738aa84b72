"""The remediator's decisions, through the official kubernetes client against the recording fake API server.

Each test drives ``Remediator.receive`` (what the webhook does) and ``run_once`` (one worker pass)
with a clock it moves by hand, so holds, cooldowns and the hourly window are exercised without
waiting; every request the remediator made is in ``api.requests``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.backoff import BackoffPolicy
from exporter.remediate.alerts import parse_notification
from exporter.remediate.cli import main as remediate_main
from exporter.remediate.controller import Remediator
from exporter.remediate.events import (
    REASON_BREAKER_OPEN,
    REASON_DEFERRED,
    REASON_DRAINED,
    REASON_DROPPED,
    REASON_DRY_RUN,
    REASON_EVICTED,
    REASON_REPAIR_REQUESTED,
    REASON_SUPPRESSED,
    REASON_TAINTED,
    REASON_UNTAINTED,
    REASON_VALIDATED,
    REASON_VALIDATING,
    REASON_VALIDATION_FAILED,
    alert_context,
)
from exporter.remediate.kubeapi import KubeApi, load_core_api
from exporter.remediate.nodestate import GPUS_ANNOTATION, PHASE_ANNOTATION, TAINT_KEY
from exporter.remediate.policy import load_policy
from exporter.remediate.selfmetrics import RemediationMetrics
from tests.remediate.fakenodeapi import FakeNodeApiServer

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
STARTS = "2024-05-01T11:59:00Z"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def api() -> Iterator[FakeNodeApiServer]:
    with FakeNodeApiServer() as server:
        for name in ("node-a", "node-b", "node-c"):
            server.add_node(name)
        server.add_pod("ml", "trainer-0", "node-a")
        server.add_pod("ml", "trainer-1", "node-b")
        yield server


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make(api: FakeNodeApiServer, tmp_path: Path, clock: Clock, policy: dict[str, Any] | None = None) -> Remediator:
    path = None
    if policy is not None:
        path = tmp_path / f"policy-{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump(policy), encoding="utf-8")
    loaded = load_policy(str(path) if path else None)
    core = load_core_api(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    return Remediator(loaded, KubeApi(core, BackoffPolicy(initial_s=0.01, max_s=0.02), attempts=3),
                      RemediationMetrics(loaded.mode), clock=clock, recheck_s=5)


ENFORCE: dict[str, Any] = {"mode": "enforce", "limits": {"cooldown": "0s", "max_tainted_percent": 100}}


def alert(node: str = "node-a", uuid: str = "GPU-a", gpu: str = "3", *, name: str = "GpuXidFatal",
          status: str = "firing", starts: str = STARTS, ends: str | None = None, fingerprint: str | None = None,
          **labels: str) -> dict[str, Any]:
    return {"status": status, "labels": {"alertname": name, "Hostname": node, "UUID": uuid, "gpu": gpu, **labels},
            "annotations": {"summary": f"{name} on {node}"}, "startsAt": starts,
            "endsAt": ends or "0001-01-01T00:00:00Z", "fingerprint": fingerprint or f"{name}-{node}-{uuid}"}


def notify(remediator: Remediator, *alerts: dict[str, Any]) -> dict[str, int]:
    body = {"version": "4", "status": alerts[0]["status"], "receiver": "remediate", "groupKey": "g",
            "truncatedAlerts": 0, "alerts": list(alerts)}
    return remediator.receive(parse_notification(json.dumps(body).encode()))


def taint(api: FakeNodeApiServer, node: str) -> dict[str, Any] | None:
    found = [t for t in api.node(node)["spec"].get("taints", []) if t["key"] == TAINT_KEY]
    return found[0] if found else None


def reasons(api: FakeNodeApiServer, name: str | None = None) -> list[str]:
    return [e["reason"] for e in api.event_list() if name is None or e["involvedObject"]["name"] == name]


def patches(api: FakeNodeApiServer, node: str) -> list[Any]:
    return [r for r in api.writes("PATCH", f"/api/v1/nodes/{node}") if r.path == f"/api/v1/nodes/{node}"]


def metric(remediator: Remediator, action: str, result: str) -> float:
    return remediator.metrics.actions.labels(action, result)._value.get()


# ---------------------------------------------------------------------------------------------------
def test_a_firing_alert_taints_once_and_a_repeat_changes_nothing(api: FakeNodeApiServer, tmp_path: Path,
                                                                 clock: Clock) -> None:
    remediator = make(api, tmp_path, clock, ENFORCE)
    assert notify(remediator, alert(xid="79", pod="trainer-0", namespace="ml"))["new"] == 1
    remediator.run_once()
    assert taint(api, "node-a") == {"key": TAINT_KEY, "value": "3", "effect": "NoSchedule"}
    assert api.node("node-a")["metadata"]["annotations"][GPUS_ANNOTATION] == "GPU-a"
    assert reasons(api, "node-a") == ["GpuXidFatal", REASON_TAINTED]
    assert reasons(api, "trainer-0") == ["GpuXidFatal"]
    writes = len(api.writes())

    assert notify(remediator, alert(xid="79", pod="trainer-0", namespace="ml")) == \
        {"new": 0, "repeat": 1, "ignored": 0, "unusable": 0}
    remediator.run_once()
    assert len(api.writes()) == writes
    assert metric(remediator, "taint", "applied") == 1


def test_a_second_gpu_joins_the_taint_without_counting_as_another_node(api: FakeNodeApiServer, tmp_path: Path,
                                                                       clock: Clock) -> None:
    remediator = make(api, tmp_path, clock, {**ENFORCE, "limits": {"cooldown": "1h", "max_nodes_per_hour": 1,
                                                                   "max_tainted_percent": 100}})
    notify(remediator, alert(gpu="3", uuid="GPU-a"))
    remediator.run_once()
    clock.advance(minutes=1)  # within the cooldown and the hourly limit of 1: not a transition, so it passes
    notify(remediator, alert(gpu="1", uuid="GPU-b"))
    remediator.run_once()
    assert taint(api, "node-a") == {"key": TAINT_KEY, "value": "1_3", "effect": "NoSchedule"}
    assert api.node("node-a")["metadata"]["annotations"][GPUS_ANNOTATION] == "GPU-a,GPU-b"
    assert REASON_SUPPRESSED not in reasons(api) and REASON_DEFERRED not in reasons(api)


def test_a_conflicting_write_is_read_again_and_decided_again(api: FakeNodeApiServer, tmp_path: Path,
                                                             clock: Clock) -> None:
    remediator = make(api, tmp_path, clock, ENFORCE)
    api.conflict_next_patches(2)  # someone changes the node just before each of the next two patches
    notify(remediator, alert())
    remediator.run_once()
    assert [r.status for r in patches(api, "node-a")] == [409, 409, 200]
    assert taint(api, "node-a") is not None
    assert "touched-by" in api.node("node-a")["metadata"]["labels"]  # their change survived ours


def test_api_failures_are_retried_with_backoff_then_left_for_a_later_pass(api: FakeNodeApiServer, tmp_path: Path,
                                                                          clock: Clock) -> None:
    remediator = make(api, tmp_path, clock, ENFORCE)
    remediator.run_once()  # synced with the cluster first
    notify(remediator, alert())
    api.fail_next(6, 503)  # listing the pods and reading the node both exhaust their 3 attempts
    remediator.run_once()
    assert taint(api, "node-a") is None
    assert metric(remediator, "taint", "failed") == 1
    assert "503" in remediator.last_error
    remediator.run_once()  # not due yet: the failed work waits RETRY_AFTER_FAILURE
    assert taint(api, "node-a") is None
    clock.advance(seconds=31)
    remediator.run_once()
    assert taint(api, "node-a") is not None
    assert [r.status for r in api.requests].count(503) == 6
    assert remediator.last_error == ""  # recovered (and logged once)


def test_the_cooldown_defers_the_untaint_and_says_so(api: FakeNodeApiServer, tmp_path: Path, clock: Clock) -> None:
    policy = {"mode": "enforce", "alerts": {"GpuXidFatal": {"untaint_after": "0s"}},
              "limits": {"cooldown": "10m", "max_tainted_percent": 100}}
    remediator = make(api, tmp_path, clock, policy)
    notify(remediator, alert())
    remediator.run_once()
    clock.advance(minutes=2)
    notify(remediator, alert(status="resolved", ends="2024-05-01T12:01:00Z"))
    remediator.run_once()
    remediator.run_once()
    assert taint(api, "node-a") is not None
    assert reasons(api, "node-a").count(REASON_DEFERRED) == 1  # once per episode, not per pass
    assert metric(remediator, "untaint", "deferred") == 1
    assert remediator.metrics.held.labels("cooldown")._value.get() == 1
    clock.advance(minutes=8)
    remediator.run_once()
    assert taint(api, "node-a") is None
    assert reasons(api, "node-a")[-1] == REASON_UNTAINTED


def test_an_untaint_waits_for_the_hold_and_a_new_firing_cancels_it(api: FakeNodeApiServer, tmp_path: Path,
                                                                   clock: Clock) -> None:
    policy = {"mode": "enforce", "alerts": {"GpuFallenOffBus": {"untaint_after": "30m"}},
              "limits": {"cooldown": "0s", "max_tainted_percent": 100}}
    remediator = make(api, tmp_path, clock, policy)
    notify(remediator, alert(name="GpuFallenOffBus"))
    remediator.run_once()
    notify(remediator, alert(name="GpuFallenOffBus", status="resolved", ends="2024-05-01T12:00:00Z"))
    clock.advance(minutes=29)
    remediator.run_once()
    assert taint(api, "node-a") is not None
    notify(remediator, alert(name="GpuFallenOffBus", starts="2024-05-01T12:29:00Z"))  # it fell off again
    clock.advance(minutes=5)
    remediator.run_once()
    assert taint(api, "node-a") is not None
    assert len(patches(api, "node-a")) == 1  # the new occurrence only re-confirmed the same marks


def test_the_share_limit_holds_taints_and_lets_them_through_when_room_is_made(api: FakeNodeApiServer,
                                                                              tmp_path: Path, clock: Clock) -> None:
    for index in range(7):  # 10 GPU nodes in all: 10 % allows one tainted node
        api.add_node(f"spare-{index}")
    policy = {"mode": "enforce", "alerts": {"GpuXidFatal": {"untaint_after": "0s"}},
              "limits": {"cooldown": "0s", "max_tainted_percent": 10}}
    remediator = make(api, tmp_path, clock, policy)
    notify(remediator, alert("node-a"), alert("node-b", uuid="GPU-b"))
    remediator.run_once()
    assert taint(api, "node-a") is not None and taint(api, "node-b") is None
    [held] = [e for e in api.event_list() if e["reason"] == REASON_SUPPRESSED]
    assert held["involvedObject"]["name"] == "node-b"
    assert "1 of 10" not in held["message"] and "2 of 10 GPU nodes would be tainted" in held["message"]
    assert remediator.metrics.breaker_open._value.get() == 1
    notify(remediator, alert("node-a", status="resolved", ends="2024-05-01T12:00:00Z"))
    clock.advance(seconds=10)
    remediator.run_once()
    assert taint(api, "node-a") is None and taint(api, "node-b") is not None  # the held change went through
    assert remediator.metrics.breaker_open._value.get() == 0


def test_a_restarted_remediator_carries_on_from_what_is_on_the_nodes(api: FakeNodeApiServer, tmp_path: Path,
                                                                     clock: Clock) -> None:
    policy = {"mode": "enforce", "alerts": {"GpuXidFatal": {"untaint_after": "5m"}},
              "limits": {"cooldown": "0s", "max_nodes_per_hour": 1, "max_tainted_percent": 100}}
    first = make(api, tmp_path, clock, policy)
    notify(first, alert(xid="79", pod="trainer-0", namespace="ml"))
    first.run_once()
    events_before = len(api.event_list())

    clock.advance(minutes=1)
    second = make(api, tmp_path, clock, policy)  # a new process: nothing in memory
    notify(second, alert(xid="79", pod="trainer-0", namespace="ml"))  # Alertmanager's next repeat
    notify(second, alert("node-b", uuid="GPU-b"))
    second.run_once()
    # only node-b's: its alert, "breaker open" (the hourly limit latched) and "suppressed"
    assert [e["reason"] for e in api.event_list()[events_before:]] == \
        ["GpuXidFatal", REASON_BREAKER_OPEN, REASON_SUPPRESSED]
    assert second.metrics.actions.labels("event", "unchanged")._value.get() == 2  # the replays hit AlreadyExists
    assert taint(api, "node-b") is None  # the hourly window came back from node-a's annotation
    notify(second, alert(status="resolved", ends="2024-05-01T12:01:00Z"))
    clock.advance(minutes=5)
    second.run_once()
    assert taint(api, "node-a") is None  # the fingerprint that marked it came back too


def test_cordon_is_opt_in_and_only_a_cordon_we_made_is_lifted(api: FakeNodeApiServer, tmp_path: Path,
                                                              clock: Clock) -> None:
    api.add_node("node-admin", unschedulable=True)
    policy = {"mode": "enforce", "alerts": {"GpuXidFatal": {"actions": ["taint", "cordon"], "taint_effect": "NoExecute",
                                                            "untaint_after": "0s"}},
              "limits": {"cooldown": "0s", "max_tainted_percent": 100}}
    remediator = make(api, tmp_path, clock, policy)
    notify(remediator, alert("node-a"), alert("node-admin", uuid="GPU-z"))
    remediator.run_once()
    assert api.node("node-a")["spec"]["unschedulable"] is True
    assert taint(api, "node-a") == {"key": TAINT_KEY, "value": "3", "effect": "NoExecute"}
    assert GPUS_ANNOTATION not in api.node("node-a")["metadata"]["annotations"]  # annotate was not chosen
    assert reasons(api, "node-a") == [REASON_TAINTED]  # "event" not chosen: no alert Event
    notify(remediator, alert("node-a", status="resolved", ends="2024-05-01T12:00:00Z"),
           alert("node-admin", uuid="GPU-z", status="resolved", ends="2024-05-01T12:00:00Z"))
    clock.advance(seconds=1)
    remediator.run_once()
    assert api.node("node-a")["spec"]["unschedulable"] is False
    assert api.node("node-admin")["spec"]["unschedulable"] is True
    assert taint(api, "node-a") is None and taint(api, "node-admin") is None


@pytest.mark.parametrize("mode", ["dry-run", "events"])
def test_dry_run_and_events_modes_change_no_node(api: FakeNodeApiServer, tmp_path: Path, clock: Clock,
                                                 mode: str) -> None:
    remediator = make(api, tmp_path, clock, {**ENFORCE, "mode": mode})
    notify(remediator, alert(xid="79", pod="trainer-0", namespace="ml"))
    remediator.run_once()
    notify(remediator, alert(gpu="1", uuid="GPU-b"))
    remediator.run_once()
    assert [r for r in api.requests if r.method == "PATCH"] == []
    expected = [REASON_DRY_RUN, REASON_DRY_RUN] if mode == "dry-run" else \
        ["GpuXidFatal", REASON_DRY_RUN, "GpuXidFatal", REASON_DRY_RUN]
    assert reasons(api, "node-a") == expected
    assert reasons(api, "trainer-0") == ([] if mode == "dry-run" else ["GpuXidFatal"])
    last = [e for e in api.event_list() if e["reason"] == REASON_DRY_RUN][-1]
    assert f"would taint {TAINT_KEY}=1_3:NoSchedule" in last["message"]
    assert metric(remediator, "taint", "dry_run") == 2 and metric(remediator, "taint", "applied") == 0


def test_alerts_it_cannot_place_or_was_not_asked_about_are_counted_not_acted_on(api: FakeNodeApiServer,
                                                                                tmp_path: Path, clock: Clock) -> None:
    remediator = make(api, tmp_path, clock, ENFORCE)
    no_node = alert()
    del no_node["labels"]["Hostname"]
    counts = notify(remediator, no_node, alert(name="GpuTemperatureHigh"))
    assert counts == {"new": 0, "repeat": 0, "ignored": 1, "unusable": 1}
    remediator.run_once()
    assert api.writes() == []


def test_an_alert_in_dcgm_exporter_4_8_3_spelling_names_its_node_too(api: FakeNodeApiServer, tmp_path: Path,
                                                                     clock: Clock) -> None:
    """node_label: Hostname (the default) also finds 4.8.3's hostname label."""
    remediator = make(api, tmp_path, clock, {**ENFORCE, "mode": "dry-run"})
    renamed = alert()
    renamed["labels"]["hostname"] = renamed["labels"].pop("Hostname")
    assert notify(remediator, renamed)["unusable"] == 0
    remediator.run_once()
    assert reasons(api, "node-a") == [REASON_DRY_RUN]
    context = alert_context(renamed["labels"], {}, [], node=remediator.node_name(renamed["labels"]))
    assert "on node node-a reported" in context  # the pods' event text


def test_an_alert_for_a_node_that_is_gone_is_dropped(api: FakeNodeApiServer, tmp_path: Path, clock: Clock) -> None:
    remediator = make(api, tmp_path, clock, {**ENFORCE, "alerts": {"GpuXidFatal": {"actions": ["taint"]}}})
    notify(remediator, alert("node-gone"))
    remediator.run_once()
    assert metric(remediator, "taint", "failed") == 1
    clock.advance(minutes=5)
    remediator.run_once()
    assert [r.status for r in api.requests if r.path == "/api/v1/nodes/node-gone"] == [404]


def test_health_reports_the_mode_and_pending_work(api: FakeNodeApiServer, tmp_path: Path, clock: Clock) -> None:
    remediator = make(api, tmp_path, clock)
    assert remediator.health() == (True, "ok: mode dry-run, waiting for the Kubernetes API, 0 nodes with pending "
                                         "changes")
    remediator.run_once()
    assert "synced" in remediator.health()[1]


# -- issue 29: held changes, the latched breaker, storms, scope, node-level alerts -------------------------

STORM_POLICY: dict[str, Any] = {"mode": "enforce", "alerts": {"GpuXidFatal": {"untaint_after": "0s"}},
                                "limits": {"cooldown": "10m", "max_nodes_per_hour": 3, "max_tainted_percent": 100}}


def tainted_nodes(api: FakeNodeApiServer) -> set[str]:
    return {name for name in api.nodes if taint(api, name) is not None}


def ever_tainted(api: FakeNodeApiServer) -> set[str]:
    """Every node a PATCH ever gave our taint (the request bodies the fake API server recorded)."""
    return {r.path.rsplit("/", 1)[-1] for r in api.writes("PATCH", "/api/v1/nodes/") if r.status == 200
            and any(t.get("key") == TAINT_KEY for t in ((r.body or {}).get("spec") or {}).get("taints") or [])}


def storm(count: int, status: str = "firing", ends: str | None = None) -> list[dict[str, Any]]:
    return [alert(f"storm-{index:02d}", uuid=f"GPU-storm-{index}", status=status, ends=ends) for index in range(count)]


def run_minutes(remediator: Remediator, clock: Clock, api: FakeNodeApiServer, minutes: int,
                seen: list[int], step: int = 1) -> None:
    """One worker pass every ``step`` minutes; ``seen``: how many nodes carried our taint after each pass."""
    for _ in range(0, minutes, step):
        clock.advance(minutes=step)
        remediator.run_once()
        seen.append(len(tainted_nodes(api)))


def test_storm_that_resolves_within_five_minutes_taints_at_most_the_limit_and_nothing_later(
        api: FakeNodeApiServer, tmp_path: Path, clock: Clock) -> None:
    for index in range(30):
        api.add_node(f"storm-{index:02d}")
    remediator = make(api, tmp_path, clock, STORM_POLICY)
    notify(remediator, *storm(30))
    remediator.run_once()
    seen = [len(tainted_nodes(api))]
    run_minutes(remediator, clock, api, 4, seen)
    assert remediator.breaker.is_open and remediator.metrics.breaker_open._value.get() == 1
    notify(remediator, *storm(30, "resolved", "2024-05-01T12:05:00Z"))
    run_minutes(remediator, clock, api, 15, seen)  # the three tainted ones wait out the 10m cooldown
    assert tainted_nodes(api) == set()
    patches_after_resolve = len(api.writes("PATCH"))
    run_minutes(remediator, clock, api, 120, seen, step=5)  # two hourly windows roll: nothing held is left to land
    assert max(seen) == 3 and len(ever_tainted(api)) == 3
    assert len(api.writes("PATCH")) == patches_after_resolve
    assert reasons(api).count(REASON_DROPPED) == 27
    assert metric(remediator, "taint", "dropped") == 27
    assert remediator.metrics.held.labels("max_nodes_per_hour")._value.get() == 0


def test_storm_that_stays_firing_taints_at_most_the_limit_until_a_person_closes_the_breaker(
        api: FakeNodeApiServer, tmp_path: Path, clock: Clock) -> None:
    for index in range(30):
        api.add_node(f"storm-{index:02d}")
    remediator = make(api, tmp_path, clock, STORM_POLICY)
    notify(remediator, *storm(30))
    remediator.run_once()
    seen = [len(tainted_nodes(api))]
    run_minutes(remediator, clock, api, 150, seen, step=5)  # the rolling window empties twice; the breaker stays open
    assert max(seen) == 3 and len(ever_tainted(api)) == 3
    assert reasons(api).count(REASON_BREAKER_OPEN) == 1
    [opened] = [e for e in api.event_list() if e["reason"] == REASON_BREAKER_OPEN]
    assert "until a person closes it (POST /breaker/close)" in opened["message"]
    assert remediator.metrics.breaker_open._value.get() == 1

    assert remediator.close_breaker("test") is True  # a person looked and decided the alarms are real
    remediator.run_once()
    assert len(tainted_nodes(api)) == 6  # the hourly limit applies again: three more, then it opens again
    assert remediator.breaker.is_open
    assert remediator.close_breaker("test") is True and remediator.close_breaker("test") is False


def test_a_held_change_is_dropped_when_its_alert_resolves(api: FakeNodeApiServer, tmp_path: Path,
                                                          clock: Clock) -> None:
    """The field report: max_nodes_per_hour 1, node-b held, its alert resolves 5 min later, tainted 66 min in."""
    policy = {"mode": "enforce", "limits": {"cooldown": "0s", "max_nodes_per_hour": 1, "max_tainted_percent": 100}}
    remediator = make(api, tmp_path, clock, policy)
    notify(remediator, alert("node-a"), alert("node-b", uuid="GPU-b"))
    remediator.run_once()
    assert taint(api, "node-a") is not None and taint(api, "node-b") is None
    clock.advance(minutes=5)
    notify(remediator, alert("node-b", uuid="GPU-b", status="resolved", ends="2024-05-01T12:05:00Z"))
    remediator.run_once()
    clock.advance(minutes=61)
    remediator.close_breaker("test")  # even a closed breaker has nothing of node-b's left to apply
    remediator.run_once()
    assert taint(api, "node-b") is None
    assert reasons(api, "node-b") == ["GpuXidFatal", REASON_BREAKER_OPEN, REASON_SUPPRESSED, REASON_DROPPED]
    [dropped] = [e for e in api.event_list() if e["reason"] == REASON_DROPPED]
    assert "GpuXidFatal for GPU 3 (GPU-b) resolved while held by max_nodes_per_hour" in dropped["message"]


def test_every_transition_logs_one_line_with_the_alert_fingerprint(api: FakeNodeApiServer, tmp_path: Path,
                                                                   clock: Clock,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    policy = {"mode": "enforce", "alerts": {"GpuXidFatal": {"untaint_after": "0s"}},
              "limits": {"cooldown": "0s", "max_tainted_percent": 100}}
    remediator = make(api, tmp_path, clock, policy)
    caplog.set_level("INFO", logger="gpu_pod_exporter.remediate")
    notify(remediator, alert(fingerprint="fp-1234"))
    remediator.run_once()
    notify(remediator, alert(fingerprint="fp-1234", status="resolved", ends="2024-05-01T12:00:00Z"))
    clock.advance(seconds=1)
    remediator.run_once()
    lines = [r for r in caplog.records if r.getMessage() == "remediation transition"]
    fields = [r.fields for r in lines]  # type: ignore[attr-defined]
    assert [(f["event"], f["state"], f["fingerprints"], f["node"]) for f in fields] == [
        (REASON_TAINTED, "quarantined", "fp-1234", "node-a"), (REASON_UNTAINTED, "healthy", "fp-1234", "node-a")]
    assert reasons(api, "node-a") == ["GpuXidFatal", REASON_TAINTED, REASON_UNTAINTED]


def test_alerts_of_another_cluster_are_ignored_when_the_cluster_is_set(api: FakeNodeApiServer, tmp_path: Path,
                                                                       clock: Clock) -> None:
    remediator = make(api, tmp_path, clock, {**ENFORCE, "cluster": "prod-a"})
    counts = notify(remediator, alert("node-a", cluster="prod-b"), alert("node-b", uuid="GPU-b"),
                    alert("node-c", uuid="GPU-c", cluster="prod-a"))
    assert counts == {"new": 1, "repeat": 0, "ignored": 2, "unusable": 0}
    remediator.run_once()
    assert tainted_nodes(api) == {"node-c"}
    unscoped = make(api, tmp_path, clock, ENFORCE)  # no cluster set: one Alertmanager per cluster, all are ours
    assert notify(unscoped, alert("node-a", cluster="prod-b"))["new"] == 1


def test_a_node_level_alert_without_a_uuid_marks_the_node(api: FakeNodeApiServer, tmp_path: Path,
                                                          clock: Clock) -> None:
    remediator = make(api, tmp_path, clock, {**ENFORCE, "alerts": {"GpuNodeFabricDown": None}})
    node_level = alert("node-a", name="GpuNodeFabricDown")
    del node_level["labels"]["UUID"], node_level["labels"]["gpu"]
    assert notify(remediator, node_level)["new"] == 1
    remediator.run_once()
    assert taint(api, "node-a") == {"key": TAINT_KEY, "value": "node", "effect": "NoSchedule"}
    context = [e for e in api.event_list() if e["reason"] == "GpuNodeFabricDown"]
    assert "the node as a whole (the alert names no GPU UUID) on node node-a" in context[0]["message"]


# -- the drain: Eviction API, PodDisruptionBudgets (429), dry-run plan ----------------------------------------

DRAIN_POLICY: dict[str, Any] = {**ENFORCE, "drain": {"mode": "evict", "namespaces": {"batch": "allow-completion"},
                                                     "deadline": "30m"}}


def drain_node(api: FakeNodeApiServer) -> None:
    api.add_node("node-d")
    api.add_pod("ml", "on-gpu-3", "node-d", owner_kind="ReplicaSet")
    api.add_pod("ml", "on-gpu-5", "node-d", owner_kind="ReplicaSet")  # a healthy GPU: stays
    api.add_pod("batch", "job-on-gpu-3", "node-d", owner_kind="Job")
    api.add_pod("kube-system", "gpu-agent", "node-d", owner_kind="DaemonSet")
    api.add_pod("ml", "bare-on-gpu-3", "node-d")  # unmanaged


def gpu3_alerts(status: str = "firing") -> list[dict[str, Any]]:
    pods = [("ml", "on-gpu-3"), ("batch", "job-on-gpu-3"), ("kube-system", "gpu-agent"), ("ml", "bare-on-gpu-3")]
    return [alert("node-d", uuid="GPU-d3", status=status, fingerprint=f"fp-{name}", pod=name, namespace=namespace)
            for namespace, name in pods]


def pods_on(api: FakeNodeApiServer, node: str) -> set[str]:
    return {f"{ns}/{name}" for (ns, name), obj in api.pods.items() if obj["spec"]["nodeName"] == node}


def test_the_drain_evicts_only_pods_on_the_failed_gpu_and_backs_off_while_a_pdb_refuses(
        api: FakeNodeApiServer, tmp_path: Path, clock: Clock) -> None:
    drain_node(api)
    api.block_evictions("ml", "on-gpu-3", 2)  # its PodDisruptionBudget allows no disruption yet
    remediator = make(api, tmp_path, clock, DRAIN_POLICY)
    notify(remediator, *gpu3_alerts())
    remediator.run_once()
    assert taint(api, "node-d") is not None
    evictions = [r for r in api.requests if r.path.endswith("/eviction")]
    assert [(r.path, r.status) for r in evictions] == [("/api/v1/namespaces/ml/pods/on-gpu-3/eviction", 429)]
    assert evictions[0].body["apiVersion"] == "policy/v1" and evictions[0].body["kind"] == "Eviction"
    remediator.run_once()  # within the backoff window: no new attempt
    assert len([r for r in api.requests if r.path.endswith("/eviction")]) == 1
    for _ in range(4):  # windows 5-10 s, then 10-20 s: at most one attempt each
        clock.advance(seconds=20)
        remediator.run_once()
    assert "ml/on-gpu-3" not in pods_on(api, "node-d")
    statuses = [r.status for r in api.requests if r.path == "/api/v1/namespaces/ml/pods/on-gpu-3/eviction"]
    assert statuses == [429, 429, 201]
    assert metric(remediator, "evict", "deferred") == 2 and metric(remediator, "evict", "applied") == 1
    assert reasons(api, "on-gpu-3")[-1] == REASON_EVICTED
    assert pods_on(api, "node-d") == {"ml/on-gpu-5", "batch/job-on-gpu-3", "kube-system/gpu-agent",
                                      "ml/bare-on-gpu-3"}
    assert REASON_DRAINED not in reasons(api, "node-d")  # the batch job may still complete
    clock.advance(minutes=31)
    remediator.run_once()
    assert pods_on(api, "node-d") == {"ml/on-gpu-5", "kube-system/gpu-agent", "ml/bare-on-gpu-3"}
    [drained] = [e for e in api.event_list() if e["reason"] == REASON_DRAINED]
    assert "DaemonSet pod: never evicted" in drained["message"] and "unmanaged pod" in drained["message"]
    evicted_paths = {r.path for r in api.requests if r.path.endswith("/eviction")}
    assert evicted_paths == {"/api/v1/namespaces/ml/pods/on-gpu-3/eviction",
                             "/api/v1/namespaces/batch/pods/job-on-gpu-3/eviction"}


def test_dry_run_prints_the_drain_plan_and_evicts_nothing(api: FakeNodeApiServer, tmp_path: Path,
                                                          clock: Clock) -> None:
    drain_node(api)
    remediator = make(api, tmp_path, clock, {**DRAIN_POLICY, "mode": "dry-run"})
    notify(remediator, *gpu3_alerts())
    remediator.run_once()
    remediator.run_once()
    assert not [r for r in api.requests if r.path.endswith("/eviction")]
    plans = [e["message"] for e in api.event_list() if "would drain" in e["message"]]
    assert len(plans) == 1
    assert "ml/on-gpu-3: evict (drain mode evict (drain.mode))" in plans[0]
    assert "batch/job-on-gpu-3: wait (allowed to complete until 2024-05-01 12:30:00 UTC (namespace batch))" \
        in plans[0]
    assert "kube-system/gpu-agent: skip (DaemonSet pod: never evicted)" in plans[0]
    assert "ml/on-gpu-5: skip (not on a failed GPU)" in plans[0]


# -- the state machine: quarantined, draining, repair requested, validating, healthy again ----------------------

LIFECYCLE_POLICY: dict[str, Any] = {
    "mode": "enforce", "alerts": {"GpuXidFatal": {"untaint_after": "10m"}},
    "limits": {"cooldown": "0s", "max_tainted_percent": 100},
    "drain": {"mode": "evict"}, "repair_request": True,
    "validation": {"image": "registry.example/gpu-diag:1", "command": ["dcgmi", "diag", "-r", "2"]}}


def phase(api: FakeNodeApiServer, node: str) -> str | None:
    raw = api.node(node)["metadata"]["annotations"].get(PHASE_ANNOTATION)
    return json.loads(raw)["phase"] if raw else None


def xid_on_gpu3(status: str = "firing") -> dict[str, Any]:
    return alert("node-d", uuid="GPU-d3", status=status, fingerprint="fp-xid79", xid="79", pod="on-gpu-3",
                 namespace="ml", ends="2024-05-01T12:05:00Z" if status == "resolved" else None)


def test_a_fatal_xid_goes_through_every_state_and_the_node_is_readmitted_after_validation(
        api: FakeNodeApiServer, tmp_path: Path, clock: Clock) -> None:
    drain_node(api)
    remediator = make(api, tmp_path, clock, LIFECYCLE_POLICY)
    notify(remediator, xid_on_gpu3())
    remediator.run_once()
    assert taint(api, "node-d") == {"key": TAINT_KEY, "value": "3", "effect": "NoSchedule"}
    assert "ml/on-gpu-3" not in pods_on(api, "node-d") and "ml/on-gpu-5" in pods_on(api, "node-d")
    assert phase(api, "node-d") == "repair-requested"
    [request] = api.objects_of("gpurepairrequests")
    assert request["apiVersion"] == "remediation.gpu-pod-exporter.io/v1alpha1"
    assert request["kind"] == "GpuRepairRequest"
    assert request["spec"]["nodeName"] == "node-d"
    assert request["spec"]["gpus"] == [{"uuid": "GPU-d3", "index": "3"}]
    assert request["spec"]["evidence"] == [{"alert": "GpuXidFatal", "fingerprint": "fp-xid79",
                                            "since": "2024-05-01T11:59:00Z", "xid": "79"}]

    clock.advance(minutes=5)
    notify(remediator, xid_on_gpu3("resolved"))
    remediator.run_once()
    assert taint(api, "node-d") is not None and api.objects_of("jobs") == []  # the hold has not passed
    clock.advance(minutes=11)
    remediator.run_once()
    [job] = api.objects_of("jobs")
    assert phase(api, "node-d") == "validating" and taint(api, "node-d") is not None
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["nodeName"] == "node-d" and pod_spec["containers"][0]["image"] == "registry.example/gpu-diag:1"
    assert pod_spec["containers"][0]["command"] == ["dcgmi", "diag", "-r", "2"]
    assert {"key": TAINT_KEY, "operator": "Exists"} in pod_spec["tolerations"]
    clock.advance(seconds=10)
    remediator.run_once()  # the Job is still running: the node stays out
    assert taint(api, "node-d") is not None

    api.set_object_status("jobs", job["metadata"]["name"], {"succeeded": 1, "conditions": [
        {"type": "Complete", "status": "True"}]})
    clock.advance(seconds=10)
    remediator.run_once()
    node = api.node("node-d")
    assert taint(api, "node-d") is None and PHASE_ANNOTATION not in node["metadata"]["annotations"]
    [condition] = [c for c in node["status"]["conditions"] if c["type"] == "UnhealthyGPU"]
    assert condition["status"] == "False"
    assert reasons(api, "node-d") == ["GpuXidFatal", REASON_TAINTED, REASON_DRAINED, REASON_REPAIR_REQUESTED,
                                      REASON_VALIDATING, REASON_VALIDATED, REASON_UNTAINTED]


def test_a_failed_validation_keeps_the_node_out(api: FakeNodeApiServer, tmp_path: Path, clock: Clock) -> None:
    drain_node(api)
    remediator = make(api, tmp_path, clock, LIFECYCLE_POLICY)
    notify(remediator, xid_on_gpu3())
    remediator.run_once()
    notify(remediator, xid_on_gpu3("resolved"))
    clock.advance(minutes=16)
    remediator.run_once()
    [job] = api.objects_of("jobs")
    api.set_object_status("jobs", job["metadata"]["name"], {"failed": 1})
    for _ in range(3):
        clock.advance(minutes=10)
        remediator.run_once()
    assert taint(api, "node-d") is not None and phase(api, "node-d") == "repair-requested"
    [failed] = [e for e in api.event_list() if e["reason"] == REASON_VALIDATION_FAILED]
    assert failed["type"] == "Warning" and "failed: the node stays quarantined" in failed["message"]
    assert len(api.objects_of("jobs")) == 1


def test_a_restarted_remediator_carries_on_the_episode_from_the_node(api: FakeNodeApiServer, tmp_path: Path,
                                                                     clock: Clock) -> None:
    drain_node(api)
    first = make(api, tmp_path, clock, LIFECYCLE_POLICY)
    notify(first, xid_on_gpu3())
    first.run_once()
    assert phase(api, "node-d") == "repair-requested"
    requests_before = len(api.writes("POST", "/apis/"))

    clock.advance(minutes=1)
    second = make(api, tmp_path, clock, LIFECYCLE_POLICY)  # a new process: nothing in memory
    notify(second, xid_on_gpu3())  # Alertmanager's next repeat
    second.run_once()
    assert len(api.writes("POST", "/apis/")) == requests_before  # no second hand-off
    notify(second, xid_on_gpu3("resolved"))  # ended 12:05, hold 10m
    clock.advance(minutes=15)
    second.run_once()
    [job] = api.objects_of("jobs")
    api.set_object_status("jobs", job["metadata"]["name"], {"succeeded": 1})
    clock.advance(seconds=10)
    second.run_once()
    node = api.node("node-d")
    assert taint(api, "node-d") is None and PHASE_ANNOTATION not in node["metadata"]["annotations"]


# -- issue 41: `remediate status` is the state machine as it is ------------------------------------------------

def status_of(api: FakeNodeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """``gpu-pod-exporter remediate status`` as an operator runs it: node -> its line."""
    capsys.readouterr()
    assert remediate_main(["status", "--kubeconfig", str(api.write_kubeconfig(tmp_path / "status-kubeconfig"))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NODE", "STATE", "SINCE", "WHY"]
    return {line.split()[0]: line for line in lines[1:]}


def drain_gpu3(api: FakeNodeApiServer, tmp_path: Path, clock: Clock, policy: dict[str, Any]) -> Remediator:
    """The fatal Xid on node-d's GPU 3 (whose pods the alerts name), one pass."""
    remediator = make(api, tmp_path, clock, policy)
    notify(remediator, *gpu3_alerts())
    remediator.run_once()
    return remediator


def test_status_says_draining_and_names_the_pod_disruption_budget_that_blocks_it(
        api: FakeNodeApiServer, tmp_path: Path, clock: Clock, capsys: pytest.CaptureFixture[str]) -> None:
    drain_node(api)
    api.block_evictions("ml", "on-gpu-3", 2, budget="trainer")  # minAvailable reached: 429 naming the budget
    remediator = drain_gpu3(api, tmp_path, clock, {**DRAIN_POLICY, "repair_request": True})
    line = status_of(api, tmp_path, capsys)["node-d"]
    assert line.split()[1] == "draining", line
    assert "ml/on-gpu-3: eviction refused by PodDisruptionBudget ml/trainer (" in line
    assert "The disruption budget trainer needs 1 healthy pods" in line
    assert "batch/job-on-gpu-3: allowed to complete until 2024-05-01 12:30:00 UTC" in line
    assert REASON_DRAINED not in reasons(api, "node-d") and api.objects_of("gpurepairrequests") == []

    for _ in range(4):  # the budget allows it: evicted; only the batch job (allowed to complete) holds the drain
        clock.advance(seconds=20)
        remediator.run_once()
    line = status_of(api, tmp_path, capsys)["node-d"]
    assert line.split()[1] == "draining" and "PodDisruptionBudget" not in line
    assert "batch/job-on-gpu-3: allowed to complete until" in line

    clock.advance(minutes=31)
    remediator.run_once()
    line = status_of(api, tmp_path, capsys)["node-d"]
    assert line.split()[1] == "repair-requested", line
    assert reasons(api, "node-d")[-2:] == [REASON_DRAINED, REASON_REPAIR_REQUESTED]


def test_a_drain_without_repair_ends_in_drained(api: FakeNodeApiServer, tmp_path: Path, clock: Clock,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    drain_node(api)
    drain_gpu3(api, tmp_path, clock, {**DRAIN_POLICY, "drain": {"mode": "evict"}})
    line = status_of(api, tmp_path, capsys)["node-d"]
    assert line.split()[1] == "drained", line
    assert "Drained: no pod on the failed GPUs is left to evict" in line
    assert "stays quarantined until its alerts resolve" in line


def test_dry_run_with_drain_reports_the_whole_plan_including_the_repair_request(
        api: FakeNodeApiServer, tmp_path: Path, clock: Clock) -> None:
    drain_node(api)
    remediator = make(api, tmp_path, clock, {**LIFECYCLE_POLICY, "mode": "dry-run"})
    notify(remediator, xid_on_gpu3())
    remediator.run_once()
    remediator.run_once()
    plan = [e["message"] for e in api.event_list() if e["reason"] == REASON_DRY_RUN]
    assert len(plan) == 3, plan
    assert plan[0].startswith(f"Mode dry-run: would taint {TAINT_KEY}=3:NoSchedule")
    assert plan[1].startswith("Mode dry-run: would drain: ") and "ml/on-gpu-3: evict" in plan[1]
    assert plan[2].startswith("Mode dry-run: would create GpuRepairRequest node-d-")
    assert "for GPUs 3 (GPU-d3) (evidence: GpuXidFatal)" in plan[2]
    assert api.writes("PATCH") == [] and api.writes("POST", "/apis/") == []
    assert not [r for r in api.requests if r.path.endswith("/eviction")]


def test_an_alert_about_a_node_that_does_not_exist_writes_nothing(api: FakeNodeApiServer, tmp_path: Path,
                                                                  clock: Clock) -> None:
    remediator = make(api, tmp_path, clock, {**LIFECYCLE_POLICY, "mode": "enforce"})
    ghost = alert("node-ghost", xid="79", pod="trainer-0", namespace="ml", fingerprint="fp-ghost")
    held_then_resolved = alert("node-ghost-2", uuid="GPU-g2", fingerprint="fp-ghost-2")
    notify(remediator, ghost, held_then_resolved)
    notify(remediator, {**held_then_resolved, "status": "resolved", "endsAt": "2024-05-01T12:00:00Z"})
    for _ in range(3):
        remediator.run_once()
        clock.advance(minutes=20)
    assert api.writes() == []
    assert api.event_list() == []


def test_an_unlabelled_alert_on_a_shared_gpu_is_not_called_drained(api: FakeNodeApiServer, tmp_path: Path,
                                                                    clock: Clock,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Time-slicing in the exporter's default mode: the Xid series of a shared GPU carries no pod labels, and
    the API server does not say which pods hold which GPU. Nothing is evicted blindly, nothing called drained."""
    api.add_node("node-s")
    api.add_pod("ml", "shared-a", "node-s", owner_kind="ReplicaSet")
    api.add_pod("ml", "shared-b", "node-s", owner_kind="ReplicaSet")
    remediator = make(api, tmp_path, clock, {**DRAIN_POLICY, "repair_request": True})
    notify(remediator, alert("node-s", uuid="GPU-s0", gpu="0"))
    remediator.run_once()
    assert taint(api, "node-s") is not None
    assert not [r for r in api.requests if r.path.endswith("/eviction")]
    assert REASON_DRAINED not in reasons(api, "node-s") and api.objects_of("gpurepairrequests") == []
    line = status_of(api, tmp_path, capsys)["node-s"]
    assert line.split()[1] == "draining", line
    assert "cannot tell which pods hold GPU 0 (GPU-s0): no alert about it names a pod" in line
    assert "may hold it: ml/shared-a, ml/shared-b" in line

    # With --kubernetes-virtual-gpus the exporter repeats the series per sharing pod: one alert names each.
    notify(remediator, *[alert("node-s", uuid="GPU-s0", gpu="0", fingerprint=f"fp-{pod}", pod=pod, namespace="ml",
                               vgpu=str(index)) for index, pod in enumerate(("shared-a", "shared-b"))])
    clock.advance(seconds=20)
    remediator.run_once()
    assert pods_on(api, "node-s") == set()
    assert REASON_DRAINED in reasons(api, "node-s") and len(api.objects_of("gpurepairrequests")) == 1


def test_an_unlabelled_alert_on_a_node_without_gpu_pods_is_drained_at_once(api: FakeNodeApiServer, tmp_path: Path,
                                                                           clock: Clock) -> None:
    api.add_node("node-idle")
    api.add_pod("kube-system", "gpu-agent", "node-idle", owner_kind="DaemonSet")
    remediator = make(api, tmp_path, clock, DRAIN_POLICY)
    notify(remediator, alert("node-idle", uuid="GPU-i0", gpu="0"))
    remediator.run_once()
    assert REASON_DRAINED in reasons(api, "node-idle")
    assert not [r for r in api.requests if r.path.endswith("/eviction")]
