"""Budget files become alert rules that promtool accepts, and the forecast alert fires when it should."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from exporter.report.budgets import main
from exporter.report.cli import main as report_main
from tests.rules.promtool_runner import ENGINE_IDS, ENGINES, REPO_ROOT, promtool

EXAMPLES = REPO_ROOT / "etc" / "chargeback"
H100 = "NVIDIA H100 80GB HBM3"

PRICING = f"default: 1.0\nmodels:\n  {H100}: 2.5\n"
# research: 2 H100s at 2.5 = 5 per hour, budget 6: a steady spend below its budget is never forecast above it
# (predict_linear over the filling window alerted it from minute 12). batch: one A100 at the default 1.0, budget
# 0.5: its mean rate over the last 30 minutes passes 0.5 an hour at minute 15 (the alert fires 5 minutes later),
# its spend in the window at minute 30.
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
                               "within 1h if it goes on spending what it spent per hour over the last 30m."}}


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
                {"eval_time": "10m", "alertname": "GpuTeamBudgetForecastExceeded", "exp_alerts": []},
                {"eval_time": "20m", "alertname": "GpuTeamBudgetForecastExceeded",
                 "exp_alerts": [forecast_alert("batch")]},
                {"eval_time": "20m", "alertname": "GpuTeamBudgetExceeded", "exp_alerts": []},
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
    assert "team:gpu_cost_rate:budget * 168.0" in text and "predict_linear" not in text
    assert "# Note: node-pool and MIG-profile prices of the pricing file are not applied" in text
    result = subprocess.run([promtool(), "check", "rules", str(output)], capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("budgets", "message"), [
    ("teams:\n  research: -5\n", ":2: teams.research: expected a budget above 0"),
    ("window: 30d\nteam:\n  a: 1\n", ":2: team: unknown key"),
    ("window: soon\nteams:\n  a: 1\n", ": window: "),
    ("teams:\n  a: 1\n", "unit: cost needs prices: give --pricing FILE"),
    ("forecast: 40d\nunit: gpuHours\nteams:\n  a: 1\n", ":1: forecast: must be no longer than window"),
    ("lookback: 31d\nunit: gpuHours\nteams:\n  a: 1\n", ":1: lookback: must be no longer than window"),
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


# ---------------------------------------------------------------------------------------- 30 days
DAY = 86400
# The defaults (window 30d, lookback 1d, forecast 7d, for 1h) but for step: 1h instead of 5m, because promtool's
# test engine refuses a query that loads more than a few thousand samples (a 30-day sum at 5 minutes is 8,640 per
# team); the arithmetic does not depend on the step.
MONTH_BUDGETS = """
unit: gpuHours
step: 1h
teams:
  steady: 2400
  daily-cycle: 2400
  growing: 2400
"""
SAMPLES_PER_DAY = 24


def month_series(team: str, pattern: list[tuple[int, int]]) -> dict[str, str]:
    """30 days at 1 hour of the team's GPUs, as (GPUs, samples) pieces repeated to fill the month."""
    pieces, total = [], 0
    while total <= 30 * SAMPLES_PER_DAY:
        for gpus, count in pattern:
            pieces.append(f"{gpus}x{count - 1}")
            total += count
    return {"series": f'namespace_team_model:gpu_fraction:sum{{cluster="c",namespace="{team}",team="{team}",'
                      f'modelName="NVIDIA H100 80GB HBM3"}}', "values": " ".join(pieces)}


def month_alerts(alertname: str, firing: dict[str, tuple[float, float]]) -> list[dict[str, object]]:
    """Checks every 6 hours of the month: a team fires at t when from <= t (days), is silent when t <= quiet."""
    checks = []
    for quarter in range(0, 30 * 4 + 1):
        days = quarter / 4
        teams = []
        for team, (quiet, start) in firing.items():
            if quiet < days < start:
                break  # too close to the crossing to say
            if days >= start:
                teams.append(team)
        else:
            checks.append({"eval_time": f"{quarter * 6}h", "alertname": alertname,
                           "exp_alerts": [{"exp_labels": {"severity": "warning", "team": team},
                                           "exp_annotations": MONTH_ANNOTATIONS[alertname](team)} for team in teams]})
    return checks


