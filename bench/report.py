"""Turn a results file into the results section of docs/benchmarks.md and its two plots.

Only the part between ``<!-- results:start -->`` and ``<!-- results:end -->`` is generated; the
method and the dcgm-exporter figures around it are prose. Every number in the generated part comes
from the results file, which only ``python -m bench run`` writes.

Aggregation: each figure is the median over repetitions; each ratio ours/theirs is the median of the
ratios of runs that ran next to each other (see ``stats.paired_ratio``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import callsets
from bench.stats import median, paired_ratio

START = "<!-- results:start -->"
END = "<!-- results:end -->"
MIB = 1024 * 1024
LATENCY_PLOT = "benchmarks-latency.png"
CPU_PLOT = "benchmarks-cpu.png"

Run = dict[str, Any]
Getter = Callable[[Run], float | None]


def _phase(run: Run, mode: str, concurrency: int) -> dict[str, Any] | None:
    phases: list[dict[str, Any]] = run.get("load", [])
    for phase in phases:
        if phase["mode"] == mode and phase["concurrency"] == concurrency:
            return phase
    return None


def phase_value(mode: str, concurrency: int, key: str, scale: float = 1.0) -> Getter:
    def get(run: Run) -> float | None:
        phase = _phase(run, mode, concurrency)
        if phase is None or phase.get(key) is None:
            return None
        return float(phase[key]) * scale

    return get


def idle_value(key: str, scale: float = 1.0) -> Getter:
    def get(run: Run) -> float | None:
        value = run.get("idle", {}).get(key)
        return None if value is None else float(value) * scale

    return get


def shared_calls(shared: set[str] | None) -> Getter:
    """NVML calls per GPU per cycle that feed a metric family both exporters serve (bench/callsets.py)."""

    def get(run: Run) -> float | None:
        if shared is None or not run.get("idle", {}).get("calls_per_cycle_by_symbol"):
            return None
        return callsets.shared_calls(callsets.calls_per_gpu(run), shared)

    return get


def shared_driver_time(shared: set[str] | None, model: dict[str, Any]) -> Getter:
    """Driver ms per cycle of the like-with-like calls only (the same calls ``shared_calls`` counts).

    Each call costs its per-call latency plus its sampling window (the results' ``driver_model``);
    ``nvmlDeviceGetFieldValues`` adds its per-entry cost for the entries the run asked for.
    """
    latency, windows = model.get("latency_s", {}), model.get("blocking_window_s", {})
    per_entry = float(model.get("field_value_latency_s", 0.0))

    def get(run: Run) -> float | None:
        if shared is None or not latency or not run.get("idle", {}).get("calls_per_cycle_by_symbol"):
            return None
        gpus = float(run["gpus"])
        total = 0.0
        for call, count in callsets.calls_per_gpu(run).items():
            if callsets.families_of(call) & shared:
                symbol = call.partition("[")[0]
                total += count * gpus * (float(latency.get(symbol, 0.0)) + float(windows.get(symbol, 0.0)))
                if symbol == "nvmlDeviceGetFieldValues":
                    total += float(run["idle"].get("field_entries_per_cycle", 0.0)) * per_entry
        return total * 1e3

    return get


def all_calls(run: Run) -> float | None:
    """Every NVML call per GPU per cycle, attempts at symbols the fake lacks included."""
    if not run.get("idle", {}).get("calls_per_cycle_by_symbol"):
        return None
    return sum(callsets.calls_per_gpu(run).values())


def value(path: Sequence[str], scale: float = 1.0) -> Getter:
    def get(run: Run) -> float | None:
        node: Any = run
        for key in path:
            if not isinstance(node, dict) or node.get(key) is None:
                return None
            node = node[key]
        return float(node) * scale

    return get


@dataclass(frozen=True)
class Row:
    label: str
    get: Getter
    digits: int = 2
    lower_is_better: bool = True


def _scrape_rows(concurrencies: Sequence[int], paced: tuple[int, float] | None) -> list[Row]:
    """Percentiles count every failed scrape as the scrape timeout; the failures are shown beside them."""
    rows = [Row("CPU per scrape, ms (c=1)", phase_value("closed", 1, "server_cpu_per_scrape_s", 1e3), 3)]
    for concurrency in concurrencies:
        rows += [
            Row(f"scrape p50, ms (c={concurrency})", phase_value("closed", concurrency, "p50_s", 1e3)),
            Row(f"scrape p99, ms (c={concurrency})", phase_value("closed", concurrency, "p99_s", 1e3)),
            Row(f"scrapes/s (c={concurrency})", phase_value("closed", concurrency, "throughput_per_s"), 0,
                lower_is_better=False),
            Row(f"failed scrapes (c={concurrency})", phase_value("closed", concurrency, "failed"), 0),
        ]
    if paced is not None:
        scrapers, interval = paced
        name = f"{scrapers} scrapers x 1/{interval:g}s"
        rows += [Row(f"scrape p50, ms ({name})", phase_value("paced", scrapers, "p50_s", 1e3)),
                 Row(f"scrape p99, ms ({name})", phase_value("paced", scrapers, "p99_s", 1e3)),
                 Row(f"failed scrapes ({name})", phase_value("paced", scrapers, "failed"), 0)]
    return rows


def rows_for(settings: dict[str, Any], shared: set[str] | None = None,
             model: dict[str, Any] | None = None) -> list[Row]:
    """The rows of a configuration table; ``shared``: the metric families both exporters serve there;
    ``model``: the driver latencies the run used (results' ``driver_model``)."""
    paced = (settings["paced_scrapers"], settings["paced_interval_s"]) if settings.get("paced_s") else None
    return [
        Row("first complete /metrics, s", value(["startup_s"])),
        Row("CPU per sampling cycle, ms", idle_value("cpu_per_cycle_s", 1e3), 3),
        Row("  of which inside (fake) NVML, ms", idle_value("nvml_thread_cpu_per_cycle_s", 1e3), 3),
        Row("CPU per cycle without NVML, ms", idle_value("cpu_excl_nvml_per_cycle_s", 1e3), 3),
        Row("CPU without NVML, % of a core", idle_value("cpu_excl_nvml_percent_of_core"), 3),
        Row("NVML calls per GPU per cycle, all", all_calls, 1),
        Row("  of which attempts at symbols the fake lacks", idle_value("missing_calls_per_gpu_per_cycle"), 1),
        Row("  of which for metric families both serve (like with like)", shared_calls(shared), 1),
        Row("Xid event waits per second (not per cycle)", idle_value("event_wait_calls_per_s"), 1),
        Row("driver time per cycle, ms (realistic latencies and sampling windows)",
            idle_value("driver_latency_per_cycle_s", 1e3), 2),
        Row("  of which for metric families both serve (like with like)", shared_driver_time(shared, model or {}), 2),
        Row("sampling cycle wall time, ms", idle_value("cycle_wall_s", 1e3), 1),
        Row("RSS steady, MiB", value(["memory", "rss_steady_bytes"], 1 / MIB), 1),
        Row("RSS peak (VmHWM), MiB", value(["memory", "peak_rss_bytes"], 1 / MIB), 1),
        Row("exposition, text bytes", value(["exposition", "text_bytes"]), 0),
        Row("exposition, series", value(["exposition", "series"]), 0),
        Row("exposition as Prometheus gets it, bytes", value(["exposition", "prometheus_bytes"]), 0),
        *_scrape_rows(settings["concurrencies"], paced),
    ]


def _fmt(number: float, digits: int) -> str:
    if math.isnan(number):
        return "n/a"
    if digits == 0:
        return f"{number:,.0f}"
    return f"{number:,.{digits}f}"


def _fmt_ratio(number: float) -> str:
    if math.isnan(number):
        return "n/a"
    if number == 0:
        return "0"
    return f"{number:.2f}" if number >= 0.01 else f"{number:.1e}"


class Results:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.runs: list[Run] = [run for run in data["runs"] if not run.get("errors")]
        self.failed: list[Run] = [run for run in data["runs"] if run.get("errors")]

    def group(self, exporter: str, gpus: int, pods: int) -> list[Run]:
        runs = [run for run in self.runs if run["exporter"] == exporter and run["gpus"] == gpus
                and run["pods"] == pods]
        return sorted(runs, key=lambda run: run["repetition"])

    def figure(self, exporter: str, gpus: int, pods: int, get: Getter) -> float:
        values = [get(run) for run in self.group(exporter, gpus, pods)]
        return median([v for v in values if v is not None])

    def worst(self, exporter: str, gpus: int, pods: int, get: Getter) -> float:
        """The largest value over repetitions (for limits that the worst run must respect, like memory)."""
        values = [v for v in (get(run) for run in self.group(exporter, gpus, pods)) if v is not None]
        return max(values) if values else math.nan

    def ratio(self, gpus: int, pods: int, get: Getter) -> float:
        ours = {run["repetition"]: get(run) for run in self.group("ours", gpus, pods)}
        theirs = {run["repetition"]: get(run) for run in self.group("nvitop", gpus, pods)}
        shared = sorted(set(ours) & set(theirs))
        a = [ours[r] for r in shared if ours[r] is not None and theirs[r] is not None]
        b = [theirs[r] for r in shared if ours[r] is not None and theirs[r] is not None]
        return paired_ratio([float(x) for x in a if x is not None], [float(x) for x in b if x is not None])

    def calls(self, exporter: str, gpus: int, pods: int = 0) -> dict[str, float]:
        """Median NVML calls per GPU per cycle by call over the runs of one configuration."""
        per_run = [callsets.calls_per_gpu(run) for run in self.group(exporter, gpus, pods)]
        names = sorted({name for calls in per_run for name in calls})
        return {name: median([calls.get(name, 0.0) for calls in per_run]) for name in names}

    def shared_families(self, gpus: int) -> set[str] | None:
        """The metric families both exporters serve at ``gpus`` (None without runs of both)."""
        ours, theirs = self.calls("ours", gpus), self.calls("nvitop", gpus)
        if not ours or not theirs:
            return None
        return callsets.shared_families(ours, theirs)

    @property
    def gpu_counts(self) -> list[int]:
        return sorted({run["gpus"] for run in self.data["runs"]})

    @property
    def pod_counts(self) -> list[int]:
        return sorted({run["pods"] for run in self.data["runs"]})


def config_table(results: Results, gpus: int) -> list[str]:
    rows = rows_for(results.data["settings"], results.shared_families(gpus), results.data.get("driver_model"))
    with_pods = [pods for pods in results.pod_counts if pods and results.group("ours", gpus, pods)]
    floors = [pods for pods in [0, *with_pods] if results.group("floor", gpus, pods)]
    header = ["", "ours", "nvitop-exporter", "ours / nvitop"]
    header += [f"ours, {pods} pods" for pods in with_pods]
    header += [f"floor{f', {pods} pods' if pods else ''}" for pods in floors]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        ours = results.figure("ours", gpus, 0, row.get)
        theirs = results.figure("nvitop", gpus, 0, row.get)
        label = row.label.replace("  ", "&nbsp;&nbsp;") + ("" if row.lower_is_better else " (higher is better)")
        cells = [label, _fmt(ours, row.digits), _fmt(theirs, row.digits),
                 _fmt_ratio(results.ratio(gpus, 0, row.get))]
        cells += [_fmt(results.figure("ours", gpus, pods, row.get), row.digits) for pods in with_pods]
        cells += [_blank_nan(results.figure("floor", gpus, pods, row.get), row.digits) for pods in floors]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def calls_table(results: Results, gpus: int) -> list[str]:
    """Every NVML call per GPU per cycle, by call, both exporters; what it feeds and what it costs a driver."""
    shared = results.shared_families(gpus) or set()
    ours, theirs = results.calls("ours", gpus), results.calls("nvitop", gpus)
    model = results.data.get("driver_model", {})
    latency, windows = model.get("latency_s", {}), model.get("blocking_window_s", {})
    lines = ["| NVML call | feeds | driver time per call, ms | ours | nvitop-exporter | counted like with like |",
             "|---|---|---|---|---|---|"]
    for name in sorted(set(ours) | set(theirs)):
        symbol = name.partition("[")[0]
        if symbol in latency or symbol in windows:
            cost = 1e3 * (float(latency.get(symbol, 0.0)) + float(windows.get(symbol, 0.0)))
            per_call = f"{cost:.4g}" + (" (sampling window)" if symbol in windows else "")
        else:
            per_call = "n/a (the fake lacks it)"
        families = ", ".join(sorted(callsets.families_of(name)))
        counted = "yes" if callsets.families_of(name) & shared else "no"
        lines.append(f"| `{name}` | {families} | {per_call} | {_fmt(ours.get(name, 0.0), 1)} | "
                     f"{_fmt(theirs.get(name, 0.0), 1)} | {counted} |")
    lines.append(f"| **all** | | | {_fmt(sum(ours.values()), 1)} | {_fmt(sum(theirs.values()), 1)} | |")
    lines.append(f"| **like with like** | | | {_fmt(callsets.shared_calls(ours, shared), 1)} | "
                 f"{_fmt(callsets.shared_calls(theirs, shared), 1)} | |")
    field_us = 1e6 * float(model.get("field_value_latency_s", 0.0))
    lines += ["", f"Metric families both serve here: {', '.join(sorted(shared)) or 'none'}. "
              f"`nvmlDeviceGetFieldValues` costs its per-call time plus {field_us:g} us per requested field. "
              "`[n]`: the argument that selects what the call reads (the clock: 0 graphics, 1 SM, 2 memory, "
              "3 video; the PCIe direction: 0 TX, 1 RX)."]
    return lines


def _blank_nan(number: float, digits: int) -> str:
    return "" if math.isnan(number) else _fmt(number, digits)


@dataclass(frozen=True)
class Target:
    name: str
    limit: str
    measured: Callable[[Results], tuple[float, str]]
    met: Callable[[float], bool]


def _targets() -> list[Target]:
    def p99_target(mode: str) -> Callable[[Results], tuple[float, str]]:
        def measured(results: Results) -> tuple[float, str]:
            pods = 110 if results.group("ours", 8, 110) else 0
            concurrency = 64 if mode == "closed" else results.data["settings"]["paced_scrapers"]
            get = phase_value(mode, concurrency, "p99_s", 1e3)
            ours = results.figure("ours", 8, pods, get)
            floor = results.figure("floor", 8, pods, get)
            return ours, f"{_fmt(ours, 2)} ms at 8 GPUs, {pods} pods (floor on this machine: {_fmt(floor, 2)} ms)"

        return measured

    def cpu_target(results: Results) -> tuple[float, str]:
        measured = results.figure("ours", 8, 0, idle_value("cpu_excl_nvml_percent_of_core"))
        nvml = results.figure("ours", 8, 0, idle_value("nvml_thread_cpu_per_cycle_s", 1e3))
        total = results.figure("ours", 8, 0, idle_value("cpu_percent_of_core"))
        return measured, (f"{_fmt(measured, 2)} % of a core without NVML; inside the fake NVML "
                          f"{_fmt(nvml, 2)} ms per cycle; everything included {_fmt(total, 2)} %")

    def rss_target(results: Results) -> tuple[float, str]:
        peaks = [(results.worst("ours", gpus, pods, value(["memory", "peak_rss_bytes"], 1 / MIB)), gpus, pods)
                 for gpus in results.gpu_counts for pods in results.pod_counts if results.group("ours", gpus, pods)]
        worst = max(peaks, default=(math.nan, 0, 0))
        return worst[0], (f"largest peak (VmHWM) of any run: {_fmt(worst[0], 1)} MiB at {worst[1]} GPUs, "
                          f"{worst[2]} pods")

    def startup_target(results: Results) -> tuple[float, str]:
        times = [(results.worst("ours", gpus, pods, value(["startup_s"])), gpus, pods)
                 for gpus in results.gpu_counts for pods in results.pod_counts if results.group("ours", gpus, pods)]
        worst = max(times, default=(math.nan, 0, 0))
        return worst[0], f"slowest run: {_fmt(worst[0], 2)} s at {worst[1]} GPUs, {worst[2]} pods"

    def calls_target(results: Results) -> tuple[float, str]:
        """Judged like with like: on both sides only the calls that feed a family both serve."""
        shared = shared_calls(results.shared_families(8))
        ratio = results.ratio(8, 0, shared)
        ours, theirs = results.figure("ours", 8, 0, shared), results.figure("nvitop", 8, 0, shared)
        ours_all, theirs_all = results.figure("ours", 8, 0, all_calls), results.figure("nvitop", 8, 0, all_calls)
        return ratio, (f"for the metric families both serve: {_fmt(ours, 1)} vs {_fmt(theirs, 1)}, ratio "
                       f"{_fmt_ratio(ratio)}; all calls (each side's whole product): {_fmt(ours_all, 1)} vs "
                       f"{_fmt(theirs_all, 1)}, ratio {_fmt_ratio(results.ratio(8, 0, all_calls))}")

    return [
        Target("p99 scrape latency, 8 GPUs x 110 pods, 64 concurrent scrapers: closed loop (64 always in flight)",
               "<= 5 ms", p99_target("closed"), lambda v: v <= 5),
        Target("p99 scrape latency, 8 GPUs x 110 pods, 64 scrapers each scraping once a second", "<= 5 ms",
               p99_target("paced"), lambda v: v <= 5),
        Target("CPU at a 1 s interval, 8 GPUs, NVML excluded", "<= 2 % of one core", cpu_target, lambda v: v <= 2),
        Target("RSS", "<= 80 MiB", rss_target, lambda v: v <= 80),
        Target("first complete metrics after start", "<= 2 s", startup_target, lambda v: v <= 2),
        Target("NVML calls per GPU per cycle vs nvitop-exporter, like with like", "<= 0.5x", calls_target,
               lambda v: v <= 0.5),
    ]


def targets_table(results: Results) -> list[str]:
    lines = ["| target | limit | met? | measured |", "|---|---|---|---|"]
    for target in _targets():
        measured, note = target.measured(results)
        verdict = "n/a" if math.isnan(measured) else ("yes" if target.met(measured) else "**no**")
        lines.append(f"| {target.name} | {target.limit} | {verdict} | {note} |")
    return lines


def machine_lines(data: dict[str, Any]) -> list[str]:
    machine = data["machine"]
    settings = data["settings"]
    packages = ", ".join(f"{name} {version}" for name, version in machine["packages"].items())
    pinning = ("server on CPU 0, load generator (and simulated cluster) on CPU 1" if data["pinned"]
               else "none")
    command = data.get("command") or f"python -m bench run --{data.get('preset', 'quick')}"
    return [
        f"- Run: `{command}` at {data['started']} "
        f"(commit {data['commit']}), {data['duration_s'] / 60:.1f} min, "
        f"{settings['repetitions']} repetition(s) per exporter, order alternating.",
        f"- Machine: {machine['cpus']} CPUs ({machine['cpu_model']}), Linux {machine['kernel']}, "
        f"Python {machine['python']}; load average at start {' '.join(machine['loadavg_at_start'])}.",
        f"- Packages: {packages}.",
        f"- Pinning: {pinning}.",
        f"- Windows: idle {settings['idle_s']:g} s after {settings['warmup_s']:g} s warm-up; closed-loop phases "
        f"{settings['phase_s']:g} s each; paced phase {settings['paced_s']:g} s; "
        f"interval {settings['interval_ms']} ms.",
    ]


def results_section(data: dict[str, Any]) -> str:
    results = Results(data)
    lines = [START, "", "### Run", "", *machine_lines(data), ""]
    for skipped in data.get("skipped", []):
        lines.append(f"- Skipped: {skipped}.")
    for run in results.failed:
        lines.append(f"- Failed run: {run['exporter']}, {run['gpus']} GPUs, {run['pods']} pods: "
                     f"{'; '.join(run['errors'])}")
    timeout = data.get("scrape_timeout_s", 10.0)
    lines += ["", "### Targets", "", *targets_table(results), "",
              "Tables: medians over repetitions; \"ours / nvitop\" is the median ratio of neighbouring runs "
              "(below 1 favours ours, except where higher is better); \"floor\" is bench/floor.py serving "
              "ours' bytes (see Method); n/a: not measured or not applicable. Scrape percentiles count every "
              f"failed scrape as {timeout:g} s (the scrape timeout), for every server alike; the failures are "
              "in the row beside them.", ""]
    calls_gpus = 8 if 8 in results.gpu_counts else (results.gpu_counts or [0])[0]
    if results.group("ours", calls_gpus, 0) or results.group("nvitop", calls_gpus, 0):
        lines += [f"### NVML calls per GPU per cycle, by call ({calls_gpus} GPUs, no pods)", "",
                  *calls_table(results, calls_gpus), ""]
    for gpus in results.gpu_counts:
        lines += [f"### {gpus} GPU{'s' if gpus > 1 else ''}", "", *config_table(results, gpus), ""]
    lines += [f"![scrape latency against concurrency]({LATENCY_PLOT})", "",
              f"![CPU per sampling cycle against GPU count]({CPU_PLOT})", "", END]
    return "\n".join(lines)


def plot(data: dict[str, Any], docs: Path) -> None:
    import matplotlib  # noqa: PLC0415 - heavy, only for the report

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    results = Results(data)
    concurrencies = list(data["settings"]["concurrencies"])
    gpus = 8 if 8 in results.gpu_counts else results.gpu_counts[0]
    figure, axes = plt.subplots(figsize=(7, 4.2))
    series = [("ours", 0, "tab:blue", "gpu-pod-exporter"), ("nvitop", 0, "tab:orange", "nvitop-exporter")]
    series += [("ours", pods, "tab:green", f"gpu-pod-exporter, {pods} pods") for pods in results.pod_counts
               if pods and results.group("ours", gpus, pods)]
    for exporter, pods, color, name in series:
        if not results.group(exporter, gpus, pods):
            continue
        for key, style in (("p50_s", "--"), ("p99_s", "-")):
            points = [results.figure(exporter, gpus, pods, phase_value("closed", c, key, 1e3)) for c in concurrencies]
            axes.plot(concurrencies, points, style, marker="o", color=color, label=f"{name} {key[:3]}")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xticks(concurrencies, [str(c) for c in concurrencies])
    axes.set_xlabel("concurrent scrapes (closed loop, new connection each)")
    axes.set_ylabel("scrape latency, ms")
    axes.set_title(f"Scrape latency, {gpus} simulated GPUs")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(docs / LATENCY_PLOT, dpi=110)
    plt.close(figure)

    figure, axes = plt.subplots(figsize=(7, 4.2))
    counts = results.gpu_counts
    exporters = (("ours", "tab:blue", "gpu-pod-exporter"), ("nvitop", "tab:orange", "nvitop-exporter"))
    kinds = (("cpu_per_cycle_s", "-", "all"), ("cpu_excl_nvml_per_cycle_s", "--", "without NVML"))
    for exporter, color, name in exporters:
        for key, style, what in kinds:
            points = [results.figure(exporter, g, 0, idle_value(key, 1e3)) for g in counts]
            axes.plot(counts, points, style, marker="o", color=color, label=f"{name}, {what}")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xticks(counts, [str(c) for c in counts])
    axes.set_xlabel("simulated GPUs")
    axes.set_ylabel("process CPU per sampling cycle, ms")
    axes.set_title(f"CPU per sampling cycle ({data['settings']['interval_ms']} ms interval, no scrapes)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(docs / CPU_PLOT, dpi=110)
    plt.close(figure)


def replace_section(document: str, section: str) -> str:
    """``document`` with the text between the markers replaced (markers appended when absent)."""
    start = document.find(START)
    end = document.find(END)
    if start == -1 or end == -1 or end < start:
        return document.rstrip("\n") + "\n\n" + section + "\n"
    return document[:start] + section + document[end + len(END):]


def write_report(results_path: Path, docs: Path) -> None:
    data = json.loads(results_path.read_text(encoding="utf-8"))
    document_path = docs / "benchmarks.md"
    document = document_path.read_text(encoding="utf-8") if document_path.exists() else "# Benchmarks\n"
    document_path.write_text(replace_section(document, results_section(data)), encoding="utf-8")
    plot(data, docs)
    print(f"wrote {document_path}, {docs / LATENCY_PLOT}, {docs / CPU_PLOT}")
