import json
import subprocess
from typing import Any

import pytest

from bench import procstat, runner
from bench.loadgen import SCRAPE_TIMEOUT_S


def _phase_with(monkeypatch: pytest.MonkeyPatch, latencies: list[float], failures: dict[str, int]) -> dict[str, Any]:
    """``runner._load_phase`` on a load generator that reported ``latencies`` and ``failures``."""
    answer = {"latencies_s": latencies, "failures": failures, "wall_s": 1.0, "cpu_s": 0.1, "bytes_received": 0}
    commands: list[list[str]] = []

    def fake_run(command: list[str], **_: Any) -> subprocess.CompletedProcess[bytes]:
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, json.dumps(answer).encode(), b"")

    monkeypatch.setattr(runner.subprocess, "run", fake_run)
    monkeypatch.setattr(runner.procstat, "cpu_times", lambda pid: procstat.CpuTimes(1.0, 0.0))
    phase = runner._load_phase(1234, 1, runner.QUICK, 0.0, "closed", 64)
    assert commands and commands[0][commands[0].index("--timeout") + 1] == str(SCRAPE_TIMEOUT_S)
    return phase


def test_failed_scrapes_raise_the_phase_percentiles_and_are_reported_beside_them(monkeypatch: pytest.MonkeyPatch):
    phase = _phase_with(monkeypatch, [0.001] * 98, {"timeout": 1, "ECONNRESET": 1})
    assert phase["failed"] == 2
    assert phase["scrapes"] == 98
    assert phase["failed_counted_as_s"] == SCRAPE_TIMEOUT_S
    assert phase["p99_s"] > 1.0  # two of 100 scrapes took the whole timeout: p99 sits among them
    assert phase["max_s"] == SCRAPE_TIMEOUT_S
    assert phase["p50_s"] == pytest.approx(0.001)
    assert phase["successful_p99_s"] == pytest.approx(0.001)  # what leaving them out would have said


def test_a_phase_without_failures_has_the_same_percentiles_either_way(monkeypatch: pytest.MonkeyPatch):
    phase = _phase_with(monkeypatch, [0.001 * n for n in range(1, 101)], {})
    assert phase["failed"] == 0
    assert phase["p99_s"] == pytest.approx(phase["successful_p99_s"])
