"""Before/after: what a counters CSV costs per sampling cycle, measured side by side in one run.

    python -m bench counters --before etc/dcgm-exporter/default-counters.csv \\
        --after exporter/metrics/data/default-counters.csv --gpus 8 --repetitions 3 --out FILE.json
    python -m bench counters --report FILE.json      # the markdown table for docs/benchmarks.md

Why: every row of the default counters is read from every GPU on every node every cycle, and NVML
serialises calls in the driver, so a row's cost is NVML calls and driver time per cycle. Each run
starts gpu-pod-exporter exactly as ``python -m bench run`` does (``bench.launch``: production code
on the fake NVML library with realistic per-call latencies, the NVML probe counting calls at cycle
ends), once with each CSV (``--collectors``), alternating before/after so a drift of the shared
machine hits both alike, and measures the idle window only (no scrapes): NVML calls per GPU per
cycle, field-value entries, the driver time those calls would take on a real driver, the exporter's
CPU per cycle with and without the fake library's own, and the exposition's size.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench import runner, scenarios, suite
from bench.stats import median, paired_ratio

RESULTS_VERSION = 1
BUDGET_CALLS_RATIO = 1.25  # the default's additions may cost at most +25 % NVML calls per cycle


def run_counters(before: Path, after: Path, gpus: int, settings: runner.Settings,
                 progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure ours once per repetition with each CSV, in alternating order; returns the results."""
    # Only the idle window matters here: no load phases.
    settings = replace(settings, concurrencies=(), paced_s=0.0)
    started = time.time()
    results: dict[str, Any] = {
        "version": RESULTS_VERSION, "kind": "counters",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "commit": suite.git_commit(), "machine": suite.machine_info(), "settings": asdict(settings),
        "gpus": gpus, "variants": {"before": str(before), "after": str(after)}, "runs": [],
    }
    variants = {"before": before, "after": after}
    with tempfile.TemporaryDirectory(prefix="bench-counters-") as tmp:
        scenario = scenarios.write_scenario(Path(tmp), gpus, 0, kubernetes=False)
        for repetition in range(settings.repetitions):
            order = ["before", "after"] if repetition % 2 == 0 else ["after", "before"]
            for position, variant in enumerate(order):
                progress(f"[{gpus} GPUs, run {repetition + 1}/{settings.repetitions}] {variant}: "
                         f"{variants[variant]}")
                measurement = runner.measure("ours", gpus, 0, scenario, settings, repetition=repetition,
                                             order=position,
                                             extra_args=["--collectors", str(variants[variant].resolve())],
                                             progress=progress)
                results["runs"].append({"variant": variant, **runner.as_dict(measurement)})
    results["duration_s"] = time.time() - started
    return results


def _per_run(results: dict[str, Any], variant: str, get: Callable[[dict[str, Any]], float]) -> list[float]:
    runs = sorted((run for run in results["runs"] if run["variant"] == variant and not run["errors"]),
                  key=lambda run: run["repetition"])
    return [get(run) for run in runs]


ROWS: tuple[tuple[str, Callable[[dict[str, Any]], float], str], ...] = (
    ("NVML calls per GPU per cycle", lambda r: r["idle"]["nvml_calls_per_gpu_per_cycle"], "{:.1f}"),
    ("field-value entries per GPU per cycle",
     lambda r: r["idle"]["field_entries_per_cycle"] / r["gpus"], "{:.1f}"),
    ("driver time per cycle (realistic latencies), ms", lambda r: r["idle"]["driver_latency_per_cycle_s"] * 1e3,
     "{:.3f}"),
    ("exporter CPU per cycle without NVML, ms", lambda r: r["idle"]["cpu_excl_nvml_per_cycle_s"] * 1e3, "{:.2f}"),
    ("CPU inside the fake NVML per cycle, ms", lambda r: r["idle"]["nvml_thread_cpu_per_cycle_s"] * 1e3, "{:.2f}"),
    ("exposition: series", lambda r: r["exposition"]["series"], "{:.0f}"),
    ("exposition: bytes (text)", lambda r: r["exposition"]["text_bytes"], "{:.0f}"),
)


