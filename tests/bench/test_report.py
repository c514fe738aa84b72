import json
from pathlib import Path
from typing import Any

from bench import report
from bench.runner import QUICK

MIB = 1024 * 1024


def _run(exporter: str, repetition: int, *, calls: float, rss_mib: float, p99_ms: float,
         cpu_ms: float = 2.0, gpus: int = 8, pods: int = 0, gpm_calls: float = 0.0) -> dict[str, Any]:
    """``calls`` per GPU per cycle in all, ``gpm_calls`` of them to GPM (profiling) symbols."""
    phases = [{"mode": "closed", "concurrency": c, "p50_s": p99_ms / 4e3, "p99_s": p99_ms / 1e3,
               "throughput_per_s": 1000.0, "failed": 0, "server_cpu_per_scrape_s": 1e-4} for c in (1, 16, 64)]
    phases.append({"mode": "paced", "concurrency": 64, "p50_s": 5e-4, "p99_s": 2e-3, "throughput_per_s": 64.0,
                   "failed": 0, "server_cpu_per_scrape_s": 1e-4})
    return {
        "exporter": exporter, "gpus": gpus, "pods": pods, "repetition": repetition, "order": 0,
        "interval_ms": 1000, "startup_s": 0.5, "attribution_s": None, "errors": [],
        "idle": {"cpu_per_cycle_s": cpu_ms / 1e3, "nvml_thread_cpu_per_cycle_s": 1e-3,
                 "cpu_excl_nvml_per_cycle_s": (cpu_ms - 1) / 1e3, "cpu_excl_nvml_percent_of_core": (cpu_ms - 1) / 10,
                 "cpu_percent_of_core": cpu_ms / 10, "nvml_calls_per_gpu_per_cycle": calls,
                 "missing_calls_per_gpu_per_cycle": 0.0, "event_wait_calls_per_s": 0.0,
                 "driver_latency_per_cycle_s": 1e-3, "cycle_wall_s": 5e-3,
                 "calls_per_cycle_by_symbol": {"nvmlDeviceGetMemoryInfo_v2": (calls - gpm_calls) * gpus,
                                               "nvmlGpmSampleGet": gpm_calls / 2 * gpus,
                                               "nvmlGpmMetricsGet": gpm_calls / 2 * gpus}},
        "exposition": {"text_bytes": 1000, "series": 10, "prometheus_bytes": 300},
        "load": phases,
        "memory": {"rss_steady_bytes": rss_mib * MIB, "peak_rss_bytes": rss_mib * MIB},
    }


def _results(runs: list[dict[str, Any]]) -> dict[str, Any]:
    settings = {**QUICK.__dict__, "concurrencies": list(QUICK.concurrencies)}
    return {"version": 1, "started": "2026-01-01T00:00:00Z", "commit": "abc1234", "duration_s": 60.0,
            "preset": "quick", "pinned": True, "skipped": ["110 pods: not wired"], "settings": settings,
            "machine": {"cpus": 2, "cpu_model": "Test CPU", "python": "3.11.7", "kernel": "6.1",
                        "loadavg_at_start": ["0.1", "0.2", "0.3"], "packages": {"nvitop-exporter": "1.7.2"}},
            "runs": runs}


RUNS = [
    _run("ours", 0, calls=12, gpm_calls=2, rss_mib=30, p99_ms=4), _run("nvitop", 0, calls=20, rss_mib=40, p99_ms=40),
    _run("nvitop", 1, calls=20, rss_mib=40, p99_ms=80), _run("ours", 1, calls=12, gpm_calls=2, rss_mib=90, p99_ms=4),
]


def test_ratios_pair_runs_of_the_same_repetition():
    results = report.Results(_results(RUNS))
    # p99 ratios 4/40 and 4/80 -> median 0.075 (the ratio of medians would be 4/60).
    ratio = results.ratio(8, 0, report.phase_value("closed", 64, "p99_s"))
    assert abs(ratio - 0.075) < 1e-12


def test_targets_say_which_are_met():
    section = report.results_section(_results(RUNS))
    lines = {line.split(" | ")[0].lstrip("| "): line for line in section.splitlines() if line.startswith("| ")}
    # 12 calls per GPU against 20 is 0.6 in all; here nvitop serves no PCIe bytes, so ours' 2 GPM calls
    # feed only families nvitop lacks: like with like, 10 vs 20 = 0.5.
    calls = lines["NVML calls per GPU per cycle vs nvitop-exporter, like with like"]
    assert "| yes |" in calls
    assert "for the metric families both serve: 10.0 vs 20.0, ratio 0.50" in calls
    assert "all calls (each side's whole product): 12.0 vs 20.0, ratio 0.60" in calls
    assert "| **no** |" in lines["RSS"]  # the worst run's peak counts (90 MiB), not the median
    assert "| yes |" in lines["first complete metrics after start"]


def test_sections_name_the_machine_the_skips_and_every_gpu_count():
    runs = [*RUNS, _run("ours", 0, calls=10, rss_mib=30, p99_ms=4, gpus=1)]
    section = report.results_section(_results(runs))
    assert "2 CPUs (Test CPU)" in section
    assert "Skipped: 110 pods: not wired" in section
    assert "### 1 GPU\n" in section
    assert "### 8 GPUs\n" in section


def test_only_the_marked_section_is_replaced():
    before, after = "# Benchmarks\n\nMethod text.\n\n", "\n\n## dcgm-exporter\n"
    prose = before + report.START + "\nold\n" + report.END + after
    updated = report.replace_section(prose, report.START + "\nnew\n" + report.END)
    assert updated == before + report.START + "\nnew\n" + report.END + after
    assert report.replace_section("# Title\n", "S") == "# Title\n\nS\n"


