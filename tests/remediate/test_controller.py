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

from exporter.remediate.alerts import parse_notification
from exporter.remediate.controller import Remediator
from exporter.remediate.events import (
    REASON_DEFERRED,
    REASON_DRY_RUN,
    REASON_SUPPRESSED,
    REASON_TAINTED,
    REASON_UNTAINTED,
    alert_context,
)
from exporter.remediate.kubeapi import Backoff, KubeApi, load_core_api
from exporter.remediate.nodestate import GPUS_ANNOTATION, TAINT_KEY
from exporter.remediate.policy import load_policy
from exporter.remediate.selfmetrics import RemediationMetrics
from exporter.simulate.fakenodeapi import FakeNodeApiServer

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
    return Remediator(loaded, KubeApi(core, Backoff(base_s=0.01, cap_s=0.02, attempts=3)),
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
    assert len(api.event_list()) == events_before + 2  # only node-b's: its alert and "suppressed"
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
    assert "on node node-a reported" in alert_context(renamed["labels"], {}, [])  # the pods' event text


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
