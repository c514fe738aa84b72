"""``python -m bench``: run the benchmark matrix, or turn a results file into the report.

    python -m bench run --quick                 # a few minutes; results in bench/results/latest.json
    python -m bench run --full --out FILE.json  # 3 alternating repetitions, longer windows
    python -m bench run --quick --gpus 8 --pods 0 --exporters ours   # a subset
    python -m bench report [RESULTS.json]       # docs/benchmarks.md results section + docs/*.png
    python -m bench profile --gpus 8 --pods 110 # py-spy under load: where the Python time goes
    python -m bench counters --before A.csv --after B.csv   # NVML cost of a counters CSV, before/after
    python -m bench process-utilization --report   # what per-process utilization adds per cycle
    python -m bench docs [--check]              # rewrite (check) docs/benchmarks.md's generated sections
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from bench import runner, suite

DEFAULT_RESULTS = runner.REPO_ROOT / "bench" / "results" / "latest.json"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def _node_page(argv: Sequence[str]) -> int:
    from bench import nodepage  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m bench node-page", description=nodepage.__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=nodepage.REPETITIONS)
    parser.add_argument("--window-s", type=float, default=nodepage.WINDOW_S)
    parser.add_argument("--out", type=Path, default=nodepage.RESULTS)
    parser.add_argument("--report", action="store_true", help="also rewrite docs/benchmarks.md's section")
    args = parser.parse_args(list(argv))
    nodepage.run(args.out, repetitions=args.repetitions, window_s=args.window_s)
    print(f"results: {args.out}")
    if args.report:
        print(f"wrote {nodepage.write_report(args.out, runner.REPO_ROOT / 'docs' / 'benchmarks.md')}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["counters"]:  # its own options (bench/counters.py)
        from bench import counters  # noqa: PLC0415

        return counters.main(arguments[1:])
    if arguments[:1] == ["node-page"]:  # its own options (bench/nodepage.py)
        return _node_page(arguments[1:])
    if arguments[:1] == ["docs"]:  # its own options (bench/docs.py)
        from bench import docs  # noqa: PLC0415

        return docs.main(arguments[1:])
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="measure both exporters")
    preset = run.add_mutually_exclusive_group()
    preset.add_argument("--quick", action="store_true", help="one repetition, short windows (default)")
    preset.add_argument("--full", action="store_true", help="three alternating repetitions, long windows")
    run.add_argument("--gpus", type=_ints, default=suite.GPU_COUNTS, help="comma-separated GPU counts")
    run.add_argument("--pods", type=_ints, default=suite.POD_COUNTS, help="comma-separated pod counts")
    run.add_argument("--exporters", default="ours,nvitop", help="comma-separated: ours, nvitop")
    run.add_argument("--repetitions", type=int, help="override the preset's repetitions")
    run.add_argument("--no-pin", action="store_true", help="do not pin server and load generator to cores")
    run.add_argument("--out", type=Path, default=DEFAULT_RESULTS, help="results JSON file")
    run.add_argument("--report", action="store_true", help="also write the report from these results")
    report = commands.add_parser("report", help="write docs/benchmarks.md's results and the plots")
    report.add_argument("results", type=Path, nargs="?", default=DEFAULT_RESULTS)
    report.add_argument("--docs", type=Path, default=runner.REPO_ROOT / "docs")
    prof = commands.add_parser("profile", help="py-spy profile of one exporter under closed-loop load")
    prof.add_argument("--exporter", choices=("ours", "nvitop"), default="ours")
    prof.add_argument("--gpus", type=int, default=8)
    prof.add_argument("--pods", type=int, default=0)
    prof.add_argument("--seconds", type=float, default=10.0)
    prof.add_argument("--concurrency", type=int, default=16)
    shared = commands.add_parser("process-utilization", help="cost of per-process utilization (with / without)")
    shared.add_argument("--gpus", type=int, default=8)
    shared.add_argument("--pods", type=int, default=24)
    shared.add_argument("--repetitions", type=int, default=3)
    shared.add_argument("--idle-s", type=float, default=30.0)
    shared.add_argument("--no-pin", action="store_true")
    shared.add_argument("--out", type=Path, default=runner.REPO_ROOT / "docs" / "benchmarks-process-utilization.json")
    shared.add_argument("--report", action="store_true", help="also rewrite docs/benchmarks.md's section")
    shared.add_argument("--report-only", type=Path, metavar="RESULTS", help="only rewrite the section from RESULTS")
    commands.add_parser("counters", help="NVML cost of a counters CSV, before/after (see bench/counters.py)")
    commands.add_parser("node-page", help="scrape latency with the live node page open (see bench/nodepage.py)")
    commands.add_parser("docs", help="rewrite (or --check) docs/benchmarks.md's generated sections (bench/docs.py)")
    args = parser.parse_args(arguments)

    if args.command == "process-utilization":
        from bench import process_utilization  # noqa: PLC0415

        if args.report_only is None:
            process_utilization.run(args.out, gpus=args.gpus, pods=args.pods, repetitions=args.repetitions,
                                    idle_s=args.idle_s, pin=not args.no_pin)
            print(f"results: {args.out}")
        if args.report or args.report_only is not None:
            print(f"wrote {process_utilization.write_report(args.report_only or args.out, runner.REPO_ROOT / 'docs')}")
        return 0

    if args.command == "profile":
        from bench import profile as profile_module  # noqa: PLC0415

        return profile_module.profile(args.exporter, args.gpus, args.pods, args.seconds, args.concurrency)

    if args.command == "run":
        settings = runner.FULL if args.full else runner.QUICK
        if args.repetitions:
            settings = replace(settings, repetitions=args.repetitions)
        if args.no_pin:
            settings = replace(settings, pin=False)
        exporters = tuple(name.strip() for name in args.exporters.split(",") if name.strip())
        unknown = set(exporters) - {"ours", "nvitop"}
        if unknown:
            parser.error(f"unknown exporter(s): {', '.join(sorted(unknown))}")
        results = suite.run_suite(settings, gpu_counts=args.gpus, pod_counts=args.pods, exporters=exporters,
                                  progress=lambda line: print(line, flush=True))
        results["preset"] = "full" if args.full else "quick"
        results["command"] = "python -m bench " + " ".join(arguments)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1, allow_nan=True) + "\n", encoding="utf-8")
        print(f"results: {args.out}")
        if args.report:
            from bench import report as report_module  # noqa: PLC0415 - matplotlib only when reporting

            report_module.write_report(args.out, runner.REPO_ROOT / "docs")
        return 0

    from bench import report as report_module  # noqa: PLC0415

    report_module.write_report(args.results, args.docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
