"""What per-process utilization costs, and how its sums compare with the GPU's own utilization.

    python -m bench process-utilization                      # ~4 minutes; writes the results JSON
    python -m bench process-utilization --report             # ... and docs/benchmarks.md's section
    python -m bench process-utilization --report-only FILE   # only rewrite the section from FILE

**Cost (side by side, alternating).** gpu-pod-exporter runs as in the main matrix (``bench.launch``,
production code, realistic NVML latencies, pods time-sharing every GPU, the simulated cluster in
its own process, ``-k --kubernetes-process-attribution`` at the default ``--process-interval`` of
5 s and a 1 s collect interval) in two variants that differ only in the fake driver: *with* the
per-process utilization calls, and *without* them (``library.missing_symbols``, as an old driver;
the exporter then asks once, logs that it is unsupported and never asks again). The difference
between neighbouring runs is what the feature adds: NVML calls per cycle, the driver time those
calls take on a real driver (the fake's realistic per-call latency; for these two calls an
estimate, see ``REALISTIC_LATENCY_S``) and process CPU per cycle.

**Sums (in process, simulated time).** The sampler reads the ``shared-gpus`` and ``default``
scenarios for 30 simulated minutes on a fixed clock; at each process read the sum of the GPU's
per-process SM samples is compared with the mean of its ``DCGM_FI_DEV_GPU_UTIL`` over the same
interval. Deterministic: no real time passes.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from bench import runner, scenarios
from bench.stats import median
from bench.suite import Cluster, git_commit, machine_info

START = "<!-- process-utilization:start -->"
END = "<!-- process-utilization:end -->"
UTILIZATION_SYMBOLS = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")
VARIANTS = ("with", "without")
SUM_CASES = (("shared-gpus", 0, "time-sliced, 3 pods"), ("default", 4, "time-sliced, 3 pods (+1 worker)"),
             ("shared-gpus", 1, "MPS, 2-3 clients"))
SUM_SECONDS = 1800
PROCESS_INTERVAL_S = 5.0


def variant_scenario(directory: Path, gpus: int, pods: int, variant: str) -> Path:
    """The exporter's scenario (no kubernetes section); ``without``: the driver lacks both calls."""
    document = scenarios.scenario_document(gpus, pods, kubernetes=False)
    if variant == "without":
        document["library"] = {"missing_symbols": list(UTILIZATION_SYMBOLS)}
    path = directory / f"process-utilization-{gpus}gpu-{pods}pods-{variant}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def cycles(server: runner.RunningExporter) -> int:
    """Sampling cycles so far; 0 while the probe does not answer yet (the process is starting)."""
    try:
        return int(server.probe().get("cycles", 0))
    except OSError:
        return 0


