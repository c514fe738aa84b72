"""Before/after: the same harness against the exporter at two commits, alternating, in one run.

    python -m bench.abtest --before REV [--after WORKTREE | --after-rev REV] [--gpus 8] [--pods 0,110]
                           [--rounds 3] [--windows quick|full] [--out docs/benchmarks-server-ab.json]

``REV`` is extracted with ``git archive`` into a temporary directory; "after" is this working tree, or
``--after-rev`` extracted the same way (so editing the tree during a long run changes nothing).
Each round runs ``bench.suite.run_suite`` (quick windows by default, the full preset's longer
windows with ``--windows full``, one repetition; ``ours`` only, no floor) once from each
tree, the order alternating between rounds, so slow drifts of this shared machine hit both sides
alike. Reported per configuration: the median of each figure per side, and the median of the
after/before ratios of neighbouring runs (``bench.stats``' method).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import median
from typing import Any

from bench.runner import REPO_ROOT

SUITE = ("import json, sys\n"
         "from bench import runner, suite\n"
         "gpus = tuple(int(x) for x in sys.argv[2].split(','))\n"
         "pods = tuple(int(x) for x in sys.argv[3].split(','))\n"
         "settings = runner.FULL if sys.argv[4] == 'full' else runner.QUICK\n"
         "import dataclasses\n"
         "settings = dataclasses.replace(settings, repetitions=1)\n"
         "result = suite.run_suite(settings, gpu_counts=gpus, pod_counts=pods, exporters=('ours',), floor=False,\n"
         "                         progress=lambda line: print(line, flush=True))\n"
         "import exporter\n"
         "result['exporter_source'] = exporter.__file__\n"
         "open(sys.argv[1], 'w').write(json.dumps(result))\n")


def _phase(run: dict[str, Any], mode: str, concurrency: int) -> dict[str, Any] | None:
    return next((p for p in run.get("load", []) if p["mode"] == mode and p["concurrency"] == concurrency), None)


def _figure(getter: Callable[[dict[str, Any]], float | None]) -> Callable[[dict[str, Any]], float | None]:
    def safe(run: dict[str, Any]) -> float | None:
        try:
            return getter(run)
        except (KeyError, TypeError):
            return None

    return safe


FIGURES: dict[str, Callable[[dict[str, Any]], float | None]] = {
    "CPU per scrape, ms (c=1)": _figure(lambda r: _phase(r, "closed", 1)["server_cpu_per_scrape_s"] * 1e3),  # type: ignore[index]
    "CPU per scrape, ms (c=64)": _figure(lambda r: _phase(r, "closed", 64)["server_cpu_per_scrape_s"] * 1e3),  # type: ignore[index]
    "scrape p99, ms (c=1)": _figure(lambda r: _phase(r, "closed", 1)["p99_s"] * 1e3),  # type: ignore[index]
    "scrape p99, ms (c=64)": _figure(lambda r: _phase(r, "closed", 64)["p99_s"] * 1e3),  # type: ignore[index]
    "scrapes/s (c=64)": _figure(lambda r: _phase(r, "closed", 64)["throughput_per_s"]),  # type: ignore[index]
    "scrape p99, ms (64 scrapers x 1/1s)": _figure(lambda r: _phase(r, "paced", 64)["p99_s"] * 1e3),  # type: ignore[index]
    "failed scrapes (all phases)": _figure(lambda r: float(sum(p["failed"] for p in r["load"]))),
    "RSS steady, MiB": _figure(lambda r: r["memory"]["rss_steady_bytes"] / 2**20),
    "RSS peak (VmHWM), MiB": _figure(lambda r: r["memory"]["peak_rss_bytes"] / 2**20),
    "exposition, series": _figure(lambda r: float(r["exposition"]["series"])),
    "series per GPU": _figure(lambda r: r["exposition"]["series"] / r["gpus"]),
    "CPU per sampling cycle, ms": _figure(lambda r: r["idle"]["cpu_per_cycle_s"] * 1e3),
}


def extract(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", rev], cwd=REPO_ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_side(tree: Path, out: Path, gpus: str, pods: str, windows: str = "quick") -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-c", SUITE, str(out), gpus, pods, windows], cwd=tree, env=env, check=True)
    result: dict[str, Any] = json.loads(out.read_text())
    if not str(result.get("exporter_source", "")).startswith(str(tree)):
        raise RuntimeError(f"the {tree} run imported the exporter from {result.get('exporter_source')}")
    return result


def table(sides: dict[str, list[dict[str, Any]]]) -> str:
    configs = sorted({(run["gpus"], run["pods"]) for runs in sides.values() for result in runs
                      for run in result["runs"]})
    lines = []
    for gpus, pods in configs:
        lines += [f"\n**{gpus} GPUs, {pods} pods**\n", "| figure | before | after | after / before |",
                  "|---|---|---|---|"]
        for name, figure in FIGURES.items():
            per_side: dict[str, list[float]] = {}
            for side, results in sides.items():
                values = []
                for result in results:
                    for run in result["runs"]:
                        if (run["gpus"], run["pods"]) == (gpus, pods):
                            value = figure(run)
                            if value is not None:
                                values.append(value)
                per_side[side] = values
            before, after = per_side.get("before", []), per_side.get("after", [])
            ratios = [a / b for a, b in zip(after, before, strict=False) if b]
            lines.append(f"| {name} | {_fmt(before)} | {_fmt(after)} | "
                         f"{median(ratios):.2f} |" if ratios else f"| {name} | {_fmt(before)} | {_fmt(after)} | n/a |")
    return "\n".join(lines)


def _fmt(values: list[float]) -> str:
    if not values:
        return "n/a"
    value = median(values)
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.abtest", description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="git revision of the 'before' side")
    parser.add_argument("--after", type=Path, default=REPO_ROOT, help="tree of the 'after' side (default: here)")
    parser.add_argument("--after-rev", help="git revision of the 'after' side (instead of --after's tree)")
    parser.add_argument("--windows", choices=("quick", "full"), default="quick",
                        help="the quick preset's windows, or the full preset's longer ones (one repetition)")
    parser.add_argument("--gpus", default="8")
    parser.add_argument("--pods", default="0,110")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "abtest.json")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    started = time.time()
    sides: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="bench-abtest-") as tmp:
        after = extract(args.after_rev, Path(tmp) / "after") if args.after_rev else args.after.resolve()
        trees = {"before": extract(args.before, Path(tmp) / "before"), "after": after}
        for round_number in range(args.rounds):
            order = ["before", "after"] if round_number % 2 == 0 else ["after", "before"]
            for side in order:
                print(f"[round {round_number + 1}/{args.rounds}] {side}", flush=True)
                sides[side].append(run_side(trees[side], Path(tmp) / f"{side}-{round_number}.json", args.gpus,
                                            args.pods, args.windows))
    commit = args.after_rev or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.after,
                                              capture_output=True, text=True, check=False).stdout.strip()
    results = {"before": args.before, "after": commit, "rounds": args.rounds, "windows": args.windows,
               "duration_s": time.time() - started, "sides": sides}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(table(sides))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
