"""The policy file: defaults that are safe, every key checked, every mistake named by file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.remediate.policy import DEFAULT_ALERTS, AlertPolicy, PolicyError, load_policy


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_without_a_file_the_remediator_only_reports_for_the_four_default_alerts() -> None:
    policy = load_policy(None)
    assert policy.mode == "dry-run" and not policy.changes_nodes
    assert set(policy.alerts) == set(DEFAULT_ALERTS) == {"GpuXidFatal", "GpuFallenOffBus", "GpuRowRemapFailure",
                                                          "GpuEccUncorrectableError"}
    for alert in policy.alerts.values():
        assert alert.actions == {"event", "taint", "annotate", "condition"}  # cordon is opt-in
        assert alert.taint_effect == "NoSchedule" and alert.untaint_after_s is None
    assert (policy.limits.cooldown_s, policy.limits.max_nodes_per_hour, policy.limits.max_tainted_percent) == \
        (600.0, 3, 10.0)


def test_a_file_sets_mode_alerts_and_limits(tmp_path: Path) -> None:
    policy = load_policy(write(tmp_path, """\
mode: enforce
node_label: node
alerts:
  GpuXidFatal:
    actions: [event, taint, cordon]
    taint_effect: NoExecute
    untaint_after: 1h30m
  GpuFallenOffBus:
limits:
  cooldown: 5m
  max_nodes_per_hour: 10
  max_tainted_percent: 25.5
  gpu_resources: [nvidia.com/, amd.com/gpu]
"""))
    assert policy.mode == "enforce" and policy.node_label == "node"
    assert policy.alerts["GpuXidFatal"] == AlertPolicy(frozenset({"event", "taint", "cordon"}), "NoExecute", 5400.0)
    assert policy.alerts["GpuFallenOffBus"] == AlertPolicy()
    assert set(policy.alerts) == {"GpuXidFatal", "GpuFallenOffBus"}  # the allowlist is replaced, not merged
    assert (policy.limits.cooldown_s, policy.limits.max_nodes_per_hour, policy.limits.max_tainted_percent,
            policy.limits.gpu_resources) == (300.0, 10, 25.5, ("nvidia.com/", "amd.com/gpu"))


def test_the_mode_flag_wins_over_the_file(tmp_path: Path) -> None:
    assert load_policy(write(tmp_path, "mode: enforce\n"), "dry-run").mode == "dry-run"
    with pytest.raises(PolicyError, match="--mode: mode: expected one of"):
        load_policy(None, "yolo")


@pytest.mark.parametrize(("text", "expected"), [
    ("mode: enforced\n", ":1: mode: expected one of dry-run, events, enforce"),
    ("modes: enforce\n", ":1: modes: unknown key"),
    ("alerts:\n  GpuXidFatal: {actions: [taint, reboot]}\n", ":2: alerts.GpuXidFatal.actions: unknown action 'reboot'"),
    ("alerts:\n  GpuXidFatal:\n    taint_effect: NoExec\n",
     ":3: alerts.GpuXidFatal.taint_effect: expected one of NoSchedule, PreferNoSchedule, NoExecute"),
    ("alerts:\n  GpuXidFatal: {untaint_after: soon}\n", ":2: alerts.GpuXidFatal.untaint_after: invalid duration"),
    ("alerts:\n  GpuXidFatal: {hold: 1m}\n", ":2: alerts.GpuXidFatal.hold: unknown key"),
    ("alerts: {}\n", ":1: alerts: the allowlist is empty"),
    ("alerts:\n  Gpu-Xid: {}\n", ":2: alerts.Gpu-Xid: expected an alert name"),
    ("limits:\n  max_tainted_percent: 150\n", ":2: limits.max_tainted_percent: expected a percentage"),
    ("limits:\n  max_nodes_per_hour: -1\n", ":2: limits.max_nodes_per_hour: expected a whole number"),
    ("limits:\n  cooldown: 10 minutes\n", ":2: limits.cooldown: invalid duration"),
    ("mode: [enforce\n", ":2: yaml: not valid YAML"),
    ("- mode\n", ":1: policy: expected a mapping"),
])
def test_a_mistake_names_the_file_line_and_key(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert str(caught.value).startswith(path)
    assert expected in str(caught.value)


def test_an_unreadable_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(str(tmp_path / "missing.yaml"))