def measure_variant(variant: str, scenario: Path, gpus: int, settings: runner.Settings,
                    flags: list[str]) -> dict[str, Any]:
    """One exporter run: start, wait for a full process interval, then the idle window."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-pu-{variant}-"))
    server = runner.RunningExporter("ours", scenario, settings, workdir, flags)
    try:
        runner._wait(lambda: cycles(server) >= 1, settings.startup_timeout_s, "a sampling cycle", server.process,
                     interval_s=0.05)
        time.sleep(settings.warmup_s)
        idle = runner._idle_window(server, settings, gpus)
    except (RuntimeError, TimeoutError, OSError, ValueError, KeyError) as exc:
        return {"variant": variant, "idle": {}, "errors": [f"{type(exc).__name__}: {exc}", server.log_tail()]}
    else:
        return {"variant": variant, "idle": idle, "errors": []}
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run_cost(gpus: int, pods: int, repetitions: int, settings: runner.Settings,
             progress: Callable[[str], None] = print) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-pu-") as tmp:
        directory = Path(tmp)
        cluster = Cluster(scenarios.write_scenario(directory, gpus, pods), directory / "cluster", settings.pin)
        try:
            paths = {variant: variant_scenario(directory, gpus, pods, variant) for variant in VARIANTS}
            for repetition in range(repetitions):
                order = VARIANTS if repetition % 2 == 0 else tuple(reversed(VARIANTS))
                for variant in order:
                    progress(f"[{gpus} GPUs, {pods} pods, run {repetition + 1}/{repetitions}] {variant}")
                    result = measure_variant(variant, paths[variant], gpus, settings, cluster.flags)
                    result["repetition"] = repetition
                    runs.append(result)
        finally:
            cluster.stop()
    return runs


def utilization_calls(idle: dict[str, Any]) -> float:
    by_symbol: dict[str, float] = idle.get("calls_per_cycle_by_symbol", {})
    return sum(float(by_symbol.get(name, 0.0)) for name in UTILIZATION_SYMBOLS)


def summarise_cost(runs: Sequence[dict[str, Any]], gpus: int) -> dict[str, Any]:
    """Medians per variant and the median difference of neighbouring runs (with - without)."""
    figures: dict[str, Callable[[dict[str, Any]], float]] = {
        "nvml_calls_per_cycle": lambda idle: float(idle["nvml_calls_per_cycle"]),
        "utilization_calls_per_cycle": utilization_calls,
        "driver_latency_per_cycle_ms": lambda idle: 1e3 * float(idle["driver_latency_per_cycle_s"]),
        "cpu_per_cycle_ms": lambda idle: 1e3 * float(idle["cpu_per_cycle_s"]),
        "cpu_excl_nvml_per_cycle_ms": lambda idle: 1e3 * float(idle["cpu_excl_nvml_per_cycle_s"]),
    }
    good = [run for run in runs if run["idle"] and not run["errors"]]
    by_repetition: dict[int, dict[str, dict[str, Any]]] = {}
    for run in good:
        by_repetition.setdefault(run["repetition"], {})[run["variant"]] = run["idle"]
    summary: dict[str, Any] = {"gpus": gpus, "pairs": 0, "figures": {}}
    pairs = [pair for pair in by_repetition.values() if set(pair) == set(VARIANTS)]
    summary["pairs"] = len(pairs)
    for name, get in figures.items():
        per_variant = {variant: median([get(run["idle"]) for run in good if run["variant"] == variant])
                       for variant in VARIANTS}
        added = median([get(pair["with"]) - get(pair["without"]) for pair in pairs])
        summary["figures"][name] = {**per_variant, "added": added, "added_per_gpu": added / gpus}
    return summary


def run_sums(seconds: int = SUM_SECONDS) -> list[dict[str, Any]]:
    """Sum of per-process SM samples vs the GPU's mean utilization over each process interval."""
    return [sum_case(name, gpu, what, seconds) for name, gpu, what in SUM_CASES]


def sum_case(name: str, gpu: int, what: str, seconds: int) -> dict[str, Any]:
    from exporter.metrics.counters import default_counters_text, parse_counters  # noqa: PLC0415
    from exporter.nvml.sampler import Sampler  # noqa: PLC0415
    from simulator.fakenvml import FIXED_WALL_EPOCH, FakeNvmlLibrary  # noqa: PLC0415
    from simulator.scenario import load_scenario  # noqa: PLC0415

    now = [0.0]
    fake = FakeNvmlLibrary(load_scenario(name), lambda: now[0])
    fake.install()
    interval = int(PROCESS_INTERVAL_S)
    device: list[float] = []
    sums: list[float] = []
    means: list[float] = []
    try:
        sampler = Sampler(parse_counters(default_counters_text(), "default").field_specs(), 1.0,
                          clock=lambda: now[0], wall_clock=lambda: FIXED_WALL_EPOCH + now[0],
                          process_interval_s=PROCESS_INTERVAL_S)
        assert sampler.initialise()
        for second in range(interval, seconds + 1):
            now[0] = float(second)
            reading = sampler.run_cycle().devices[gpu]
            device.append(reading.values["DCGM_FI_DEV_GPU_UTIL"])
            if second % interval or second == interval:  # the first read covers the time before start
                continue
            assert reading.process_utilization is not None
            sums.append(sum(sample.sm for sample in reading.process_utilization.samples))
            means.append(statistics.fmean(device[-interval:]))
    finally:
        fake.uninstall()
    differences = [total - mean for total, mean in zip(sums, means, strict=True)]
    return {
        "scenario": name, "gpu": gpu, "what": what, "reads": len(differences),
        "mean_device_util": statistics.fmean(means), "mean_sum_of_processes": statistics.fmean(sums),
        "mean_difference": statistics.fmean(differences),
        "mean_abs_difference": statistics.fmean(abs(value) for value in differences),
        "max_abs_difference": max(abs(value) for value in differences),
    }


