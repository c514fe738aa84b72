"""``gpu-pod-exporter remediate``: every input checked before anything listens; a mistake is one line and exit 2."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.remediate.alerts import parse_notification
from exporter.remediate.controller import Remediator
from exporter.remediate.kubeapi import KubeApi, load_core_api
from exporter.remediate.policy import load_policy
from exporter.remediate.selfmetrics import RemediationMetrics
from exporter.tools import TOOLS
from tests.remediate.fakenodeapi import FakeNodeApiServer


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(["remediate", *args])
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_subcommand_is_registered() -> None:
    assert TOOLS["remediate"].module == "exporter.remediate.cli"


def test_help_describes_every_thing_remediate_does(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 42: the help described only Events and taints after drain, repair and device taints came."""
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for promise in ("taint", "cordon", "DeviceTaintRule", "Eviction API", "PodDisruptionBudgets hold",
                    "GpuRepairRequest", "validation", "dry-run", "POST /breaker/close",
                    "gpu-pod-exporter remediate status", "draining and\n                  what blocks it"):
        assert promise in out, promise
    assert max(len(line) for line in out.splitlines()) <= 80


def test_check_config_prints_the_policy_in_force(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "--check-config")
    assert code == 0
    assert "mode: dry-run (from built-in defaults)" in out
    assert "GpuXidFatal: actions annotate, condition, event, taint; taint effect NoSchedule; untaint never" in out
    assert "at most 3 nodes changed per hour, at most 10% of GPU nodes tainted" in out
    policy = tmp_path / "policy.yaml"
    policy.write_text("mode: events\nalerts:\n  GpuFallenOffBus: {untaint_after: 30m}\n", encoding="utf-8")
    code, out, _ = run(capsys, "--config", str(policy), "--mode", "enforce", "--check-config")
    assert code == 0 and "mode: enforce" in out and "GpuFallenOffBus: " in out and "untaint 1800s after resolved" in out
    policy.write_text("cluster: prod-a\ndrain: {mode: evict, namespaces: {batch: allow-completion}}\n"
                      "repair_request: true\nvalidation: {image: registry.example/diag:1}\n", encoding="utf-8")
    code, out, _ = run(capsys, "--config", str(policy), "--check-config")
    assert code == 0
    assert "cluster: only alerts labelled cluster=prod-a" in out
    assert "drain: mode evict, deadline 3600s, namespaces batch=allow-completion, pod label gpu-pod-exporter/drain, " \
        "unmanaged pods left alone" in out
    assert "repair: a GpuRepairRequest per quarantined node" in out
    assert "validation: Job registry.example/diag:1 in gpu-monitoring before re-admission" in out


@pytest.mark.parametrize(("files", "args", "message"), [
    ({"policy.yaml": "mode: [\n"}, ["--config", "{policy.yaml}"], "policy.yaml:2: yaml: not valid YAML"),
    ({"policy.yaml": "limits: {cooldown: forever}\n"}, ["--config", "{policy.yaml}"],
     "policy.yaml:1: limits.cooldown: invalid duration"),
    ({}, ["--bearer-token-file", "{dir}/missing"], "bearer-token-file: cannot read"),
    ({"token": "two words\n"}, ["--bearer-token-file", "{token}"], "expected one token"),
    ({"web.yml": "tls_server_config: {cert_file: /nope.crt, key_file: /nope.key}\n"},
     ["--web-config-file", "{web.yml}"], "tls_server_config.cert_file: cannot read /nope.crt"),
    ({}, ["--address", "9401"], "--address: expected [host]:port"),
    ({}, ["--recheck-interval", "0"], "--recheck-interval: expected a number of seconds > 0"),
    ({"policy.yaml": "drain:\n  mode: drop\n"}, ["--config", "{policy.yaml}"],
     "policy.yaml:2: drain.mode: expected one of none, evict, allow-completion, got 'drop'"),
    ({"policy.yaml": "validation: {namespace: x}\n"}, ["--config", "{policy.yaml}"],
     "policy.yaml:1: validation.image: required"),
    ({"policy.yaml": "cluster: [a]\n"}, ["--config", "{policy.yaml}"], "policy.yaml:1: cluster: expected"),
    ({}, ["--kubeconfig", "{dir}/missing-kubeconfig"], "cannot configure the Kubernetes client from"),
])
def test_a_mistake_is_one_line_and_exit_code_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               files: dict[str, str], args: list[str], message: str) -> None:
    paths = {"dir": str(tmp_path)}
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        paths[name] = str(tmp_path / name)
    def fill(arg: str) -> str:
        for name, path in paths.items():
            arg = arg.replace("{" + name + "}", path)
        return arg

    code, out, err = run(capsys, *(fill(arg) for arg in args))
    assert code == 2
    assert err.startswith("gpu-pod-exporter remediate: error: ") and err.count("\n") == 1, err
    assert message in err
    assert "Traceback" not in err and out == ""


def test_an_unknown_mode_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--mode", "yolo")
    assert code == 2 and "invalid choice: 'yolo'" in err


def test_status_prints_each_node_it_touched_its_state_and_why(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:

    with FakeNodeApiServer() as api:
        for name in ("node-a", "node-b", "node-untouched"):
            api.add_node(name)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        policy_file = tmp_path / "policy.yaml"
        policy_file.write_text("mode: enforce\nrepair_request: true\nlimits: {max_tainted_percent: 100}\n",
                               encoding="utf-8")
        policy = load_policy(str(policy_file))
        remediator = Remediator(policy, KubeApi(load_core_api(str(kubeconfig))), RemediationMetrics("enforce"),
                                clock=lambda: datetime(2024, 5, 1, 12, 0, tzinfo=UTC))
        body = {"version": "4", "status": "firing", "receiver": "r", "groupKey": "g", "alerts": [
            {"status": "firing", "labels": {"alertname": "GpuXidFatal", "Hostname": "node-a", "UUID": "GPU-1",
                                            "gpu": "1", "xid": "79"}, "startsAt": "2024-05-01T11:59:00Z"},
            {"status": "firing", "labels": {"alertname": "GpuFallenOffBus", "Hostname": "node-b", "UUID": "GPU-2",
                                            "gpu": "2"}, "startsAt": "2024-05-01T11:59:00Z"}]}
        remediator.receive(parse_notification(json.dumps(body).encode()))
        remediator.run_once()
        code, out, err = run(capsys, "status", "--kubeconfig", str(kubeconfig))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NODE", "STATE", "SINCE", "WHY"]
    assert len(lines) == 3 and "node-untouched" not in out
    assert lines[1].startswith("node-a") and " repair-requested " in lines[1]
    assert "Handed to repair: GpuRepairRequest node-a-" in lines[1]
    assert "GPU 1 (GPU-1): GpuXidFatal since 2024-05-01T11:59:00Z" in lines[1]
    assert lines[2].startswith("node-b") and "GpuFallenOffBus" in lines[2]


def test_status_without_a_cluster_is_one_line_and_exit_code_1(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    code, out, err = run(capsys, "status", "--kubeconfig", str(tmp_path / "missing"))
    assert code == 1 and out == ""
    assert err.startswith("gpu-pod-exporter remediate: error: cannot configure the Kubernetes client") \
        and err.count("\n") == 1
