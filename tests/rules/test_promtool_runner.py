"""A missing promtool (Debian's 2.42 or Prometheus 3's) skips the rule tests on a laptop but fails them under CI."""

from pathlib import Path

import pytest

from devcluster import build
from tests.rules import promtool_runner


def test_missing_promtool_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true requires it"):
        promtool_runner.promtool()


def test_missing_promtool_skips_with_the_reason_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install prometheus"):
        promtool_runner.promtool()


def test_present_promtool_is_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: f"/opt/bin/{name}")
    assert promtool_runner.promtool() == "/opt/bin/promtool"


def test_prometheus_3_promtool_comes_from_the_platform_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPU_POD_EXPORTER_CACHE", str(tmp_path))
    path = build.binary_path("promtool")
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\n", encoding="utf-8")
    path.chmod(0o755)
    assert promtool_runner.promtool("3") == str(path)


def test_unbuilt_prometheus_3_promtool_skips_saying_how_to_build_it(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    monkeypatch.setenv("GPU_POD_EXPORTER_CACHE", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="scripts/cluster bin promtool"):
        promtool_runner.promtool("3")


def test_unbuildable_prometheus_3_promtool_fails_under_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPU_POD_EXPORTER_CACHE", str(tmp_path))
    monkeypatch.setenv("CI", "true")

    def no_go(name: str) -> None:
        raise build.BuildError("go not found on PATH")

    monkeypatch.setattr(build, "build", no_go)
    with pytest.raises(pytest.fail.Exception, match="CI=true requires it: go not found"):
        promtool_runner.promtool("3")