def section(data: dict[str, Any]) -> str:
    cost = data["cost"]["summary"]
    figures = cost["figures"]
    lines = [
        START, "",
        f"- Run: `python -m bench process-utilization` at {data['started']} (commit {data['commit']}), "
        f"{data['duration_s'] / 60:.1f} min; {cost['gpus']} GPUs, {data['cost']['pods']} pods time-sharing them, "
        f"{cost['pairs']} alternating pair(s) of runs, idle windows of {data['settings']['idle_s']:.0f} s; "
        f"collect interval 1 s, process interval {PROCESS_INTERVAL_S:g} s.",
        f"- Machine: {data['machine']['cpus']} CPUs ({data['machine']['cpu_model'] or 'unknown'}), "
        f"Python {data['machine']['python']}.",
        "",
        "| per sampling cycle (1 s), all GPUs | with per-process utilization | without (driver lacks it) | added "
        "| added per GPU |",
        "|---|---|---|---|---|",
    ]
    rows = (("NVML calls", "nvml_calls_per_cycle", "{:.2f}"),
            ("&nbsp;&nbsp;of which per-process utilization calls", "utilization_calls_per_cycle", "{:.2f}"),
            ("driver time, ms (realistic latencies; these two calls estimated at 1 ms each)",
             "driver_latency_per_cycle_ms", "{:.2f}"),
            ("process CPU, ms", "cpu_per_cycle_ms", "{:.2f}"),
            ("process CPU without the fake NVML, ms", "cpu_excl_nvml_per_cycle_ms", "{:.2f}"))
    for label, key, form in rows:
        figure = figures[key]
        lines.append(f"| {label} | {form.format(figure['with'])} | {form.format(figure['without'])} | "
                     f"{form.format(figure['added'])} | {form.format(figure['added_per_gpu'])} |")
    lines += [
        "",
        "Per-process utilization is read with the process lists, once per process interval: one pynvml call "
        "per GPU, which is two C calls (the size query and the fill) when there are new samples and one when "
        "there are none (NOT_FOUND). Per cycle at the default intervals that is 2 / 5 = 0.4 C calls per GPU.",
        "",
        "| GPU of the simulator | reads | GPU_UTIL, mean over each interval | sum of per-process SM samples "
        "| mean difference | mean \\|difference\\| | largest \\|difference\\| |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in data["sums"]:
        lines.append(f"| `{case['scenario']}` GPU {case['gpu']} ({case['what']}) | {case['reads']} | "
                     f"{case['mean_device_util']:.1f} % | {case['mean_sum_of_processes']:.1f} % | "
                     f"{case['mean_difference']:+.1f} | {case['mean_abs_difference']:.1f} | "
                     f"{case['max_abs_difference']:.1f} |")
    lines += ["", END]
    return "\n".join(lines)


def replace_section(document: str, generated: str) -> str:
    if START in document and END in document:
        before, rest = document.split(START, 1)
        _, after = rest.split(END, 1)
        return before + generated + after
    return document.rstrip("\n") + "\n\n" + generated + "\n"


def write_report(results: Path, docs: Path) -> Path:
    data = json.loads(results.read_text(encoding="utf-8"))
    path = docs / "benchmarks.md"
    path.write_text(replace_section(path.read_text(encoding="utf-8"), section(data)), encoding="utf-8")
    return path


def run(out: Path, *, gpus: int = 8, pods: int = 24, repetitions: int = 3, idle_s: float = 30.0,
        pin: bool = True, progress: Callable[[str], None] = print) -> dict[str, Any]:
    started = time.time()
    settings = replace(runner.FULL, idle_s=idle_s, warmup_s=6.0, repetitions=repetitions, pin=pin)
    data: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "commit": git_commit(),
        "machine": machine_info(),
        "settings": {"idle_s": idle_s, "warmup_s": settings.warmup_s, "interval_ms": settings.interval_ms,
                     "process_interval_s": PROCESS_INTERVAL_S, "pinned": pin},
    }
    progress("sums of per-process samples against the GPU's utilization (simulated time)")
    data["sums"] = run_sums()
    runs = run_cost(gpus, pods, repetitions, settings, progress)
    data["cost"] = {"gpus": gpus, "pods": pods, "runs": runs, "summary": summarise_cost(runs, gpus)}
    data["duration_s"] = time.time() - started
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, allow_nan=True) + "\n", encoding="utf-8")
    return data
