"""Profile one exporter under load with py-spy, and print where its Python time goes.

    python -m bench profile --gpus 8 --pods 0 --exporter ours --seconds 10 --concurrency 16

Starts the exporter like a measurement does (same launcher, same scenario, pinned), drives it with
the closed-loop load generator, and records with ``py-spy record --gil`` (only samples of threads that
hold the GIL, i.e. Python work; time in syscalls and in the kernel's socket code does not show).
Prints the functions with the most samples, by self and inclusive count. py-spy is in the ``bench``
extra; it needs ptrace permission on the exporter process.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

from bench import runner, scenarios
from bench.suite import Cluster


def summarise(collapsed: str, top: int = 25) -> str:
    """Self and inclusive sample counts per frame from py-spy's raw (collapsed-stack) output."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    lines = [f"{total} samples holding the GIL", "", "self:"]
    lines += [f"{count:7d} {100 * count / total:5.1f}%  {frame}" for frame, count in own.most_common(top)]
    lines += ["", "inclusive:"]
    lines += [f"{count:7d} {100 * count / total:5.1f}%  {frame}" for frame, count in inclusive.most_common(top)]
    return "\n".join(lines)


def profile(exporter: str, gpus: int, pods: int, seconds: float, concurrency: int) -> int:
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        print("py-spy is not installed (pip install 'gpu-pod-exporter[bench]')", file=sys.stderr)
        return 2
    settings = replace(runner.QUICK, phase_s=seconds)
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        directory = Path(tmp)
        scenario = scenarios.write_scenario(directory, gpus, pods, kubernetes=False)
        cluster = Cluster(scenarios.write_scenario(directory, gpus, pods), directory / "cluster", True) \
            if pods else None
        server = runner.RunningExporter(exporter, scenario, settings, directory,
                                        cluster.flags if cluster else [])
        try:
            runner._wait(lambda: runner._text(server.port), 60, "metrics", server.process)
            output = directory / "profile.txt"
            recorder = subprocess.Popen([py_spy, "record", "--pid", str(server.pid), "--duration",
                                         str(int(seconds)), "--rate", "200", "--gil", "--format", "raw",
                                         "--output", str(output)], stdout=subprocess.DEVNULL)
            phase = runner._load_phase(server.port, server.pid, settings, 0.0, "closed", concurrency)
            recorder.wait(seconds + 60)
            print(f"{phase['scrapes']} scrapes, p50 {phase['p50_s'] * 1e3:.2f} ms, p99 {phase['p99_s'] * 1e3:.2f} ms")
            if not output.exists():
                print("py-spy wrote no profile (ptrace not permitted?)", file=sys.stderr)
                return 1
            print(summarise(output.read_text()))
        finally:
            server.stop()
            if cluster is not None:
                cluster.stop()
    return 0