NEVER = (31.0, 31.0)
MONTH_ANNOTATIONS = {
    "GpuTeamBudgetForecastExceeded": lambda team: {
        "summary": "A team's GPU spend is on course to pass its budget",
        "description": f"Team {team} is forecast to spend more than its budget (GPU-hours per 30d, rolling) within "
                       "7d if it goes on spending what it spent per hour over the last 1d."},
    "GpuTeamBudgetExceeded": lambda team: {
        "summary": "A team's GPU spend passed its budget",
        "description": f"Team {team} spent more than its budget (GPU-hours per 30d, rolling)."},
}


def month_test(rules: Path) -> dict[str, object]:
    """Three teams with the same budget, 2,400 GPU-hours per rolling 30 days, over the first 30 days of data:

    * steady: 3 GPUs all the time, 90 % of the budget (2,160 GPU-hours in 30 days): never forecast above;
    * daily-cycle: 4 GPUs by day and 2 by night, the same 90 % on average: never forecast above;
    * growing: 4 GPUs all the time, 120 %: passes the budget on day 25 (4 x 24 x 25 = 2,400); the forecast
      (spend of the last 23 days + 7 days at 4 GPUs) passes it on day 18, and the alert fires an hour later,
      a week before the spend itself does.

    Checked every 6 hours, except within the hours around a crossing (the rule's `for`, the hourly grid).
    """
    return {
        "rule_files": [rules.name],
        "evaluation_interval": "1h",
        "tests": [{
            "interval": "1h",
            "input_series": [month_series("steady", [(3, SAMPLES_PER_DAY)]),
                             month_series("daily-cycle", [(4, SAMPLES_PER_DAY // 2), (2, SAMPLES_PER_DAY // 2)]),
                             month_series("growing", [(4, SAMPLES_PER_DAY)])],
            "alert_rule_test": [
                *month_alerts("GpuTeamBudgetForecastExceeded",
                              {"steady": NEVER, "daily-cycle": NEVER, "growing": (17.9, 18.2)}),
                *month_alerts("GpuTeamBudgetExceeded",
                              {"steady": NEVER, "daily-cycle": NEVER, "growing": (24.9, 25.1)}),
            ],
        }],
    }


def run_month(tmp_path: Path, rules: Path, engine: str = "2.42") -> subprocess.CompletedProcess[str]:
    (tmp_path / "month.test.yaml").write_text(yaml.safe_dump(month_test(rules), sort_keys=False), encoding="utf-8")
    return subprocess.run([promtool(engine), "test", "rules", "month.test.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, check=False)


# Both engines: Prometheus 3's ranges are left-open, 2.42's closed (one point more in every sum).
@pytest.mark.parametrize("engine", ENGINES, ids=ENGINE_IDS)
def test_over_30_days_a_steady_spend_below_budget_never_fires_and_an_overspend_fires_a_week_early(
        tmp_path: Path, engine: str) -> None:
    rules = generate(tmp_path, MONTH_BUDGETS, None)
    result = run_month(tmp_path, rules, engine)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_the_30_day_test_catches_the_old_predict_linear_forecast(tmp_path: Path) -> None:
    """The same test against the forecast this generated before (predict_linear over the rolling spend) fails:
    the steady team is alerted in the last days of the month."""
    rules = generate(tmp_path, MONTH_BUDGETS, None)
    data = yaml.safe_load(rules.read_text(encoding="utf-8"))
    [forecast] = [rule for rule in data["groups"][0]["rules"] if rule.get("record") == "team:gpu_cost_forecast:budget"]
    forecast["expr"] = "predict_linear(team:gpu_cost_in_window:budget[86400s], 604800)"
    rules.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    result = run_month(tmp_path, rules)
    assert result.returncode != 0
    assert 'team="steady"' in result.stdout + result.stderr or "team: steady" in result.stdout + result.stderr
