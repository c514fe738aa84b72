"""promtool accepts the rule files, their unit tests pass, and the unit tests do catch a broken rule: under
Debian's promtool 2.42 and under Prometheus 3's."""

import shutil
from pathlib import Path

import pytest

from tests.rules.promtool_runner import ENGINE_IDS, ENGINES, RULE_FILES, RULE_TEST_FILES, RULES_DIR, run_promtool

each_engine = pytest.mark.parametrize("engine", ENGINES, ids=ENGINE_IDS)


def test_there_are_rule_files_and_rule_tests() -> None:
    assert {p.name for p in RULE_FILES} == {"gpu-pod-exporter-alerts.yaml", "gpu-pod-exporter-recording.yaml"}
    assert len(RULE_TEST_FILES) >= 4


@each_engine
def test_promtool_check_rules_is_clean(engine: str) -> None:
    result = run_promtool("check", "rules", *RULE_FILES, engine=engine)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert output.count("SUCCESS") == len(RULE_FILES), output
    assert "WARNING" not in output.upper(), output


@each_engine
def test_promtool_unit_tests_pass(engine: str) -> None:
    result = run_promtool("test", "rules", *RULE_TEST_FILES, engine=engine)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert output.count("SUCCESS") == len(RULE_TEST_FILES), output


# Under the oldest promtool only: these prove the unit tests' own power, which does not depend on the
# engine that runs them (both run every unit test above), and each run costs 15 to 40 s.
@pytest.mark.parametrize(("old", "new", "broken_alert"), [
    # a threshold change is noticed
    ("expr: DCGM_FI_DEV_GPU_TEMP > 85", "expr: DCGM_FI_DEV_GPU_TEMP > 95", "GpuTemperatureHigh"),
    # a shorter `for` is noticed (the test checks silence just before it elapses)
    ("        for: 30m\n        labels:\n          severity: info",
     "        for: 29m\n        labels:\n          severity: info",
     "GpuAllocatedButIdle"),
    # memory nearly full judged on the sample alone misses the spikes between scrapes
    ("(DCGM_EXP_FB_USED_PEAK or DCGM_FI_DEV_FB_USED)", "DCGM_FI_DEV_FB_USED", "GpuMemoryNearlyFull"),
])
def test_the_unit_tests_fail_when_a_rule_changes(
    tmp_path: Path, old: str, new: str, broken_alert: str
) -> None:
    copy = tmp_path / "rules"
    shutil.copytree(RULES_DIR, copy)
    alerts = copy / "gpu-pod-exporter-alerts.yaml"
    text = alerts.read_text(encoding="utf-8")
    assert text.count(old) == 1
    alerts.write_text(text.replace(old, new), encoding="utf-8")
    result = run_promtool("test", "rules", *sorted((copy / "tests").glob("*.yaml")), cwd=copy)
    assert result.returncode != 0
    assert f"alertname: {broken_alert}" in result.stdout + result.stderr
