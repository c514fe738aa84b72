"""Budget files become alert rules that promtool accepts, and the forecast alert fires when it should."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from exporter.report.budgets import main
from exporter.report.cli import main as report_main
from tests.rules.promtool_runner import REPO_ROOT, promtool

EXAMPLES = REPO_ROOT / "etc" / "chargeback"
H100 = "NVIDIA H100 80GB HBM3"

PRICING = f"default: 1.0\nmodels:\n  {H100}: 2.5\n"
# research: 2 H100s at 2.5 = 5 per hour; its rolling one-hour spend climbs 5/60 a minute for an hour
# (forecast an hour ahead: spend + 5, above 6 from minute 12), then stays at 5 (forecast 5 once the
# last 30 minutes are flat). batch: one A100 at the default 1.0, budget 0.5: spent from minute 30.
BUDGETS = """
window: 1h
step: 1m
lookback: 30m
forecast: 1h
for: 5m
teams:
  research: 6
  serving: 100
  batch: 0.5
"""


def series(team: str, model: str, gpus: int) -> dict[str, str]:
    return {"series": f'namespace_team_model:gpu_fraction:sum{{cluster="east",namespace="{team}-ns",team="{team}",'
                      f'modelName="{model}"}}', "values": f"{gpus}x180"}


def forecast_alert(team: str) -> dict[str, object]:
    return {"exp_labels": {"severity": "warning", "team": team},
            "exp_annotations": {
                "summary": "A team's GPU spend is on course to pass its budget",
                "description": f"Team {team} is forecast to spend more than its budget (USD per 1h, rolling) "
                               "within 1h at the trend of the last 30m."}}


def exceeded_alert(team: str) -> dict[str, object]:
    return {"exp_labels": {"severity": "warning", "team": team},
            "exp_annotations": {"summary": "A team's GPU spend passed its budget",
                                "description": f"Team {team} spent more than its budget (USD per 1h, rolling)."}}


def generate(tmp_path: Path, budgets: str, pricing: str | None) -> Path:
    (tmp_path / "budgets.yaml").write_text(budgets, encoding="utf-8")
    argv = ["--budgets", str(tmp_path / "budgets.yaml"), "-o", str(tmp_path / "budget-rules.yaml")]
    if pricing is not None:
        (tmp_path / "pricing.yaml").write_text(pricing, encoding="utf-8")
        argv += ["--pricing", str(tmp_path / "pricing.yaml")]
    assert main(argv) == 0
    return tmp_path / "budget-rules.yaml"


def test_a_budget_alert_fires_in_a_promtool_test(tmp_path: Path) -> None:
    rules = generate(tmp_path, BUDGETS, PRICING)
    tests = {
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [series("research", H100, 2), series("serving", "NVIDIA A100-SXM4-80GB", 1),
                             series("batch", "NVIDIA A100-SXM4-80GB", 1)],
            "promql_expr_test": [{"expr": "team:gpu_cost_per_hour:budget", "eval_time": "10m", "exp_samples": [
                {"labels": f'team:gpu_cost_per_hour:budget{{team="{team}"}}', "value": value}
                for team, value in (("research", 5), ("serving", 1), ("batch", 1))]}],
            "alert_rule_test": [
                {"eval_time": "20m", "alertname": "GpuTeamBudgetForecastExceeded",
                 "exp_alerts": [forecast_alert("research"), forecast_alert("batch")]},
                {"eval_time": "20m", "alertname": "GpuTeamBudgetExceeded", "exp_alerts": []},
                {"eval_time": "10m", "alertname": "GpuTeamBudgetForecastExceeded",
                 "exp_alerts": [forecast_alert("batch")]},  # research pending, not yet 5 minutes above
                {"eval_time": "100m", "alertname": "GpuTeamBudgetForecastExceeded",
                 "exp_alerts": [forecast_alert("batch")]},
                {"eval_time": "100m", "alertname": "GpuTeamBudgetExceeded", "exp_alerts": [exceeded_alert("batch")]},
            ],
        }],
    }
    (tmp_path / "budget.test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    result = subprocess.run([promtool(), "test", "rules", "budget.test.yaml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_example_budget_and_pricing_files_give_rules_promtool_accepts(tmp_path: Path) -> None:
    output = tmp_path / "rules.yaml"
    assert report_main(["budget-rules", "--budgets", str(EXAMPLES / "budgets.example.yaml"), "--pricing",
                        str(EXAMPLES / "pricing.example.yaml"), "-o", str(output)]) == 0
    text = output.read_text(encoding="utf-8")
    assert "predict_linear(team:gpu_cost_in_window:budget[86400s], 604800.0)" in text
    assert "# Note: node-pool and MIG-profile prices of the pricing file are not applied" in text
    result = subprocess.run([promtool(), "check", "rules", str(output)], capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("budgets", "message"), [
    ("teams:\n  research: -5\n", ":2: teams.research: expected a budget above 0"),
    ("window: 30d\nteam:\n  a: 1\n", ":2: team: unknown key"),
    ("window: soon\nteams:\n  a: 1\n", ": window: "),
    ("teams:\n  a: 1\n", "unit: cost needs prices: give --pricing FILE"),
])
def test_mistakes_in_the_budget_file_are_one_line_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], budgets: str, message: str) -> None:
    (tmp_path / "b.yaml").write_text(budgets, encoding="utf-8")
    assert main(["--budgets", str(tmp_path / "b.yaml")]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_gpu_hour_budgets_need_no_prices(tmp_path: Path) -> None:
    rules = yaml.safe_load(generate(tmp_path, "unit: gpuHours\nteams:\n  research: 500\n", None).read_text())
    [cost] = [r for r in rules["groups"][0]["rules"] if r.get("record") == "team:gpu_cost_per_hour:budget"]
    assert cost["expr"] == "sum by (team) (\n  (namespace_team_model:gpu_fraction:sum * 1.0)\n)"