def test_write_report_makes_the_document_and_both_plots(tmp_path: Path):
    results_path = tmp_path / "results.json"
    results_path.write_text(json.dumps(_results(RUNS)))
    (tmp_path / "benchmarks.md").write_text("# Benchmarks\n\nprose\n")
    report.write_report(results_path, tmp_path)
    document = (tmp_path / "benchmarks.md").read_text()
    assert document.startswith("# Benchmarks\n\nprose\n")
    assert report.START in document and report.END in document
    for name in (report.LATENCY_PLOT, report.CPU_PLOT):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _with_calls(run: dict[str, Any], by_symbol: dict[str, float], by_argument: dict[str, float]) -> dict[str, Any]:
    gpus = run["gpus"]
    run["idle"]["calls_per_cycle_by_symbol"] = {name: count * gpus for name, count in by_symbol.items()}
    run["idle"]["calls_per_cycle_by_argument"] = {name: count * gpus for name, count in by_argument.items()}
    run["idle"]["nvml_calls_per_gpu_per_cycle"] = sum(by_symbol.values())
    return run


OURS_CALLS = {"nvmlDeviceGetMemoryInfo_v2": 1.0, "nvmlDeviceGetClockInfo": 2.0, "nvmlGpmSampleGet": 1.0,
              "nvmlGpmMetricsGet": 1.0, "nvmlDeviceGetCurrentClocksEventReasons": 1.0}
OURS_ARGUMENTS = {"nvmlDeviceGetClockInfo[1]": 1.0, "nvmlDeviceGetClockInfo[2]": 1.0}
NVITOP_CALLS = {"nvmlDeviceGetMemoryInfo_v2": 1.0, "nvmlDeviceGetClockInfo": 4.0, "nvmlDeviceGetPcieThroughput": 2.0,
                "nvmlDeviceGetFanSpeed": 1.0, "nvmlDeviceGetComputeRunningProcesses_v3": 2.0}
NVITOP_ARGUMENTS = {f"nvmlDeviceGetClockInfo[{kind}]": 1.0 for kind in range(4)} | {
    "nvmlDeviceGetPcieThroughput[0]": 1.0, "nvmlDeviceGetPcieThroughput[1]": 1.0}


def _symmetric_runs() -> list[dict[str, Any]]:
    return [_with_calls(_run("ours", r, calls=6, rss_mib=30, p99_ms=4), OURS_CALLS, OURS_ARGUMENTS) for r in (0, 1)] \
        + [_with_calls(_run("nvitop", r, calls=10, rss_mib=30, p99_ms=40), NVITOP_CALLS, NVITOP_ARGUMENTS)
           for r in (0, 1)]


def test_like_with_like_keeps_gpm_calls_when_the_peer_serves_pcie_bytes_and_drops_one_sided_families():
    section = report.results_section(_results(_symmetric_runs()))
    lines = {line.split(" | ")[0].lstrip("| "): line for line in section.splitlines() if line.startswith("| ")}
    # Shared: memory, SM and memory clocks, PCIe bytes. ours: memory 1 + clocks 2 + GPM 2 = 5 (clock-event
    # reasons left out); nvitop: memory 1 + SM/memory clocks 2 + PCIe 2 = 5 (graphics/video clocks, fan and
    # process lists left out). The same rule on both sides: 5 vs 5, not 4 vs 10.
    calls = lines["NVML calls per GPU per cycle vs nvitop-exporter, like with like"]
    assert "for the metric families both serve: 5.0 vs 5.0, ratio 1.00" in calls
    assert "| **no** |" in calls
    assert "all calls (each side's whole product): 6.0 vs 10.0, ratio 0.60" in calls
    assert "| `nvmlGpmSampleGet` | PCIe bytes, profiling (engine, tensor, DRAM activity) |" in section
    assert lines["`nvmlDeviceGetClockInfo[3]`"].endswith("| 0.0 | 1.0 | no |")
    assert lines["`nvmlDeviceGetPcieThroughput[0]`"].endswith("| 0.0 | 1.0 | yes |")
    assert lines["`nvmlDeviceGetCurrentClocksEventReasons`"].endswith("| 1.0 | 0.0 | no |")


def test_the_pcie_call_costs_its_sampling_window_in_the_calls_table():
    data = _results(_symmetric_runs())
    data["driver_model"] = {"latency_s": {"nvmlDeviceGetPcieThroughput": 0.0, "nvmlDeviceGetFanSpeed": 137e-6},
                            "blocking_window_s": {"nvmlDeviceGetPcieThroughput": 0.020},
                            "field_value_latency_s": 5e-6}
    section = report.results_section(data)
    assert "| `nvmlDeviceGetPcieThroughput[1]` | PCIe bytes | 20 (sampling window) | 0.0 | 1.0 | yes |" in section
    assert "| `nvmlDeviceGetFanSpeed` | fan speed | 0.137 | 0.0 | 1.0 | no |" in section
    # Like with like, nvitop's driver time is its two PCIe calls per GPU (8 GPUs x 2 x 20 ms); its fan
    # speed (not served by ours) is left out, as ours' calls for families nvitop lacks would be.
    assert "| &nbsp;&nbsp;of which for metric families both serve (like with like) | 0.00 | 320.00 |" in section


def test_a_failed_scrape_is_stated_beside_the_percentiles():
    runs = _symmetric_runs()
    for run in runs:
        if run["exporter"] == "nvitop":
            run["load"][2]["failed"] = 33
    section = report.results_section(_results(runs))
    assert "| failed scrapes (c=64) | 0 | 33 |" in section
    assert "Scrape percentiles count every failed scrape as 10 s (the scrape timeout)" in section
