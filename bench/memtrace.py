"""Where the peak memory goes: tracemalloc in one exporter under the measurement's load phases.

    python -m bench.memtrace --gpus 64 --pods 110 [--out docs/benchmarks-memtrace.json]

Starts ours twice like a measurement does (same launcher, same scenario and simulated cluster) and
drives the load phases of a quick run (closed loop at 1, 16 and 64, then 64 paced scrapers) each
time. The first run is plain: resident memory by mapping from /proc/<pid>/smaps when idle and after
the load (what tracemalloc cannot see: C extensions' heaps, malloc arenas, thread stacks, library
pages), and VmHWM. The second sets ``BENCH_TRACEMALLOC`` and ``PYTHONTRACEMALLOC``: tracing starts
with the interpreter, and a watcher thread in the exporter's process records each new high of the
traced Python heap and the allocation sites (by source line) at the highest, so the report says
whether the load phases raised the Python heap at all, and what holds it. tracemalloc slows the
process down and its bookkeeping inflates RSS, so the memory figures to quote are the plain run's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ENV = "BENCH_TRACEMALLOC"
CHECK_PERIOD_S = 0.2


def _sites(snapshot: tracemalloc.Snapshot, top: int) -> list[dict[str, Any]]:
    filtered = snapshot.filter_traces((tracemalloc.Filter(False, tracemalloc.__file__),))
    return [{"bytes": stat.size, "blocks": stat.count,
             "where": f"{_short(stat.traceback[0].filename)}:{stat.traceback[0].lineno}"}
            for stat in filtered.statistics("lineno")[:top]]


def _short(filename: str) -> str:
    """A site as the report prints it: relative to site-packages, the repository or the standard library."""
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1]
    for package in ("exporter", "simulator", "bench"):
        if f"/{package}/" in filename:
            return package + "/" + filename.rsplit(f"/{package}/", 1)[1]
    if "/lib/python3." in filename:
        return "stdlib/" + filename.split("/lib/python3.", 1)[1].split("/", 1)[-1]
    return filename


def start_in_process(path: str, top: int = 15) -> None:
    """Called by bench.launch when ``BENCH_TRACEMALLOC`` names a file: trace, and record each new high.

    The tool sets ``PYTHONTRACEMALLOC`` too, so tracing began with the interpreter (imports included).
    The file (JSON) holds every new high with its ``time.monotonic()`` and the allocation sites at the
    highest one.
    """
    if not tracemalloc.is_tracing():
        tracemalloc.start(4)

    def watch() -> None:
        highs: list[tuple[float, int]] = []
        while True:
            time.sleep(CHECK_PERIOD_S)
            current, _ = tracemalloc.get_traced_memory()
            if not highs or current > highs[-1][1] * 1.01:
                highs.append((time.monotonic(), current))
                record = {"highs": highs, "sites": _sites(tracemalloc.take_snapshot(), top)}
                Path(path).write_text(json.dumps(record), encoding="utf-8")

    threading.Thread(target=watch, name="memtrace", daemon=True).start()


def mappings(pid: int) -> list[tuple[int, str]]:
    """Resident KiB per mapping kind (a shared library, [heap], [stack], anonymous) from /proc/<pid>/smaps:
    what tracemalloc cannot see (C extensions' heaps, malloc arenas, thread stacks, library pages)."""
    resident: dict[str, int] = {}
    name = ""
    with Path(f"/proc/{pid}/smaps").open(encoding="utf-8") as smaps:
        for line in smaps:
            fields = line.split()
            if not fields:
                continue
            if "-" in fields[0] and len(fields) >= 5 and not fields[0].endswith(":"):
                path = fields[5] if len(fields) > 5 else "[anonymous]"
                name = path.rsplit("/", 1)[-1] if path.startswith("/") else path
            elif fields[0] == "Rss:":
                resident[name] = resident.get(name, 0) + int(fields[1])
    return sorted(((kib, name) for name, kib in resident.items()), reverse=True)


def measure(gpus: int, pods: int, trace: bool, top: int = 12) -> dict[str, Any]:
    """One exporter under the quick preset's load phases: resident memory by mapping when idle and
    after the load, VmHWM, and with ``trace`` the traced Python heap's highs (idle vs under load)."""
    from bench import procstat, runner, scenarios  # noqa: PLC0415
    from bench.suite import Cluster  # noqa: PLC0415

    settings = runner.QUICK
    result: dict[str, Any] = {"gpus": gpus, "pods": pods, "tracemalloc": trace}
    with tempfile.TemporaryDirectory(prefix="bench-memtrace-") as tmp:
        directory = Path(tmp)
        report = directory / "tracemalloc.json"
        env = {ENV: str(report), "PYTHONTRACEMALLOC": "4"} if trace else {}
        saved = {name: os.environ.get(name) for name in (ENV, "PYTHONTRACEMALLOC")}
        os.environ.update(env)
        try:
            scenario = scenarios.write_scenario(directory, gpus, pods, kubernetes=False)
            cluster = Cluster(scenarios.write_scenario(directory, gpus, pods), directory / "cluster", True) \
                if pods else None
            server = runner.RunningExporter("ours", scenario, settings, directory, cluster.flags if cluster else [])
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        try:
            runner._wait(lambda: runner._text(server.port), 120, "metrics", server.process)
            time.sleep(settings.idle_s)
            result["rss_idle_bytes"] = procstat.memory(server.pid).rss_bytes
            result["idle_by_mapping_kib"] = mappings(server.pid)[:top]
            load_started = time.monotonic()
            runner._load_phases(server.port, server.pid, settings, 0.0, "ours", print)
            result["peak_rss_bytes"] = procstat.memory(server.pid).peak_rss_bytes
            result["loaded_by_mapping_kib"] = mappings(server.pid)[:top]
            result["threads"] = sum(1 for _ in Path(f"/proc/{server.pid}/task").iterdir())
        finally:
            server.stop()
            if cluster is not None:
                cluster.stop()
        if trace and report.exists():
            record = json.loads(report.read_text(encoding="utf-8"))
            before = [size for at, size in record["highs"] if at < load_started]
            result["traced_high_before_load_bytes"] = max(before, default=0)
            result["traced_high_bytes"] = record["highs"][-1][1]
            result["traced_high_under_load"] = record["highs"][-1][0] >= load_started
            result["traced_sites_at_high"] = record["sites"]
    return result


def report_text(data: dict[str, Any]) -> str:
    """The docs/benchmarks.md section: where the memory of one configuration goes (bench/docs.py)."""
    plain, traced = data["plain"], data["traced"]
    mib = 2**20
    lines = [f"- Run: `python -m bench.memtrace --gpus {plain['gpus']} --pods {plain['pods']} --out ...` at "
             f"{data['started']} (commit {data['commit']}), quick preset's load phases, once without and once "
             "with tracemalloc.", "",
             "| figure | without tracemalloc | with tracemalloc |", "|---|---|---|",
             f"| RSS idle, MiB | {plain['rss_idle_bytes'] / mib:.1f} | {traced['rss_idle_bytes'] / mib:.1f} |",
             f"| RSS peak (VmHWM), MiB | {plain['peak_rss_bytes'] / mib:.1f} | {traced['peak_rss_bytes'] / mib:.1f} |",
             f"| threads | {plain['threads']} | {traced['threads']} |",
             f"| traced Python heap, highest before the load, MiB | n/a | "
             f"{traced.get('traced_high_before_load_bytes', 0) / mib:.1f} |",
             f"| traced Python heap, highest of the run, MiB | n/a | {traced.get('traced_high_bytes', 0) / mib:.1f} |",
             "", "Resident memory by mapping after the load phases (without tracemalloc):", "",
             "| mapping | MiB |", "|---|---|"]
    lines += [f"| `{name}` | {kib / 1024:.1f} |" for kib, name in plain["loaded_by_mapping_kib"][:8]]
    lines += ["", "Allocation sites at the traced high (with tracemalloc):", "", "| site | MiB | blocks |",
              "|---|---|---|"]
    lines += [f"| `{site['where']}` | {site['bytes'] / mib:.2f} | {site['blocks']:,} |"
              for site in traced.get("traced_sites_at_high", [])[:8]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memtrace", description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--out", type=Path, help="results JSON (docs/benchmarks-memtrace.json)")
    args = parser.parse_args(argv)
    from bench.runner import REPO_ROOT  # noqa: PLC0415

    data: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                                                     capture_output=True, text=True, check=False).stdout.strip()}
    data["plain"] = measure(args.gpus, args.pods, trace=False)
    data["traced"] = measure(args.gpus, args.pods, trace=True)
    if args.out:
        args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(report_text(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
