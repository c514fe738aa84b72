"""Helpers for the remediation tests: the remediator as a process, a fake cluster built from scenarios."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from simulator.kube_scenario import parse_kubernetes_section
from simulator.scenario import load_scenario
from tests.remediate.fakenodeapi import FakeNodeApiServer
from tests.support.exporter_process import parse_samples
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_for
from tests.support.ports import free_port
from tests.support.processes import stop_process

FIXTURES = Path(__file__).resolve().parent / "fixtures"
DEFAULT_COUNTERS = REPO_ROOT / "exporter" / "metrics" / "data" / "default-counters.csv"
XID_TOTAL_ROW = "DCGM_EXP_XID_ERRORS_TOTAL, counter, Total number of XID errors since the exporter started."


def counters_for_xid_alerts(path: Path) -> tuple[Path, bool]:
    """The exporter's default counters, plus ``DCGM_EXP_XID_ERRORS_TOTAL`` when they lack it.

    GpuXidFatal reads ``DCGM_EXP_XID_ERRORS_TOTAL``; returns (the CSV, whether the row was added) so
    a test can say so. Everything else is the default set, as a user runs it.
    """
    text = DEFAULT_COUNTERS.read_text(encoding="utf-8")
    names = {line.split(",", 1)[0].strip() for line in text.splitlines() if line.strip() and not line.startswith("#")}
    added = "DCGM_EXP_XID_ERRORS_TOTAL" not in names
    path.write_text(text.rstrip("\n") + ("\n" + XID_TOTAL_ROW if added else "") + "\n", encoding="utf-8")
    return path, added


def add_scenario_node(api: FakeNodeApiServer, scenario: Path, node: str | None = None) -> list[tuple[str, str]]:
    """Add the scenario's node (renamed to ``node``) with its GPUs and pods; returns the pods (namespace, name)."""
    loaded = load_scenario(str(scenario))
    assert loaded.kubernetes is not None, scenario
    section = parse_kubernetes_section(loaded.kubernetes.node, loaded.kubernetes.source)
    name = node or section.node
    api.add_node(name, gpus=len(loaded.gpus))
    for pod in section.pods:
        api.add_pod(pod.namespace, pod.name, name, uid=pod.uid)
    return [(pod.namespace, pod.name) for pod in section.pods]


def write_policy(path: Path, policy: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(policy), sort_keys=False), encoding="utf-8")
    return path


class RemediatorProcess:
    """``python -m exporter remediate`` against a fake API server, listening on a free local port."""

    def __init__(self, workdir: Path, api: FakeNodeApiServer, *, policy: Mapping[str, Any] | None = None,
                 token: str | None = "webhook-token", extra: Sequence[str] = ()) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.api = api
        self.token = token
        self.port = free_port()
        args = ["--kubeconfig", str(api.write_kubeconfig(workdir / "kubeconfig")),
                "--address", f"127.0.0.1:{self.port}", "--recheck-interval", "1", *extra]
        if policy is not None:
            args += ["--config", str(write_policy(workdir / "policy.yaml", policy))]
        if token is not None:
            (workdir / "token").write_text(token + "\n", encoding="utf-8")
            args += ["--bearer-token-file", str(workdir / "token")]
        self.log_path = workdir / "remediate.log"
        self._log = self.log_path.open("wb")
        environ = {**os.environ, "PYTHONUNBUFFERED": "1"}
        environ.pop("KUBECONFIG", None)
        self.process = subprocess.Popen([sys.executable, "-m", "exporter", "remediate", *args], cwd=REPO_ROOT,
                                        env=environ, stdout=self._log, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/alerts"

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request(method, path, body=body, headers=dict(headers or {}))
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def post(self, payload: bytes | Mapping[str, Any], *, authorized: bool = True) -> tuple[int, bytes]:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json", **(self.auth() if authorized else {})}
        return self.request("POST", "/alerts", body, headers)

    def wait_healthy(self, deadline_s: float = 60.0) -> None:
        def healthy() -> bool:
            self.assert_running()
            try:
                status, body = self.request("GET", "/health")
            except OSError:
                return False
            return status == 200 and b"synced" in body

        try:
            wait_for(healthy, deadline_s, "the remediator to answer /health with the API synced")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nremediate log:\n{self.log()}") from None

    def samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        status, body = self.request("GET", "/metrics")
        assert status == 200, body
        return {tuple(sorted(labels.items())): value for sample, labels, value in parse_samples(body.decode())
                if sample == name}

    def value(self, name: str, **labels: str) -> float:
        return self.samples(name).get(tuple(sorted(labels.items())), 0.0)

    def assert_running(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"remediate exited with {self.process.returncode}:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> int:
        code = stop_process(self.process, grace_s=15)
        self._log.close()
        return code