def _fmt(template: str, value: float) -> str:
    return "n/a" if math.isnan(value) else template.format(value)


def calls_by_symbol(results: dict[str, Any], variant: str) -> dict[str, float]:
    """Median calls per GPU per cycle of each NVML symbol."""
    symbols = {name for run in results["runs"] if run["variant"] == variant and not run["errors"]
               for name in run["idle"]["calls_per_cycle_by_symbol"]}
    return {name: median(_per_run(results, variant,
                                  lambda r, n=name: r["idle"]["calls_per_cycle_by_symbol"].get(n, 0.0) / r["gpus"]))
            for name in sorted(symbols)}


def report(results: dict[str, Any]) -> str:
    """The markdown section for docs/benchmarks.md (table, per-symbol difference, verdict)."""
    gpus = results["gpus"]
    runs = len([run for run in results["runs"] if run["variant"] == "before"])
    lines = [
        f"- Run: `python -m bench counters --gpus {gpus} --repetitions {results['settings']['repetitions']}` at "
        f"{results['started']} (commit {results['commit']}), {results['duration_s'] / 60:.1f} min; "
        f"{runs} run(s) per CSV, order alternating; idle window {results['settings']['idle_s']:.0f} s, "
        f"interval {results['settings']['interval_ms']} ms, no scrapes.",
        f"- before: `{results['variants']['before']}`; after: `{results['variants']['after']}`.",
        "",
        "| per sampling cycle, " + f"{gpus} x H100 | before | after | after / before |",
        "|---|---|---|---|",
    ]
    for title, get, template in ROWS:
        before, after = _per_run(results, "before", get), _per_run(results, "after", get)
        lines.append(f"| {title} | {_fmt(template, median(before))} | {_fmt(template, median(after))} | "
                     f"{_fmt('{:.2f}', paired_ratio(after, before))} |")
    before_symbols, after_symbols = calls_by_symbol(results, "before"), calls_by_symbol(results, "after")
    changed = [(name, before_symbols.get(name, 0.0), after_symbols.get(name, 0.0))
               for name in sorted(set(before_symbols) | set(after_symbols))
               if before_symbols.get(name, 0.0) != after_symbols.get(name, 0.0)]
    lines.append("")
    lines.append("Calls that differ, per GPU per cycle: " + (", ".join(
        f"`{name}` {old:g} -> {new:g}" for name, old, new in changed) or "none") + ".")
    calls = paired_ratio(_per_run(results, "after", ROWS[0][1]), _per_run(results, "before", ROWS[0][1]))
    verdict = "within" if calls <= BUDGET_CALLS_RATIO else "OVER"
    lines.append(f"NVML calls per cycle: x{calls:.2f}, {verdict} the budget of "
                 f"x{BUDGET_CALLS_RATIO:.2f} (+{(BUDGET_CALLS_RATIO - 1) * 100:.0f} %).")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench counters", description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="counters CSV of the baseline")
    parser.add_argument("--after", type=Path, help="counters CSV to compare with it")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--idle", type=float, default=runner.FULL.idle_s, help="idle window, seconds")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the exporter to a core")
    parser.add_argument("--out", type=Path, default=runner.REPO_ROOT / "bench" / "results" / "counters.json")
    parser.add_argument("--report", type=Path, metavar="RESULTS", help="print the markdown table of a results file")
    args = parser.parse_args(argv)
    if args.report:
        print(report(json.loads(args.report.read_text(encoding="utf-8"))), end="")
        return 0
    if args.before is None or args.after is None:
        parser.error("--before and --after are required to measure (or give --report RESULTS)")
    settings = replace(runner.FULL, repetitions=args.repetitions, idle_s=args.idle, pin=not args.no_pin)
    results = run_counters(args.before, args.after, args.gpus, settings,
                           progress=lambda line: print(line, flush=True))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, allow_nan=True) + "\n", encoding="utf-8")
    print(f"results: {args.out}")
    print(report(results), end="")
    return 0
