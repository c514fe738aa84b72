"""``gpu-pod-exporter report budget-rules``: a budget file per team becomes Prometheus alert rules.

A bill at the end of the month is too late to act on; an alert when a team's spend is on course
to pass its budget is not. The generated rules build on the shipped recording rules
(``namespace_team_model:gpu_fraction:sum``, group ``gpu-pod-exporter.cost-report``):

* ``gpu_model:price_per_hour:budget``: the pricing file's price per model as constant series;
* ``team:gpu_cost_per_hour:budget``: what each team's GPUs cost per hour now (models without a price
  use the file's ``default``; a model with neither costs nothing and the header says so);
* ``team:gpu_cost_in_window:budget``: its spend over the budget window, rolling
  (``sum_over_time(...[window:step])``);
* ``team:gpu_cost_rate:budget``: its mean cost per hour over the last ``lookback`` (hours it held no
  GPU count as zero: a team that appeared an hour ago is not extrapolated from that hour);
* ``team:gpu_cost_kept:budget``: what was spent in the part of today's window that will still be in
  it ``forecast`` from now (the last ``window - forecast``);
* ``team:gpu_cost_forecast:budget``: the spend of the window as it will be ``forecast`` from now:
  the kept spend plus ``forecast`` at that mean rate;
* ``team:gpu_budget:budget``: the budget per team, and the alerts ``GpuTeamBudgetForecastExceeded``
  (the forecast is above the budget) and ``GpuTeamBudgetExceeded`` (the spend is).

Why not ``predict_linear`` over the rolling spend (what this generated before): the rolling spend
rises while the window fills (the first ``window`` of data, or after any rise in spend) and the
trend projects that rise forward as if nothing ever left the window; a team spending a steady
90 % of its budget was forecast above it from about day 26 of 30. The forecast here counts what
leaves the window, so a steady spend is forecast at its steady window total: it fires only for a
spend whose window total will pass the budget (proved by a promtool test over a 30-day series in
``tests/report/test_budgets.py``).

Budgets may be in money (prices from ``--pricing``) or in GPU-hours (``unit: gpuHours``: every
whole-GPU hour counts 1). Prices per node pool or MIG profile cannot be expressed per model and
are not applied here (the rules say so in their header); the report's chargeback applies them.

Budget file (docs/cost.md, "Budgets")::

    unit: cost            # or gpuHours
    window: 30d           # the budget period, rolling
    step: 5m              # resolution of the rolling sum
    lookback: 1d          # the spend rate is the mean of this long (at least a day: a daily cycle averages out)
    forecast: 7d          # how far ahead it looks (at most the window)
    for: 1h               # how long the forecast must stay above before the alert fires
    teams:
      research: 5000
      serving: 1500
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from exporter import safeyaml
from exporter.prometheus.flags import FlagError, OneLineParser
from exporter.prometheus.promql import quote
from exporter.report.pricing import PriceSheet
from exporter.report.pricingfile import PricingFileError, load_pricing
from exporter.units import format_duration, parse_prometheus_duration

PROG = "gpu-pod-exporter report budget-rules"
GROUP = "gpu-pod-exporter.budgets"
SOURCE_SERIES = "namespace_team_model:gpu_fraction:sum"
KEYS = ("unit", "window", "step", "lookback", "forecast", "for", "teams", "currency")
DEFAULTS = {"unit": "cost", "window": "30d", "step": "5m", "lookback": "1d", "forecast": "7d", "for": "1h"}


class BudgetFileError(ValueError):
    """``FILE:LINE: KEY: what is wrong``."""


@dataclass(frozen=True)
class Budgets:
    unit: str
    window_s: float
    step_s: float
    lookback_s: float
    forecast_s: float
    for_s: float
    teams: tuple[tuple[str, float], ...]
    currency: str | None = None


def load_budgets(path: str) -> Budgets:
    root = safeyaml.YamlFile(path, safeyaml.located(BudgetFileError)).load("budgets")
    if root is None or not root.is_mapping():
        raise BudgetFileError(f"{path}: expected a mapping with teams: (see docs/cost.md, Budgets)")
    keys = root.mapping(KEYS)
    teams: list[tuple[str, float]] = []
    if "teams" in keys:
        entries = keys["teams"].mapping()
        if not entries:
            raise keys["teams"].error("expected a mapping of team: budget")
        for team, amount in entries.items():
            teams.append((team, amount.convert(_budget)))
    if not teams:
        raise BudgetFileError(f"{path}: teams: missing (give team: budget pairs)")
    unit = keys["unit"].convert(str) if "unit" in keys else DEFAULTS["unit"]
    if unit not in ("cost", "gpuHours"):
        raise keys["unit"].error("expected cost or gpuHours")
    durations = {key: keys[key].convert(lambda raw: parse_prometheus_duration(str(raw))) if key in keys
                 else parse_prometheus_duration(DEFAULTS[key])
                 for key in ("window", "step", "lookback", "forecast", "for")}
    if durations["step"] <= 0 or durations["window"] < durations["step"] or durations["lookback"] < durations["step"]:
        raise BudgetFileError(f"{path}: step: must be above 0 and no longer than window and lookback")
    if durations["forecast"] > durations["window"]:
        raise _located(keys, "forecast", path, "must be no longer than window (the spend it forecasts is the window's)")
    if durations["lookback"] > durations["window"]:
        raise _located(keys, "lookback", path, "must be no longer than window")
    currency = keys["currency"].value() if "currency" in keys else None
    return Budgets(unit, durations["window"], durations["step"], durations["lookback"],
                   durations["forecast"], durations["for"], tuple(teams), str(currency) if currency else None)


def _located(keys: dict[str, Any], key: str, path: str, message: str) -> BudgetFileError:
    """``FILE:LINE: KEY: message`` when the key is in the file, ``FILE: KEY: message`` for a default."""
    if key in keys:
        return BudgetFileError(str(keys[key].error(message)))
    return BudgetFileError(f"{path}: {key}: {message} (default {DEFAULTS[key]})")


def _budget(raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not raw > 0:
        raise ValueError("expected a budget above 0")
    return float(raw)


def _constants(label: str, values: Sequence[tuple[str, float]]) -> str:
    return "\nor\n".join(f'label_replace(vector({value!r}), "{label}", {quote(name)}, "", "")'
                         for name, value in values)


def _prom_duration(seconds: float) -> str:
    return f"{int(seconds)}s"


def budget_rules(budgets: Budgets, prices: PriceSheet | None) -> tuple[dict[str, Any], list[str]]:
    """The rule file (as data) and the caveats to print in its header."""
    caveats: list[str] = []
    if budgets.unit == "gpuHours":
        model_prices: list[tuple[str, float]] = []
        default: float | None = 1.0
        unit = "GPU-hours"
    else:
        if prices is None:
            raise BudgetFileError("unit: cost needs prices: give --pricing FILE (or unit: gpuHours in the budget file)")
        per_model: dict[str, float] = {}
        for model, item in prices.on_prem.items():
            per_model[model] = item.per_hour
        per_model |= dict(prices.list_prices)
        per_model |= dict(prices.per_model)
        model_prices = sorted(per_model.items())
        default = prices.default
        unit = budgets.currency or prices.currency or "USD"
        if prices.pools or prices.mig_profiles:
            caveats.append("node-pool and MIG-profile prices of the pricing file are not applied: these rules price "
                           "per model (the report's chargeback applies them)")
        if prices.energy_per_kwh is not None:
            caveats.append("the energy price is not applied: these rules count GPU-hours only")
        if default is None:
            caveats.append("models without a price in the pricing file cost nothing here (give default:)")
        if not model_prices and default is None:
            raise BudgetFileError("the pricing file has no price per model and no default")
    per_hour = "team:gpu_cost_per_hour:budget"
    priced_terms = []
    rules: list[dict[str, Any]] = []
    if model_prices:
        rules.append({"record": "gpu_model:price_per_hour:budget", "expr": _constants("modelName", model_prices)})
        priced_terms.append(f"{SOURCE_SERIES} * on (modelName) group_left () gpu_model:price_per_hour:budget")
    if default is not None:
        rest = f"{SOURCE_SERIES} * {default!r}"
        if model_prices:
            rest += " unless on (modelName) gpu_model:price_per_hour:budget"
        priced_terms.append(rest)
    rules.append({"record": per_hour, "expr": "sum by (team) (\n  " + "\n  or\n  ".join(
        f"({term})" for term in priced_terms) + "\n)"})
    rules += _spend_rules(per_hour, budgets)
    rules.append({"record": "team:gpu_budget:budget", "expr": _constants("team", budgets.teams)})
    period, ahead = format_duration(budgets.window_s), format_duration(budgets.forecast_s)
    lookback = format_duration(budgets.lookback_s)
    rules.append({
        "alert": "GpuTeamBudgetForecastExceeded",
        "expr": "team:gpu_cost_forecast:budget > on (team) team:gpu_budget:budget",
        "for": _prom_duration(budgets.for_s),
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "A team's GPU spend is on course to pass its budget",
            "description": (f"Team {{{{ $labels.team }}}} is forecast to spend more than its budget "
                            f"({unit} per {period}, rolling) within {ahead} if it goes on spending what it spent "
                            f"per hour over the last {lookback}."),
        },
    })
    rules.append({
        "alert": "GpuTeamBudgetExceeded",
        "expr": "team:gpu_cost_in_window:budget > on (team) team:gpu_budget:budget",
        "for": "0s",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "A team's GPU spend passed its budget",
            "description": f"Team {{{{ $labels.team }}}} spent more than its budget ({unit} per {period}, rolling).",
        },
    })
    return {"groups": [{"name": GROUP, "rules": rules}]}, caveats


def _spend_rules(per_hour: str, budgets: Budgets) -> list[dict[str, Any]]:
    """The rolling spend, the recent rate and the forecast (module docstring: why not predict_linear)."""
    step = _prom_duration(budgets.step_s)

    def mean_per_hour(seconds: float) -> str:
        """The mean cost per hour over the last ``seconds``; a point without the team's series (no GPU held) is 0.

        Divided by the number of points of the grid (``vector(1)``), not by seconds / step: Prometheus 2
        includes both ends of a range and Prometheus 3 only the last, so the count is the engine's own.
        """
        span = f"[{_prom_duration(seconds)}:{step}]"
        return f"sum_over_time({per_hour}{span}) / on () group_left () count_over_time(vector(1){span})"

    def spend_over(seconds: float) -> str:
        return f"{mean_per_hour(seconds)} * {seconds / 3600.0!r}"

    rate, kept = "team:gpu_cost_rate:budget", "team:gpu_cost_kept:budget"
    ahead = f"{rate} * {budgets.forecast_s / 3600.0!r}"
    kept_s = budgets.window_s - budgets.forecast_s
    rules: list[dict[str, Any]] = [
        {"record": "team:gpu_cost_in_window:budget", "expr": spend_over(budgets.window_s)},
        {"record": rate, "expr": mean_per_hour(budgets.lookback_s)},
    ]
    if kept_s <= 0:
        return [*rules, {"record": "team:gpu_cost_forecast:budget", "expr": ahead}]
    # `or`: a team with no spend in one of the two parts still has a forecast (the other part)
    return [*rules, {"record": kept, "expr": spend_over(kept_s)},
            {"record": "team:gpu_cost_forecast:budget", "expr": f"{kept} + {ahead} or {kept} or {ahead}"}]


def render(budgets: Budgets, prices: PriceSheet | None, budget_path: str, pricing_path: str | None) -> str:
    rules, caveats = budget_rules(budgets, prices)
    header = [f"# Generated by {PROG} --budgets {budget_path}" + (f" --pricing {pricing_path}" if pricing_path else ""),
              f"# Reads {SOURCE_SERIES} (deploy/rules/gpu-pod-exporter-recording.yaml): load both rule files.",
              *(f"# Note: {caveat}." for caveat in caveats)]
    return "\n".join(header) + "\n" + yaml.safe_dump(rules, sort_keys=False, width=120)


def main(argv: Sequence[str]) -> int:
    parser = OneLineParser(prog=PROG, description="Prometheus alert rules from a budget file per team: "
                                     "the window's spend forecast from the recent rate (docs/cost.md, Budgets).")
    parser.add_argument("--budgets", required=True, metavar="FILE", help="The budget file (YAML).")
    parser.add_argument("--pricing", metavar="FILE", help="The pricing file (needed for budgets in money).")
    parser.add_argument("--output", "-o", metavar="FILE", help="Write here instead of standard output.")
    try:
        args = parser.parse_args(list(argv))
        budgets = load_budgets(args.budgets)
        prices = load_pricing(args.pricing) if args.pricing else None
        text = render(budgets, prices, args.budgets, args.pricing)
    except (BudgetFileError, PricingFileError, FlagError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as error:
        print(f"{PROG}: error: --output {args.output}: {error.strerror or error}", file=sys.stderr)
        return 2
    return 0
