"""With --kubernetes-enable-dra the doctor also asks whether the exporter may watch ResourceSlices."""

from __future__ import annotations

import pytest

from tests.doctor.conftest import clean_environment
from tests.doctor.support import FAST, doctor


def test_dra_scenario_checks_resourceslice_access_and_finds_it_granted(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(monkeypatch)
    run = doctor("--simulate", "dra-mixed", "--json", *FAST)
    for verb in ("list", "watch"):
        assert run.row("kubernetes api", f"access {verb} resourceslices")["verdict"] == "ok"


def test_dra_without_the_grant_names_the_chart_value(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(monkeypatch)
    run = doctor("--simulate", "default", "--json", *FAST, "--kubernetes-enable-dra")
    row = run.row("kubernetes api", "access watch resourceslices")
    assert row["verdict"] == "failed" and "kubernetesDRA.enabled" in row["hint"]  # the default ClusterRole lacks it
    assert run.row("kubernetes api", "access watch pods")["verdict"] == "ok"


def test_without_dra_resourceslices_are_not_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(monkeypatch)
    run = doctor("--simulate", "default", "--json", *FAST)
    assert not [row for row in run.rows() if "resourceslices" in row["check"]]
