"""Where the peak memory goes: tracemalloc in one exporter under the measurement's load phases.

    python -m bench.memtrace --gpus 64 --pods 110 [--top 25]

Starts ours like a measurement does (same launcher, same scenario and simulated cluster), with
``BENCH_TRACEMALLOC`` set: the launcher then starts ``tracemalloc`` before the exporter is imported,
and a watcher thread in the exporter's process writes the allocation sites (grouped by source line,
and by 4-frame traceback) each time the traced total reaches a new high. The tool drives the load
phases of a quick run (closed loop at 1, 16 and 64, then 64 paced scrapers), stops the exporter
and prints what was allocated at the highest point, plus VmHWM. tracemalloc slows the process
down several times and counts only Python allocations (not thread stacks, not malloc's unreturned
arenas), so use it to find what grows, and the plain bench rows to measure it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

ENV = "BENCH_TRACEMALLOC"
CHECK_PERIOD_S = 0.2


def _report(snapshot: tracemalloc.Snapshot, current: int, top: int) -> str:
    filtered = snapshot.filter_traces((tracemalloc.Filter(False, tracemalloc.__file__),))
    lines = [f"traced at this high: {current / 2**20:.1f} MiB", "", "by line:"]
    for stat in filtered.statistics("lineno")[:top]:
        frame = stat.traceback[0]
        lines.append(f"{stat.size / 2**20:8.2f} MiB {stat.count:8d} blocks  {frame.filename}:{frame.lineno}")
    lines += ["", "by traceback (4 frames):"]
    for stat in filtered.statistics("traceback")[:top // 2]:
        lines.append(f"{stat.size / 2**20:8.2f} MiB {stat.count:8d} blocks")
        lines += [f"             {frame.filename}:{frame.lineno}" for frame in stat.traceback]
    return "\n".join(lines)


def start_in_process(path: str, top: int = 30) -> None:
    """Called by bench.launch when ``BENCH_TRACEMALLOC`` names a file: trace, and record each new high.

    The tool sets ``PYTHONTRACEMALLOC`` too, so tracing began with the interpreter (imports included).
    """
    if not tracemalloc.is_tracing():
        tracemalloc.start(4)

    def watch() -> None:
        highest = 0
        while True:
            time.sleep(CHECK_PERIOD_S)
            current, _ = tracemalloc.get_traced_memory()
            if current > highest * 1.02:
                highest = current
                text = _report(tracemalloc.take_snapshot(), current, top)
                Path(path).write_text(text + "\n")

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


def main(argv: Sequence[str] | None = None) -> int:
    from bench import procstat, runner, scenarios  # noqa: PLC0415
    from bench.suite import Cluster  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m bench.memtrace", description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--no-trace", action="store_true",
                        help="only the resident memory by mapping (tracemalloc's own bookkeeping inflates it)")
    args = parser.parse_args(argv)
    settings = runner.QUICK
    with tempfile.TemporaryDirectory(prefix="bench-memtrace-") as tmp:
        directory = Path(tmp)
        report = directory / "tracemalloc.txt"
        if not args.no_trace:
            os.environ[ENV] = str(report)
            os.environ["PYTHONTRACEMALLOC"] = "4"
        scenario = scenarios.write_scenario(directory, args.gpus, args.pods, kubernetes=False)
        cluster = Cluster(scenarios.write_scenario(directory, args.gpus, args.pods), directory / "cluster", True) \
            if args.pods else None
        server = runner.RunningExporter("ours", scenario, settings, directory, cluster.flags if cluster else [])
        try:
            runner._wait(lambda: runner._text(server.port), 120, "metrics", server.process)
            time.sleep(settings.idle_s)
            steady = procstat.memory(server.pid).rss_bytes
            print(f"resident by mapping when idle (RSS {steady / 2**20:.1f} MiB):")
            for kib, name in mappings(server.pid)[:5]:
                print(f"{kib / 1024:8.1f} MiB  {name}")
            runner._load_phases(server.port, server.pid, settings, 0.0, "ours", print)
            memory = procstat.memory(server.pid)
            threads = sum(1 for _ in Path(f"/proc/{server.pid}/task").iterdir())
            print(f"resident by mapping after the load phases ({threads} threads):")
            for kib, name in mappings(server.pid)[:args.top]:
                print(f"{kib / 1024:8.1f} MiB  {name}")
            print(f"RSS after idle {steady / 2**20:.1f} MiB; VmHWM {memory.peak_rss_bytes / 2**20:.1f} MiB "
                  "(tracemalloc inflates both)")
        finally:
            server.stop()
            if cluster is not None:
                cluster.stop()
        if not args.no_trace:
            print(report.read_text() if report.exists() else "no tracemalloc report was written", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
