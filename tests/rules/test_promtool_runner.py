"""A missing promtool skips the rule tests on a laptop but fails them under CI."""

import pytest

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
