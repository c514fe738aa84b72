"""What the peak series cost per render and per sampling cycle, in one process, interleaved.

    python -m bench.peaks_cost [--gpus 8,64] [--rounds 200] [--out docs/benchmarks-peaks-cost.json]
    python -m bench.peaks_cost --profile 64     (where a render's CPU goes, by function: cProfile)

Why in-process: on this shared machine the whole-exporter before/after (``bench.abtest``) moves by
tens of percent between neighbouring runs, far more than the peaks can cost. Here the same process
renders the same snapshot (a sampler on the fake NVML library, the benchmark scenario's GPUs, every
GPU held by one pod so every series carries workload labels) with and without its peak values,
alternating every round, and takes the median of each side's CPU time (``time.thread_time``: other
processes' load does not count). What it reports per GPU count:

* render + text encoding, CPU ms, without and with the peaks; the series and text bytes of each;
* the sampler's side: ``DevicePeaks.add`` for every GPU, CPU µs per cycle (what the cycle adds);
* the memory the windows hold after more than a window of cycles (tracemalloc, bytes per GPU),
  fed a slowly falling reading (the worst case: a falling sequence keeps every sample).

``--profile N`` renders and encodes the N-GPU snapshot (with peaks) repeatedly under cProfile and prints
the functions with the most own time: how #33's question "does the render grow with the peaks, and
can it be cheaper" was answered (the text encoding, not the render, was most of the CPU).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import pstats
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from bench import scenarios
from bench.runner import REPO_ROOT
from exporter.metrics.counters import load_counters
from exporter.metrics.exposition import encode_text
from exporter.metrics.render import RenderContext, RenderOptions, render
from exporter.nvml.peaks import DEFAULT_WINDOW_S, PEAK_FAMILIES, DevicePeaks
from exporter.nvml.sampler import Sampler
from exporter.snapshot import DeviceIdentity, Snapshot
from simulator.fakenvml import installed
from simulator.scenario import parse_scenario


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pod(identity: DeviceIdentity, _gpu_instance_id: int | None) -> Sequence[Mapping[str, str]]:
    return ({"container": "worker", "namespace": "ml-training", "pod": f"train-{identity.index}",
             "team": "research"},)


def _snapshot(gpus: int) -> Snapshot:
    document = scenarios.scenario_document(gpus, 0, kubernetes=False)
    document["latency_profile"] = "none"  # the fake's latencies do not matter here: only the render is timed
    clock = _Clock()
    with installed(parse_scenario(yaml.safe_dump(document), "bench.yaml", "bench"), clock):
        sampler = Sampler(load_counters(None).field_specs(), 1.0, clock=clock)
        if not sampler.initialise():
            raise RuntimeError("the fake NVML library did not initialise")
        for _ in range(5):
            sampler.run_cycle()
            clock.now += 1.0
        return sampler.snapshot


def _render_cpu(snapshot: Snapshot) -> tuple[float, int, int]:
    context = RenderContext(snapshot=snapshot, counters=load_counters(None), options=RenderOptions(hostname="node"),
                            workloads=_pod)
    started = time.thread_time()
    families = render(context)
    body = encode_text(families)
    return time.thread_time() - started, sum(len(family.samples) for family in families), len(body)


def measure(gpus: int, rounds: int) -> dict[str, Any]:
    with_peaks = _snapshot(gpus)
    without = dataclasses.replace(with_peaks, devices=tuple(dataclasses.replace(reading, peaks={})
                                                            for reading in with_peaks.devices))
    cpu: dict[str, list[float]] = {"without": [], "with": []}
    size: dict[str, tuple[int, int]] = {}
    for round_number in range(rounds):
        order = ("without", "with") if round_number % 2 == 0 else ("with", "without")
        for side in order:
            seconds, series, body = _render_cpu(without if side == "without" else with_peaks)
            cpu[side].append(seconds)
            size[side] = (series, body)
    values = [dict(reading.values) for reading in with_peaks.devices]
    windows = [DevicePeaks(DEFAULT_WINDOW_S) for _ in values]
    add_cpu = []
    for cycle in range(rounds):
        started = time.thread_time()
        for window, reading in zip(windows, values, strict=True):
            window.add(float(cycle), reading)
        add_cpu.append(time.thread_time() - started)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held = [DevicePeaks(DEFAULT_WINDOW_S) for _ in values]
    for cycle in range(int(DEFAULT_WINDOW_S) * 2):
        falling = {name: 1e6 - cycle for name in PEAK_FAMILIES}
        for window in held:
            window.add(float(cycle), falling)
    held_bytes = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return {"gpus": gpus, "rounds": rounds,
            "render_cpu_ms": {side: statistics.median(times) * 1e3 for side, times in cpu.items()},
            "series": {side: size[side][0] for side in size}, "text_bytes": {side: size[side][1] for side in size},
            "add_cpu_us_per_cycle": statistics.median(add_cpu) * 1e6,
            "windows_bytes_per_gpu_worst_case": held_bytes / len(held)}


def report_text(data: dict[str, Any]) -> str:
    """The docs/benchmarks.md section (bench/docs.py)."""
    gpus = ",".join(str(run["gpus"]) for run in data["runs"])
    lines = [f"- Run: `python -m bench.peaks_cost --gpus {gpus} --rounds {data['runs'][0]['rounds']}` at "
             f"{data['started']} (commit {data['commit']}); medians of interleaved rounds, thread CPU time.", "",
             "| GPUs | render + encode, ms, without peaks | with peaks | with / without | series without | with "
             "| peak series per GPU | text bytes with / without | `DevicePeaks.add`, µs per cycle | window memory "
             "per GPU, worst case, bytes |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for run in data["runs"]:
        cpu, series, text = run["render_cpu_ms"], run["series"], run["text_bytes"]
        lines.append(f"| {run['gpus']} | {cpu['without']:.2f} | {cpu['with']:.2f} | {cpu['with'] / cpu['without']:.2f} "
                     f"| {series['without']:,} | {series['with']:,} | "
                     f"{(series['with'] - series['without']) / run['gpus']:g} | "
                     f"{text['with'] / text['without']:.2f} | {run['add_cpu_us_per_cycle']:.0f} | "
                     f"{run['windows_bytes_per_gpu_worst_case']:,.0f} |")
    return "\n".join(lines)


def profile(gpus: int, rounds: int = 50, top: int = 15) -> str:
    """cProfile of ``rounds`` renders + text encodings of the ``gpus``-GPU snapshot, by own time."""
    snapshot = _snapshot(gpus)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(rounds):
        _render_cpu(snapshot)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peaks_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="8,64")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--profile", type=int, metavar="GPUS", help="print a cProfile of rendering GPUS GPUs instead")
    args = parser.parse_args(argv)
    if args.profile:
        print(profile(args.profile))
        return 0
    data = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                                     text=True, check=False).stdout.strip(),
            "runs": [measure(int(count), args.rounds) for count in args.gpus.split(",")]}
    if args.out:
        args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(report_text(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
